"""W1 (per-step overhead) and W2/W2b/W2z (parallel makespan) for the planexec runtime.

Run: ``.venv/bin/python -m benchmarks.core`` (add ``--repeat N`` for more repetitions).
Models are scripted with simulated latency and tools sleep for a set time, so the figures measure
the framework and its schedule. Each figure is the median over the repetitions; one JSON line is
printed per measurement, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from planexec import Agent, Budget, Limits, tool
from planexec.log import RunState
from planexec.models import StreamingScriptedModel
from planexec.store import RunStore, SQLiteStore
from planexec.testing import ScriptedModel
from planexec.tools import Tool


def _noop_tool() -> Tool:
    @tool
    async def noop(x: int = 0) -> int:
        """Return x."""
        return x

    return noop


def _sleep_tool() -> Tool:
    @tool
    async def work(ms: float) -> float:
        """Sleep for ms milliseconds."""
        await asyncio.sleep(ms / 1000)
        return ms

    return work


def chain_plan(n: int) -> dict[str, Any]:
    steps = [{"id": "s0", "description": "step", "tool": "noop", "args": {"x": 0}}]
    steps += [
        {"id": f"s{i}", "description": "step", "tool": "noop", "args": {"x": i}, "depends_on": [f"s{i - 1}"]}
        for i in range(1, n)
    ]
    return {"steps": steps}


def layered_plan() -> dict[str, Any]:
    """W2: 5 layers of 10 steps of 50 ms; (k, j) depends on (k-1, j) and (k-1, (j+1) mod 10)."""
    steps = []
    for k in range(5):
        for j in range(10):
            deps = [] if k == 0 else sorted({f"l{k - 1}_{j}", f"l{k - 1}_{(j + 1) % 10}"})
            steps.append(
                {"id": f"l{k}_{j}", "description": "work", "tool": "work", "args": {"ms": 50}, "depends_on": deps}
            )
    return {"steps": steps}


def uneven_plan() -> dict[str, Any]:
    """W2b: 10 chains of 5 steps; in layer k the step of chain (k*3 mod 10) takes 90 ms, the rest 10 ms."""
    steps = []
    for k in range(5):  # listed layer by layer, as a planner writes them
        for c in range(10):
            ms = 90 if c == (k * 3) % 10 else 10
            deps = [f"c{c}_{k - 1}"] if k else []
            steps.append(
                {"id": f"c{c}_{k}", "description": "work", "tool": "work", "args": {"ms": ms}, "depends_on": deps}
            )
    return {"steps": steps}


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return time.perf_counter() - t0


W1_BUDGET = Budget(steps=None, tool_calls=None)
"""The default caps, but for steps and tool calls: W1 runs chains of up to 1,000 steps."""


async def w1_planexec(n: int, store: RunStore | None = None) -> float:
    agent = Agent(ScriptedModel([chain_plan(n), {"answer": "ok"}]), tools=[_noop_tool()], budget=W1_BUDGET, store=store)

    async def go() -> None:
        result = await agent.run("chain")
        assert result.ok, result.stop

    return await _timed(go)


def _folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir())


async def w4(n: int, repeat: int) -> dict[str, float]:
    """W1 with the default durable store (a SQLite file) against no store; resume cost of the log."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        store = SQLiteStore(path)
        durable: list[float] = []
        memory: list[float] = []
        for _ in range(repeat):
            memory.append(await w1_planexec(n))
            durable.append(await w1_planexec(n, store))
        runs = await store.list_runs(limit=1)
        run_id = runs[0].run_id
        events = runs[0].events
        t0 = time.perf_counter()
        log = [s.event for s in await store.read(run_id)]
        state = RunState.fold(log)
        fold_s = time.perf_counter() - t0
        assert state.finished
        await store.close()
        size = _folder_size(Path(folder))
    added = (statistics.median(durable) - statistics.median(memory)) / n * 1e6
    return {
        "added_us_per_step": round(added, 1),
        "bytes_per_step": round(size / (repeat * n), 1),
        "events_per_step": round(events / n, 2),
        "read_and_fold_ms": round(fold_s * 1e3, 1),
    }


async def w1_floor(n: int) -> float:
    """A bare asyncio chain: one task and one event per step."""

    async def step(prev: asyncio.Event | None, done: asyncio.Event) -> None:
        if prev is not None:
            await prev.wait()
        done.set()

    async def go() -> None:
        prev: asyncio.Event | None = None
        tasks = []
        for _ in range(n):
            ev = asyncio.Event()
            tasks.append(asyncio.create_task(step(prev, ev)))
            prev = ev
        await asyncio.gather(*tasks)

    return await _timed(go)


def step_pieces(text: str) -> list[str]:
    """A plan's JSON text cut right after each step, so step i of n arrives at i/(n+1) of the call."""
    plan = json.loads(text)
    steps = [json.dumps(s) for s in plan["steps"]]
    pieces = ['{"steps": [' + steps[0]]
    pieces += [", " + s for s in steps[1:]]
    pieces[-1] += "]}"
    return pieces


async def w2(plan: dict[str, Any], model_latency: float, *, streaming: bool = False) -> float:
    model: ScriptedModel
    if streaming:
        model = StreamingScriptedModel([plan, {"answer": "ok"}], latency=model_latency, pieces=step_pieces)
    else:
        model = ScriptedModel([plan, {"answer": "ok"}], latency=model_latency)
    agent = Agent(model, tools=[_sleep_tool()], limits=Limits(max_concurrency=64), store=None)

    async def go() -> None:
        result = await agent.run("layers")
        assert result.ok, result.stop

    return await _timed(go)


def streaming_bound_s(plan: dict[str, Any], latency: float) -> float:
    """The makespan when step i of n arrives at latency·i/(n+1) and starts once it and its
    dependencies are there; then the answer call."""
    steps = plan["steps"]
    finish: dict[str, float] = {}
    for i, s in enumerate(steps, 1):
        ready = max([latency * i / (len(steps) + 1), *(finish[d] for d in s["depends_on"])])
        finish[s["id"]] = ready + s["args"]["ms"] / 1000
    return max(latency, *finish.values()) + latency


def critical_path_s(plan: dict[str, Any]) -> float:
    """The longest chain of step durations in a plan, in seconds."""
    finish: dict[str, float] = {}
    for s in plan["steps"]:  # steps are listed after their dependencies
        finish[s["id"]] = s["args"]["ms"] / 1000 + max((finish[d] for d in s["depends_on"]), default=0.0)
    return max(finish.values())


def _emit(rows: list[dict[str, Any]], **row: Any) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


async def main(repeat: int) -> None:
    rows: list[dict[str, Any]] = []
    for n in (100, 1000):
        floor = statistics.median([await w1_floor(n) for _ in range(repeat)]) / n * 1e6
        ours = statistics.median([await w1_planexec(n) for _ in range(repeat)]) / n * 1e6
        _emit(
            rows,
            workload=f"W1 N={n}",
            metric="us_per_step",
            planexec=round(ours, 1),
            asyncio_floor=round(floor, 1),
            ratio=round(ours / floor, 2),
            goal="<= 40",
        )
    for n in (100, 1000):
        figures = await w4(n, repeat)
        _emit(
            rows,
            workload=f"W4 N={n}",
            metric="added_us_per_step",
            planexec=figures["added_us_per_step"],
            goal="<= 150",
            **{k: v for k, v in figures.items() if k != "added_us_per_step"},
        )
    cases = [("W2", layered_plan(), 0.1), ("W2b", uneven_plan(), 0.1), ("W2z", layered_plan(), 0.0)]
    for name, plan, latency in cases:
        bound = round(2 * latency + critical_path_s(plan), 4)  # plan call + critical path + answer call
        ms = statistics.median([await w2(plan, latency) for _ in range(repeat)])
        _emit(
            rows,
            workload=name,
            metric="makespan_s",
            planexec=round(ms, 4),
            bound=bound,
            ratio=round(ms / bound, 3),
            note="bound: planning + critical path + answer, no streaming",
        )
    for name, plan in (("W2 streamed", layered_plan()), ("W2b streamed", uneven_plan())):
        bound = round(streaming_bound_s(plan, 0.1), 4)
        ms = statistics.median([await w2(plan, 0.1, streaming=True) for _ in range(repeat)])
        _emit(
            rows,
            workload=name,
            metric="makespan_s",
            planexec=round(ms, 4),
            bound=bound,
            ratio=round(ms / bound, 3),
            note="bound with streaming dispatch: step i of n ready at 100*i/(n+1) ms",
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print()
    print(f"python {platform.python_version()} on {platform.machine()}, {repeat} repetitions, peak RSS {rss:.0f} MiB")
    print(f"{'workload':<12} {'metric':<18} {'planexec':>10} {'reference':>10} {'ratio':>7}")
    for r in rows:
        ref = r.get("asyncio_floor", r.get("bound", r.get("goal", "")))
        print(f"{r['workload']:<12} {r['metric']:<18} {r['planexec']:>10} {ref!s:>10} {r.get('ratio', ''):>7}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.repeat))
    sys.exit(0)
