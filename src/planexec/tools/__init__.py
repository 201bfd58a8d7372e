"""Tools: plain values with a name, a description, an argument schema and one async invoke."""

from planexec.tools._function import tool
from planexec.tools._threads import run_in_thread
from planexec.tools._tool import Invoke, OutputNotJSON, RetryPolicy, Tool, ToolContext, ToolCrashed, call_with_timeout
from planexec.tools._toolset import Toolset

__all__ = [
    "Invoke",
    "OutputNotJSON",
    "RetryPolicy",
    "Tool",
    "ToolContext",
    "ToolCrashed",
    "Toolset",
    "call_with_timeout",
    "run_in_thread",
    "tool",
]
