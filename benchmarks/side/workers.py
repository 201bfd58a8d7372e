"""Runs shared by workers over PostgreSQL: throughput with 1, 2 and 3 ``planexec worker``
processes on this machine, and how long after a worker is killed its runs are taken over.

Each run is a two-step plan from a function-backed planner (answers at once) whose tool sleeps
``--tool-ms`` (default 10 ms) per step. Throughput: ``--runs`` runs (default 200) are queued, then
N workers (``--concurrency`` 8 each) are started, and the clock runs from their start until the
queue shows every run done, from the moment every worker has claimed a run (worker start-up,
about 1 s of CPU each, is left out).

Take-over: two workers with ``--lease`` second leases share runs whose steps take 0.5 s; once the
second holds four runs mid-call it is killed with SIGKILL; for each run it held (and had not
ended), the time from the kill to the ``run_resumed`` event the other worker logs. The lease is the
floor: a claim waits for it to expire (it was renewed up to a third of a lease before the kill).

    PLANEXEC_TEST_POSTGRES=postgresql://… python -m benchmarks.side.workers [--runs 200] [--lease 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import planexec
from planexec.log import RunResumed
from planexec.runs import AgentSpec, submit
from planexec.store import PostgresStore, RunQueue

TOOLS = '''
import asyncio

from planexec import tool
from planexec.testing import FunctionModel


@tool(side_effect=True, idempotent=True)
async def work(item: str, seconds: float) -> str:
    """Work on an item."""
    await asyncio.sleep(seconds)
    return f"{item} done"


TOOLS = [work]


def planner(seconds):
    def reply(request):
        if request.purpose != "planner.propose":
            return {"answer": "done"}
        first = {"id": "a", "description": "a", "tool": "work", "args": {"item": "a", "seconds": seconds}}
        second = {"id": "b", "description": "b", "tool": "work", "args": {"item": "${a}", "seconds": seconds},
                  "depends_on": ["a"]}
        return {"steps": [first, second]}

    return FunctionModel(reply)


QUICK = planner(float(__import__("os").environ.get("BENCH_TOOL_SECONDS", "0.01")))
SLOW = planner(0.5)
'''


class Bench:
    def __init__(self, base_url: str, home: Path, tool_seconds: float) -> None:
        self.base_url = base_url
        self.home = home
        self.tool_seconds = tool_seconds
        (home / "bench_worker_tools.py").write_text(TOOLS)
        if str(home) not in sys.path:
            sys.path.insert(0, str(home))

    def schema_url(self) -> tuple[str, str]:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        sep = "&" if "?" in self.base_url else "?"
        return schema, f"{self.base_url}{sep}options=-csearch_path%3D{schema}"

    def drop(self, schema: str) -> None:
        import psycopg

        with psycopg.connect(self.base_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

    def worker(self, url: str, name: str, *args: str) -> subprocess.Popen[bytes]:
        src = str(Path(planexec.__file__).resolve().parents[1])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([src, str(self.home)]),
            "BENCH_TOOL_SECONDS": str(self.tool_seconds),
        }
        command = [sys.executable, "-m", "planexec", "--store", url, "worker", "--name", name, *args]
        return subprocess.Popen(command, cwd=self.home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def spec(self, planner: str) -> AgentSpec:
        return AgentSpec(planner=f"object:bench_worker_tools:{planner}", tools=("bench_worker_tools:TOOLS",))


async def _until(check: Any, patience: float = 300.0) -> None:
    give_up = time.monotonic() + patience
    while not await check():
        if time.monotonic() > give_up:
            raise TimeoutError("the benchmark waited too long")
        await asyncio.sleep(0.02)


async def throughput(bench: Bench, workers: int, runs: int, concurrency: int) -> float:
    schema, url = bench.schema_url()
    store = PostgresStore(url, pool_size=4)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        queue = RunQueue(store)
        spec = bench.spec("QUICK").recorded()
        for i in range(runs):
            await submit(store, spec, f"item {i}", check=i == 0)
        processes = [
            bench.worker(url, f"w{i}", "--concurrency", str(concurrency), "--poll-seconds", "0.05")
            for i in range(workers)
        ]

        async def all_up() -> bool:  # every worker has claimed: its start-up is behind it
            owners = {e.owner for e in await queue.entries(state="leased", limit=runs + 1)}
            return len(owners) == workers or not await queue.entries(state="queued", limit=1)

        await _until(all_up)
        before = len(await queue.entries(state="done", limit=runs + 1))
        started = time.monotonic()

        async def done() -> bool:
            return len(await queue.entries(state="done", limit=runs + 1)) == runs

        await _until(done)
        return (runs - before) / (time.monotonic() - started)
    finally:
        for p in processes:
            p.send_signal(signal.SIGTERM)
        for p in processes:
            p.wait(timeout=60)
        await store.close()
        bench.drop(schema)


async def direct(bench: Bench, runs: int, concurrency: int) -> float:
    """The floor: the same runs started in this process, ``concurrency`` at a time, on the same
    store, with no queue, no lease and no worker process."""
    from planexec.runs import build_agent

    schema, url = bench.schema_url()
    store = PostgresStore(url, pool_size=concurrency + 2)
    try:
        spec = bench.spec("QUICK").recorded()
        slots = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with slots:
                agent = build_agent(spec, store=store)
                await agent.start(f"item {i}", metadata=spec.metadata()).result()

        started = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(runs)))
        return runs / (time.monotonic() - started)
    finally:
        await store.close()
        bench.drop(schema)


async def takeover(bench: Bench, lease: float, runs: int = 16) -> list[float]:
    schema, url = bench.schema_url()
    store = PostgresStore(url, pool_size=4)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        queue = RunQueue(store)
        spec = bench.spec("SLOW").recorded()
        ids = [await submit(store, spec, f"slow {i}", check=i == 0) for i in range(runs)]
        args = ("--concurrency", "4", "--lease-seconds", str(lease), "--poll-seconds", "0.05")
        survivor = bench.worker(url, "survivor", *args)
        processes = [survivor]

        async def survivor_up() -> bool:
            return any(e.owner == "survivor" for e in await queue.entries(state="leased"))

        await _until(survivor_up)
        victim = bench.worker(url, "victim", *args)

        async def victim_busy() -> bool:
            held = [e for e in await queue.entries(state="leased") if e.owner == "victim"]
            if len(held) < 4:
                return False
            logs = [await store.read(e.run_id) for e in held]
            return all(any(s.event.kind == "step_started" for s in log) for log in logs)

        await _until(victim_busy)
        held = {e.run_id for e in await queue.entries(state="leased") if e.owner == "victim"}
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.wait()

        async def settled() -> bool:  # each run held at the kill is resumed, or had ended before it
            for run_id in held:
                kinds = {s.event.kind for s in await store.read(run_id)}
                if "run_resumed" not in kinds and "run_finished" not in kinds:
                    return False
            return True

        await _until(settled)
        delays = []
        for run_id in held:
            log = [s.event for s in await store.read(run_id)]
            resumed = [e for e in log if isinstance(e, RunResumed)]
            if resumed:
                delays.append(resumed[0].at - killed_at)

        async def done() -> bool:
            return len(await queue.entries(state="done")) == len(ids)

        await _until(done)
        return delays
    finally:
        for p in processes:
            p.send_signal(signal.SIGTERM)
        for p in processes:
            p.wait(timeout=60)
        await store.close()
        bench.drop(schema)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("PLANEXEC_TEST_POSTGRES"))
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tool-ms", type=float, default=10.0)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--workers", default="1,2,3")
    args = parser.parse_args()
    if not args.url:
        parser.error("give --url postgresql://… or set PLANEXEC_TEST_POSTGRES (scripts/postgres start prints it)")
    with tempfile.TemporaryDirectory() as home:
        bench = Bench(args.url, Path(home), args.tool_ms / 1000)
        print(f"{args.runs} runs of 2 steps ({args.tool_ms:g} ms tool each), concurrency {args.concurrency} per worker")
        floor = await direct(bench, args.runs, args.concurrency)
        print(f"  no workers, {args.concurrency} runs at once in one process (the store's floor): {floor:7.1f} runs/s")
        for n in (int(x) for x in args.workers.split(",")):
            rate = await throughput(bench, n, args.runs, args.concurrency)
            print(f"  {n} worker{'s' if n > 1 else ' '}: {rate:7.1f} runs/s")
        delays = await takeover(bench, args.lease)
        print(
            f"take-over after SIGKILL, lease {args.lease:g} s: {len(delays)} runs resumed by the other worker "
            f"after median {statistics.median(delays):.2f} s, max {max(delays):.2f} s"
        )


if __name__ == "__main__":
    asyncio.run(main())
