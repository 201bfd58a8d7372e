"""Runs one side-by-side measurement in this process and prints its figures as one JSON line.

    python -m benchmarks.measure '{"workload": "W1", "framework": "planexec", "n": 1000, "repeat": 5}'

``benchmarks.compare`` starts one such process per workload and framework, so that each peak RSS
belongs to one framework's run alone and no framework inherits another's caches. The line holds
``figures`` (medians over the repetitions), ``rss_after_imports_mib`` (resident memory once the
framework is imported, before the workload) and ``peak_rss_mib``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from typing import Any

from benchmarks.side.common import peak_rss_mib, rss_mib

__all__ = ["run_case"]


def _import_framework(framework: str) -> None:
    import benchmarks.core  # planexec and the shared plans

    if framework.startswith("langgraph"):
        import benchmarks.peers.langgraph_plan_execute
        import benchmarks.peers.langgraph_send  # noqa: F401


def _medians(batches: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(b[key] for b in batches) for key in batches[0]}


async def run_case(case: dict[str, Any]) -> dict[str, Any]:
    workload, framework = case["workload"], case.get("framework", "")
    repeat = int(case.get("repeat", 1))
    if workload == "W1":
        from benchmarks.side.overhead import w1

        seconds = await w1(framework, case["n"], repeat)
        return {"us_per_step": statistics.median(seconds) / case["n"] * 1e6, "runs": len(seconds)}
    if workload in ("W2", "W2b", "W2z"):
        from benchmarks.side.overhead import bounds, summary, w2

        return {**summary(await w2(framework, workload, repeat)), **bounds(workload)}
    if workload == "W3":
        from benchmarks.side.concurrency import w3

        batches = await w3(framework, case["concurrency"], repeat)
        return {**_medians(batches), "batches": len(batches)}
    if workload == "W4":
        from benchmarks.side.durability import w4_langgraph, w4_planexec

        if framework == "planexec":
            return await w4_planexec(case["n"], repeat)
        return await w4_langgraph(framework, case["n"], repeat)
    if workload == "W5":
        from benchmarks.side.economy import w5_langgraph, w5_planexec, w5_send

        by_size: dict[str, Any] = {}
        for n in case["sizes"]:
            fail = f"s{n // 2}" if case.get("fail") else None
            if framework == "planexec":
                by_size[str(n)] = await w5_planexec(n, case["policy"], fail=fail)
            elif framework == "langgraph_send":
                by_size[str(n)] = await w5_send(n)
            else:
                by_size[str(n)] = await w5_langgraph(n, fail=fail)
        return by_size
    if workload == "W6 replan":
        from benchmarks.side.economy import w6_replan_langgraph, w6_replan_planexec

        return await (w6_replan_planexec() if framework == "planexec" else w6_replan_langgraph())
    if workload == "W6 crash":
        from benchmarks.side.crash import w6_crash

        trials = await asyncio.to_thread(w6_crash, framework)
        return {
            "kills": len(trials),
            "killed_mid_run": sum(t["killed_mid_run"] for t in trials),
            "finished_steps_rerun": sum(t["finished_steps_rerun"] for t in trials),
            "completed_calls_repeated": sum(t["completed_calls_repeated"] for t in trials),
            "repeated_with_same_key": sum(t["repeated_with_same_key"] for t in trials),
            "resume_to_first_step_ms": statistics.median(t["resume_to_first_step_ms"] for t in trials),
            "resumed_ok": sum(t["resumed_ok"] for t in trials),
            "trials": trials,
        }
    raise ValueError(f"unknown workload {workload!r}")


def main(argv: list[str]) -> None:
    case = json.loads(argv[0])
    _import_framework(case.get("framework", ""))
    after_imports = rss_mib()
    figures = asyncio.run(run_case(case))
    out = {
        "figures": figures,
        "rss_after_imports_mib": round(after_imports, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
