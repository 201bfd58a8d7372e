"""Runs shared by workers over PostgreSQL: ``planexec worker`` processes (real subprocesses) take
runs queued with :func:`planexec.runs.submit` and run each exactly once — also when one of them is
killed with SIGKILL in the middle (its runs are taken over once their leases expire) or drained
with SIGTERM (its runs are left to the others at once).

Effects go to files the way a deduplicating service keeps them: each call is written to an
attempts log (with the worker's pid), and an effect is applied once per idempotency key. So a
duplicated effect (two keys for one step) and a lost one (a step with none) are both counted.

Sizes: 200 runs of two side-effecting steps over three workers, leases of 1.5 s; every wait is
for a state the database shows, with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import planexec
from planexec import UsageError
from planexec.log import (
    Event,
    ModelCalled,
    PlanRecalled,
    RunFinished,
    RunResumed,
    RunStarted,
    RunState,
    StepStarted,
    StepSucceeded,
)
from planexec.runs import AgentSpec, LimitRule, Rules, give_back, held_by, submit
from planexec.store import MemoryStore, PostgresStore, QueueEntry, RunQueue

from .serve_support import Server
from .test_store_support import postgres_schema, postgres_url

RUNS = 200
LEASE = 1.5
DEADLINE = 90.0
"""The longest any wait in these tests may take (a failure, not a pace)."""

TOOLS = '''
import asyncio
import hashlib
import os

from planexec import ToolContext, tool
from planexec.testing import FunctionModel


@tool(side_effect=True, idempotent=True, trusted=True)  # what it returns is its own words, not outside text
async def apply(item: str, seconds: float, ctx: ToolContext) -> str:
    """Apply an effect to an item, once per idempotency key (as a deduplicating service would)."""
    HERE = os.environ["WORKERS_TEST_EFFECTS"]
    with open(os.path.join(HERE, "attempts.log"), "a") as log:
        log.write(f"{ctx.run_id} {ctx.step_id} {ctx.idempotency_key} {os.getpid()}\\n")
    await asyncio.sleep(seconds)
    name = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()
    try:
        fd = os.open(os.path.join(HERE, "applied", name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return f"{item}: applied before"
    os.write(fd, f"{ctx.run_id} {ctx.step_id}\\n".encode())
    os.close(fd)
    return f"{item}: applied"


@tool(side_effect=True, idempotent=True, requires_approval=True, trusted=True)
async def publish(item: str, ctx: ToolContext) -> str:
    """Publish an item (a human approves it first)."""
    return await apply.invoke({"item": item, "seconds": 0.0}, ctx)


TOOLS = [apply, publish]


def _gated(request):
    if request.purpose != "planner.propose":
        return {"answer": "published"}
    return {"steps": [{"id": "a", "description": "publish", "tool": "publish", "args": {"item": "news"}}]}


GATED = FunctionModel(_gated, name="planner-gated")


def _planner(seconds):
    def reply(request):
        if request.purpose != "planner.propose":
            return {"answer": "both applied"}
        first = {"id": "a", "description": "first", "tool": "apply", "args": {"item": "first", "seconds": seconds}}
        second = {"id": "b", "description": "second", "tool": "apply", "args": {"item": "${a}", "seconds": seconds},
                  "depends_on": ["a"]}
        return {"steps": [first, second]}

    return FunctionModel(reply, name=f"planner-{seconds}")


QUICK = _planner(0.01)
BRISK = _planner(0.02)
SLOW = _planner(1.5)
'''


PLANNERS = {0.01: "QUICK", 0.02: "BRISK", 1.5: "SLOW"}
"""The tools module's planners by tool-call seconds: functions of the request alone, so that a run
taken over in another process gets the same replies whatever its log holds."""


class Setup:
    """A test's schema, tools module, planner scripts and effects folder; starts workers."""

    def __init__(self, url: str, home: Path) -> None:
        self.url = url
        self.home = home
        self.effects = home / "effects"
        (self.effects / "applied").mkdir(parents=True)
        (home / "workers_test_tools.py").write_text(TOOLS)
        self.workers: list[subprocess.Popen[str]] = []

    def spec(self, seconds: float = 0.01, tools: tuple[str, ...] = ("workers_test_tools:TOOLS",)) -> AgentSpec:
        planner = f"object:workers_test_tools:{PLANNERS[seconds]}"
        return AgentSpec(planner=planner, tools=tools, cwd=str(self.home))

    def env(self) -> dict[str, str]:
        src = str(Path(planexec.__file__).resolve().parents[1])
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([src, str(self.home)]),
            "WORKERS_TEST_EFFECTS": str(self.effects),
        }

    def start_worker(self, name: str, *args: str, url: str | None = None) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "planexec", "--store", url or self.url, "worker", "--name", name]
        command += ["--lease-seconds", str(LEASE), "--poll-seconds", "0.05", *args]
        process = subprocess.Popen(
            command, cwd=self.home, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.workers.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)

    def applied(self) -> list[tuple[str, str]]:
        found = []
        for file in (self.effects / "applied").iterdir():
            run_id, step_id = file.read_text().split()
            found.append((run_id, step_id))
        return found

    def attempts(self) -> list[list[str]]:
        log = self.effects / "attempts.log"
        return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with postgres_schema() as url:
        made = Setup(url, tmp_path)
        try:
            yield made
        finally:
            made.stop_all()


async def wait_for(check: Callable[[], Any], what: str, *, patience: float = DEADLINE) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail after ``patience`` s."""
    give_up = time.monotonic() + patience
    while True:
        found = check()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        if time.monotonic() > give_up:
            pytest.fail(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def logs(store: PostgresStore, run_ids: list[str]) -> dict[str, list[Event]]:
    return {run_id: [s.event for s in await store.read(run_id)] for run_id in run_ids}


def check_exactly_once(setup: Setup, run_logs: dict[str, list[Event]], entries: dict[str, QueueEntry]) -> None:
    """Every run met its goal, every step's effect happened once, and no two workers ran one run at once."""
    for run_id, log in run_logs.items():
        assert isinstance(log[-1], RunFinished), run_id
        assert log[-1].stop.kind == "goal_met", (run_id, log[-1].stop)
        succeeded = Counter(e.step_id for e in log if isinstance(e, StepSucceeded))
        assert succeeded == {"a": 1, "b": 1}, (run_id, succeeded)
        segments = sum(isinstance(e, RunStarted | RunResumed) for e in log)
        assert sum(isinstance(e, RunStarted) for e in log) == 1
        assert 1 <= segments <= entries[run_id].claims, (run_id, segments, entries[run_id])
        assert entries[run_id].state == "done"
    applied = Counter(setup.applied())
    expected = {(run_id, step) for run_id in run_logs for step in ("a", "b")}
    assert set(applied) == expected, "lost effects"
    assert max(applied.values()) == 1, "duplicated effects"
    # one worker at a time: a run's calls come from one worker, then from the next, never back
    by_run: dict[str, list[str]] = defaultdict(list)
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    for run_id, step_id, key, pid in setup.attempts():
        if not by_run[run_id] or by_run[run_id][-1] != pid:
            by_run[run_id].append(pid)
        keys[(run_id, step_id)].add(key)
    for run_id, pids in by_run.items():
        assert len(pids) == len(set(pids)), f"run {run_id}: workers took turns {pids}"
    assert all(len(k) == 1 for k in keys.values()), "a step was called with two idempotency keys"


async def test_many_runs_over_three_workers_one_killed_mid_run(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=8)
    queue = RunQueue(store)
    try:
        spec = setup.spec(seconds=0.02)
        started = time.monotonic()
        run_ids = [await submit(store, spec, f"apply item {i}", check=i == 0) for i in range(RUNS)]
        submitted = time.monotonic() - started
        workers = [setup.start_worker(f"w{i}", "--concurrency", "8", "--grace-seconds", "10") for i in range(3)]
        doomed = workers[0]

        async def doomed_mid_run() -> bool:
            held = [e for e in await queue.entries(state="leased") if e.owner == "w0"]
            calls = {int(a[3]) for a in setup.attempts()}
            return len(held) >= 2 and doomed.pid in calls

        await wait_for(doomed_mid_run, "worker w0 to hold runs and call tools")
        held_at_kill = {e.run_id for e in await queue.entries(state="leased") if e.owner == "w0"}
        doomed.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()

        async def all_done() -> bool:
            return len(await queue.entries(state="done", limit=RUNS + 10)) == RUNS

        await wait_for(all_done, "every run to finish")
        elapsed = time.monotonic() - started
        for process in workers[1:]:
            process.send_signal(signal.SIGTERM)
        for process in workers[1:]:
            _out, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
            assert "another process is writing" not in err
            assert "drained" in err
        entries = {e.run_id: e for e in await queue.entries(limit=RUNS + 10)}
        run_logs = await logs(store, run_ids)
        check_exactly_once(setup, run_logs, entries)
        taken_over = [r for r in held_at_kill if entries[r].claims >= 2]
        assert taken_over, "the killed worker's runs were taken over"
        assert all(entries[r].owner is None for r in run_ids)
        for run_id in taken_over:
            assert any(isinstance(e, RunResumed) for e in run_logs[run_id]) or not any(
                isinstance(e, StepStarted) for e in run_logs[run_id][:2]
            )
        print(
            f"\n{RUNS} runs: submitted in {submitted:.2f} s, all finished {elapsed:.2f} s after the first "
            f"submission; {len(taken_over)} taken over after the kill "
            f"({time.monotonic() - killed_at:.2f} s ago)"
        )
    finally:
        await store.close()


async def test_sigterm_drains_and_another_worker_finishes_what_was_left(setup: Setup) -> None:
    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        quick = [await submit(store, setup.spec(seconds=0.01), f"quick {i}") for i in range(2)]
        slow = [await submit(store, setup.spec(seconds=1.5), f"slow {i}") for i in range(2)]
        first = setup.start_worker("first", "--concurrency", "4", "--grace-seconds", "0.5")

        async def slow_ones_called() -> bool:
            called = {a[0] for a in setup.attempts()}
            done = await queue.entries(state="done")
            return set(slow) <= called and {e.run_id for e in done} >= set(quick)

        await wait_for(slow_ones_called, "the quick runs to finish and the slow ones to call their tool")
        begun = time.monotonic()
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=30)
        took = time.monotonic() - begun
        assert first.returncode == 0, err
        assert "left to others 2" in err
        assert took < 10
        for run_id in slow:
            entry = await queue.entry(run_id)
            assert entry is not None
            assert (entry.state, entry.owner) == ("queued", None)
        second = setup.start_worker("second", "--concurrency", "4")

        async def all_done() -> bool:
            return len(await queue.entries(state="done")) == 4

        await wait_for(all_done, "the second worker to finish the drained runs")
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
        entries = {e.run_id: e for e in await queue.entries()}
        check_exactly_once(setup, await logs(store, quick + slow), entries)
        for run_id in slow:
            assert entries[run_id].claims == 2
    finally:
        await store.close()


async def test_a_spec_that_cannot_be_built_fails_once_with_a_typed_stop(setup: Setup) -> None:
    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        with pytest.raises(UsageError) as refused:  # checked at submission by default
            await submit(store, setup.spec(tools=("no_such_module_here:TOOLS",)), "never")
        assert any(p.where.startswith("tools") for p in refused.value.problems)
        broken = await submit(store, setup.spec(tools=("no_such_module_here:TOOLS",)), "never", check=False)
        fine = await submit(store, setup.spec(), "fine")
        worker = setup.start_worker("only", "--concurrency", "2")

        async def both_done() -> bool:
            return len(await queue.entries(state="done")) == 2

        await wait_for(both_done, "both runs to be done")
        await asyncio.sleep(LEASE)  # a lease's time more: nothing claims the failed run again
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        assert "failed to build 1" in err
        entry = await queue.entry(broken)
        assert entry is not None
        assert entry.state == "done"
        assert entry.claims == 1
        log = [s.event for s in await store.read(broken)]
        assert [e.kind for e in log] == ["run_started", "run_finished"]
        last = log[-1]
        assert isinstance(last, RunFinished)
        assert last.stop.kind == "error"
        assert last.stop.code == "usage"
        assert "no_such_module_here" in last.stop.detail
        fine_log = [s.event for s in await store.read(fine)]
        assert isinstance(fine_log[-1], RunFinished)
        assert fine_log[-1].stop.kind == "goal_met"
    finally:
        await store.close()


async def test_a_run_every_worker_dies_with_is_ended_after_max_claims(setup: Setup) -> None:
    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(), "a run its workers keep dying with")
        for ghost in ("ghost-1", "ghost-2"):  # two workers claimed it and died before writing anything
            [claim] = await queue.claim(ghost, limit=1, lease_seconds=0.01)
            assert claim.run_id == run_id
            await asyncio.sleep(0.02)
        worker = setup.start_worker("third", "--max-claims", "2")

        async def done() -> QueueEntry | None:
            entry = await queue.entry(run_id)
            return entry if entry is not None and entry.state == "done" else None

        entry = await wait_for(done, "the run to be ended")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        assert entry.claims == 3
        log = [s.event for s in await store.read(run_id)]
        assert [e.kind for e in log] == ["run_started", "run_finished"]
        last = log[-1]
        assert isinstance(last, RunFinished)
        assert (last.stop.kind, last.stop.code) == ("error", "internal")
        assert "claimed 3 times" in last.stop.detail
        assert setup.attempts() == []
    finally:
        await store.close()


async def test_a_worker_whose_store_goes_away_stops_with_a_clear_message(setup: Setup) -> None:
    import psycopg

    base = postgres_url()
    database = f"gone_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    info = psycopg.conninfo.conninfo_to_dict(base)
    url = f"postgresql://{info['user']}:{info['password']}@{info['host']}:{info['port']}/{database}?connect_timeout=2"
    try:
        worker = setup.start_worker(
            "doomed", "--concurrency", "2", "--store-patience", "1", "--poll-seconds", "0.05", url=url
        )
        store = PostgresStore(url)
        try:
            queue = RunQueue(store)
            await submit(store, setup.spec(), "work before the store goes away")

            async def done() -> bool:
                return len(await queue.entries(state="done")) == 1

            await wait_for(done, "the worker to finish a run", patience=30)
        finally:
            await store.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 1, err
        assert "stopped: the store failed" in err
        assert str(info["password"]) not in err
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


async def test_claims_skip_locked_rows_and_fence_stale_leases() -> None:
    with postgres_schema() as url:
        store = PostgresStore(url, pool_size=8)
        other = PostgresStore(url, pool_size=8)
        try:
            queue, rival = RunQueue(store), RunQueue(other)
            for i in range(40):
                assert await queue.submit(f"r{i:02d}", goal="g", constraints=(), spec={})
            assert not await queue.submit("r00", goal="g", constraints=(), spec={})  # taken
            results = await asyncio.gather(
                *(q.claim(name, limit=3, lease_seconds=60) for q, name in [(queue, "a"), (rival, "b")] * 10)
            )
            claimed = [c.run_id for batch in results for c in batch]
            assert len(claimed) == len(set(claimed)) == 40, "a run was claimed twice"
            # a lease that expires is taken over under a new number; the old holder is fenced off
            await queue.submit("late", goal="g", constraints=(), spec={})
            [late] = await queue.claim("a", limit=1, lease_seconds=0.05)
            await asyncio.sleep(0.1)
            [taken] = await rival.claim("b", limit=1, lease_seconds=60)
            assert taken.run_id == "late"
            assert taken.lease == late.lease + 1
            assert taken.claims == 2
            assert await queue.renew("a", {"late": late.lease}, lease_seconds=60) == set()
            assert not await queue.release("late", owner="a", lease=late.lease, state="done")
            assert await rival.renew("b", {"late": taken.lease}, lease_seconds=60) == {"late"}
            assert await rival.release("late", owner="b", lease=taken.lease, state="waiting")
            assert await queue.requeue("late")
            entry = await queue.entry("late")
            assert entry is not None
            assert entry.state == "queued"
            assert entry.owner is None
        finally:
            await store.close()
            await other.close()


async def test_submit_refuses_what_workers_cannot_share(tmp_path: Path) -> None:
    spec = AgentSpec(planner="scripted:" + str(tmp_path / "p.json"), tools=())
    (tmp_path / "p.json").write_text(json.dumps([{"answer": "x"}]))
    with pytest.raises(UsageError) as caught:
        await submit(MemoryStore(), spec, "  ")
    wheres = {p.where for p in caught.value.problems}
    assert {"goal", "store"} <= wheres
    with postgres_schema() as url:
        store = PostgresStore(url)
        try:
            run_id = await submit(store, spec, "a goal", run_id="fixed")
            assert run_id == "fixed"
            with pytest.raises(UsageError, match="submitted or stored already"):
                await submit(store, spec, "again", run_id="fixed")
        finally:
            await store.close()


async def test_a_run_a_worker_holds_is_not_resumed_elsewhere(setup: Setup) -> None:
    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(), "held by a worker")
        [claim] = await queue.claim("busy-worker", limit=1, lease_seconds=60)
        await store.append(run_id, [RunStarted(at=time.time(), run_id=run_id, goal="held", budget={})], expected_seq=0)
        assert await held_by(store, run_id) == "busy-worker"
        assert await held_by(MemoryStore(), run_id) is None
        command = [sys.executable, "-m", "planexec", "--store", setup.url, "resume", run_id, "--no-live"]
        refused = await asyncio.to_thread(
            subprocess.run, command, cwd=setup.home, env=setup.env(), capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 2, refused.stderr
        assert "worker busy-worker runs it now" in refused.stderr
        assert await queue.release(run_id, owner="busy-worker", lease=claim.lease, state="done")
        assert await held_by(store, run_id) is None
    finally:
        await store.close()


async def test_a_worker_whose_lease_is_taken_over_stops_writing_at_once(setup: Setup) -> None:
    """A worker that lost its lease without dying (paused past it, say) notices at its next renewal
    and stops: the run's log gets nothing more from it, and the run is finished once, from the log."""
    import psycopg

    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(seconds=1.5), "a run whose lease is taken over")
        holder = setup.start_worker("holder", "--concurrency", "1")
        await wait_for(lambda: any(a[0] == run_id for a in setup.attempts()), "the holder to call the tool")
        with psycopg.connect(setup.url, autocommit=True) as conn:  # its lease runs out under it
            conn.execute("UPDATE planexec_queue SET expires_at = 0 WHERE run_id = %s", (run_id,))
        [stolen] = await queue.claim("thief", limit=1, lease_seconds=60)
        assert await queue.release(run_id, owner="thief", lease=stolen.lease, state="queued")

        async def done() -> bool:
            entry = await queue.entry(run_id)
            return entry is not None and entry.state == "done"

        await wait_for(done, "the holder to claim the run again and finish it")
        holder.send_signal(signal.SIGTERM)
        _, err = holder.communicate(timeout=30)
        assert holder.returncode == 0, err
        assert "lost 1" in err
        log = [s.event for s in await store.read(run_id)]
        kinds = [e.kind for e in log]
        assert kinds.count("run_resumed") == 1
        assert kinds.index("step_succeeded") > kinds.index("run_resumed"), kinds  # nothing after the loss
        entry = await queue.entry(run_id)
        assert entry is not None
        check_exactly_once(setup, {run_id: log}, {run_id: entry})
        assert entry.claims == 3
    finally:
        await store.close()


def _cli(setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "planexec", *args]
    return subprocess.run(command, cwd=setup.home, env=setup.env(), capture_output=True, text=True, timeout=60)


async def test_an_answered_run_goes_back_to_the_workers(setup: Setup) -> None:
    """A worker leaves a run that needs an approval waiting; approving it from any machine gives it
    back to the workers' queue (not resumed in the approving process), and a worker finishes it."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        spec = AgentSpec(
            planner="object:workers_test_tools:GATED", tools=("workers_test_tools:TOOLS",), cwd=str(setup.home)
        )
        run_id = await submit(store, spec, "publish the news", check=False)
        setup.start_worker("w0", "--concurrency", "2")

        async def entry_state() -> str | None:
            entry = await queue.entry(run_id)
            return entry.state if entry is not None else None

        await wait_for(lambda: _state_is(entry_state, "waiting"), "the run to wait for its approval")
        assert setup.applied() == []
        questions = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approvals", "--json")
        [question] = json.loads(questions.stdout)
        approved = await asyncio.to_thread(
            _cli, setup, "--store", setup.url, "approve", run_id, question["question_id"], "--json"
        )
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["requeued"] is True
        assert f"run {run_id}: given back to the workers (queued)" in approved.stderr
        await wait_for(lambda: _state_is(entry_state, "done"), "a worker to finish the answered run")
        log = (await logs(store, [run_id]))[run_id]
        assert isinstance(log[-1], RunFinished)
        assert log[-1].stop.kind == "goal_met", log[-1].stop
        assert setup.applied() == [(run_id, "a")]
        assert not await give_back(store, run_id)  # done: nothing to give back
        assert not await give_back(MemoryStore(), run_id)  # no workers without PostgreSQL

        # the same through the server's API: the answer gives the run back, the server does not run it
        served = await submit(store, spec, "publish the weather", check=False)
        run_id = served
        await wait_for(lambda: _state_is(entry_state, "waiting"), "the second run to wait for its approval")
        server = Server(setup.home, [], extra=["--store", setup.url]).start()
        try:
            with server.client() as api:
                [asked] = api.get(f"/v1/runs/{served}").json()["questions"]
                url = f"/v1/runs/{served}/questions/{asked['question_id']}/answer"
                answered = await asyncio.to_thread(api.post, url, json={"decision": "approve"})
                assert answered.status_code == 200, answered.text
                assert answered.json()["resumed"] is False
        finally:
            server.kill(signal.SIGTERM)
        await wait_for(lambda: _state_is(entry_state, "done"), "a worker to finish the run answered by the API")
        last = (await logs(store, [served]))[served][-1]
        assert isinstance(last, RunFinished)
        assert last.stop.kind == "goal_met", last.stop
        assert (served, "a") in setup.applied()
    finally:
        await store.close()


async def test_a_run_that_reached_its_cap_on_a_worker_is_raised_and_a_worker_goes_on(setup: Setup) -> None:
    """A worker leaves a run waiting for its cap to be raised; a raise from the command line gives it
    back to the workers, and a worker goes on where it stopped, each effect once."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        spec = replace(setup.spec(), budget={"tool_calls": 1}, rules=Rules(limits=LimitRule(on_budget="ask")))
        run_id = await submit(store, spec, "apply both", check=False)
        setup.start_worker("w0")

        async def entry_state() -> str | None:
            entry = await queue.entry(run_id)
            return entry.state if entry is not None else None

        await wait_for(lambda: _state_is(entry_state, "waiting"), "the run to reach its cap")
        assert setup.applied() == [(run_id, "a")]
        questions = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approvals", "--json")
        [question] = json.loads(questions.stdout)
        assert (question["kind"], question["budget"]["name"]) == ("budget", "tool_calls")
        raised = await asyncio.to_thread(
            _cli,
            setup,
            "--store",
            setup.url,
            "approve",
            run_id,
            question["question_id"],
            "--raise",
            "tool_calls=5",
            "--json",
        )
        assert raised.returncode == 0, raised.stderr
        assert json.loads(raised.stdout)["requeued"] is True
        await wait_for(lambda: _state_is(entry_state, "done"), "a worker to finish the raised run")
        log = (await logs(store, [run_id]))[run_id]
        assert isinstance(log[-1], RunFinished)
        assert log[-1].stop.kind == "goal_met", log[-1].stop
        assert sorted(setup.applied()) == [(run_id, "a"), (run_id, "b")]
        assert RunState.fold(log).budget["tool_calls"] == 5
    finally:
        await store.close()


async def test_a_submitted_run_is_addressable_before_a_worker_begins_it(setup: Setup) -> None:
    """From the id `planexec submit` prints: show says it is queued, tell is kept and heard first when
    a worker begins it, and approve says there is nothing to answer yet (not "no run")."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(), "apply both", check=False)
        shown = await asyncio.to_thread(_cli, setup, "--store", setup.url, "show", run_id)
        assert shown.returncode == 0, shown.stderr
        assert "submitted to the workers" in shown.stdout
        assert "not begun yet (queued)" in shown.stdout
        told = await asyncio.to_thread(_cli, setup, "--store", setup.url, "tell", run_id, "apply them in order")
        assert told.returncode == 0, told.stderr
        assert "hears it when one begins it" in told.stdout
        refused = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approve", run_id)
        assert refused.returncode == 2
        assert "has not begun (queued): it has no log yet and asks nothing" in refused.stderr
        setup.start_worker("w0")

        async def entry_state() -> str | None:
            entry = await queue.entry(run_id)
            return entry.state if entry is not None else None

        await wait_for(lambda: _state_is(entry_state, "done"), "a worker to finish the run")
        log = (await logs(store, [run_id]))[run_id]
        assert [e.kind for e in log[:3]] == ["run_started", "information_added", "planning_started"]
        assert log[1].text == "apply them in order"  # type: ignore[union-attr]
        assert isinstance(log[-1], RunFinished)
        assert log[-1].stop.kind == "goal_met"
    finally:
        await store.close()


async def test_workers_share_a_plan_memory_across_runs(setup: Setup) -> None:
    """`planexec submit --memory`: the first run's plan is remembered in the store; the same goal
    submitted again is planned from memory by whichever worker takes it, with no planner call."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    flags = ["--planner", "object:workers_test_tools:QUICK", "--tools", "workers_test_tools:TOOLS", "--memory"]
    try:
        setup.start_worker("w0", "--concurrency", "2")
        run_ids = []
        for n in range(2):
            submitted = await asyncio.to_thread(_cli, setup, "--store", setup.url, "submit", "apply item 7", *flags)
            assert submitted.returncode == 0, submitted.stderr
            run_ids.append(submitted.stdout.strip())

            async def done(run_id: str = run_ids[-1]) -> bool:
                entry = await queue.entry(run_id)
                return entry is not None and entry.state == "done"

            await wait_for(done, f"run {n} to finish")
        first, second = (await logs(store, run_ids)).values()
        for log in (first, second):
            assert isinstance(log[-1], RunFinished)
            assert log[-1].stop.kind == "goal_met", log[-1].stop
        proposed = [
            sum(isinstance(e, ModelCalled) and e.purpose == "planner.propose" for e in log) for log in (first, second)
        ]
        assert proposed == [1, 0]  # the second run's plan came from memory, with no planner call
        [recalled] = [e for e in second if isinstance(e, PlanRecalled)]
        assert recalled.mode == "direct"
        assert not any(isinstance(e, PlanRecalled) for e in first)
    finally:
        await store.close()


async def _state_is(read: Callable[[], Any], wanted: str) -> bool:
    return bool(await read() == wanted)


async def test_the_command_line_submits_lists_and_refuses(setup: Setup, tmp_path: Path) -> None:
    flags = ["--planner", "object:workers_test_tools:QUICK", "--tools", "workers_test_tools:TOOLS"]
    sqlite = str(tmp_path / "runs.db")
    for command in (["submit", "a goal", *flags], ["worker"], ["queue"]):
        refused = await asyncio.to_thread(_cli, setup, "--store", sqlite, *command)
        assert refused.returncode == 2, refused.stderr
        assert "workers share runs through a PostgreSQL store" in refused.stderr
        assert "Traceback" not in refused.stderr
    wrong = await asyncio.to_thread(_cli, setup, "--store", setup.url, "submit", "g", "--planner", "nope:x")
    assert wrong.returncode == 2
    assert "--planner" in wrong.stderr, wrong.stderr
    queued = await asyncio.to_thread(_cli, setup, "--store", setup.url, "submit", "a goal", *flags, "--run-id", "c1")
    assert queued.returncode == 0, queued.stderr
    assert queued.stdout.strip() == "c1"
    again = await asyncio.to_thread(_cli, setup, "--store", setup.url, "submit", "a goal", *flags, "--run-id", "c1")
    assert again.returncode == 2
    assert "submitted or stored already" in again.stderr
    listed = await asyncio.to_thread(_cli, setup, "--store", setup.url, "queue", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["run_id"], row["state"], row["claims"]) == ("c1", "queued", 0)
    shown = await asyncio.to_thread(_cli, setup, "--store", setup.url, "queue")
    assert "c1  queued  claims 0" in shown.stdout
    assert str(postgres_url().split("@")[0].split(":")[-1]) not in shown.stdout  # the password is hidden
