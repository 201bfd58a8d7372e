"""What limits runs per second when ``planexec worker`` processes share a PostgreSQL store, and a
bottleneck model fitted to it that predicts runs/s for N workers on machines of their own.

Run it with a PostgreSQL server on this machine (``scripts/postgres start`` prints its URL)::

    PLANEXEC_TEST_POSTGRES=postgresql://… python -m benchmarks.side.scaling [--runs 400] [--repeats 3]

It takes 2–4 minutes on two shared cores. The runs are those of ``benchmarks.side.workers``: a
two-step plan from a function-backed planner (no model latency) whose idempotent side-effecting
tool sleeps ``--tool-ms`` per step. Each sitting (``--repeats`` of them) measures:

* **one run alone**: one worker with one slot runs ``--alone`` runs; wall time per run is a run's
  latency with nothing else queued (R0, the latency bound's constant).
* **the sweep**: for N = 1, 2, 3 workers (``--concurrency`` runs each), ``--runs`` queued runs;
  runs/s over a window from the moment every worker has claimed a run and a tenth of the runs are
  done until nine tenths are (start-up and the tail left out), and over that window the **CPU
  seconds per run** spent in the worker processes and in the PostgreSQL server (the postmaster and
  its children, read from ``/proc/PID/stat``), plus what the rest of the machine used meanwhile
  (``/proc/stat``), since other programs share these cores. Over the workers' whole life:
  committed transactions per run (``pg_stat_database``), events and appends per run (rows written
  to ``planexec_events`` and ``planexec_runs``) and the queue's statements (claims, lease
  renewals, releases).

After the sittings, **the store's ceiling**: ``--burst-connections`` connections from this process
append two-event batches (a step's ``step_started`` and ``step_succeeded``) to runs of their own as
fast as they can, for ``--burst-appends`` appends: appends/s and PostgreSQL CPU per append (one
Python process may be the limit: its CPU per append is printed beside).

The model (printed with its constants): a run costs ``c_w`` CPU seconds in a worker and ``c_pg`` in
the database; a worker is one event loop, so it uses at most one core, and holds at most ``k``
runs, each taking at least R0; so

    X(N) = min(N * min(k / R0, 1 / c_w), C_pg / c_pg)

for N workers with a core each and a database of C_pg cores. On this machine every process shares
the same cores C, so the prediction here is ``min(N * k / R0, N / c_w, C / (c_w + c_pg))``, with
``c_w`` and ``c_pg`` from the one-worker sweeps — checked against every sweep, with C = what the
other programs left of the machine's cores during it. Gunther's Universal Scalability Law is fitted
to the quietest sitting's points for comparison. Every process the benchmark starts is stopped by
its PID; each measurement uses a schema of its own, dropped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.side.workers import Bench
from planexec.executor import Verdict
from planexec.log import Event, RunStarted, StepStarted, StepSucceeded
from planexec.runs import submit
from planexec.store import PostgresStore

__all__ = ["main"]

TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


# -- CPU time, from /proc -------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (index 0 is the state); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_cpu(pid: int) -> float:
    """CPU seconds of a process and of the children it has reaped (utime, stime, cutime, cstime)."""
    f = _stat_fields(pid)
    return 0.0 if f is None else sum(int(x) for x in f[11:15]) / TICK


def tree_cpu(parent: int) -> float:
    """CPU seconds of ``parent`` (with its reaped children) and of its live children. A child that
    exits between two readings moves into the parent's reaped time whole, so a difference of two
    readings counts it exactly."""
    total = process_cpu(parent)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        f = _stat_fields(int(entry.name))
        if f is not None and int(f[1]) == parent:
            total += sum(int(x) for x in f[11:13]) / TICK
    return total


def machine_busy() -> float:
    """CPU seconds every core of the machine has spent busy since boot (/proc/stat)."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / TICK


def postmaster_pid(url: str) -> int:
    """The PostgreSQL server's main process: the parent of the backend serving a connection."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    fields = None if row is None else _stat_fields(int(row[0]))
    if fields is None:
        raise RuntimeError("the PostgreSQL server is not on this machine: its CPU time cannot be read")
    return int(fields[1])


@dataclass
class Clock:
    """A reading of the wall clock and of the CPU spent by the processes that matter."""

    wall: float
    workers: float
    database: float
    machine: float
    me: float

    @classmethod
    def read(cls, workers: list[int], postmaster: int) -> Clock:
        return cls(
            wall=time.monotonic(),
            workers=sum(process_cpu(p) for p in workers),
            database=tree_cpu(postmaster),
            machine=machine_busy(),
            me=process_cpu(os.getpid()),
        )


# -- the database's own counters ---------------------------------------------------------------------


def db_counters(url: str, schema: str) -> dict[str, int]:
    """Committed transactions in the database, and rows written to the schema's tables."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
        out = {"xact": 0 if row is None else int(row[0])}
        rows = conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for name, inserted, updated in rows:
            out[f"{name}.ins"] = int(inserted)
            out[f"{name}.upd"] = int(updated)
    return out


def count(url: str, sql: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


class Poller:
    """One connection that watches a schema's queue (a count every 50 ms costs the store little)."""

    def __init__(self, url: str, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.schema = schema

    def done(self) -> int:
        row = self.conn.execute(f"SELECT count(*) FROM {self.schema}.planexec_queue WHERE state = 'done'").fetchone()
        return 0 if row is None else int(row[0])

    def owners(self) -> int:
        sql = f"SELECT count(DISTINCT owner) FROM {self.schema}.planexec_queue WHERE state = 'leased'"
        row = self.conn.execute(sql).fetchone()
        return 0 if row is None else int(row[0])

    def queued(self) -> int:
        row = self.conn.execute(f"SELECT count(*) FROM {self.schema}.planexec_queue WHERE state = 'queued'").fetchone()
        return 0 if row is None else int(row[0])

    def wait(self, check: Any, patience: float = 300.0) -> None:
        give_up = time.monotonic() + patience
        while not check():
            if time.monotonic() > give_up:
                raise TimeoutError("the benchmark waited too long")
            time.sleep(0.02)

    def close(self) -> None:
        self.conn.close()


# -- the sweep -------------------------------------------------------------------------------------


@dataclass
class Sweep:
    """One measurement of N workers."""

    workers: int
    runs: int
    rate: float  # runs/s in the window
    c_worker: float  # CPU s per run, all workers together, in the window
    c_database: float  # CPU s per run in PostgreSQL, in the window
    c_driver: float  # CPU s per run in this process (its polling), in the window
    others: float  # cores the rest of the machine used during the window
    xact: float  # committed transactions per run, the workers' whole life
    events: float  # events per run
    appends: float  # appends (transactions writing a run's log) per run
    queue_rows: float  # queue rows updated per run (claims, renewals, releases)
    claims: float  # claims per run
    extra: dict[str, float] = field(default_factory=dict)


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def sweep_once(bench: Bench, postmaster: int, workers: int, runs: int, concurrency: int, lease: float) -> Sweep:
    schema, url = bench.schema_url()
    store = PostgresStore(url, pool_size=4)
    processes: list[subprocess.Popen[bytes]] = []
    poller = Poller(bench.base_url, schema)
    try:
        spec = bench.spec("QUICK").recorded()
        for i in range(runs):
            await submit(store, spec, f"item {i}", check=i == 0)
        await store.close()
        before = db_counters(bench.base_url, schema)
        processes = [
            bench.worker(
                url,
                f"w{i}",
                "--concurrency",
                str(concurrency),
                "--lease-seconds",
                str(lease),
                "--poll-seconds",
                "0.05",
            )
            for i in range(workers)
        ]
        pids = [p.pid for p in processes]
        # The window: from the moment every worker has claimed a run and a tenth of the runs are
        # done (the workers' start-up and first runs, which build the agent, are behind them) until
        # nine tenths are (the last runs, with fewer in hand, are left out too).
        poller.wait(lambda: poller.owners() == workers or poller.queued() == 0)
        poller.wait(lambda: poller.done() >= runs // 10)
        first = Clock.read(pids, postmaster)
        done_first = poller.done()
        poller.wait(lambda: poller.done() >= runs * 9 // 10)
        last = Clock.read(pids, postmaster)
        done_last = poller.done()
        poller.wait(lambda: poller.done() == runs)
        _stop(processes)
        await asyncio.sleep(0.5)  # the workers' connections close and their backends report their counters
        after = db_counters(bench.base_url, schema)
        d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        events = count(bench.base_url, f"SELECT count(*) FROM {schema}.planexec_events")
        claims = count(bench.base_url, f"SELECT sum(claims) FROM {schema}.planexec_queue")
        in_window = done_last - done_first
        wall = last.wall - first.wall
        return Sweep(
            workers=workers,
            runs=in_window,
            rate=in_window / wall,
            c_worker=(last.workers - first.workers) / in_window,
            c_database=(last.database - first.database) / in_window,
            c_driver=(last.me - first.me) / in_window,
            others=max(
                0.0,
                (last.machine - first.machine)
                - (last.workers - first.workers)
                - (last.database - first.database)
                - (last.me - first.me),
            )
            / wall,
            xact=d["xact"] / runs,
            events=events / runs,
            appends=(d.get("planexec_runs.ins", 0) + d.get("planexec_runs.upd", 0)) / runs,
            queue_rows=d.get("planexec_queue.upd", 0) / runs,
            claims=claims / runs,
            extra={"wall": wall},
        )
    finally:
        _stop(processes)
        poller.close()
        await store.close()
        bench.drop(schema)


async def alone(bench: Bench, runs: int) -> float:
    """Seconds per run for one worker with one slot: a run's latency with nothing beside it."""
    schema, url = bench.schema_url()
    store = PostgresStore(url, pool_size=2)
    processes: list[subprocess.Popen[bytes]] = []
    poller = Poller(bench.base_url, schema)
    try:
        spec = bench.spec("QUICK").recorded()
        for i in range(runs + 1):
            await submit(store, spec, f"item {i}", check=i == 0)
        processes = [bench.worker(url, "alone", "--concurrency", "1", "--poll-seconds", "0.01")]
        poller.wait(lambda: poller.done() >= 1)  # the first run pays for the worker's warm-up
        t0 = time.monotonic()
        poller.wait(lambda: poller.done() == runs + 1)
        return (time.monotonic() - t0) / runs
    finally:
        _stop(processes)
        poller.close()
        await store.close()
        bench.drop(schema)


# -- the store's ceiling ---------------------------------------------------------------------------


def _started(run_id: str) -> RunStarted:
    return RunStarted(at=time.time(), run_id=run_id, goal="work on an item", budget={}, tools=("work",))


def _step(run_id: str, i: int) -> list[Event]:
    step_id = f"s{i}"
    return [
        StepStarted(
            at=time.time(),
            step_id=step_id,
            executor="tools",
            tool="work",
            args={"item": f"item {i}", "seconds": 0.01},
            idempotency_key=f"{run_id}:{step_id}:1",
        ),
        StepSucceeded(at=time.time(), step_id=step_id, output=f"item {i} done", verdict=Verdict(passed=True)),
    ]


async def burst(bench: Bench, postmaster: int, connections: int, appends: int) -> dict[str, float]:
    """``connections`` writers append two-event batches to runs of their own, ``appends`` in all."""
    schema, url = bench.schema_url()
    store = PostgresStore(url, pool_size=connections)
    try:
        each = max(1, appends // connections)
        ids = [f"burst-{i}" for i in range(connections)]
        for run_id in ids:
            await store.append(run_id, [_started(run_id)], expected_seq=0)
        latencies: list[float] = []

        async def writer(run_id: str) -> None:
            seq = 1
            for i in range(each):
                t0 = time.perf_counter()
                seq = await store.append(run_id, _step(run_id, i), expected_seq=seq)
                latencies.append(time.perf_counter() - t0)

        first = Clock.read([], postmaster)
        await asyncio.gather(*(writer(r) for r in ids))
        last = Clock.read([], postmaster)
        n = each * connections
        wall = last.wall - first.wall
        return {
            "appends_per_s": n / wall,
            "pg_cpu_per_append": (last.database - first.database) / n,
            "client_cpu_per_append": (last.me - first.me) / n,
            "median_latency": statistics.median(latencies),
            "others": max(0.0, (last.machine - first.machine) - (last.database - first.database) - (last.me - first.me))
            / wall,
        }
    finally:
        await store.close()
        bench.drop(schema)


# -- the model ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """``X(N) = min(N * min(k / R, 1 / c_w), C_pg / c_pg)``, with R = R0 + ray_steps * ray_latency."""

    c_w: float  # CPU s per run in a worker
    c_pg: float  # CPU s per run in PostgreSQL
    r0: float  # a run's latency alone, s
    k: int  # runs a worker holds at once

    def worker_bound(self, ray_latency: float = 0.0, ray_steps: int = 0) -> float:
        return min(self.k / (self.r0 + ray_steps * ray_latency), 1 / self.c_w)

    def store_bound(self, pg_cores: float) -> float:
        return pg_cores / self.c_pg

    def predict(self, n: int, pg_cores: float, ray_latency: float = 0.0, ray_steps: int = 0) -> float:
        return min(n * self.worker_bound(ray_latency, ray_steps), self.store_bound(pg_cores))

    def shared(self, n: int, cores: float) -> float:
        """Everything on the same ``cores``: the CPU a run needs in all, or the latency bound."""
        return min(n * self.k / self.r0, n / self.c_w, cores / (self.c_w + self.c_pg))


def usl(points: dict[int, float]) -> tuple[float, float, float]:
    """Gunther's Universal Scalability Law, X(N) = λN / (1 + σ(N−1) + κN(N−1)), through X(1) and a
    least-squares fit of σ and κ to the other points (σ, κ ≥ 0)."""
    lam = points[1]
    rows = [(n - 1, n * (n - 1), n * lam / x - 1) for n, x in points.items() if n > 1]
    best = (float("inf"), 0.0, 0.0)
    for sigma in [i / 1000 for i in range(1001)]:
        # for a fixed σ the best κ ≥ 0 is a one-variable least squares
        num = sum(b * (y - sigma * a) for a, b, y in rows)
        den = sum(b * b for _, b, _ in rows)
        kappa = max(0.0, num / den) if den else 0.0
        err = sum((y - sigma * a - kappa * b) ** 2 for a, b, y in rows)
        if err < best[0]:
            best = (err, sigma, kappa)
    return lam, best[1], best[2]


def usl_predict(lam: float, sigma: float, kappa: float, n: int) -> float:
    return lam * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


# -- the report ----------------------------------------------------------------------------------------


def _mark(model: Model, x: float, pg_cores: float) -> str:
    return "*" if x >= model.store_bound(pg_cores) - 1e-9 else " "


def _pct(predicted: float, measured: float) -> str:
    return f"{100 * (predicted - measured) / measured:+.0f} %"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("PLANEXEC_TEST_POSTGRES"))
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3, help="sittings")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tool-ms", type=float, default=10.0)
    parser.add_argument("--lease", type=float, default=3.0, help="lease seconds (renewed every third)")
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument("--alone", type=int, default=30, help="runs for the one-run-alone latency")
    parser.add_argument("--burst-connections", type=int, default=8)
    parser.add_argument("--burst-appends", type=int, default=3000)
    parser.add_argument("--ray-step-ms", type=float, default=6.2, help="latency a step on Ray adds (ray_overhead)")
    args = parser.parse_args()
    if not args.url:
        parser.error("give --url postgresql://… or set PLANEXEC_TEST_POSTGRES (scripts/postgres start prints it)")
    ns = [int(x) for x in args.workers.split(",")]
    if 1 not in ns:
        parser.error("--workers must include 1")
    postmaster = postmaster_pid(args.url)
    print(
        f"python {platform.python_version()} on {platform.machine()}, {CORES} CPUs; "
        f"{args.runs} runs of 2 steps ({args.tool_ms:g} ms tool each), concurrency {args.concurrency} per worker, "
        f"lease {args.lease:g} s"
    )
    with tempfile.TemporaryDirectory() as home:
        bench = Bench(args.url, Path(home), args.tool_ms / 1000)
        sweeps: dict[int, list[Sweep]] = {n: [] for n in ns}
        alones: list[float] = []
        for repeat in range(args.repeats):
            alones.append(await alone(bench, args.alone))
            print(f"  [{repeat + 1}] one run alone (1 worker, 1 slot): {1000 * alones[-1]:.1f} ms per run")
            for n in ns:
                s = await sweep_once(bench, postmaster, n, args.runs, args.concurrency, args.lease)
                s.extra["r0"] = alones[-1]
                sweeps[n].append(s)
                print(
                    f"  [{repeat + 1}] {n} worker{'s' if n > 1 else ' '}: {s.rate:6.1f} runs/s; CPU ms per run: "
                    f"workers {1000 * s.c_worker:.2f}, PostgreSQL {1000 * s.c_database:.2f}, "
                    f"this process {1000 * s.c_driver:.2f}; {s.xact:.1f} transactions per run; "
                    f"other programs used {s.others:.2f} cores"
                )

        b = await burst(bench, postmaster, args.burst_connections, args.burst_appends)
        print(
            f"store ceiling: {args.burst_connections} connections appending 2-event batches: "
            f"{b['appends_per_s']:.0f} appends/s, PostgreSQL {1e6 * b['pg_cpu_per_append']:.0f} µs CPU per append, "
            f"client {1e6 * b['client_cpu_per_append']:.0f} µs, median {1000 * b['median_latency']:.2f} ms per append "
            f"(other programs used {b['others']:.2f} cores)"
        )

    r0 = statistics.median(alones)
    every = [s for n in ns for s in sweeps[n]]
    # The model's constants come from one worker, where the fewest processes share the cores: a
    # worker on a machine of its own is as busy as that one.
    c_w = statistics.median(s.c_worker for s in sweeps[1])
    c_pg = statistics.median(s.c_database for s in sweeps[1])
    per_run = {
        "events": statistics.median(s.events for s in every),
        "appends": statistics.median(s.appends for s in every),
        "transactions": statistics.median(s.xact for s in every),
        "queue rows updated": statistics.median(s.queue_rows for s in every),
        "claims": statistics.median(s.claims for s in every),
    }
    model = Model(c_w=c_w, c_pg=c_pg, r0=r0, k=args.concurrency)

    print("\nper run (median over every sweep; CPU: the model's constants, from 1 worker):")
    print(f"  CPU: worker {1000 * c_w:.2f} ms, PostgreSQL {1000 * c_pg:.2f} ms")
    for name, value in per_run.items():
        print(f"  {name}: {value:.1f}")
    renewals = 3 / args.lease
    print(
        f"lease churn per worker: {renewals:.1f} renewal statements/s (one per third of a lease, "
        f"renewing every run it holds) + about {per_run['claims']:.1f} claim per run it starts"
    )
    append_share = per_run["appends"] * b["pg_cpu_per_append"] / c_pg
    print(
        f"PostgreSQL CPU per run explained by its appends at the burst's cost: {100 * append_share:.0f} % "
        f"({per_run['appends']:.0f} × {1e6 * b['pg_cpu_per_append']:.0f} µs of {1000 * c_pg:.2f} ms)"
    )

    print(
        f"\nthe model on this machine, sitting by sitting: X = min(N·k/R0, N/c_w, C/(c_w + c_pg)), k = "
        f"{args.concurrency}, R0 that sitting's, C = the cores the other programs left"
    )
    print("  sitting  N   measured runs/s   × 1 worker   others   C left   predicted   error    CPU ms/run w + pg")
    errors = []
    for repeat in range(args.repeats):
        one = sweeps[1][repeat].rate
        for n in ns:
            s = sweeps[n][repeat]
            left = CORES - s.others
            predicted = Model(c_w=c_w, c_pg=c_pg, r0=s.extra["r0"], k=args.concurrency).shared(n, left)
            errors.append(abs(predicted - s.rate) / s.rate)
            print(
                f"  {repeat + 1:>7}  {n}   {s.rate:15.1f}   {s.rate / one:10.2f}   {s.others:6.2f}   {left:6.2f}"
                f"   {predicted:9.1f}   {_pct(predicted, s.rate):>6}   "
                f"{1000 * s.c_worker:5.2f} + {1000 * s.c_database:4.2f}"
            )
    mean, worst = 100 * statistics.mean(errors), 100 * max(errors)
    print(f"  model error: mean {mean:.0f} %, max {worst:.0f} % (absolute, over every sweep)")
    print(f"  on the 2 cores alone (nothing else running): {model.shared(max(ns), CORES):.0f} runs/s")
    quiet = min(range(args.repeats), key=lambda r: statistics.mean(sweeps[n][r].others for n in ns))
    lam, sigma, kappa = usl({n: sweeps[n][quiet].rate for n in ns})
    print(f"  USL fitted to the quietest sitting ({quiet + 1}): λ = {lam:.1f} runs/s, σ = {sigma:.3f}, κ = {kappa:.4f}")

    ray = args.ray_step_ms / 1000
    print(
        f"\npredicted runs/s, N workers with a core each (2-core machines: 2 workers a machine), "
        f"PostgreSQL of 2 or 8 cores; worker bound min(k/R0, 1/c_w) = {model.worker_bound():.0f} runs/s; "
        f"store bound {model.store_bound(2):.0f} (2 cores) / {model.store_bound(8):.0f} (8 cores)"
    )
    print("    N   PG 2 cores   PG 8 cores   PG 8, both steps on Ray (Ray tasks/s)   USL")
    for n in (1, 2, 4, 8, 16, 32):
        x2, x8, xr = model.predict(n, 2), model.predict(n, 8), model.predict(n, 8, ray, 2)
        print(
            f"  {n:3d}   {x2:8.0f}{_mark(model, x2, 2)}   {x8:8.0f}{_mark(model, x8, 8)}   "
            f"{xr:10.0f}{_mark(model, xr, 8)} ({2 * xr:6.0f})              {usl_predict(lam, sigma, kappa, n):6.0f}"
        )
    r_ray = r0 + 2 * ray
    print(
        "  * the store is saturated. Ray: each step adds "
        f"{args.ray_step_ms:g} ms of latency (R = {1000 * r0:.0f} → {1000 * r_ray:.0f} ms), not CPU in the store; "
        f"a worker stays CPU-bound while k ≥ R / c_w = {r0 / c_w:.1f} → {r_ray / c_w:.1f} runs in hand"
    )


if __name__ == "__main__":
    asyncio.run(main())
