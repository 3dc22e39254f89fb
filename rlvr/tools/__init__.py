"""Tools a policy may call during an episode: a registry, call formats, execution and the built-ins.

`TOOLS` maps names to `Tool`s (a function and the JSON schema its signature and docstring give);
`get_tool` also reads `path/to/file.py:function` and `package.module:function`. `FORMATS` holds the
ways a call is written (`chat_template`, `tagged`), and `run_tool_calls` runs one assistant turn's
calls into the reply an environment sends back. See docs/guides/tools.md.
"""

from rlvr.tools.builtin import calculator, python
from rlvr.tools.execution import MAX_OUTPUT_CHARS, ToolError, ToolRun, run_tool_calls
from rlvr.tools.formats import FORMATS, ToolCall, detect_format, template_has_tool_format
from rlvr.tools.toolbox import TOOLS, Tool, get_tool, make_tool, register_tool, resolve_tools
from rlvr.tools.tool_schema import function_schema

__all__ = ["TOOLS", "FORMATS", "Tool", "ToolCall", "ToolError", "ToolRun", "MAX_OUTPUT_CHARS", "calculator",
           "python", "detect_format", "function_schema", "get_tool", "make_tool", "register_tool", "resolve_tools",
           "run_tool_calls", "template_has_tool_format"]
