"""Tools: plain values with a name, a description, an argument schema and one async invoke."""

from planexec.tools._function import tool
from planexec.tools._tool import RetryPolicy, Tool, ToolContext
from planexec.tools._toolset import Toolset

__all__ = ["RetryPolicy", "Tool", "ToolContext", "Toolset", "tool"]
