"""Planning on BFCL's multi-turn base tasks, three ways: planexec's upfront policy, its step-by-step
policy, and the ReAct baseline — each driven by the oracle of the same ground truth, so that what
differs is how many model calls each way needs and how much each call sends.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.bfcl_policies`` (needs ``bfcl-eval``:
``pip install --no-deps bfcl-eval==2026.3.23 mpmath``, which ``make`` does).

For each of the 200 tasks and each way: the model calls made to plan (a ReAct run: every model
call), the characters of their messages, and — since a ReAct model is sent the tools' definitions
with every call, where planexec's planner has them in its messages — the characters of those
definitions (name, description, JSON Schema) times the ReAct calls. Printed: medians per task, the
totals, and each way's wall time for the 200 tasks (BFCL's checks included).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from planexec.bfcl import TaskRun, load_tasks, run_task

WAYS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("planexec, upfront", {"agent": "planexec", "policy": "upfront"}),
    ("planexec, step by step", {"agent": "planexec", "policy": "step"}),
    ("ReAct baseline", {"agent": "react"}),
)


def _definition_chars(task: Any) -> int:
    tools = TaskRun(task).tools(0)
    return len(json.dumps([{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]))


async def main() -> None:
    tasks = load_tasks("multi_turn_base")
    definitions = {task.id: _definition_chars(task) for task in tasks}
    print(f"BFCL multi_turn_base, {len(tasks)} tasks, each way driven by the oracle of the ground truth")
    columns = (("calls/task", 11), ("chars/task", 12), ("+ tool defs", 13), ("all calls", 11), ("all chars", 13))
    print(f"{'way':<24}" + "".join(f"{name:>{width}}" for name, width in columns) + f"{'wall':>8}")
    for label, options in WAYS:
        calls: list[int] = []
        chars: list[int] = []
        with_defs: list[int] = []
        started = time.perf_counter()
        for task in tasks:
            outcome = await run_task(task, **options)
            assert outcome.valid, (label, task.id, outcome.error)
            calls.append(outcome.planner_calls)
            chars.append(outcome.request_chars)
            extra = definitions[task.id] * outcome.planner_calls if options["agent"] == "react" else 0
            with_defs.append(outcome.request_chars + extra)
        wall = time.perf_counter() - started
        print(
            f"{label:<24}{statistics.median(calls):>11.0f}{statistics.median(chars):>12,.0f}"
            f"{statistics.median(with_defs):>13,.0f}{sum(calls):>11,}{sum(with_defs):>13,}{wall:>7.1f}s"
        )


if __name__ == "__main__":
    asyncio.run(main())
