"""Side-by-side benchmarks: planexec against LangGraph's documented agents and a plain asyncio floor.

Run: ``.venv/bin/python -m benchmarks.compare [--repeat N] [--quick | --full] [--only W1,W3]``
(``make bench`` installs the ``bench`` extra and runs it). Workloads W1–W6 are defined in the
project's benchmark plan; the peers are built as LangGraph's own documentation builds them
(``benchmarks/peers``): the plan-and-execute graph (planner → ReAct executor → replanner, replanning
after every step) and the orchestrator–worker graph that fans steps out with ``Send``, superstep by
superstep; the SQLite checkpointer where durability is measured. Models are scripted (simulated
latency and token usage), tools sleep for set times, so the figures measure frameworks and schedules.

Each measurement runs in its own process (``benchmarks.measure``), so a peak RSS belongs to one
framework's run; figures are medians over the repetitions of that process. One JSON line is printed
per measurement, then a table with the ratio planexec ÷ peer.

Where a peer is capped (it is too slow to repeat at full size in the time budget) the table says so:
plan-and-execute runs W1 at N = 1,000 at most 3 times, W2 and W2b once (each run takes ~17 s of
model latency alone) and W3 at 1,000 concurrent runs once (~90 s), unless ``--full``; and W4 at
N = 100 and 300, never 1,000. The Send graph runs W4 at N = 1,000 twice and W3 at 1,000 twice
(every framework does, unless ``--full``). ``--quick`` drops W3 at 1,000, plan-and-execute's W2
and W2b, and repeats twice. Nothing is extrapolated.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.side.table import FLOOR, PE, PX, SEND, W5_SIZES, Results, markdown, table

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "planexec",
    "langgraph",
    "langchain-core",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-prebuilt",
    "pydantic",
    "aiosqlite",
)


@dataclass(frozen=True)
class Settings:
    repeat: int
    quick: bool
    full: bool
    only: frozenset[str]

    def wants(self, workload: str) -> bool:
        return not self.only or workload.split()[0] in self.only


def _case(workload: str, framework: str, variant: str, **params: Any) -> dict[str, Any]:
    return {"workload": workload, "framework": framework, "variant": variant, **params}


def plan_cases(s: Settings) -> list[dict[str, Any]]:
    """Every measurement of the run, with the caps described in the module docstring."""
    r = s.repeat
    cases: list[dict[str, Any]] = []
    if s.wants("W1"):
        for n in (100, 1000):
            pe_runs = r if n == 100 or s.full else (1 if s.quick else min(r, 3))
            for fw, runs in ((PX, r), (FLOOR, r), (SEND, r), (PE, pe_runs)):
                cases.append(_case("W1", fw, f"N={n}", n=n, repeat=runs))
    if s.wants("W2"):
        for wl in ("W2", "W2b", "W2z"):
            frameworks = [PX, FLOOR, SEND] + ([f"{PX}_streaming", f"{FLOOR}_streaming"] if wl != "W2z" else [])
            cases += [_case(wl, fw, wl, repeat=r) for fw in frameworks]
            if wl == "W2z":
                cases.append(_case(wl, PE, wl, repeat=r))
            elif not s.quick:
                cases.append(_case(wl, PE, wl, repeat=min(r, 3) if s.full else 1))
    if s.wants("W3"):
        for c in (200,) if s.quick else (200, 1000):
            batches = min(r, 3) if c == 200 or s.full else 2
            for fw in (PX, f"{PX}_sqlite", FLOOR, SEND, PE):
                runs = 1 if (fw == PE and c == 1000 and not s.full) else batches
                cases.append(_case("W3", fw, str(c), concurrency=c, repeat=runs))
    if s.wants("W4"):
        small = 1 if s.quick else min(r, 3)
        for n in (100, 1000):
            cases.append(_case("W4", PX, f"N={n}", n=n, repeat=r))
            cases.append(_case("W4", SEND, f"N={n}", n=n, repeat=small if n == 100 else (1 if s.quick else 2)))
        for n in (100,) if s.quick else (100, 300):
            cases.append(_case("W4", PE, f"N={n}", n=n, repeat=1 if s.quick else 2))
    if s.wants("W5"):
        sizes = list(W5_SIZES)
        cases.append(_case("W5", PX, "upfront", policy="upfront", sizes=sizes))
        cases.append(_case("W5", PX, "step", policy="step", sizes=sizes))
        cases.append(_case("W5", PX, "upfront+failure", policy="upfront", fail=True, sizes=sizes))
        cases.append(_case("W5", SEND, "upfront", sizes=sizes))
        cases.append(_case("W5", PE, "upfront", sizes=sizes))
        cases.append(_case("W5", PE, "upfront+failure", fail=True, sizes=sizes))
    if s.wants("W6"):
        cases += [_case("W6 replan", fw, "replan") for fw in (PX, PE)]
        cases += [_case("W6 crash", fw, "crash") for fw in (PX, PE)]
    return cases


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement in its own process and return its JSON line, parsed."""
    spec = {k: v for k, v in case.items() if k != "variant"}
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "benchmarks.measure", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    parsed: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return parsed


def environment() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "machine": f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "versions": versions,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per measurement (default 5)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer repetitions, W3 at 200 only, fewer peer runs")
    mode.add_argument("--full", action="store_true", help="lift the caps on the slow peer runs (much longer)")
    parser.add_argument("--only", default="", help="comma-separated workloads to run, e.g. W1,W3")
    args = parser.parse_args(argv)
    repeat = min(args.repeat, 2) if args.quick else args.repeat
    only = frozenset(w.strip().upper().replace("W2B", "W2").replace("W2Z", "W2") for w in args.only.split(",") if w)
    settings = Settings(repeat=max(1, repeat), quick=args.quick, full=args.full, only=only)

    started = time.perf_counter()
    env = environment()
    print(json.dumps({"environment": env, "repeat": settings.repeat, "quick": settings.quick, "full": settings.full}))
    res = Results()
    for case in plan_cases(settings):
        out = run_case(case)
        res.add(case, out)
        print(json.dumps({**case, **out}), flush=True)
    elapsed = time.perf_counter() - started

    print()
    print(f"machine: {env['machine']}; Python {env['python']}; SQLite {env['sqlite']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()))
    flags = " --quick" if settings.quick else " --full" if settings.full else ""
    print(f"command: python -m benchmarks.compare --repeat {settings.repeat}{flags}; took {elapsed / 60:.1f} min")
    print()
    print(markdown(table(res)))
    errors = [(k, v["error"]) for k, v in res.data.items() if "error" in v]
    for key, error in errors:
        print(f"failed: {' '.join(key)}: {error}", file=sys.stderr)


if __name__ == "__main__":
    main()
