"""The tool registry, schemas from signatures and docstrings, tools from files, and running calls:
every failure (unreadable call, unknown tool, wrong arguments, timeout, exception) is an error message
and a counted error, never an exception; outputs are cut at the stated limit; the calculator refuses code."""

import json
import textwrap
import time
from typing import Literal, Optional

import pytest

from rlvr.tools import FORMATS, TOOLS, get_tool, make_tool, register_tool, resolve_tools, run_tool_calls
from rlvr.tools.builtin import calculator
from rlvr.tools.execution import MALFORMED_CALL, UNKNOWN_TOOL, ToolError, check_arguments, truncate_output
from rlvr.tools.tool_schema import function_schema, parse_docstring

TAGGED = FORMATS.get("tagged")
JSON_CALLS = FORMATS.get("chat_template")


def lookup(city: str, days: int = 3, units: Optional[Literal["c", "f"]] = None, tags: list[str] = ()) -> str:
    """Look up the weather forecast for a city.

    Uses the cached forecast when there is one.

    Args:
        city: the city's name, e.g.
            Paris or Lyon
        days (int): how many days ahead
        units: c or f
    Returns:
        the forecast as text
    """
    return f"{city}:{days}:{units}:{','.join(tags)}"


def test_schema_from_signature_and_docstring():
    schema = function_schema(lookup)
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "lookup"
    # the first paragraph only, not the second, nor the Returns section
    assert function["description"] == "Look up the weather forecast for a city."
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert parameters["required"] == ["city"]  # parameters with defaults are optional
    assert parameters["properties"] == {
        "city": {"type": "string", "description": "the city's name, e.g. Paris or Lyon"},  # continuation joined
        "days": {"type": "integer", "description": "how many days ahead"},  # the (int) is not in the text
        "units": {"type": "string", "enum": ["c", "f"], "description": "c or f"},  # Optional unwrapped
        "tags": {"type": "array", "items": {"type": "string"}},  # no Args line: no description
    }


def test_docstring_sections_do_not_leak_into_arguments():
    description, arguments = parse_docstring("Do it.\n\nArgs:\n    x: first\nReturns:\n    y: not an argument\n")
    assert description == "Do it."
    assert arguments == {"x": "first"}


@pytest.mark.parametrize("source, message", [
    ("def f(x):\n    'Doc.'\n", "no type hint"),
    ("def f(*xs: int):\n    'Doc.'\n", r"\*args and \*\*kwargs"),
    ("def f(x: int):\n    pass\n", "needs a docstring"),
    ("def f(x: set):\n    'Doc.'\n", "has no JSON type"),
])
def test_a_function_that_cannot_be_described_is_refused_naming_why(source, message):
    namespace = {}
    exec(source, namespace)
    with pytest.raises(ValueError, match=message):
        function_schema(namespace["f"])


def test_the_built_in_schemas_are_what_chat_templates_take():
    schema = TOOLS.get("calculator").schema
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]
    assert set(TOOLS.names()) >= {"calculator", "python"}
    json.dumps(schema)  # plain JSON


def test_an_unknown_tool_name_lists_the_valid_choices():
    with pytest.raises(KeyError) as error:
        get_tool("calculater")
    message = str(error.value)
    assert "did you mean 'calculator'" in message and "calculator, python" in message
    assert "path/to/file.py:Name" in message


def test_register_tool_refuses_a_taken_name():
    def calculator(expression: str) -> str:
        """Another calculator."""
        return expression

    with pytest.raises(ValueError, match="already registered"):
        register_tool(calculator)


def test_register_tool_adds_a_tool_that_get_tool_finds():
    def shout_for_test(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    register_tool(shout_for_test)
    try:
        assert get_tool("shout_for_test").function("hi") == "HI"
    finally:
        TOOLS.remove("shout_for_test")


def test_a_tool_from_a_file(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(textwrap.dedent('''
        def reverse(text: str) -> str:
            """Reverse a string.

            Args:
                text: what to reverse
            """
            return text[::-1]
    '''))
    monkeypatch.chdir(tmp_path)
    tool = get_tool("my_tools.py:reverse")
    assert tool.name == "reverse" and tool.parameters["properties"]["text"]["description"] == "what to reverse"
    run = run_tool_calls("<reverse>abc</reverse>", [tool], TAGGED)
    assert run.content == "cba"
    tool = get_tool("my_tools:reverse")  # the module form, from the current directory
    assert tool.function("xy") == "yx"
    with pytest.raises(KeyError, match="has no attribute 'nope'; it defines: reverse"):
        get_tool("my_tools.py:nope")
    with pytest.raises(FileNotFoundError, match="missing.py"):
        get_tool("missing.py:reverse")


def test_two_tools_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two tools are named 'calculator'"):
        resolve_tools(["calculator", "calculator"])


# ----------------------------------------------------------------------------- running calls

def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def explode(text: str) -> str:
    """Always fails."""
    raise RuntimeError("boom " + text)


def slow(text: str) -> str:
    """Sleeps."""
    time.sleep(5)
    return text


def chatty(text: str) -> str:
    """Talks a lot."""
    return "x" * 5000


ADD, EXPLODE, CHATTY = make_tool(add), make_tool(explode), make_tool(chatty)
SLOW = make_tool(slow, timeout_seconds=0.2)


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments}).join(["<tool_call>", "</tool_call>"])


def test_a_good_call_returns_the_result_and_counts_one_call():
    run = run_tool_calls("sum: " + call("add", a=2, b=40), [ADD], JSON_CALLS)
    assert run.content == "42"
    assert run.tool_calls == {"add": 1} and run.tool_errors == {}


def test_a_turn_without_a_call_has_no_reply():
    run = run_tool_calls("The answer is 42.", [ADD], JSON_CALLS)
    assert run.content is None and run.tool_calls == {} and run.tool_errors == {}


@pytest.mark.parametrize("text, key, words", [
    (call("ad", a=1, b=2), UNKNOWN_TOOL, "unknown tool 'ad'; the tools are add, explode"),
    (call("add", a=1), "add", "missing argument 'b'"),
    (call("add", a=1, b=2, c=3), "add", "unexpected argument 'c'"),
    (call("add", a=1, b="2"), "add", "argument 'b' must be integer, got str"),
    (call("add", a=True, b=2), "add", "argument 'a' must be integer, got bool"),
    ("<tool_call>{'name': 'add'}</tool_call>", MALFORMED_CALL, "malformed call: the call is not valid JSON"),
    ("<tool_call>" + '{"name": "add", "arguments": {"a": 1', MALFORMED_CALL, "not closed"),
    (call("explode", text="now"), "explode", "RuntimeError: boom now"),
])
def test_every_failure_is_an_error_message_and_a_counted_error(text, key, words):
    run = run_tool_calls(text, [ADD, EXPLODE], JSON_CALLS)
    assert run.content.startswith("error: ") and words in run.content
    assert run.tool_calls == {key: 1} and run.tool_errors == {key: 1}


def test_a_tool_past_its_time_limit_is_an_error_not_a_wait():
    started = time.monotonic()
    run = run_tool_calls(call("slow", text="a"), [SLOW], JSON_CALLS)
    assert time.monotonic() - started < 2
    assert run.content == "error: timed out after 0.2 s" and run.tool_errors == {"slow": 1}


def test_a_timed_out_call_does_not_hold_up_the_next():
    started = time.monotonic()
    run = run_tool_calls(call("slow", text="a") + call("add", a=1, b=1), [SLOW, ADD], JSON_CALLS)
    assert time.monotonic() - started < 2
    assert run.content.splitlines() == ["slow: error: timed out after 0.2 s", "add: 2"]


def test_two_calls_in_a_turn_run_in_order_each_counted():
    run = run_tool_calls(call("add", a=1, b=2) + " then " + call("add", a=10, b=5)
                         + call("explode", text="x"), [ADD, EXPLODE], JSON_CALLS)
    assert run.content.splitlines() == ["add: 3", "add: 15", "explode: error: RuntimeError: boom x"]
    assert run.tool_calls == {"add": 2, "explode": 1} and run.tool_errors == {"explode": 1}


def test_calls_past_the_per_turn_limit_are_errors_and_not_run():
    text = "".join(call("add", a=i, b=0) for i in range(5))
    run = run_tool_calls(text, [ADD], JSON_CALLS, max_calls=3)
    lines = run.content.splitlines()
    assert lines[:3] == ["add: 0", "add: 1", "add: 2"] and all("not run" in line for line in lines[3:])
    assert run.tool_calls == {"add": 5} and run.tool_errors == {"add": 2}


def test_long_output_is_cut_at_the_limit_saying_how_much_was_dropped():
    run = run_tool_calls("<chatty>a</chatty>", [CHATTY], TAGGED, max_output_chars=100)
    assert run.content == "x" * 100 + "\n[output truncated: 4900 more characters]"
    assert truncate_output("short", 100) == "short"


def test_a_long_error_message_is_cut_too():
    def verbose(text: str) -> str:
        """Fails at length."""
        raise ValueError("y" * 3000)

    run = run_tool_calls("<verbose>a</verbose>", [make_tool(verbose)], TAGGED, max_output_chars=50)
    assert run.content == ("error: ValueError: " + "y" * 3000)[:50] + "\n[output truncated: 2969 more characters]"


def test_check_arguments_accepts_what_fits():
    assert check_arguments(ADD, {"a": 1, "b": 2}) is None
    tool = make_tool(lookup)
    assert check_arguments(tool, {"city": "Nice", "units": "c", "tags": ["a"]}) is None
    assert "must be string" in check_arguments(tool, {"city": "Nice", "units": "k"})  # not in the enum
    assert "must be array" in check_arguments(tool, {"city": "Nice", "tags": "a"})


# ----------------------------------------------------------------------------- the calculator

@pytest.mark.parametrize("expression, expected", [
    ("123*45", "5535"),
    ("123 × 45 =", "5535"),
    ("(7+3)/4", "2.5"),
    ("1/3", "0.333333333333"),
    ("2^10", "1024"),
    ("-3**2", "-9"),  # the tree decides: a negated power
    ("0.1+0.2", "0.3"),  # exact decimals, not binary floats
    ("999*99", "98901"),
])
def test_calculator_values(expression, expected):
    assert calculator(expression) == expected


@pytest.mark.parametrize("payload, words", [
    ("__import__('os').system('echo hi')", "not arithmetic"),
    ("open('/etc/passwd').read()", "not arithmetic"),
    ("(lambda: 1)()", "not arithmetic"),
    ("[x for x in range(10**9)]", "not arithmetic"),
    ("x = 1", "not arithmetic"),
    ("9**9**9", "more than 1000 digits"),
    ("2**0.5", "whole-number exponents"),
    ("1/0", "division by zero"),
    ("0**-1", "division by zero"),
    ("", "empty"),
])
def test_calculator_refuses_code_and_runaway_numbers(payload, words):
    with pytest.raises(ToolError, match=words):
        calculator(payload)


def test_a_refused_calculator_payload_is_a_counted_error_in_a_turn():
    run = run_tool_calls("<calculator>__import__('os').getcwd()</calculator>", [TOOLS.get("calculator")], TAGGED)
    assert run.content.startswith("error: not arithmetic") and run.tool_errors == {"calculator": 1}
