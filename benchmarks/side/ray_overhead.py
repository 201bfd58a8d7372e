"""The per-step overhead of the Ray backend (tasks and actor pools), beside the in-process one.

Run: ``PYTHONPATH=.:src .venv/bin/python -m benchmarks.side.ray_overhead`` (``--calls`` and
``--steps`` to change the sizes). Needs the ``ray`` extra.

A local Ray cluster of one node (one CPU, no dashboard, loopback only) is started for the
measurement and shut down after it. One tool, ``add(a, b)``, is:

* called ``--calls`` times (300 by default, after a warm-up of 20), one call at a time, through
  its ``invoke`` in process, through a ``RayExecutor``'s remote version of it (a Ray task per
  call: submit, schedule on a warm worker, run, return) and through a ``RayExecutor`` with an
  actor pool (``RayOptions(actors=1)``: a call on a live async actor) — median and p99 per call,
  in µs;
* run as a chain of ``--steps`` sequential steps (100 by default) by an ``Agent`` with a
  ``ScriptedModel`` (no model latency), with the in-process tool executor, with a ``RayExecutor``
  named ``tools`` and with the same executor on an actor pool — the run's wall time ÷ steps,
  median of 3 runs after a warm-up run: what a step costs the framework end to end on each
  backend.

Starting the cluster is timed once and printed apart. The figures move with the machine's load:
quote differences taken in one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.side.common import median
from planexec import Agent, Budget, tool
from planexec.executor import RayExecutor, RayOptions
from planexec.testing import ScriptedModel
from planexec.tools import Tool, ToolContext

__all__ = ["main"]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _isolate() -> Path:
    """The environment Ray needs on a machine without a cloud: loopback only, no usage reports."""
    root = Path(tempfile.mkdtemp(prefix="pxr-", dir="/tmp"))
    home = root / "home"
    home.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    os.environ.update(
        {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_TMPDIR": str(root / "t"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
            "HOME": str(home),
        }
    )
    return root


async def _per_call(tool_: Tool, calls: int) -> list[float]:
    ctx = ToolContext(run_id="bench", step_id="s", attempt=1, idempotency_key="bench:s")
    for i in range(20):
        await tool_.invoke({"a": i, "b": 1}, ctx)
    took = []
    for i in range(calls):
        t0 = time.perf_counter()
        await tool_.invoke({"a": i, "b": 1}, ctx)
        took.append((time.perf_counter() - t0) * 1e6)
    return took


def _chain(steps: int) -> dict[str, Any]:
    """A plan of ``steps`` ``add`` steps, each depending on the one before."""
    return {
        "steps": [
            {
                "id": f"s{i}",
                "description": "add",
                "tool": "add",
                "args": {"a": i, "b": 1},
                "depends_on": [f"s{i - 1}"] if i else [],
            }
            for i in range(steps)
        ]
    }


async def _per_step(executors: list[RayExecutor], steps: int) -> float:
    async def once() -> float:
        planner = ScriptedModel([_chain(steps), {"answer": "done"}])
        budget = Budget(tool_calls=steps + 10, steps=steps + 10, wall_time=600)
        agent = Agent(planner, tools=[add], executors=executors, budget=budget, store=None)
        t0 = time.perf_counter()
        result = await agent.run("add up")
        if result.stop.kind != "goal_met":
            raise RuntimeError(f"the run did not finish: {result.stop}")
        return (time.perf_counter() - t0) * 1e6 / steps

    await once()
    return median([await once() for _ in range(3)])


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _measure(calls: int, steps: int) -> None:
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    print(f"local Ray cluster started in {time.perf_counter() - t0:.1f} s")
    cluster = RayExecutor(name="tools", options=RayOptions(num_cpus=0))
    pool = RayExecutor(name="tools", options=RayOptions(num_cpus=0, actors=1))
    try:
        here = await _per_call(add, calls)
        there = await _per_call(cluster.remote(add), calls)
        pooled = await _per_call(pool.remote(add), calls)
        print(f"\nper call ({calls} calls)      median µs    p99 µs   overhead µs")
        print(f"  in process            {median(here):>10.0f} {_p99(here):>9.0f}")
        for label, took in (("Ray task", there), ("Ray actor pool", pooled)):
            print(f"  {label:<20}  {median(took):>10.0f} {_p99(took):>9.0f} {median(took) - median(here):>13.0f}")
        local_step = await _per_step([], steps)
        ray_step = await _per_step([cluster], steps)
        pool_step = await _per_step([pool], steps)
        print(f"\nper step, a chain of {steps} steps (µs, median of 3 runs)   overhead µs")
        print(f"  in process            {local_step:>10.0f}")
        for label, took_step in (("Ray task", ray_step), ("Ray actor pool", pool_step)):
            print(f"  {label:<20}  {took_step:>10.0f} {took_step - local_step:>13.0f}")
    finally:
        await pool.close()
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--steps", type=int, default=100)
    options = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    root = _isolate()
    try:
        asyncio.run(_measure(options.calls, options.steps))
    finally:
        shutil.rmtree(root, ignore_errors=True)  # Ray's session files, once Ray has shut down


if __name__ == "__main__":
    main()
