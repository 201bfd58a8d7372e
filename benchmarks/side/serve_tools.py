"""The tools of the agent ``benchmarks.side.serve_load`` registers with ``planexec serve``."""

from planexec import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


TOOLS = [add]
