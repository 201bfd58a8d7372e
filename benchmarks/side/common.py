"""Shared by the side-by-side workloads: tools for both frameworks, memory readings, medians."""

from __future__ import annotations

import asyncio
import resource
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planexec import ToolError, tool
from planexec.tools import Tool

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

__all__ = [
    "FailOnce",
    "lc_lookup",
    "lc_noop",
    "lc_work",
    "median",
    "peak_rss_mib",
    "px_lookup",
    "px_noop",
    "px_work",
    "rss_mib",
    "timed",
]

OUTPUT_PAD = "x" * 24
"""Padding in W5/W6 tool outputs, so each output is about 40 characters, as a short real result."""


def rss_mib() -> float:
    """The process's resident memory now (Linux), MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


class FailOnce:
    """Which step ids fail on their first call (and succeed after); counts every call."""

    def __init__(self, *ids: str) -> None:
        self.pending = set(ids)
        self.calls: dict[str, int] = {}
        self.failed_at: float | None = None
        """``time.time()`` of the failing call."""

    def call(self, step_id: str) -> bool:
        """Count a call; True when this call must fail."""
        self.calls[step_id] = self.calls.get(step_id, 0) + 1
        if step_id in self.pending:
            self.pending.discard(step_id)
            self.failed_at = time.time()
            return True
        return False


def _lookup_output(i: int) -> str:
    return f"value of record {i}: {OUTPUT_PAD}"


# -- planexec tools ------------------------------------------------------------------------


def px_noop() -> Tool:
    @tool
    async def noop(x: int = 0) -> int:
        """Return x."""
        return x

    return noop


def px_work() -> Tool:
    @tool
    async def work(ms: float) -> float:
        """Sleep for ms milliseconds."""
        await asyncio.sleep(ms / 1000)
        return ms

    return work


def px_lookup(fails: FailOnce | None = None) -> Tool:
    @tool
    async def lookup(i: int) -> str:
        """Look record i up."""
        if fails is not None and fails.call(f"s{i}"):
            raise ToolError(f"record {i} is locked, try again")
        return _lookup_output(i)

    return lookup


# -- LangChain tools (the LangGraph peers; imported only where a peer runs) --------------------


def lc_noop() -> BaseTool:
    from langchain_core.tools import StructuredTool

    async def noop(x: int = 0) -> int:
        """Return x."""
        return x

    return StructuredTool.from_function(coroutine=noop, name="noop")


def lc_work() -> BaseTool:
    from langchain_core.tools import StructuredTool

    async def work(ms: float) -> float:
        """Sleep for ms milliseconds."""
        await asyncio.sleep(ms / 1000)
        return ms

    return StructuredTool.from_function(coroutine=work, name="work")


def lc_lookup(fails: FailOnce | None = None) -> BaseTool:
    from langchain_core.tools import StructuredTool, ToolException

    async def lookup(i: int) -> str:
        """Look record i up."""
        if fails is not None and fails.call(f"s{i}"):
            raise ToolException(f"record {i} is locked, try again")
        return _lookup_output(i)

    # a failing call is reported to the agent as the tool's answer, LangChain's documented way
    return StructuredTool.from_function(coroutine=lookup, name="lookup", handle_tool_error=True)
