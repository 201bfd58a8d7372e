"""planexec's framework time on BFCL's multi-turn base tasks, per call.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.bfcl_overhead`` (needs ``bfcl-eval``:
``pip install --no-deps bfcl-eval==2026.3.23 mpmath``, which ``make`` does).

For each of the 200 tasks: the ground truth's calls made directly on fresh instances of the task's
classes (parsed beforehand: the calls alone), against the same task run through planexec with the
oracle planner (each turn a run of a session: planner, static checks, scheduler, executor, the
run's log in memory), timed from each turn's ``run_started`` to its ``run_finished``. A task's
figure is (planexec's time − the direct calls' time) ÷ its calls: what the framework adds to one
call. Printed: the median and p99 over the tasks, the same per turn, a turn's time split by least
squares into what every turn costs and what each of its calls adds (and the median turn by its
number of calls), the suite's wall time both
ways, the planner's calls and request characters per task, and what one hand-off of a sync
function to a worker thread and back costs on this machine (BFCL's functions are sync, so each
call makes one, and so does each turn's answer check): on a loaded machine that hand-off, not
planexec's own work, is most of a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any

from planexec.bfcl import BfclWorld, load_tasks, parse_call, run_task
from planexec.log import ModelCalled, RunFinished, RunStarted
from planexec.tools import run_in_thread


def _direct(task: Any) -> tuple[float, int, list[float]]:
    """The ground truth's calls made directly: their time, their count, and each turn's time."""
    world = BfclWorld(task)
    calls = [[parse_call(text, world.signature_of) for text in turn] for turn in task.ground_truth]
    fresh = BfclWorld(task)
    owner = {name: fresh.instances[cls] for name, cls in fresh._owner.items()}
    count = 0
    turns = []
    for turn in calls:
        t0 = time.perf_counter()
        for name, kwargs in turn:
            with contextlib.suppress(Exception):  # as BFCL's executor, a failed call is a result
                getattr(owner[name], name)(**kwargs)
            count += 1
        turns.append(time.perf_counter() - t0)
    return sum(turns), count, turns


async def _hand_off(rounds: int = 2000) -> float:
    """The median µs of one round trip of a no-op sync function through a worker thread."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await run_in_thread(int)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def main() -> None:
    tasks = load_tasks("multi_turn_base")
    per_call: list[float] = []
    per_turn: list[float] = []
    direct_total = planexec_total = 0.0
    planner_calls: list[int] = []
    planner_chars: list[int] = []
    by_calls: dict[int, list[float]] = {}
    """Framework time of each turn (µs), by the number of calls the turn makes."""
    t_suite = time.perf_counter()
    for task in tasks:
        direct, count, direct_turns = _direct(task)
        outcome = await run_task(task)
        assert outcome.valid, (task.id, outcome.error)
        spent = 0.0
        calls = chars = 0
        for index, turn in enumerate(outcome.turns):
            started = next(e.at for e in turn.events if isinstance(e, RunStarted))
            finished = next(e.at for e in turn.events if isinstance(e, RunFinished))
            spent += finished - started
            made = len(task.ground_truth[index])
            by_calls.setdefault(made, []).append((finished - started - direct_turns[index]) * 1e6)
            for e in turn.events:
                if isinstance(e, ModelCalled) and e.role == "planner":
                    calls += 1
                    chars += e.request_chars
        planner_calls.append(calls)
        planner_chars.append(chars)
        direct_total += direct
        planexec_total += spent
        if count:
            per_call.append((spent - direct) / count * 1e6)
        per_turn.append((spent - direct) / len(outcome.turns) * 1e6)
    suite = time.perf_counter() - t_suite
    per_call.sort()
    p99 = per_call[min(len(per_call) - 1, int(0.99 * len(per_call)))]
    print(f"BFCL multi_turn_base, {len(tasks)} tasks, the oracle planner (upfront), no store")
    print(f"  framework time per call: median {statistics.median(per_call):.0f} µs, p99 {p99:.0f} µs")
    print(f"  framework time per turn: median {statistics.median(per_turn):.0f} µs")
    print(f"  the calls made directly: {direct_total:.2f} s in all; through planexec: {planexec_total:.2f} s")
    print(f"  the suite's wall time (checks included): {suite:.1f} s")
    print(
        f"  planner calls per task: median {statistics.median(planner_calls):.0f}, "
        f"request characters per task: median {statistics.median(planner_chars):,.0f}"
    )
    print(f"  a sync function's hand-off to a worker thread and back: median {await _hand_off():.0f} µs")
    points = [(n, t) for n, times in by_calls.items() if n > 0 for t in times]
    slope, intercept = statistics.linear_regression([float(n) for n, _ in points], [t for _, t in points])
    fit = f"{intercept:.0f} µs + {slope:.0f} µs per call"
    print(f"  a turn's framework time ≈ {fit} (least squares over {len(points)} turns with calls)")
    for n in sorted(by_calls):
        times = by_calls[n]
        print(f"    turns of {n} calls: {len(times):>4}, median {statistics.median(times):,.0f} µs")


if __name__ == "__main__":
    asyncio.run(main())
