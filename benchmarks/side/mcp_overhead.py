"""The per-call overhead of an MCP tool, beside a plain Python tool's.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.mcp_overhead`` (``--calls`` and
``--steps`` to change the sizes).

One function, ``add(a, b)`` (benchmarks/side/mcp_add_server.py), is called through a planexec
tool's ``invoke`` in four ways, ``--calls`` times each (200 by default) after a warm-up of 20
calls, one call at a time; each call is timed on its own and the median and p99 are reported:

* ``plain``: a ``@tool`` of the function (no serialisation, no transport);
* ``mcp in-process``: the function served by the SDK's ``MCPServer`` in this process, through
  ``MCPToolset`` (JSON-RPC messages over in-memory streams: the protocol without a transport);
* ``mcp stdio``: the same server as a subprocess, over its stdin and stdout;
* ``mcp-server-time stdio``: ``get_current_time("UTC")`` of the ``mcp-server-time`` server from
  PyPI, a real server (its own work, a time-zone lookup and formatting, is included).

Then a full run: an ``Agent`` with a ``ScriptedModel`` (no model latency) runs a chain of
``--steps`` sequential ``add`` steps (200 by default, each depending on the previous one), with
the plain tool and with the stdio MCP tool. The figure is the run's wall time ÷ steps, the median
over 5 runs after a warm-up run: what one step costs the framework with each tool, so the
difference is what MCP adds per step inside a run (sequential steps: every call's round trip is
on the run's path).

Connecting (spawning the server, the handshake, listing the tools) is timed once per server and
printed apart; it is not in the per-call figures. Ratios are to the plain tool (a run's to the
plain tool's run). The figures move with the machine's load from one sitting to the next: quote
ratios taken in one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.side.common import median
from benchmarks.side.mcp_add_server import add, build_server
from planexec import Agent, Budget, tool
from planexec.mcp import MCPStdio, MCPToolset
from planexec.testing import ScriptedModel
from planexec.tools import Tool, ToolContext

__all__ = ["call_latencies", "main", "run_us_per_step"]

SERVER_SCRIPT = Path(__file__).with_name("mcp_add_server.py")
WARM_UP = 20
RUNS = 5
CONTEXT = ToolContext(run_id="bench", step_id="s1", attempt=1, idempotency_key="bench:s1:v1")
BUDGET = Budget(steps=None, tool_calls=None)
"""The default caps, but for steps and tool calls: the chain is longer than they allow."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _time_server() -> str | None:
    """The ``mcp-server-time`` executable beside this Python, or on the PATH."""
    beside = Path(sys.executable).parent / "mcp-server-time"
    return str(beside) if beside.exists() else shutil.which("mcp-server-time")


async def call_latencies(tool: Tool, args: dict[str, Any], calls: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``tool.invoke``, one at a time, after a warm-up."""
    for _ in range(WARM_UP):
        await tool.invoke(dict(args), CONTEXT)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        await tool.invoke(dict(args), CONTEXT)
        seconds.append(time.perf_counter() - start)
    return seconds


def chain(n: int) -> dict[str, Any]:
    """A plan of ``n`` ``add`` steps, each depending on the one before."""
    steps = [
        {
            "id": f"s{i}",
            "description": "add",
            "tool": "add",
            "args": {"a": i, "b": 1},
            "depends_on": [f"s{i - 1}"] if i else [],
        }
        for i in range(n)
    ]
    return {"steps": steps}


async def _run_seconds(tool: Tool, steps: int) -> float:
    agent = Agent(ScriptedModel([chain(steps), {"answer": "ok"}]), tools=[tool], budget=BUDGET)
    start = time.perf_counter()
    result = await agent.run("add along a chain")
    seconds = time.perf_counter() - start
    assert result.ok, result.stop
    assert len(result.outputs) == steps, "not every step ran"
    return seconds


async def run_us_per_step(tool: Tool, steps: int) -> list[float]:
    """µs per step of ``RUNS`` runs of a ``steps``-step chain, after a warm-up run of 20 steps."""
    await _run_seconds(tool, 20)
    return [await _run_seconds(tool, steps) / steps * 1e6 for _ in range(RUNS)]


def _row(measure: str, micros: list[float], samples: int, **extra: Any) -> dict[str, Any]:
    row = {
        "measure": measure,
        "median_us": round(median(micros), 1),
        "p99_us": round(_percentile(micros, 0.99), 1) if samples > RUNS else None,
        "samples": samples,
        **extra,
    }
    print(json.dumps(row), flush=True)
    return row


async def _with_toolset(
    server: Any, name: str, use: Callable[[Tool], Awaitable[None]], connects: dict[str, float], label: str
) -> None:
    """Connect to ``server`` (timing it into ``connects``), hand its tool ``name`` to ``use``."""
    start = time.perf_counter()
    async with MCPToolset(server=server, only=(name,)) as tools:
        connects[label] = (time.perf_counter() - start) * 1e3
        [found] = list(tools)
        await use(found)


async def measure(calls: int, steps: int) -> tuple[list[dict[str, Any]], dict[str, float]]:
    rows: list[dict[str, Any]] = []
    connects: dict[str, float] = {}
    add_args = {"a": 2, "b": 3}

    plain = tool(add)
    assert await plain.invoke(dict(add_args), CONTEXT) == 5
    rows.append(_row("plain tool, invoke", [s * 1e6 for s in await call_latencies(plain, add_args, calls)], calls))
    rows.append(_row(f"run of {steps} steps, plain tool", await run_us_per_step(plain, steps), RUNS))

    async def in_process(found: Tool) -> None:
        assert await found.invoke(dict(add_args), CONTEXT) == {"result": 5}
        micros = [s * 1e6 for s in await call_latencies(found, add_args, calls)]
        rows.append(_row("MCP in-process, invoke", micros, calls))

    await _with_toolset(build_server(), "add", in_process, connects, "in-process")

    async def stdio(found: Tool) -> None:
        assert await found.invoke(dict(add_args), CONTEXT) == {"result": 5}
        micros = [s * 1e6 for s in await call_latencies(found, add_args, calls)]
        rows.append(_row("MCP stdio, invoke", micros, calls))
        rows.append(_row(f"run of {steps} steps, MCP stdio tool", await run_us_per_step(found, steps), RUNS))

    await _with_toolset(
        MCPStdio(command=sys.executable, args=(str(SERVER_SCRIPT),)), "add", stdio, connects, "stdio (add)"
    )

    time_server = _time_server()
    if time_server is None:
        print(json.dumps({"measure": "mcp-server-time", "skipped": "mcp-server-time is not installed"}))
        return rows, connects

    async def real(found: Tool) -> None:
        micros = [s * 1e6 for s in await call_latencies(found, {"timezone": "UTC"}, calls)]
        rows.append(_row("mcp-server-time stdio, get_current_time", micros, calls, note="includes the server's work"))

    server = MCPStdio(command=time_server, args=("--local-timezone", "UTC"))
    await _with_toolset(server, "get_current_time", real, connects, "stdio (mcp-server-time)")
    return rows, connects


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table, calls then runs; calls are compared with the plain call, runs with the plain
    tool's run (ratio, and the median added over it)."""
    calls = [r for r in rows if not r["measure"].startswith("run of")]
    runs = [r for r in rows if r["measure"].startswith("run of")]
    lines = [
        "| measure | median µs | p99 µs | ratio to the plain tool | added µs |",
        "|---|---:|---:|---:|---:|",
    ]
    for group in (calls, runs):
        base = group[0]["median_us"]
        for r in group:
            p99 = "–" if r["p99_us"] is None else f"{r['p99_us']:,.1f}"
            lines.append(
                f"| {r['measure']} | {r['median_us']:,.1f} | {p99} | {r['median_us'] / base:,.1f}×"
                f" | {r['median_us'] - base:,.1f} |"
            )
    return "\n".join(lines)


def main(calls: int, steps: int) -> None:
    rows, connects = asyncio.run(measure(calls, steps))
    print()
    print(markdown(rows))
    print()
    run_rows = [r for r in rows if r["measure"].startswith("run of")]
    plain_run = next(r for r in run_rows if r["measure"].endswith("plain tool"))["median_us"]
    mcp_run = next(r for r in run_rows if r["measure"].endswith("MCP stdio tool"))["median_us"]
    print(
        f"python {platform.python_version()} on {platform.machine()}; calls: {calls} per measure after {WARM_UP}"
        f" warm-up calls, one at a time; runs: median of {RUNS} runs (µs = wall time ÷ {steps} sequential steps;"
        " no p99 over so few runs)."
    )
    print(f"Inside a run, the stdio MCP tool adds {mcp_run - plain_run:,.0f} µs per step.")
    print("Connecting, once per server: " + ", ".join(f"{k} {v:,.0f} ms" for k, v in connects.items()) + ".")
    print("mcp-server-time's figure includes its own work (a time-zone lookup and formatting).")
    print("Machine load moves these figures between sittings: compare ratios taken in one sitting.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per measure (default 200)")
    parser.add_argument("--steps", type=int, default=200, help="steps in a run's chain (default 200)")
    args = parser.parse_args()
    main(args.calls, args.steps)
