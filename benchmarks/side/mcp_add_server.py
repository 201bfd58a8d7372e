"""A one-tool MCP server over stdio for the MCP overhead benchmark: ``add(a, b)``.

Run as a script (``python benchmarks/side/mcp_add_server.py``) it serves over stdin and stdout;
imported, it gives the same function and server for the plain and in-process cases. It imports
nothing but the ``mcp`` SDK, as the SDK spawns it with a minimal environment (no PYTHONPATH).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

__all__ = ["add", "build_server"]


async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def build_server() -> MCPServer:
    server = MCPServer("add")
    server.tool(annotations=ToolAnnotations(readOnlyHint=True))(add)
    return server


if __name__ == "__main__":
    build_server().run()
