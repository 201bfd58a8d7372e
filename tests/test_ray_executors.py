"""The Ray backend on a real local Ray cluster of three simulated nodes (``ray.cluster_utils.Cluster``),
started once for the test session (``tests/ray_cluster.py``): steps land on the nodes that have the
resources they ask for; errors,
retries, timeouts and cancellations end as they do in process; a node killed mid-call has an
idempotent call sent again with the same idempotency key on another node (its effect applied once)
and a non-idempotent one held for a human, never repeated.

Skipped when Ray is not installed; ``PLANEXEC_REQUIRE_RAY=1`` turns the skip into a failure.
Tools record what happened (node, idempotency key, effect) in a SQLite file that every node's
workers reach; tests wait for those records, never for elapsed time.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from planexec import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    Approvals,
    Budget,
    ModelExecutor,
    RetryPolicy,
    ToolExecutor,
    tool,
)
from planexec.errors import ToolError, TransientToolError, UsageError
from planexec.executor import RayExecutor, RayOptions
from planexec.log import (
    Event,
    RunResult,
    StepAttemptFailed,
    StepFailed,
    StepHeld,
    StepStarted,
    StepSucceeded,
    ToolProgress,
    dump_event,
)
from planexec.runtime import replay_log
from planexec.testing import ScriptedModel, tool_calls
from planexec.tools import Tool, ToolContext
from tests.ray_cluster import DIR_VAR, NODE_RESOURCES, RayNodes, require_ray
from tests.support import tool_step

require_ray()
# Ray is imported only once the environment it needs here is set (it reads some of it on import).

PATIENCE = 120.0
"""Seconds a test waits for a record to appear: only turns a hang into a failure (on a busy 2-core
machine a pool's new actor, a worker process of its own, took up to 25 s to start)."""
RAY_SAFETY = Budget(wall_time=PATIENCE * 2)
"""The runs' wall-time budget: only turns a hang into a failed run (a busy machine starts Ray's
workers slowly)."""


# -- the tools, as they run on the cluster's nodes ---------------------------------------------


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(Path(os.environ[DIR_VAR]) / "effects.db", timeout=30)
    conn.execute("create table if not exists calls (key text, node text, tool text)")
    conn.execute("create table if not exists effects (key text primary key, node text, amount integer)")
    conn.execute("create table if not exists clients (pid integer, node text)")
    conn.execute("create table if not exists served (key text, pid integer)")
    return conn


def _record_call(ctx: ToolContext, tool_name: str) -> str:
    import ray

    node: str = ray.get_runtime_context().get_node_id()
    with _db() as conn:
        conn.execute("insert into calls values (?, ?, ?)", (ctx.idempotency_key, node, tool_name))
    return node


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


def _gate(name: str) -> Path:
    return Path(os.environ[DIR_VAR]) / f"gate-{name}"


async def _wait_for_gate(name: str) -> None:
    while not _gate(name).exists():  # noqa: ASYNC110  # the gate is a file the test writes
        await asyncio.sleep(0.02)


@tool
def where(label: str, ctx: ToolContext) -> dict[str, str]:
    """Say which node ran the call."""
    return {"label": label, "node": _record_call(ctx, "where")}


@tool
def fails(ctx: ToolContext) -> str:
    """Always fails."""
    raise ToolError("the warehouse refused the query")


@tool(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0))
def flaky(ctx: ToolContext) -> str:
    """Fails transiently twice, then works."""
    if ctx.attempt < 3:
        raise TransientToolError(f"busy (attempt {ctx.attempt})")
    return f"done on attempt {ctx.attempt}"


async def _hang(marker: str, ctx: ToolContext) -> str:
    _record_call(ctx, "hangs")
    (Path(os.environ[DIR_VAR]) / f"started-{marker}").touch()
    try:
        await asyncio.sleep(3600)
    finally:
        (Path(os.environ[DIR_VAR]) / f"cancelled-{marker}").touch()
    return "never"


@tool
def ping(ctx: ToolContext) -> str:
    """Answer at once (starts a worker on the node)."""
    return _record_call(ctx, "ping")


@tool
async def stubborn(marker: str, ctx: ToolContext) -> int:
    """Ignore being cancelled: only killing its worker process ends it."""
    _record_call(ctx, "stubborn")
    (Path(os.environ[DIR_VAR]) / f"started-{marker}").write_text(str(os.getpid()))
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            (Path(os.environ[DIR_VAR]) / f"ignored-{marker}").touch()


@tool(timeout=2.0, retry=RetryPolicy(max_attempts=1))
async def hangs(marker: str, ctx: ToolContext) -> str:
    """Never ends by itself (times out)."""
    return await _hang(marker, ctx)


@tool
async def waits(marker: str, ctx: ToolContext) -> str:
    """Never ends by itself (no timeout)."""
    return await _hang(marker, ctx)


async def _charge(order: str, amount: int, ctx: ToolContext, tool_name: str) -> dict[str, Any]:
    _record_call(ctx, tool_name)
    (Path(os.environ[DIR_VAR]) / f"started-{order}").touch()
    await _wait_for_gate(order)
    with _db() as conn:  # the effect, once per idempotency key
        conn.execute("insert or ignore into effects values (?, ?, ?)", (ctx.idempotency_key, "", amount))
    return {"order": order, "charged": amount}


@tool(side_effect=True, idempotent=True)
async def charge(order: str, amount: int, ctx: ToolContext) -> dict[str, Any]:
    """Charge an order (the payment service drops a repeated idempotency key)."""
    return await _charge(order, amount, ctx, "charge")


@tool(side_effect=True)
async def ship(order: str, amount: int, ctx: ToolContext) -> dict[str, Any]:
    """Ship an order (not safe to repeat)."""
    return await _charge(order, amount, ctx, "ship")


@functools.cache
def _client() -> str:
    """A client the tool builds once per process and keeps (counted, to show it stays warm)."""
    with _db() as conn:
        conn.execute("insert into clients values (?, ?)", (os.getpid(), _node_id()))
    return f"client of {os.getpid()}"


@tool
async def lookup(item: str, ctx: ToolContext) -> dict[str, Any]:
    """Look an item up with the process's client."""
    client = _client()
    node = _record_call(ctx, "lookup")
    with _db() as conn:
        conn.execute("insert into served values (?, ?)", (ctx.idempotency_key, os.getpid()))
    return {"item": item, "client": client, "node": node}


@tool
async def pause(marker: str, ctx: ToolContext) -> int:
    """Wait for the test to let it go; say which process ran it."""
    _record_call(ctx, "pause")
    (Path(os.environ[DIR_VAR]) / f"started-{marker}").write_text(str(os.getpid()))
    await _wait_for_gate(marker)
    return os.getpid()


TOOLS: list[Tool] = [where, fails, flaky, ping, stubborn, hangs, waits, charge, ship, lookup, pause]


# -- the cluster ----------------------------------------------------------------------------------


@pytest.fixture
def nodes(ray_nodes: RayNodes) -> RayNodes:
    """The session's cluster: a head node and two worker nodes with different custom resources."""
    return ray_nodes


def executor(**options: Any) -> RayExecutor:
    return RayExecutor(
        options=RayOptions(num_cpus=0),
        tool_options={
            "where": RayOptions(resources={"sql": 1}),
            "ping": RayOptions(resources={"head": 1}),
            "hangs": RayOptions(resources={"head": 1}),
            "waits": RayOptions(resources={"head": 1}),
            "stubborn": RayOptions(resources={"head": 1}),
            "charge": RayOptions(resources={"payments": 1}),
            "ship": RayOptions(resources={"payments": 1}),
        },
        **options,
    )


def pooled(**options: Any) -> RayExecutor:
    """An executor whose calls run on actor pools (close it when done: its actors hold resources)."""
    head = RayOptions(resources={"head": 1}, actors=1, actor_concurrency=4)
    return RayExecutor(
        options=RayOptions(num_cpus=0, actors=2, actor_concurrency=4),
        tool_options={
            "where": RayOptions(resources={"sql": 1}),
            "lookup": RayOptions(resources={"sql": 1}, actor_concurrency=2),
            "pause": RayOptions(resources={"sql": 1}, actor_concurrency=2),  # the same pool as lookup
            "ping": head,
            "hangs": head,
            "waits": head,
            "stubborn": head,
            "charge": RayOptions(resources={"payments": 1}, actors=1),
            "ship": RayOptions(resources={"payments": 1}, actors=1),
        },
        **options,
    )


def agent(
    steps: list[dict[str, Any]], *, ray_backend: bool = True, using: RayExecutor | None = None, **options: Any
) -> Agent:
    planner = ScriptedModel([{"steps": steps}, {"answer": "done"}])
    executors = [using or executor()] if ray_backend else [ToolExecutor()]
    return Agent(planner, tools=TOOLS, executors=executors, budget=RAY_SAFETY, store=None, **options)


def outline(events: Sequence[Event]) -> dict[str, list[tuple[str, str | None]]]:
    """Per step, the kinds of its events with their error kinds: what must not differ by backend."""
    found: dict[str, list[tuple[str, str | None]]] = {}
    for e in events:
        if isinstance(e, StepAttemptFailed | StepFailed):
            found.setdefault(e.step_id, []).append((e.kind, e.error.kind))
        elif isinstance(e, StepStarted | StepSucceeded):
            found.setdefault(e.step_id, []).append((e.kind, None))
    return found


def outputs(result: RunResult) -> dict[str, Any]:
    return {step_id: record.output for step_id, record in result.steps.items() if record.status == "succeeded"}


def rows(query: str, *args: Any) -> list[tuple[Any, ...]]:
    with _db() as conn:
        return list(conn.execute(query, args))


async def appears(path: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while not path.exists():  # noqa: ASYNC240  # a file a tool on the cluster writes
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)


# -- the tests ------------------------------------------------------------------------------------


async def test_steps_land_on_the_nodes_that_have_what_they_ask_for(nodes: RayNodes) -> None:
    steps = [tool_step(f"w{i}", "where", {"label": f"w{i}"}) for i in range(3)]
    ex = RayExecutor(name="drafts", options=RayOptions(num_cpus=0, resources={"draft": 1}))
    drafted = [
        tool_step("d", "where", {"label": "d"}, executor="drafts"),
        tool_step("f", "flaky", {}, executor="drafts"),
    ]
    planner = ScriptedModel([{"steps": steps + drafted}, {"answer": "done"}])
    result = await Agent(planner, tools=TOOLS, executors=[executor(), ex], budget=RAY_SAFETY, store=None).run("where")
    assert result.stop.kind == "goal_met", result.stop
    found = outputs(result)
    assert {nodes.label_of(found[f"w{i}"]["node"]) for i in range(3)} == {"sql"}  # the tool's own resources
    assert nodes.label_of(found["d"]["node"]) == "draft"  # the executor's resources
    assert found["f"] == "done on attempt 3"


async def test_errors_and_retries_end_as_they_do_in_process(nodes: RayNodes) -> None:
    steps = [tool_step("t", "flaky", {}), tool_step("f", "fails", {}, "t")]
    here = await agent(steps, ray_backend=False).run("errors")
    there = await agent(steps).run("errors")
    assert outline(there.events) == outline(here.events)
    failed = [e for e in there.events if isinstance(e, StepFailed)]
    assert [(e.step_id, e.error.kind, e.error.message) for e in failed] == [
        ("f", "tool_error", "fails: the warehouse refused the query")
    ]
    assert outputs(there)["t"] == outputs(here)["t"] == "done on attempt 3"


async def test_a_timeout_fails_the_step_and_cancels_its_task(nodes: RayNodes) -> None:
    # the ping first leaves a worker ready on the node, so the call starts well within its timeout
    steps = [tool_step("p", "ping", {}), tool_step("h", "hangs", {"marker": "timeout"}, "p")]
    result = await agent(steps).run("hang")
    failed = [e for e in result.events if isinstance(e, StepFailed)]
    assert [e.error.kind for e in failed] == ["timeout"]
    assert (nodes.root / "started-timeout").exists()  # it was running when it timed out
    await appears(nodes.root / "cancelled-timeout")  # the task on the cluster was cancelled


async def test_a_task_that_ignores_being_cancelled_loses_its_worker(nodes: RayNodes) -> None:
    planner = ScriptedModel([{"steps": [tool_step("s", "stubborn", {"marker": "stubborn"})]}, {"answer": "x"}])
    ray_executor = executor(kill_after=0.5)
    run = Agent(planner, tools=TOOLS, executors=[ray_executor], budget=RAY_SAFETY, store=None).start("stubborn")
    started = nodes.root / "started-stubborn"
    await appears(started)
    pid = int(started.read_text())
    run.cancel()
    result = await run.result()
    assert result.stop.kind == "cancelled"
    await appears(nodes.root / "ignored-stubborn")  # asked to stop, it carried on
    deadline = time.monotonic() + PATIENCE
    while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):  # noqa: ASYNC240
        assert time.monotonic() < deadline, "the worker running the task was never killed"
        await asyncio.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


async def test_a_cancelled_run_cancels_its_task(nodes: RayNodes) -> None:
    run = agent([tool_step("h", "waits", {"marker": "cancel"})]).start("hang")
    await appears(nodes.root / "started-cancel")
    run.cancel()
    result = await run.result()
    assert result.stop.kind == "cancelled"
    await appears(nodes.root / "cancelled-cancel")


async def test_an_idempotent_call_on_a_dying_node_is_sent_again_with_the_same_key(nodes: RayNodes) -> None:
    calm = agent([tool_step("c", "charge", {"order": "calm", "amount": 5})])
    _gate("calm").touch()
    undisturbed = await calm.run("charge")
    run = agent([tool_step("c", "charge", {"order": "o1", "amount": 5})]).start("charge")
    await appears(nodes.root / "started-o1")
    [(key, first)] = rows("select key, node from calls where tool = 'charge' and key like ?", f"{run.run_id}%")
    victim = nodes.label_of(first)
    nodes.kill(victim)
    _gate("o1").touch()
    try:
        result = await run.result()
    finally:
        nodes.add(victim, dict(NODE_RESOURCES[victim]))
    assert result.stop.kind == "goal_met", result.stop
    calls = rows("select key, node from calls where key = ?", key)
    assert [k for k, _ in calls] == [key, key]  # sent twice, with the same key
    assert calls[0][1] != calls[1][1]  # on another node
    assert rows("select count(*) from effects where key = ?", key) == [(1,)]  # the effect happened once
    assert result.answer == undisturbed.answer
    assert outputs(result)["c"] == {"order": "o1", "charged": 5}
    assert outputs(undisturbed)["c"] == {"order": "calm", "charged": 5}
    started = [e for e in result.events if isinstance(e, StepStarted)]
    assert [e.idempotency_key for e in started] == [key]
    [resent] = [e for e in result.events if isinstance(e, ToolProgress)]  # the re-send is in the log
    assert (resent.step_id, resent.progress, resent.total) == ("c", 1.0, 2.0)
    assert resent.message is not None
    assert resent.message.startswith("sent again with the same idempotency key: the Ray node or worker")


async def test_a_non_idempotent_call_on_a_dying_node_is_held_for_a_human(nodes: RayNodes) -> None:
    asked: list[ApprovalRequest] = []

    async def human(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, choice="done", output={"order": "o2", "charged": 7}, reason="checked")

    run = agent([tool_step("s", "ship", {"order": "o2", "amount": 7})], approvals=Approvals(approver=human)).start(
        "ship"
    )
    await appears(nodes.root / "started-o2")
    [(key, first)] = rows("select key, node from calls where tool = 'ship' and key like ?", f"{run.run_id}%")
    victim = nodes.label_of(first)
    nodes.kill(victim)
    try:
        result = await run.result()
    finally:
        nodes.add(victim, dict(NODE_RESOURCES[victim]))
        _gate("o2").touch()
    assert result.stop.kind == "goal_met", result.stop
    assert [r.subject for r in asked] == ["effect"]
    assert "effect uncertain" in asked[0].reason
    assert len([e for e in result.events if isinstance(e, StepHeld)]) == 1
    assert rows("select count(*) from calls where key = ?", key) == [(1,)]  # never sent again
    assert rows("select count(*) from effects where key = ?", key) == [(0,)]
    assert outputs(result)["s"] == {"order": "o2", "charged": 7}
    replayed = await replay_log(list(result.events))  # no tool called, no cluster needed
    assert replayed.matched, replayed.divergence
    assert [dump_event(e) for e in replayed.events] == [dump_event(e) for e in result.events]


async def test_an_executor_for_another_cluster_is_refused(nodes: RayNodes) -> None:
    elsewhere = RayExecutor(address="127.0.0.1:1", options=RayOptions(num_cpus=0))
    planner = ScriptedModel([{"steps": [tool_step("w", "ping", {})]}, {"answer": "x"}, {"answer": "x"}])
    result = await Agent(planner, tools=TOOLS, executors=[elsewhere], budget=RAY_SAFETY, store=None).run("ping")
    [failed] = [e for e in result.events if isinstance(e, StepFailed)]
    assert failed.error.kind == "tool_error"
    assert f"connected to the Ray cluster at {nodes.address}, not 127.0.0.1:1" in failed.error.message
    with pytest.raises(UsageError, match="a process joins one cluster"):
        await elsewhere.connect()
    await RayExecutor(address=nodes.address).connect()  # the same cluster: nothing to say


def test_bad_options_are_refused_with_every_problem() -> None:
    with pytest.raises(UsageError) as caught:
        RayExecutor(
            options=RayOptions(num_cpus=-1, resources={"sql": -2}),
            tool_options={"x": {"sql": 1}},  # type: ignore[dict-item]
            max_concurrency=0,
            resends=-1,
            kill_after=-1.0,
        )
    wheres = [p.where for p in caught.value.problems]
    assert wheres == [
        "options.num_cpus",
        "options.resources.sql",
        "tool_options.x",
        "max_concurrency",
        "resends",
        "kill_after",
    ]


async def test_a_model_driven_step_calls_its_tools_on_the_cluster(nodes: RayNodes) -> None:
    model = ScriptedModel([tool_calls(("where", {"label": "m"})), "found it"])
    research = RayExecutor(
        name="research",
        inner=ModelExecutor(model=model, name="research", tools=["where"]),
        tool_options={"where": RayOptions(num_cpus=0, resources={"draft": 1})},
    )
    step = {"id": "m1", "description": "find where", "executor": "research", "allowed_tools": ["where"]}
    planner = ScriptedModel([{"steps": [step]}, {"answer": "done"}])
    result = await Agent(planner, tools=TOOLS, executors=[research], budget=RAY_SAFETY, store=None).run("research")
    assert result.stop.kind == "goal_met", result.stop
    assert outputs(result) == {"m1": "found it"}
    [call] = result.steps["m1"].tool_calls
    assert call.error is None
    assert nodes.label_of(call.output["node"]) == "draft"
    model.assert_consumed()


async def test_without_ray_a_call_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    ctx = ToolContext(run_id="r", step_id="s", attempt=1, idempotency_key="r:s")
    with pytest.raises(UsageError, match=r"pip install 'planexec\[ray\]'"):
        await RayExecutor().remote(where).invoke({"label": "x"}, ctx)


# -- actor pools ----------------------------------------------------------------------------------


async def gone(pid: int, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):  # noqa: ASYNC240
        assert time.monotonic() < deadline, f"{what} never ended"
        await asyncio.sleep(0.05)


async def test_a_pool_keeps_its_tools_warm_on_the_nodes_it_asks_for(nodes: RayNodes) -> None:
    ex = pooled()
    try:
        results = []
        for run in range(2):  # the same pool serves both runs
            steps = [tool_step(f"l{i}", "lookup", {"item": f"{run}.{i}"}) for i in range(4)]
            results.append(await agent(steps, using=ex).run("look up"))
        served = rows("select pid from served where key like ? or key like ?", *(f"{r.run_id}%" for r in results))
        clients = rows("select pid, node from clients where pid in (select pid from served)")
    finally:
        await ex.close()
    assert [r.stop.kind for r in results] == ["goal_met", "goal_met"]
    found = [o for r in results for o in outputs(r).values()]
    assert len(found) == len(served) == 8
    assert {nodes.label_of(o["node"]) for o in found} == {"sql"}  # the tool's resources, held by its actors
    pids = {pid for (pid,) in served}
    assert 1 <= len(pids) <= 2  # at most the pool's two actors served the eight calls
    assert os.getpid() not in pids
    assert sorted(pid for pid, _ in clients) == sorted(pids)  # one client per actor, not one per call
    assert {nodes.label_of(node) for _, node in clients} == {"sql"}
    assert {o["client"] for o in found} == {f"client of {pid}" for pid in pids}
    for pid in pids:  # closing the executor killed its actors
        await gone(pid, f"actor {pid}")


async def test_a_pool_spreads_overlapping_calls_over_its_actors(nodes: RayNodes) -> None:
    ex = pooled()
    try:
        steps = [tool_step(f"p{i}", "pause", {"marker": f"spread-{i}"}) for i in range(3)]
        run = agent(steps, using=ex).start("pause")
        for i in range(3):
            await appears(nodes.root / f"started-spread-{i}")
        pids = [int((nodes.root / f"started-spread-{i}").read_text()) for i in range(3)]
        # the least busy actor first: a second actor for the second call, then one of the two
        assert len(set(pids)) == 2, pids
        assert os.getpid() not in pids
        for i in range(3):
            _gate(f"spread-{i}").touch()
        result = await run.result()
        assert result.stop.kind == "goal_met", result.stop
        # lookup shares the pool (the same options): it runs on one of those two actors
        after = await agent([tool_step("l", "lookup", {"item": "x"})], using=ex).run("look up")
        [(pid,)] = rows("select pid from served where key like ?", f"{after.run_id}%")
        assert pid in pids
    finally:
        await ex.close()
    for pid in set(pids):
        await gone(pid, f"actor {pid}")


async def test_errors_and_retries_on_a_pool_end_as_they_do_in_process(nodes: RayNodes) -> None:
    steps = [tool_step("t", "flaky", {}), tool_step("f", "fails", {}, "t")]
    here = await agent(steps, ray_backend=False).run("errors")
    ex = pooled()
    try:
        there = await agent(steps, using=ex).run("errors")
    finally:
        await ex.close()
    assert outline(there.events) == outline(here.events)
    failed = [e for e in there.events if isinstance(e, StepFailed)]
    assert [(e.step_id, e.error.kind, e.error.message) for e in failed] == [
        ("f", "tool_error", "fails: the warehouse refused the query")
    ]
    assert outputs(there)["t"] == outputs(here)["t"] == "done on attempt 3"


async def test_a_timeout_on_a_pool_cancels_the_actor_call(nodes: RayNodes) -> None:
    steps = [tool_step("p", "ping", {}), tool_step("h", "hangs", {"marker": "a-timeout"}, "p")]
    ex = pooled()
    try:
        result = await agent(steps, using=ex).run("hang")
        failed = [e for e in result.events if isinstance(e, StepFailed)]
        assert [e.error.kind for e in failed] == ["timeout"]
        assert (nodes.root / "started-a-timeout").exists()
        await appears(nodes.root / "cancelled-a-timeout")  # the call on the actor was cancelled
    finally:
        await ex.close()


async def test_a_cancelled_run_cancels_its_actor_call(nodes: RayNodes) -> None:
    ex = pooled()
    try:
        run = agent([tool_step("h", "waits", {"marker": "a-cancel"})], using=ex).start("hang")
        await appears(nodes.root / "started-a-cancel")
        run.cancel()
        result = await run.result()
        assert result.stop.kind == "cancelled"
        await appears(nodes.root / "cancelled-a-cancel")
    finally:
        await ex.close()


async def test_an_actor_whose_call_ignores_being_cancelled_is_replaced(nodes: RayNodes) -> None:
    ex = pooled(kill_after=0.5)
    try:
        steps = [tool_step("s", "stubborn", {"marker": "a-stubborn"})]
        run = agent(steps, using=ex).start("stubborn")
        started = nodes.root / "started-a-stubborn"
        await appears(started)
        pid = int(started.read_text())
        run.cancel()
        assert (await run.result()).stop.kind == "cancelled"
        await appears(nodes.root / "ignored-a-stubborn")  # asked to stop, it carried on
        await gone(pid, "the actor running the call")
        after = await agent([tool_step("p", "ping", {})], using=ex).run("ping")  # a new actor takes its place
        assert after.stop.kind == "goal_met", after.stop
    finally:
        await ex.close()


async def test_an_idempotent_call_on_a_dying_actor_is_sent_again_with_the_same_key(nodes: RayNodes) -> None:
    ex = pooled()
    try:
        run = agent([tool_step("c", "charge", {"order": "a-o1", "amount": 5})], using=ex).start("charge")
        await appears(nodes.root / "started-a-o1")
        [(key, first)] = rows("select key, node from calls where tool = 'charge' and key like ?", f"{run.run_id}%")
        victim = nodes.label_of(first)
        nodes.kill(victim)
        _gate("a-o1").touch()
        try:
            result = await run.result()
        finally:
            nodes.add(victim, dict(NODE_RESOURCES[victim]))
    finally:
        await ex.close()
    assert result.stop.kind == "goal_met", result.stop
    calls = rows("select key, node from calls where key = ?", key)
    assert [k for k, _ in calls] == [key, key]  # sent twice, with the same key
    assert calls[0][1] != calls[1][1]  # to a new actor on another node
    assert rows("select count(*) from effects where key = ?", key) == [(1,)]  # the effect happened once
    assert outputs(result)["c"] == {"order": "a-o1", "charged": 5}


async def test_a_non_idempotent_call_on_a_dying_actor_is_held_for_a_human(nodes: RayNodes) -> None:
    asked: list[ApprovalRequest] = []

    async def human(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, choice="done", output={"order": "a-o2", "charged": 7}, reason="checked")

    ex = pooled()
    try:
        steps = [tool_step("s", "ship", {"order": "a-o2", "amount": 7})]
        run = agent(steps, using=ex, approvals=Approvals(approver=human)).start("ship")
        await appears(nodes.root / "started-a-o2")
        [(key, first)] = rows("select key, node from calls where tool = 'ship' and key like ?", f"{run.run_id}%")
        victim = nodes.label_of(first)
        nodes.kill(victim)
        try:
            result = await run.result()
        finally:
            nodes.add(victim, dict(NODE_RESOURCES[victim]))
            _gate("a-o2").touch()
    finally:
        await ex.close()
    assert result.stop.kind == "goal_met", result.stop
    assert [r.subject for r in asked] == ["effect"]
    assert "effect uncertain" in asked[0].reason
    assert len([e for e in result.events if isinstance(e, StepHeld)]) == 1
    assert rows("select count(*) from calls where key = ?", key) == [(1,)]  # never sent again
    assert rows("select count(*) from effects where key = ?", key) == [(0,)]
    assert outputs(result)["s"] == {"order": "a-o2", "charged": 7}


async def test_a_call_not_safe_to_repeat_skips_an_actor_that_died_while_idle(nodes: RayNodes) -> None:
    asked: list[ApprovalRequest] = []

    async def human(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=False, reason="not expected")

    ex = pooled()
    try:
        _gate("a-o3").touch()
        first = await agent([tool_step("s", "ship", {"order": "a-o3", "amount": 3})], using=ex).run("ship")
        assert first.stop.kind == "goal_met", first.stop
        [(node,)] = rows("select node from calls where tool = 'ship' and key like ?", f"{first.run_id}%")
        victim = nodes.label_of(node)
        nodes.kill(victim)  # the pool's actor dies with it, between two calls
        try:
            _gate("a-o4").touch()
            steps = [tool_step("s", "ship", {"order": "a-o4", "amount": 4})]
            result = await agent(steps, using=ex, approvals=Approvals(approver=human)).run("ship")
        finally:
            nodes.add(victim, dict(NODE_RESOURCES[victim]))
    finally:
        await ex.close()
    assert result.stop.kind == "goal_met", result.stop
    assert asked == []  # sent once, to a live actor: nothing uncertain to ask about
    [(key, second)] = rows("select key, node from calls where tool = 'ship' and key like ?", f"{result.run_id}%")
    assert second != node
    assert rows("select count(*) from effects where key = ?", key) == [(1,)]
    assert outputs(result)["s"] == {"order": "a-o4", "charged": 4}


def test_bad_actor_options_are_refused_with_every_problem() -> None:
    with pytest.raises(UsageError) as caught:
        RayExecutor(
            options=RayOptions(actors=-1, actor_concurrency=0),
            tool_options={
                "x": RayOptions(actors=True, actor_concurrency=2.5),  # type: ignore[arg-type]
                "y": RayOptions(actors="4", runtime_env=["pip"]),  # type: ignore[arg-type]
            },
        )
    wheres = [p.where for p in caught.value.problems]
    assert wheres == [
        "options.actors",
        "options.actor_concurrency",
        "tool_options.x.actors",
        "tool_options.x.actor_concurrency",
        "tool_options.y.runtime_env",
        "tool_options.y.actors",
    ]
    assert RayOptions(actor_concurrency=3).over(RayOptions(actors=2, actor_concurrency=1)).actor_options() == {
        "max_concurrency": 3,
        "max_restarts": 0,
        "max_task_retries": 0,
    }
