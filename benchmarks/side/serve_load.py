"""``planexec serve`` under load, over a real socket, with the SQLite store.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.serve_load`` (``--runs``,
``--subscribers``, ``--workers`` to change the sizes; about a minute with the defaults).

The server is started as a process of its own (``python -m planexec serve``, port 0, a SQLite
file in a temporary folder) with one agent: a scripted planner (no model latency) whose plan is
three ``add`` steps, two in parallel and one after both, then the answer — so what is measured is
the server, the engine and the store, not a model. Three figures:

* **starting runs**: ``--runs`` (1,000) ``POST /v1/runs`` requests, 16 in flight at once from one
  client; runs accepted per second, and runs finished per second until the last has finished
  (``--workers`` runs execute at once, 4 by default, as ``planexec serve`` does).
* **live streams**: ``--subscribers`` (100) Server-Sent Event connections at once, together
  following all ``--runs`` runs of a second batch: each run, once its ``POST`` is answered, is
  taken by the next free subscriber, which follows it from its first event to its end. Every
  stream's events are checked — all of them, each once, in log order (sequence numbers 1, 2, …
  up to the ``run_finished`` event) — and each event's delivery latency is the time it was
  received minus the time the engine stamped on it (``at``; one clock, one machine), for the
  events that happened while their stream was open (a stream opened after a run began first reads
  what the log already holds): p50 and p99.
  With ``--rate R`` the second batch is started at R runs a second instead of all at once, to see
  what delivery costs when the server is not also saturated by a queue of runs.
* **memory**: the server's resident set at start, and its peak (``VmHWM``) after both batches.

There is no peer in this table: none of the frameworks of ``benchmarks/peers`` ships an HTTP
server that runs offline here. The machine is shared and noisy: quote figures from one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "serve-benchmark-token-0123456789abcdef"
PLAN = {
    "steps": [
        {"id": "a", "description": "add a", "tool": "add", "args": {"a": 1, "b": 2}, "depends_on": []},
        {"id": "b", "description": "add b", "tool": "add", "args": {"a": 3, "b": 4}, "depends_on": []},
        {
            "id": "c",
            "description": "add c",
            "tool": "add",
            "args": {"a": "${a}", "b": "${b}"},
            "depends_on": ["a", "b"],
        },
    ]
}


def start_server(folder: Path, workers: int) -> tuple[subprocess.Popen[str], str]:
    (folder / "token").write_text(TOKEN)
    (folder / "replies.json").write_text(json.dumps([PLAN, {"answer": "10"}]))
    spec = {
        "planner": f"scripted:{folder / 'replies.json'}",
        "tools": ["benchmarks.side.serve_tools:TOOLS"],
        "cwd": str(ROOT),
    }
    (folder / "adder.json").write_text(json.dumps(spec))
    command = [sys.executable, "-m", "planexec", "serve", "--port", "0", "--workers", str(workers)]
    command += ["--store", f"sqlite:///{folder / 'runs.db'}", "--token-file", str(folder / "token")]
    command += ["--agent", f"adder={folder / 'adder.json'}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    process = subprocess.Popen(
        command, cwd=folder, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        found = re.search(r"planexec serve: (http://127\.0\.0\.1:\d+)/", line)
        if found:
            return process, found.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError("planexec serve did not start")


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def start_runs(
    client: httpx.AsyncClient,
    count: int,
    label: str,
    in_flight: int = 16,
    started: asyncio.Queue[str | None] | None = None,
    rate: float | None = None,
) -> list[str]:
    gate = asyncio.Semaphore(in_flight)
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def one(i: int) -> str:
        if rate is not None:  # paced: run i is started i / rate seconds after the first
            await asyncio.sleep(max(0.0, began + i / rate - loop.time()))
        async with gate:
            response = await client.post("/v1/runs", json={"agent": "adder", "goal": f"{label} {i}"})
            response.raise_for_status()
            run_id = str(response.json()["run_id"])
            if started is not None:
                started.put_nowait(run_id)  # a subscriber follows it from now on
            return run_id

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def wait_finished(client: httpx.AsyncClient, run_ids: list[str]) -> None:
    """Until every run has finished: the last one started is watched (runs are taken in order),
    then each is checked once."""
    left = list(run_ids)
    while left:
        status = (await client.get(f"/v1/runs/{left[-1]}")).json()["status"]
        if status == "finished":
            left = [r for r in left if (await client.get(f"/v1/runs/{r}")).json()["status"] != "finished"]
        else:
            await asyncio.sleep(0.05)


async def follow(client: httpx.AsyncClient, run_id: str, latencies: list[float], counted: list[int]) -> bool:
    """Follow one run's stream from its first event to ``end``; whether every event came once, in
    order. The latency of each event that happened while the stream was open goes to ``latencies``."""
    expected = 1
    subscribed = time.time()  # events stamped before this were in the log already, not delivered live
    async with client.stream("GET", f"/v1/runs/{run_id}/events/stream", timeout=120) as response:
        response.raise_for_status()
        kind, seq = "", None
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                seq = int(line[3:].strip())
            elif line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:") and kind not in ("end", "waiting"):
                event = json.loads(line[5:])
                counted[0] += 1
                if float(event["at"]) >= subscribed:
                    latencies.append(time.time() - float(event["at"]))
                if seq != expected:
                    return False
                expected += 1
            elif line.startswith("data:") and kind == "end":
                return True
    return False


async def measure(runs: int, subscribers: int, workers: int, rate: float | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="planexec-serve-bench-") as tmp:
        process, url = start_server(Path(tmp), workers)
        try:
            rss_start = memory_kib(process.pid, "VmRSS")
            headers = {"Authorization": f"Bearer {TOKEN}"}
            limits = httpx.Limits(max_connections=subscribers + 32, max_keepalive_connections=subscribers + 32)
            async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as client:
                began = time.perf_counter()
                first = await start_runs(client, runs, "first")
                accepted = time.perf_counter() - began
                await wait_finished(client, first)
                finished = time.perf_counter() - began

                # The second batch, followed live by the subscribers as it is started.
                latencies: list[float] = []
                counted = [0]
                queue: asyncio.Queue[str | None] = asyncio.Queue()
                complete = 0

                async def subscriber() -> None:
                    nonlocal complete
                    while (run_id := await queue.get()) is not None:
                        if await follow(client, run_id, latencies, counted):
                            complete += 1

                followers = [asyncio.create_task(subscriber()) for _ in range(subscribers)]
                began = time.perf_counter()
                await start_runs(client, runs, "second", started=queue, rate=rate)
                for _ in followers:
                    queue.put_nowait(None)
                await asyncio.gather(*followers)
                streamed = time.perf_counter() - began
            peak = memory_kib(process.pid, "VmHWM")
        finally:
            process.terminate()
            process.wait(30)
    latencies.sort()
    return {
        "runs": runs,
        "workers": workers,
        "accepted_per_s": runs / accepted,
        "finished_per_s": runs / finished,
        "subscribers": subscribers,
        "streams_complete": complete,
        "events": counted[0],
        "live_events": len(latencies),
        "latency_p50_ms": 1000 * statistics.median(latencies or [float("nan")]),
        "latency_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else float("nan"),
        "streamed_s": streamed,
        "rss_start_mib": rss_start / 1024,
        "rss_peak_mib": peak / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="start the followed batch at R runs a second (default: all at once)",
    )
    args = parser.parse_args()
    got = asyncio.run(measure(args.runs, args.subscribers, args.workers, args.rate))
    live = f"{got['live_events']:,} events that happened while their stream was open"
    rows = [
        (
            f"runs started through the API, per second ({got['runs']} POSTs, 16 in flight)",
            f"{got['accepted_per_s']:,.0f}",
        ),
        (f"runs finished per second ({got['workers']} workers, 3 steps each)", f"{got['finished_per_s']:,.1f}"),
        ("SSE streams complete, in order, nothing lost or repeated", f"{got['streams_complete']:,} of {got['runs']:,}"),
        (
            f"events delivered to {got['subscribers']} concurrent subscribers"
            + (f", runs started at {args.rate:g}/s" if args.rate else ""),
            f"{got['events']:,}",
        ),
        (
            f"delivery latency p50 / p99 (ms), over the {live}",
            f"{got['latency_p50_ms']:.1f} / {got['latency_p99_ms']:.1f}",
        ),
        ("server memory at start / peak (MiB)", f"{got['rss_start_mib']:.0f} / {got['rss_peak_mib']:.0f}"),
    ]
    print("| measure | value |")
    print("|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print()
    print(
        f"python {platform.python_version()} on {platform.machine()}; the second batch took {got['streamed_s']:.1f} s"
    )


if __name__ == "__main__":
    main()
