"""The two call formats: what the prompt shows, how calls are read back (two in a turn, a call cut
off, bad JSON, a missing name, arguments as a JSON string), their stop strings, and the detection of
a chat template's own `<tool_call>` format on a tokenizer built here (nothing downloaded)."""

import json

import pytest

from rlvr.tools import FORMATS, TOOLS, detect_format, make_tool, run_tool_calls, template_has_tool_format

TAGGED = FORMATS.get("tagged")
JSON_CALLS = FORMATS.get("chat_template")
CALCULATOR = TOOLS.get("calculator")


def power(base: int, exponent: int) -> int:
    """Raise base to a power."""
    return base ** exponent


POWER = make_tool(power)

# A chat template in the shape of Qwen2.5's: the tools go into the system message as JSON, and an
# assistant's calls are written as `<tool_call>` JSON; tool results come back as `tool` messages.
QWEN_LIKE_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call functions. Signatures:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\nReturn each call as "
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{% for call in message.tool_calls %}<tool_call>\n{\"name\": \"{{ call.function.name }}\", \"arguments\": "
    "{{ call.function.arguments | tojson }}}\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
# In the shape of SmolLM2's: no tools at all.
PLAIN_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                  "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer(template: str):
    """A word-level tokenizer with `template` as its chat template, built in memory."""
    import tokenizers  # a dependency of transformers: always there
    from transformers import PreTrainedTokenizerFast

    model = tokenizers.models.WordLevel({"[UNK]": 0, "<|im_end|>": 1}, unk_token="[UNK]")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="<|im_end|>")
    tokenizer.chat_template = template
    return tokenizer


# ----------------------------------------------------------------------------- tagged

def test_tagged_one_argument_call_is_the_argument_itself():
    calls = TAGGED.parse("Let me compute. <calculator> 123*45 </calculator>", [CALCULATOR])
    assert [(c.name, c.arguments, c.error) for c in calls] == [("calculator", {"expression": "123*45"}, None)]
    assert calls[0].text == "<calculator> 123*45 </calculator>"


def test_tagged_several_arguments_are_a_json_object_and_numbers_keep_their_type():
    calls = TAGGED.parse('<power>{"base": 2, "exponent": 5}</power>', [POWER])
    assert calls[0].arguments == {"base": 2, "exponent": 5}
    run = run_tool_calls('<power>{"base": 2, "exponent": 5}</power>', [POWER], TAGGED)
    assert run.content == "32"


def test_tagged_two_calls_in_a_turn():
    calls = TAGGED.parse("<calculator>1+1</calculator> and <calculator>2*3</calculator>", [CALCULATOR])
    assert [c.arguments["expression"] for c in calls] == ["1+1", "2*3"]


def test_tagged_call_cut_off_is_an_error():
    calls = TAGGED.parse("ok <calculator>123*4", [CALCULATOR])
    assert len(calls) == 1 and calls[0].arguments is None and "not closed with </calculator>" in calls[0].error


def test_tagged_malformed_json_is_an_error_naming_the_tool():
    calls = TAGGED.parse('<power>{"base": 2, exponent: 5}</power>', [POWER])
    assert calls[0].name == "power" and "not valid JSON" in calls[0].error
    run = run_tool_calls('<power>{"base": 2, exponent: 5}</power>', [POWER], TAGGED)
    assert run.tool_errors == {"power": 1}


def test_tagged_reads_only_the_offered_tools():
    assert TAGGED.parse("<answer>5</answer> <python>1</python>", [CALCULATOR]) == []


def test_tagged_write_parse_round_trip_and_stop_strings():
    for tool, arguments in ((CALCULATOR, {"expression": "12*34"}), (POWER, {"base": 3, "exponent": 2})):
        written = TAGGED.write_call(tool, arguments)
        assert [c.arguments for c in TAGGED.parse(written, [tool])] == [arguments]
        stop = TAGGED.stop_strings([tool])
        assert any(written.endswith(s) for s in stop)  # the turn stops right at the call's end
    assert TAGGED.write_call(CALCULATOR, {"expression": "12*34"}) == "<calculator>12*34</calculator>"
    assert TAGGED.stop_strings([CALCULATOR, POWER]) == ("</calculator>", "</power>")
    text = TAGGED.instructions([CALCULATOR])
    assert "<calculator>ARGUMENT</calculator>" in text and CALCULATOR.description in text


# ----------------------------------------------------------------------------- chat_template (<tool_call> JSON)

def test_json_calls_two_in_a_turn_and_arguments_as_a_string():
    text = ('<tool_call>\n{"name": "power", "arguments": {"base": 2, "exponent": 3}}\n</tool_call>\n'
            '<tool_call>{"name": "power", "arguments": "{\\"base\\": 5, \\"exponent\\": 2}"}</tool_call>')
    calls = JSON_CALLS.parse(text, [POWER])
    assert [c.arguments for c in calls] == [{"base": 2, "exponent": 3}, {"base": 5, "exponent": 2}]
    assert run_tool_calls(text, [POWER], JSON_CALLS).content == "power: 8\npower: 25"


@pytest.mark.parametrize("body, words", [
    ('{"name": "power", "arguments": {"base": 2,}}', "not valid JSON"),
    ('["power", 2]', "must be a JSON object"),
    ('{"arguments": {"base": 2}}', 'no "name"'),
    ('{"name": "power", "arguments": [2, 3]}', '"arguments" must be a JSON object'),
])
def test_json_calls_malformed(body, words):
    calls = JSON_CALLS.parse(f"<tool_call>{body}</tool_call>", [POWER])
    assert len(calls) == 1 and calls[0].arguments is None and words in calls[0].error


def test_json_call_cut_off_after_a_good_one():
    text = '<tool_call>{"name": "power", "arguments": {"base": 2, "exponent": 2}}</tool_call><tool_call>{"name": "po'
    calls = JSON_CALLS.parse(text, [POWER])
    assert calls[0].arguments == {"base": 2, "exponent": 2}
    assert calls[1].error.startswith("the call is not closed")
    run = run_tool_calls(text, [POWER], JSON_CALLS)
    assert run.tool_calls == {"power": 1, "malformed_call": 1} and run.tool_errors == {"malformed_call": 1}


def test_template_detection():
    assert template_has_tool_format(QWEN_LIKE_TEMPLATE) and detect_format(QWEN_LIKE_TEMPLATE) == "chat_template"
    assert not template_has_tool_format(PLAIN_TEMPLATE) and detect_format(PLAIN_TEMPLATE) == "tagged"
    assert detect_format(None) == "tagged"
    # `<tool_call>` in a template that never renders `tools` is not a tool format
    assert not template_has_tool_format("{{ messages[0].content }} <tool_call>")
    JSON_CALLS.check_template(QWEN_LIKE_TEMPLATE)
    with pytest.raises(ValueError, match="no tool format.*valid choices: chat_template, tagged"):
        JSON_CALLS.check_template(PLAIN_TEMPLATE)


def test_a_tokenizer_renders_the_schemas_and_its_own_call_parses_back():
    tokenizer = tiny_tokenizer(QWEN_LIKE_TEMPLATE)
    assert detect_format(tokenizer.chat_template) == "chat_template"
    messages = [{"role": "user", "content": "What is 2 to the 10?"}]
    prompt = tokenizer.apply_chat_template(messages, tools=[POWER.schema, CALCULATOR.schema], tokenize=False,
                                           add_generation_prompt=True)
    assert json.dumps(POWER.schema) in prompt  # the schema went in as it is
    assert "Raise base to a power." in prompt and '"required": ["expression"]' in prompt
    # The template's own rendering of an assistant call is what the parser reads.
    call = {"type": "function", "function": {"name": "power", "arguments": {"base": 2, "exponent": 10}}}
    transcript = tokenizer.apply_chat_template(messages + [{"role": "assistant", "tool_calls": [call]}],
                                               tools=[POWER.schema], tokenize=False)
    assistant_turn = transcript.split("<|im_start|>assistant\n")[-1]
    assert run_tool_calls(assistant_turn, [POWER], JSON_CALLS).content == "1024"
    assert JSON_CALLS.write_call(POWER, {"base": 2, "exponent": 10}) in assistant_turn
    assert assistant_turn.split("<|im_end|>")[0].endswith(JSON_CALLS.stop_strings([POWER])[0])


def test_a_tokenizer_without_a_tool_format_is_detected():
    tokenizer = tiny_tokenizer(PLAIN_TEMPLATE)
    assert detect_format(tokenizer.chat_template) == "tagged"


def test_json_call_without_its_arguments_is_an_error_naming_the_missing_one():
    run = run_tool_calls('<tool_call>{"name": "calculator"}</tool_call>', [CALCULATOR], JSON_CALLS)
    assert run.content == "error: bad arguments: missing argument 'expression'; calculator takes expression"
    assert run.tool_errors == {"calculator": 1}


def test_tagged_json_arguments_are_type_checked():
    run = run_tool_calls('<power>{"base": true, "exponent": 2}</power>', [POWER], TAGGED)
    assert run.content == "error: bad arguments: argument 'base' must be integer, got bool"


def test_tagged_call_of_a_tool_without_parameters():
    def moon_phase() -> str:
        """Today's moon phase."""
        return "full"

    tool = make_tool(moon_phase)
    assert TAGGED.parse("<moon_phase>\n</moon_phase>", [tool])[0].arguments == {}
    assert run_tool_calls("<moon_phase> </moon_phase>", [tool], TAGGED).content == "full"
