"""Tools: plain values with a name, a description, an argument schema and one async invoke; and
workflows, the deterministic scripts a planner may hand the rest of the work to."""

from planexec.tools._function import tool
from planexec.tools._threads import run_in_thread
from planexec.tools._tool import Invoke, OutputNotJSON, RetryPolicy, Tool, ToolContext, ToolCrashed, call_with_timeout
from planexec.tools._toolset import Toolset
from planexec.tools._workflow import Workflow, workflow

__all__ = [
    "Invoke",
    "OutputNotJSON",
    "RetryPolicy",
    "Tool",
    "ToolContext",
    "ToolCrashed",
    "Toolset",
    "Workflow",
    "call_with_timeout",
    "run_in_thread",
    "tool",
    "workflow",
]
