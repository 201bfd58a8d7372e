"""Approvals and the confidence gate: sensitive or unsure steps wait for a human; plans can too."""

from __future__ import annotations

import asyncio

import pytest

from planexec import Agent, ApprovalDecision, ApprovalRequest, Approvals, Limits, ToolError, tool
from planexec.errors import Rejected
from planexec.log import ApprovalDecided, ApprovalRequested, StepFailed, StepStarted
from planexec.testing import ScriptedModel
from tests.support import SAFETY, events_of, failing_tool, tool_step


class Ledger:
    """A sensitive tool that records every call it gets."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        ledger = self

        @tool(sensitive=True, side_effect=True)
        async def delete(path: str) -> str:
            """Delete a file."""
            ledger.deleted.append(path)
            return f"deleted {path}"

        self.tool = delete


class Approver:
    """Answers approval requests with fixed decisions and records what it was asked."""

    def __init__(self, *decisions: ApprovalDecision | bool) -> None:
        self.decisions = list(decisions)
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision | bool:
        self.requests.append(request)
        return self.decisions.pop(0)


@tool
async def read(path: str) -> str:
    """Read a file."""
    return "content"


UNSURE_DELETE = {"steps": [tool_step("del", "delete", {"path": "/tmp/x"}, confidence=0.3)]}


async def test_an_unsure_sensitive_step_is_not_run_without_an_approver() -> None:
    ledger = Ledger()
    planner = ScriptedModel([UNSURE_DELETE, {"reason": "do not delete", "steps": []}, {"answer": "kept the file"}])
    result = await Agent(planner, tools=[ledger.tool]).run("clean up")

    assert ledger.deleted == []
    rec = result.steps["del"]
    assert rec.status == "failed"
    assert rec.error is not None
    assert rec.error.kind == "low_confidence"
    assert "0.30" in rec.error.message
    failed = events_of(result, StepFailed)
    assert len(failed) == 1
    assert failed[0].started is False
    assert events_of(result, StepStarted) == []
    assert "low_confidence" in planner.calls[1].last_user_text
    assert result.stop.kind == "goal_met"
    assert result.answer == "kept the file"


async def test_an_unsure_sensitive_step_runs_when_a_human_approves() -> None:
    ledger = Ledger()
    approver = Approver(ApprovalDecision(approved=True, by="alice", reason="fine"))
    planner = ScriptedModel([UNSURE_DELETE, {"answer": "deleted"}])
    result = await Agent(planner, tools=[ledger.tool], approvals=Approvals(approver=approver)).run("clean up")

    assert result.stop.kind == "goal_met"
    assert ledger.deleted == ["/tmp/x"]
    assert len(approver.requests) == 1
    request = approver.requests[0]
    assert request.subject == "step"
    assert request.step is not None
    assert request.step.id == "del"
    assert request.reason.startswith("low confidence")
    assert request.run_id == result.run_id

    asked = events_of(result, ApprovalRequested)
    decided = events_of(result, ApprovalDecided)
    assert len(asked) == 1
    assert len(decided) == 1
    assert asked[0].approval_id == decided[0].approval_id == request.approval_id
    assert (asked[0].subject, asked[0].step_id) == ("step", "del")
    assert (decided[0].approved, decided[0].by, decided[0].reason) == (True, "alice", "fine")
    # The approval comes before the step starts.
    kinds = [e.kind for e in result.events]
    assert kinds.index("approval_decided") < kinds.index("step_started")


async def test_an_unsure_sensitive_step_rejected_by_a_human_stops_the_run() -> None:
    ledger = Ledger()
    approver = Approver(ApprovalDecision(approved=False, by="bob", reason="too risky"))
    planner = ScriptedModel([UNSURE_DELETE])
    result = await Agent(planner, tools=[ledger.tool], approvals=Approvals(approver=approver)).run("clean up")

    assert result.stop.kind == "rejected"
    assert "too risky" in result.stop.detail
    assert ledger.deleted == []
    assert events_of(result, StepStarted) == []
    decided = events_of(result, ApprovalDecided)
    assert [(d.approved, d.by) for d in decided] == [(False, "bob")]
    with pytest.raises(Rejected) as raised:
        result.raise_for_stop()
    assert raised.value.result is result


async def test_a_sensitive_step_asks_the_approver_even_when_confident() -> None:
    ledger = Ledger()
    approver = Approver(True)
    planner = ScriptedModel(
        [{"steps": [tool_step("del", "delete", {"path": "/a"}, confidence=0.95)]}, {"answer": "ok"}]
    )
    result = await Agent(planner, tools=[ledger.tool], approvals=Approvals(approver=approver)).run("clean up")
    assert result.stop.kind == "goal_met"
    assert ledger.deleted == ["/a"]
    assert [r.reason for r in approver.requests] == ["sensitive tool delete"]


async def test_a_confident_sensitive_step_runs_without_an_approver() -> None:
    ledger = Ledger()
    planner = ScriptedModel([{"steps": [tool_step("del", "delete", {"path": "/a"}, confidence=0.9)]}, {"answer": "ok"}])
    result = await Agent(planner, tools=[ledger.tool]).run("clean up")
    assert result.stop.kind == "goal_met"
    assert ledger.deleted == ["/a"]


async def test_an_unsure_step_of_a_harmless_tool_runs_without_asking() -> None:
    approver = Approver()
    planner = ScriptedModel([{"steps": [tool_step("r", "read", {"path": "/a"}, confidence=0.1)]}, {"answer": "ok"}])
    result = await Agent(planner, tools=[read], approvals=Approvals(approver=approver)).run("read")
    assert result.stop.kind == "goal_met"
    assert approver.requests == []


async def test_plan_approval_rejecting_stops_the_run_before_any_step() -> None:
    ledger = Ledger()
    approver = Approver(ApprovalDecision(approved=False, reason="not this plan"))
    planner = ScriptedModel([{"steps": [tool_step("del", "delete", {"path": "/a"})]}])
    agent = Agent(planner, tools=[ledger.tool], approvals=Approvals(approver=approver, plan=True))
    result = await agent.run("clean up")

    assert result.stop.kind == "rejected"
    assert "not this plan" in result.stop.detail
    assert ledger.deleted == []
    assert result.plans == ()
    assert len(approver.requests) == 1
    request = approver.requests[0]
    assert request.subject == "plan"
    assert request.plan is not None
    assert request.plan.version == 1
    assert request.plan.ids == ("del",)
    asked = events_of(result, ApprovalRequested)
    assert [(a.subject, a.plan_version) for a in asked] == [("plan", 1)]


async def test_plan_approval_approving_installs_the_plan() -> None:
    approver = Approver(True)
    planner = ScriptedModel([{"steps": [tool_step("r", "read", {"path": "/a"})]}, {"answer": "content"}])
    agent = Agent(planner, tools=[read], approvals=Approvals(approver=approver, plan=True))
    result = await agent.run("read")
    assert result.stop.kind == "goal_met"
    assert [r.subject for r in approver.requests] == ["plan"]
    kinds = [e.kind for e in result.events]
    assert kinds.index("approval_decided") < kinds.index("plan_proposed")


async def test_every_plan_version_is_approved_when_asked() -> None:
    @tool
    async def attempt(n: int) -> str:
        """Fails for 1."""
        if n == 1:
            raise ToolError("no")
        return "ok"

    approver = Approver(True, True)
    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "attempt", {"n": 1})]},
            {"reason": "try 2", "steps": [tool_step("b", "attempt", {"n": 2})]},
            {"answer": "ok"},
        ]
    )
    agent = Agent(planner, tools=[attempt], approvals=Approvals(approver=approver, plan=True))
    result = await agent.run("try")
    assert result.stop.kind == "goal_met"
    assert [(r.subject, r.plan.version if r.plan else None) for r in approver.requests] == [("plan", 1), ("plan", 2)]


async def test_approval_always_needs_a_human_even_for_a_harmless_tool() -> None:
    approver = Approver(True)
    planner = ScriptedModel([{"steps": [tool_step("r", "read", {"path": "/a"}, approval="always")]}, {"answer": "ok"}])
    result = await Agent(planner, tools=[read], approvals=Approvals(approver=approver)).run("read")
    assert result.stop.kind == "goal_met"
    assert [r.step.id if r.step else None for r in approver.requests] == ["r"]


async def test_a_step_waiting_for_approval_is_not_dispatched_twice_when_a_patch_keeps_it() -> None:
    # The sensitive step waits for a human. Meanwhile a sibling fails and the patch keeps the
    # waiting step unchanged. It must go on waiting, not be started a second time.
    ledger = Ledger()
    approval_asked = asyncio.Event()
    patched = asyncio.Event()

    failing = failing_tool("broken", name="failing", after=approval_asked)

    class SlowApprover(Approver):
        async def __call__(self, request: ApprovalRequest) -> ApprovalDecision | bool:
            self.requests.append(request)
            approval_asked.set()
            await patched.wait()
            return True

    approver = SlowApprover()
    keep = tool_step("del", "delete", {"path": "/a"})
    planner = ScriptedModel(
        [
            {"steps": [keep, tool_step("f", "failing", {})]},
            {"reason": "drop the broken step, keep the delete", "steps": [keep]},
            {"answer": "deleted"},
        ]
    )
    agent = Agent(planner, tools=[ledger.tool, failing], approvals=Approvals(approver=approver), budget=SAFETY)
    run = agent.start("clean up")
    async for event in run.events():
        if event.kind == "plan_proposed" and event.plan.version == 2:
            patched.set()
    result = await run.result()

    assert result.stop.kind == "goal_met", result.stop
    assert ledger.deleted == ["/a"], "the delete ran more than once"
    assert len(approver.requests) == 1
    assert [e.step_id for e in events_of(result, StepStarted)].count("del") == 1


async def test_many_approvals_can_be_pending_at_once_across_branches() -> None:
    ledger = Ledger()
    both_asked = asyncio.Event()

    class GatheringApprover(Approver):
        async def __call__(self, request: ApprovalRequest) -> ApprovalDecision | bool:
            self.requests.append(request)
            if len(self.requests) == 2:
                both_asked.set()
            await both_asked.wait()
            return True

    approver = GatheringApprover()
    planner = ScriptedModel(
        [
            {"steps": [tool_step("d1", "delete", {"path": "/a"}), tool_step("d2", "delete", {"path": "/b"})]},
            {"answer": "deleted both"},
        ]
    )
    agent = Agent(
        planner,
        tools=[ledger.tool],
        approvals=Approvals(approver=approver),
        limits=Limits(max_concurrency=4),
        budget=SAFETY,
    )
    result = await agent.run("clean up")
    assert result.stop.kind == "goal_met", result.stop
    assert sorted(ledger.deleted) == ["/a", "/b"]
    assert len(events_of(result, ApprovalRequested)) == 2
    kinds = [e.kind for e in result.events]
    assert kinds.count("approval_requested") == 2
    first_decision = kinds.index("approval_decided")
    assert kinds[:first_decision].count("approval_requested") == 2
