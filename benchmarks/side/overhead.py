"""W1 (per-step overhead of a chain of no-op steps) and W2/W2b/W2z (parallel makespan), for
planexec, the LangGraph peers and a plain asyncio floor.

``w1`` and ``w2`` return the seconds of each repetition (the caller takes the median); a warm-up
run comes first, so that one-off import and cache costs are not counted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks import core
from benchmarks.side.common import lc_noop, lc_work, median, timed

__all__ = ["W2_CASES", "bounds", "dag_floor", "summary", "w1", "w2"]

W2_CASES: dict[str, tuple[str, float]] = {
    "W2": ("layered", 0.1),
    "W2b": ("uneven", 0.1),
    "W2z": ("layered", 0.0),
}
"""Workload → (plan, model latency in seconds)."""


def _plan(kind: str) -> dict[str, Any]:
    return core.layered_plan() if kind == "layered" else core.uneven_plan()


async def _graph_run(framework: str, plan: dict[str, Any], latency: float, tool: str) -> float:
    """One run of a LangGraph peer over ``plan``; checks that every step ran."""
    from benchmarks.peers.langgraph_plan_execute import PlanExecuteResponder, build_plan_execute
    from benchmarks.peers.langgraph_send import SendResponder, build_send
    from benchmarks.peers.scripted_chat import ScriptedChatModel

    steps = plan["steps"]
    tools = [lc_noop() if tool == "noop" else lc_work()]
    send = framework == "langgraph_send"
    responder = SendResponder(steps) if send else PlanExecuteResponder(steps)
    model = ScriptedChatModel(responder=responder, latency=latency)
    graph = build_send(model, tools) if send else build_plan_execute(model, tools)
    out: dict[str, Any] = {}

    async def go() -> None:
        out.update(await graph.ainvoke({"goal": "run every step"} if send else {"input": "run every step"}))

    seconds = await timed(go)
    done = out["completed"] if send else out["past_steps"]
    assert len(done) == len(steps), f"{framework} did not run every step"
    return seconds


async def w1(framework: str, n: int, repeat: int) -> list[float]:
    """Seconds per run of an N-step chain of no-op steps (model latency 0), after a warm-up."""
    plan = core.chain_plan(n)

    async def once(size: int) -> float:
        if framework == "planexec":
            return await core.w1_planexec(size)
        if framework == "asyncio":
            return await core.w1_floor(size)
        return await _graph_run(framework, core.chain_plan(size) if size != n else plan, 0.0, "noop")

    await once(10)
    return [await once(n) for _ in range(repeat)]


async def dag_floor(plan: dict[str, Any], latency: float, *, streamed: bool) -> float:
    """A bare asyncio schedule of the plan: a planning sleep, one task per step that waits for its
    dependencies' events and sleeps its duration, then an answer sleep. Streamed: step i of n is
    there at latency·i/(n+1), while the planning call still lasts its whole latency."""
    steps = plan["steps"]
    done = {s["id"]: asyncio.Event() for s in steps}

    async def step(i: int, s: dict[str, Any]) -> None:
        if streamed:
            await asyncio.sleep(latency * i / (len(steps) + 1))
        for d in s["depends_on"]:
            await done[d].wait()
        await asyncio.sleep(s["args"]["ms"] / 1000)
        done[s["id"]].set()

    async def go() -> None:
        if streamed:
            await asyncio.gather(asyncio.sleep(latency), *(step(i, s) for i, s in enumerate(steps, 1)))
        else:
            await asyncio.sleep(latency)
            await asyncio.gather(*(step(i, s) for i, s in enumerate(steps, 1)))
        await asyncio.sleep(latency)

    return await timed(go)


async def w2(framework: str, workload: str, repeat: int) -> list[float]:
    """Makespans (seconds) of one W2 case; frameworks: planexec, planexec_streaming, asyncio,
    asyncio_streaming, langgraph_send, langgraph_plan_execute."""
    kind, latency = W2_CASES[workload]
    plan = _plan(kind)

    async def once() -> float:
        if framework in ("planexec", "planexec_streaming"):
            return await core.w2(plan, latency, streaming=framework == "planexec_streaming")
        if framework in ("asyncio", "asyncio_streaming"):
            return await dag_floor(plan, latency, streamed=framework == "asyncio_streaming")
        return await _graph_run(framework, plan, latency, "work")

    if repeat > 1:
        await once()
    return [await once() for _ in range(repeat)]


def bounds(workload: str) -> dict[str, float]:
    """The makespan bounds of a W2 case: the plan arriving whole, and streamed."""
    kind, latency = W2_CASES[workload]
    plan = _plan(kind)
    whole = 2 * latency + core.critical_path_s(plan)
    streamed = core.streaming_bound_s(plan, latency) if latency > 0 else whole
    return {"bound_s": round(whole, 4), "streaming_bound_s": round(streamed, 4)}


def summary(seconds: list[float]) -> dict[str, Any]:
    return {"median_s": round(median(seconds), 4), "runs": len(seconds)}
