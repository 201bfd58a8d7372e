"""W4: what the durable run log costs — SQLiteStore against MemoryStore.

Run: ``.venv/bin/python -m benchmarks.store`` (``--repeat N`` for more repetitions, ``--dir`` for
where the database files go; default: a temporary folder).

A run of N steps is appended the way the runtime appends it: run_started, then one append per step
holding two events (step_started, step_succeeded), each after the seq the previous append returned.
Figures (medians over the repetitions):

* append cost: µs per append call and per event, for MemoryStore and SQLiteStore (default
  secret redaction on), plus SQLiteStore with redaction off and the cost of encoding alone
  (serializing + redacting the events, which every backend pays);
* bytes per step: growth of the SQLite file (measured after closing, when the WAL has been
  checkpointed into it) divided by N, for N = 100 and N = 1,000 — they should be about equal;
  also the JSON payload per step and, on Linux, the bytes the process handed to write() per step
  (the WAL frames: each commit writes whole pages);
* read back: ms to read a 1,000-step log (2,001 events) from a freshly opened store.

One JSON line is printed per measurement, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planexec.executor import Verdict
from planexec.log import Event, RunStarted, StepStarted, StepSucceeded
from planexec.store import MemoryStore, Redactor, RunStore, SQLiteStore
from planexec.store._codec import encode_events

STEPS = 1_000


def run_started(run_id: str) -> RunStarted:
    return RunStarted(
        at=time.time(),
        run_id=run_id,
        goal="reconcile the March invoices against the ledger",
        budget={"model_calls": 50, "cost": 2.0, "steps": None},
        tools=("fetch_invoices", "fetch_ledger", "compare"),
    )


def step_events(i: int) -> list[Event]:
    """The two events of one finished tool step, with small realistic arguments and output."""
    at = 1_700_000_000.0 + i
    step_id = f"step-{i}"
    return [
        StepStarted(
            at=at,
            step_id=step_id,
            executor="tools",
            tool="fetch_invoices",
            args={"month": "2026-03", "page": i},
            idempotency_key=f"run-1:{step_id}:1",
        ),
        StepSucceeded(
            at=at + 0.01,
            step_id=step_id,
            output={"count": 20, "total": 1234.5 + i, "ids": [f"INV-{i:05d}", f"INV-{i + 1:05d}"]},
            verdict=Verdict(passed=True),
        ),
    ]


async def append_run(store: RunStore, run_id: str, steps: int) -> float:
    """Append a run of ``steps`` steps; return the seconds spent in the step appends."""
    last = await store.append(run_id, [run_started(run_id)], expected_seq=0)
    batches = [step_events(i) for i in range(steps)]
    start = time.perf_counter()
    for batch in batches:
        last = await store.append(run_id, batch, expected_seq=last)
    return time.perf_counter() - start


def _written_bytes() -> int | None:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


async def append_cost(make: Callable[[], RunStore], steps: int) -> float:
    store = make()
    try:
        return await append_run(store, "run-1", steps)
    finally:
        await store.close()


def encode_cost(steps: int) -> float:
    redactor = Redactor()
    batches = [step_events(i) for i in range(steps)]
    start = time.perf_counter()
    for batch in batches:
        encode_events(batch, redactor)
    return time.perf_counter() - start


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _size(path: Path) -> int:
    return path.stat().st_size


async def bytes_per_step(folder: Path, steps: int) -> dict[str, float]:
    path = folder / f"size-{steps}.db"
    _remove_database(path)
    store = SQLiteStore(path)
    await store.append("run-1", [run_started("run-1")], expected_seq=0)
    await store.close()
    before = _size(path)
    store = SQLiteStore(path)
    await store.last_seq("run-1")  # open before counting
    written_before = _written_bytes()
    last = 1
    payload = 0
    redactor = Redactor()
    for i in range(steps):
        batch = step_events(i)
        payload += sum(len(e.data) for e in encode_events(batch, redactor))
        last = await store.append("run-1", batch, expected_seq=last)
    written_after = _written_bytes()
    await store.close()
    after = _size(path)
    out = {"file_bytes_per_step": (after - before) / steps, "json_bytes_per_step": payload / steps}
    if written_before is not None and written_after is not None:
        out["write_bytes_per_step"] = (written_after - written_before) / steps
    return out


async def read_back(folder: Path, steps: int, repeat: int) -> tuple[float, float]:
    path = folder / "read.db"
    store = SQLiteStore(path)
    await append_run(store, "run-1", steps)
    await store.close()
    memory = MemoryStore()
    await append_run(memory, "run-1", steps)
    sqlite_times, memory_times = [], []
    for _ in range(repeat):
        store = SQLiteStore(path)
        try:
            start = time.perf_counter()
            events = await store.read("run-1")
            sqlite_times.append(time.perf_counter() - start)
        finally:
            await store.close()
        if len(events) != 2 * steps + 1:
            raise RuntimeError(f"read {len(events)} events, expected {2 * steps + 1}")
        start = time.perf_counter()
        await memory.read("run-1")
        memory_times.append(time.perf_counter() - start)
    await memory.close()
    return statistics.median(sqlite_times), statistics.median(memory_times)


def _emit(rows: list[dict[str, Any]], **row: Any) -> None:
    rows.append(row)
    print(json.dumps(row), flush=True)


async def main(repeat: int, folder: Path) -> None:
    rows: list[dict[str, Any]] = []
    counter = iter(range(1_000_000))

    def sqlite(redactor: Redactor | None = None) -> Callable[[], RunStore]:
        return lambda: SQLiteStore(folder / f"append-{next(counter)}.db", redactor=redactor)

    cases: list[tuple[str, Callable[[], RunStore]]] = [
        ("MemoryStore", MemoryStore),
        ("SQLiteStore", sqlite()),
        ("SQLiteStore, redaction off", sqlite(Redactor.off())),
    ]
    for name, make in cases:
        seconds = statistics.median([await append_cost(make, STEPS) for _ in range(repeat)])
        _emit(
            rows,
            workload="W4 append",
            store=name,
            us_per_append=round(seconds / STEPS * 1e6, 1),
            us_per_event=round(seconds / (2 * STEPS) * 1e6, 1),
        )
    seconds = statistics.median([encode_cost(STEPS) for _ in range(repeat)])
    _emit(
        rows,
        workload="W4 append",
        store="encoding alone (serialize + redact)",
        us_per_append=round(seconds / STEPS * 1e6, 1),
        us_per_event=round(seconds / (2 * STEPS) * 1e6, 1),
    )
    sizes = {}
    for steps in (100, 1_000):
        sizes[steps] = await bytes_per_step(folder, steps)
        _emit(rows, workload="W4 size", steps=steps, **{k: round(v, 1) for k, v in sizes[steps].items()})
    growth = sizes[1_000]["file_bytes_per_step"] / sizes[100]["file_bytes_per_step"]
    _emit(rows, workload="W4 size", metric="file bytes per step, 1,000 vs 100 steps", ratio=round(growth, 3))
    sqlite_s, memory_s = await read_back(folder, STEPS, repeat)
    _emit(
        rows,
        workload="W4 read",
        steps=STEPS,
        events=2 * STEPS + 1,
        sqlite_ms=round(sqlite_s * 1e3, 2),
        memory_ms=round(memory_s * 1e3, 2),
    )

    print()
    print(f"python {platform.python_version()} on {platform.machine()}, {repeat} repetitions, files in {folder}")
    print(f"{'append, 1,000 steps of 2 events':<40} {'µs/append':>10} {'µs/event':>9}")
    for r in rows:
        if r["workload"] == "W4 append":
            print(f"{r['store']:<40} {r['us_per_append']:>10} {r['us_per_event']:>9}")
    print(f"{'SQLite size':<40} {'file B/step':>12} {'JSON B/step':>12} {'write() B/step':>15}")
    for steps in (100, 1_000):
        s = sizes[steps]
        written = s.get("write_bytes_per_step")
        print(
            f"{f'{steps:,} steps':<40} {s['file_bytes_per_step']:>12.1f} {s['json_bytes_per_step']:>12.1f} "
            f"{'n/a' if written is None else f'{written:.0f}':>15}"
        )
    read = rows[-1]
    label = "read back a 1,000-step log (2,001 events)"
    print(f"{label:<40} SQLite {read['sqlite_ms']} ms, memory {read['memory_ms']} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the database files go")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(main(args.repeat, args.dir))
    else:
        with tempfile.TemporaryDirectory(prefix="planexec-bench-") as tmp:
            asyncio.run(main(args.repeat, Path(tmp)))
    sys.exit(0)
