"""W3: many concurrent runs of a 10-step chain (model latency 100 ms per call, tools 20 ms).

Figures per batch of ``concurrency`` runs started together: runs per second (runs ÷ the batch's
wall time), p50 and p99 of the runs' own latencies, and CPU milliseconds per run (the process's
CPU time over the batch ÷ runs). Peak RSS is the measuring process's, read by the caller.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.side.common import lc_work, px_work
from planexec import Agent
from planexec.models import ModelRequest
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel

__all__ = ["STEPS", "w3"]

STEPS = 10
MODEL_LATENCY = 0.1
TOOL_MS = 20.0


def chain(steps: int = STEPS) -> list[dict[str, Any]]:
    return [
        {
            "id": f"s{i}",
            "description": "work",
            "tool": "work",
            "args": {"ms": TOOL_MS},
            "depends_on": [f"s{i - 1}"] if i else [],
        }
        for i in range(steps)
    ]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _batch(run: Callable[[], Awaitable[None]], concurrency: int) -> dict[str, float]:
    latencies: list[float] = []

    async def one() -> None:
        start = time.perf_counter()
        await run()
        latencies.append(time.perf_counter() - start)

    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    return {
        "runs_per_s": concurrency / wall,
        "p50_s": _percentile(latencies, 0.5),
        "p99_s": _percentile(latencies, 0.99),
        "cpu_ms_per_run": cpu / concurrency * 1e3,
        "wall_s": wall,
    }


def _planexec_runner(store_dir: Path | None) -> tuple[Callable[[], Awaitable[None]], SQLiteStore | None]:
    plan = {"steps": chain()}

    def reply(request: ModelRequest) -> Any:
        if request.purpose == "planner.propose":
            return plan
        return {"answer": "done"}

    store = SQLiteStore(store_dir / "runs.db") if store_dir is not None else None
    agent = Agent(FunctionModel(reply, latency=MODEL_LATENCY), tools=[px_work()], store=store)

    async def run() -> None:
        result = await agent.run("run the chain")
        assert result.ok, result.stop

    return run, store


def _floor_runner() -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await asyncio.sleep(MODEL_LATENCY)
        for _ in range(STEPS):
            await asyncio.sleep(TOOL_MS / 1000)
        await asyncio.sleep(MODEL_LATENCY)

    return run


def _graph_runner(framework: str) -> Callable[[], Awaitable[None]]:
    from benchmarks.peers.langgraph_plan_execute import PlanExecuteResponder, build_plan_execute
    from benchmarks.peers.langgraph_send import SendResponder, build_send
    from benchmarks.peers.scripted_chat import ScriptedChatModel

    steps = chain()
    if framework == "langgraph_send":
        graph = build_send(ScriptedChatModel(responder=SendResponder(steps), latency=MODEL_LATENCY), [lc_work()])

        async def run_send() -> None:
            out = await graph.ainvoke({"goal": "run the chain"})
            assert len(out["completed"]) == STEPS

        return run_send
    graph = build_plan_execute(
        ScriptedChatModel(responder=PlanExecuteResponder(steps), latency=MODEL_LATENCY), [lc_work()]
    )

    async def run_pe() -> None:
        out = await graph.ainvoke({"input": "run the chain"})
        assert len(out["past_steps"]) == STEPS
        assert out["response"]

    return run_pe


async def w3(framework: str, concurrency: int, repeat: int) -> list[dict[str, float]]:
    """One batch per repetition, after a warm-up batch of 5 runs; frameworks: planexec,
    planexec_sqlite (the default durable store), asyncio, langgraph_send, langgraph_plan_execute."""
    with tempfile.TemporaryDirectory(prefix="planexec-w3-") as folder:
        store = None
        if framework in ("planexec", "planexec_sqlite"):
            run, store = _planexec_runner(Path(folder) if framework == "planexec_sqlite" else None)
        elif framework == "asyncio":
            run = _floor_runner()
        else:
            run = _graph_runner(framework)
        try:
            await _batch(run, 5)
            return [await _batch(run, concurrency) for _ in range(repeat)]
        finally:
            if store is not None:
                await store.close()
