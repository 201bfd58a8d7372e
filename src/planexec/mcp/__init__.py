"""MCP servers' tools as planexec tools: ``async with MCPToolset(MCPStdio(command=...)) as tools``.

Needs the ``mcp`` extra (``pip install 'planexec[mcp]'``).
"""

from planexec.mcp._servers import MCPHttp, MCPStdio
from planexec.mcp._toolset import IDEMPOTENCY_META_KEY, MCPTool, MCPToolset

__all__ = ["IDEMPOTENCY_META_KEY", "MCPHttp", "MCPStdio", "MCPTool", "MCPToolset"]
