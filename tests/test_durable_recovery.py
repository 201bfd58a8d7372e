"""Resuming runs from their logs: after a stop at every point of a run, nothing finished runs again,
every effect happens once, and the answer is the one an uninterrupted run gives."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from planexec import Agent, ApprovalDecision, ApprovalRequest, Approvals, ToolContext, tool
from planexec.errors import EffectUncertain
from planexec.log import (
    ApprovalRequested,
    Event,
    RunFinished,
    RunResumed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepSucceeded,
    dump_event,
)
from planexec.models import ModelRequest
from planexec.runtime import replay_log
from planexec.store import MemoryStore
from planexec.testing import FunctionModel
from planexec.tools import Tool

from .support import SAFETY, tool_step


@dataclass
class Ledger:
    """The outside world: effects keyed by idempotency key, and every call each tool received."""

    effects: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def tools(self) -> list[Tool]:
        @tool
        async def fetch(item: str, ctx: ToolContext) -> str:
            """Read an item (no side effect)."""
            self.calls.append(("fetch", ctx.step_id))
            return f"data:{item}"

        @tool(side_effect=True, idempotent=True)
        async def charge(account: str, amount: int, ctx: ToolContext) -> str:
            """Charge an account; the billing service deduplicates by idempotency key."""
            self.calls.append(("charge", ctx.step_id))
            if ctx.idempotency_key not in self.effects:
                self.effects[ctx.idempotency_key] = f"charged {account} {amount}"
            return self.effects[ctx.idempotency_key]

        @tool(side_effect=True)
        async def email(to: str, ctx: ToolContext) -> str:
            """Send an e-mail; not safe to repeat."""
            self.calls.append(("email", ctx.step_id))
            self.effects[f"email:{ctx.step_id}"] = f"mailed {to}"
            return f"mailed {to}"

        return [fetch, charge, email]


PLAN = {
    "steps": [
        tool_step("a", "fetch", {"item": "a"}),
        tool_step("b", "fetch", {"item": "b"}),
        tool_step("pay", "charge", {"account": "${a}", "amount": 5}, "a"),
        tool_step("join", "fetch", {"item": "${pay} and ${b}"}, "pay", "b"),
    ]
}


def planner() -> FunctionModel:
    """Plans once, then answers from the record: the same replies in any process."""

    def reply(request: ModelRequest) -> Any:
        if request.purpose == "planner.propose":
            return PLAN
        assert request.purpose == "planner.finish", request.purpose
        found = re.search(r"^- join .*? → (.*)$", request.last_user_text, re.MULTILINE)
        assert found is not None
        return {"answer": "done: " + found.group(1)}

    return FunctionModel(reply)


async def run_whole(ledger: Ledger) -> tuple[list[Event], str | None]:
    store = MemoryStore()
    agent = Agent(planner(), tools=ledger.tools(), store=store, budget=SAFETY)
    result = await agent.run("pay and report", run_id="r1")
    assert result.stop.kind == "goal_met", result.stop
    return list(result.events), result.answer


async def test_an_uninterrupted_run_is_logged_whole() -> None:
    ledger = Ledger()
    events, answer = await run_whole(ledger)
    assert answer == "done: data:charged data:a 5 and data:b"
    assert isinstance(events[-1], RunFinished)
    started = [e for e in events if isinstance(e, StepStarted) and e.tool == "charge"]
    assert started[0].idempotency_key == "r1:pay:v1"


async def test_resuming_after_a_stop_at_every_event_finishes_the_same_run() -> None:
    reference = Ledger()
    events, answer = await run_whole(reference)
    for cut in range(1, len(events)):
        ledger = Ledger(effects=dict(reference.effects) if _effect_logged(events[:cut]) else {})
        store = MemoryStore()
        await store.append("r1", events[:cut], expected_seq=0)
        finished = {e.step_id for e in events[:cut] if isinstance(e, StepSucceeded)}
        agent = Agent(planner(), tools=ledger.tools(), store=store, budget=SAFETY)
        run = await agent.resume("r1")
        result = await run.result()
        assert result.stop.kind == "goal_met", (cut, result.stop)
        assert result.answer == answer, cut
        again = {step for _, step in ledger.calls} & finished
        assert not again, f"stopped after event {cut}: finished steps ran again: {again}"
        assert list(ledger.effects.values()) == list(reference.effects.values()), cut
        logged = [dump_event(s.event) for s in await store.read("r1")]
        assert logged == [dump_event(e) for e in result.events]
        assert sum(isinstance(e, RunResumed) for e in result.events) == 1


def _effect_logged(events: list[Event]) -> bool:
    """Whether the charge's intent was written (so the effect may have happened before the stop)."""
    return any(isinstance(e, StepStarted) and e.tool == "charge" for e in events)


async def test_an_interrupted_idempotent_call_is_sent_again_with_the_same_key() -> None:
    reference = Ledger()
    events, _ = await run_whole(reference)
    cut = next(i for i, e in enumerate(events) if isinstance(e, StepStarted) and e.tool == "charge") + 1
    ledger = Ledger(effects=dict(reference.effects))
    store = MemoryStore()
    await store.append("r1", events[:cut], expected_seq=0)
    result = await (await Agent(planner(), tools=ledger.tools(), store=store).resume("r1")).result()
    assert result.stop.kind == "goal_met"
    requeued = [e for e in result.events if isinstance(e, StepRequeued)]
    assert [e.step_id for e in requeued] == ["pay"]
    assert "idempotent" in requeued[0].reason
    assert ledger.calls.count(("charge", "pay")) == 1
    assert len(ledger.effects) == 1


EMAIL_PLAN = {
    "steps": [
        tool_step("mail", "email", {"to": "ops@example.com"}),
        tool_step("after", "fetch", {"item": "${mail}"}, "mail"),
    ]
}


def email_planner() -> FunctionModel:
    def reply(request: ModelRequest) -> Any:
        if request.purpose == "planner.propose":
            return EMAIL_PLAN
        if request.purpose == "planner.patch":
            return {
                "reason": "the mail was skipped; read something else",
                "steps": [tool_step("alt", "fetch", {"item": "x"})],
            }
        return {"answer": "finished"}

    return FunctionModel(reply)


async def interrupted_email() -> tuple[MemoryStore, Ledger]:
    """A log that stops between the e-mail's intent and its result (the mail was sent)."""
    ledger = Ledger()
    store = MemoryStore()
    whole = await Agent(email_planner(), tools=ledger.tools(), store=store).run("mail", run_id="m1")
    cut = next(i for i, e in enumerate(whole.events) if isinstance(e, StepStarted) and e.tool == "email") + 1
    truncated = MemoryStore()
    await truncated.append("m1", list(whole.events[:cut]), expected_seq=0)
    return truncated, Ledger(effects=dict(ledger.effects))


async def test_an_interrupted_unsafe_effect_is_held_for_a_human_not_repeated() -> None:
    store, ledger = await interrupted_email()
    run = await Agent(email_planner(), tools=ledger.tools(), store=store).resume("m1")
    result = await run.result()
    assert result.stop.kind == "waiting"
    held = [e for e in result.events if isinstance(e, StepHeld)]
    assert [e.step_id for e in held] == ["mail"]
    asked = [e for e in result.events if isinstance(e, ApprovalRequested)]
    assert asked[-1].subject == "effect"
    assert "retry, skip, or mark done" in asked[-1].reason
    assert ("email", "mail") not in ledger.calls
    assert result.steps["mail"].status == "held"


@pytest.mark.parametrize(
    ("choice", "emails", "answer_steps"),
    [("done", 0, {"mail", "after"}), ("retry", 1, {"mail", "after"}), ("skip", 0, {"alt"})],
)
async def test_a_human_settles_an_uncertain_effect(choice: str, emails: int, answer_steps: set[str]) -> None:
    store, ledger = await interrupted_email()
    agent = Agent(email_planner(), tools=ledger.tools(), store=store)
    waiting = await (await agent.resume("m1")).result()
    approval_id = waiting.events[-1].approvals[0]  # type: ignore[union-attr]
    run = await agent.resume("m1")
    run.decide(approval_id, approved=True, choice=choice, output="mailed ops@example.com", reason="checked")  # type: ignore[arg-type]
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert ledger.calls.count(("email", "mail")) == emails
    assert answer_steps <= set(result.outputs)


class BrokenStore(MemoryStore):
    """A store whose disk fills up after a few writes."""

    def __init__(self, writes: int) -> None:
        super().__init__()
        self.writes = writes

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        if self.writes <= 0:
            raise OSError("no space left on device")
        self.writes -= 1
        return await super().append(run_id, events, expected_seq=expected_seq)


async def test_a_run_whose_log_cannot_be_written_stops_with_an_error_and_calls_no_side_effect() -> None:
    ledger = Ledger()
    agent = Agent(planner(), tools=ledger.tools(), store=BrokenStore(writes=1), budget=SAFETY)
    result = await agent.run("pay and report", run_id="r1")
    assert result.stop.kind == "error"
    assert "no space left on device" in result.stop.detail
    assert ("charge", "pay") not in ledger.calls


class _CutOff:
    """An executor whose first call is cut off with its effect uncertain (as a backend whose
    machine died mid-call reports it); later calls go through."""

    name = "edge"
    kind: Literal["tools", "model"] = "tools"
    max_concurrency = None

    def __init__(self) -> None:
        self.calls: list[str | None] = []

    async def run(self, step: Any, args: dict[str, Any], ctx: Any) -> Any:
        tool_ = ctx.tools.get(step.tool)
        self.calls.append(step.id)
        if len(self.calls) == 1:
            raise EffectUncertain(step.tool, "the machine running it was lost")
        return await ctx.call_tool(tool_, args)


async def test_an_uncertain_effect_is_held_retried_once_and_replayed_exactly() -> None:
    """An executor reports a call cut off with its effect unknown: the run holds the step, the human
    says retry, the step runs again with the same key — and a replay of the log matches it event for
    event, hold and answer included, with no tool called."""
    sent: list[str] = []

    @tool(side_effect=True)
    def send(to: str, ctx: ToolContext) -> str:
        """Send a note (not safe to repeat)."""
        sent.append(ctx.idempotency_key)
        return f"sent to {to}"

    async def human(request: ApprovalRequest) -> ApprovalDecision:
        assert request.subject == "effect"
        return ApprovalDecision(approved=True, choice="retry", reason="checked: it never arrived")

    cut = _CutOff()
    plan = {"steps": [tool_step("s", "send", {"to": "ann"}, executor="edge")]}
    planner = FunctionModel(lambda r: plan if r.purpose == "planner.propose" else {"answer": "sent"})
    approvals = Approvals(approver=human)
    agent = Agent(planner, tools=[send], executors=[cut], budget=SAFETY, store=MemoryStore(), approvals=approvals)
    result = await agent.run("send a note")
    assert result.stop.kind == "goal_met", result.stop
    assert cut.calls == ["s", "s"]
    [key] = {e.idempotency_key for e in result.events if isinstance(e, StepStarted)}
    assert sent == [key]
    assert [e.kind for e in result.events if e.kind in ("approval_requested", "step_held", "approval_decided")] == [
        "approval_requested",
        "step_held",
        "approval_decided",
    ]
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence
    assert [dump_event(e) for e in report.events] == [dump_event(e) for e in result.events]
    assert sent == [key]  # the replay called nothing
