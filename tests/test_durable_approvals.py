"""Approvals that outlive the process: questions saved in the log, answered from anywhere."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planexec import Agent, Approvals, Plan, RunContext, Step, UsageError, tool
from planexec.log import ApprovalDecided, ApprovalRequested, RunFinished, RunState, RunSuspended, dump_event
from planexec.models import FunctionModel, ModelRequest
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel

from .support import tool_step


def tools(deleted: list[str]) -> list[Any]:
    @tool(sensitive=True, side_effect=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    @tool
    async def look(path: str) -> str:
        """Look at a file."""
        return f"saw {path}"

    return [delete, look]


DEFERRED = Approvals(deferred=True)

PLAN = {
    "steps": [
        tool_step("d1", "delete", {"path": "/a"}),
        tool_step("d2", "delete", {"path": "/b"}),
        tool_step("l", "look", {"path": "/c"}),
    ]
}


def planner() -> FunctionModel:
    def reply(request: ModelRequest) -> Any:
        return PLAN if request.purpose == "planner.propose" else {"answer": "cleaned"}

    return FunctionModel(reply)


async def answer_in_store(store: MemoryStore, run_id: str, approval_id: str, *, approved: bool) -> None:
    """What another process (the CLI) does: append the answer after the log's last event."""
    last = await store.last_seq(run_id)
    decided = ApprovalDecided(at=1.0, approval_id=approval_id, approved=approved, by="cli", reason="ok")
    await store.append(run_id, [decided], expected_seq=last)


async def test_two_pending_approvals_on_parallel_branches_survive_a_restart_in_either_order() -> None:
    for order in ((0, 1), (1, 0)):
        deleted: list[str] = []
        store = MemoryStore()
        agent = Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED)
        first = await agent.run("clean up", run_id="c1")
        assert first.stop.kind == "waiting"
        suspended = first.events[-1]
        assert isinstance(suspended, RunSuspended)
        assert len(suspended.approvals) == 2
        assert first.steps["l"].status == "succeeded"  # the other branch ran meanwhile
        assert deleted == []
        asked = [e for e in first.events if isinstance(e, ApprovalRequested)]
        ids = [e.approval_id for e in asked]
        assert sorted(e.step_id or "" for e in asked) == ["d1", "d2"]

        # a new process, a new agent: answer one, resume: it waits again for the other
        await answer_in_store(store, "c1", ids[order[0]], approved=True)
        again = await (
            await Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED).resume("c1")
        ).result()
        assert again.stop.kind == "waiting"
        assert len(deleted) == 1
        await answer_in_store(store, "c1", ids[order[1]], approved=True)
        done = await (
            await Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED).resume("c1")
        ).result()
        assert done.stop.kind == "goal_met", done.stop
        assert sorted(deleted) == ["/a", "/b"]
        assert done.answer == "cleaned"
        # no question was asked twice
        assert len([e for e in done.events if isinstance(e, ApprovalRequested)]) == 2


async def test_a_rejection_in_the_store_stops_the_resumed_run_as_rejected() -> None:
    deleted: list[str] = []
    store = MemoryStore()
    first = await Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED).run("clean up", run_id="c2")
    ids = first.events[-1].approvals  # type: ignore[union-attr]
    await answer_in_store(store, "c2", ids[0], approved=False)
    result = await (await Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED).resume("c2")).result()
    assert result.stop.kind == "rejected"
    assert deleted in ([], ["/b"], ["/a"])


async def test_a_live_run_that_waits_sees_answers_written_by_another_process() -> None:
    deleted: list[str] = []
    store = MemoryStore()
    agent = Agent(
        planner(),
        tools=tools(deleted),
        store=store,
        approvals=Approvals(deferred=True, when_waiting="wait", poll_interval=0.01),
    )
    run = agent.start("clean up", run_id="c3")
    asked: list[str] = []
    async for event in run.events():
        if isinstance(event, ApprovalRequested):
            asked.append(event.approval_id)
            if len(asked) == 2:
                for approval_id in asked:
                    await answer_in_store(store, "c3", approval_id, approved=True)
        if isinstance(event, RunFinished):
            break
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert sorted(deleted) == ["/a", "/b"]
    logged = [dump_event(s.event) for s in await store.read("c3")]
    assert logged == [dump_event(e) for e in result.events]  # the store's order and the run's agree


async def test_answering_in_process_with_decide() -> None:
    deleted: list[str] = []
    agent = Agent(
        planner(), tools=tools(deleted), store=MemoryStore(), approvals=Approvals(deferred=True, when_waiting="wait")
    )
    run = agent.start("clean up")
    async for event in run.events():
        if isinstance(event, ApprovalRequested):
            run.decide(event.approval_id, approved=True, by="alice")
    result = await run.result()
    assert result.stop.kind == "goal_met"
    assert {e.by for e in result.events if isinstance(e, ApprovalDecided)} == {"alice"}
    with pytest.raises(UsageError, match=r"answered already"):
        run.decide(next(e.approval_id for e in result.events if isinstance(e, ApprovalRequested)), approved=True)


async def test_an_edited_plan_becomes_a_version_authored_by_a_human() -> None:
    deleted: list[str] = []
    store = MemoryStore()
    agent = Agent(planner(), tools=tools(deleted), store=store, approvals=Approvals(deferred=True, plan=True))
    first = await agent.run("clean up", run_id="c4")
    assert first.stop.kind == "waiting"
    question = next(e for e in first.events if isinstance(e, ApprovalRequested))
    assert question.subject == "plan"
    assert question.plan is not None
    edited = Plan(steps=(Step(id="only", description="just look", tool="look", args={"path": "/z"}),), reason="safer")
    resumed = await Agent(
        planner(), tools=tools(deleted), store=store, approvals=Approvals(deferred=True, plan=True)
    ).resume("c4")
    resumed.decide(question.approval_id, approved=True, edited_plan=edited, by="bob")
    result = await resumed.result()
    assert result.stop.kind == "goal_met", result.stop
    assert result.plans[-1].author == "human"
    assert result.plans[-1].reason == "safer"
    assert set(result.outputs) == {"only"}
    assert deleted == []


async def test_an_edited_plan_that_fails_its_checks_stops_with_the_problems() -> None:
    store = MemoryStore()
    agent = Agent(planner(), tools=tools([]), store=store, approvals=Approvals(deferred=True, plan=True))
    first = await agent.run("clean up", run_id="c5")
    question = next(e for e in first.events if isinstance(e, ApprovalRequested))
    bad = Plan(steps=(Step(id="x", description="?", tool="nope"),))
    run = await agent.resume("c5")
    run.decide(question.approval_id, approved=True, edited_plan=bad)
    result = await run.result()
    assert result.stop.kind == "error"
    assert "unknown tool 'nope'" in result.stop.detail


async def test_without_a_store_a_step_that_needs_a_human_is_refused_not_left_hanging() -> None:
    @tool(sensitive=True)
    async def risky() -> str:
        """Risky."""
        return "x"

    model = ScriptedModel([{"steps": [{"id": "r", "description": "r", "tool": "risky", "approval": "always"}]}])
    result = await asyncio.wait_for(Agent(model, tools=[risky], store=None).run("go"), timeout=30)
    assert result.stop.kind == "rejected"


async def test_time_spent_waiting_for_a_human_does_not_count_against_wall_time() -> None:
    deleted: list[str] = []
    store = MemoryStore()
    clock = iter(float(t) for t in range(1_000_000))
    first = await Agent(
        planner(), tools=tools(deleted), store=store, approvals=DEFERRED, context=RunContext(clock=lambda: next(clock))
    ).run("clean up", run_id="c6")
    active = RunState.fold(first.events).active_time
    for approval_id in first.events[-1].approvals:  # type: ignore[union-attr]
        last = await store.last_seq("c6")
        late = ApprovalDecided(at=500_000.0, approval_id=approval_id, approved=True)
        await store.append("c6", [late], expected_seq=last)
    log = [s.event for s in await store.read("c6")]
    assert RunState.fold(log).active_time == active


async def test_the_event_stream_of_a_resumed_run_goes_on_past_its_earlier_suspension() -> None:
    deleted: list[str] = []
    store = MemoryStore()
    first = await Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED).run("clean up", run_id="c7")
    for approval_id in first.events[-1].approvals:  # type: ignore[union-attr]
        await answer_in_store(store, "c7", approval_id, approved=True)
    run = await Agent(planner(), tools=tools(deleted), store=store, approvals=DEFERRED).resume("c7")
    kinds = [e.kind async for e in run.events()]
    assert kinds.count("run_suspended") == 1
    assert kinds[-1] == "run_finished"
