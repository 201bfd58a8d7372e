"""Receipts: for every side-effecting call of a real run, plan version → approval → effect, each
named by its event's seq and hash in the run's chain — from SQLite files and PostgreSQL, for runs
written before the chain existed, and for logs changed behind the store's back."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, ApprovalDecision, ApprovalRequest, Approvals, tool
from planexec.executor import StepError, Verdict
from planexec.log import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    PlanProposed,
    RunFinished,
    RunResumed,
    RunStarted,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepSucceeded,
    StopReason,
)
from planexec.plan import Plan, Step
from planexec.runs import Receipt, Receipts, fold_receipts, read_receipts
from planexec.store import RunStore, SQLiteStore, StoredEvent
from planexec.testing import ScriptedModel, tool_calls
from tests.support import SAFETY
from tests.test_store_support import DURABLE, Backend, make_backend

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class World:
    """Tools with side effects that record their calls, and one without."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        world = self

        @tool(trusted=True)  # the world's own read tools: what they return no outsider can shape
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        @tool(side_effect=True)
        def publish(value: int) -> str:
            """Publish a value."""
            world.calls.append(f"publish {value}")
            return f"published {value}"

        @tool(side_effect=True, requires_approval=True)
        def wire(amount: int) -> str:
            """Wire money."""
            world.calls.append(f"wire {amount}")
            return f"wired {amount}"

        @tool(side_effect=True, sensitive=True)
        def erase(path: str) -> str:
            """Erase a file."""
            world.calls.append(f"erase {path}")
            return f"erased {path}"

        @tool(trusted=True)
        def find(q: str) -> str:
            """Search."""
            return f"found {q}"

        self.tools = [add, publish, wire, erase, find]


class Approver:
    def __init__(self, by: str) -> None:
        self.by = by
        self.asked: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision(approved=True, by=self.by, reason="checked")


SUM_THEN_PUBLISH = {
    "reason": "add, then publish the sum",
    "steps": [
        {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
        {
            "id": "pub",
            "description": "Publish the sum",
            "tool": "publish",
            "args": {"value": "${sum}"},
            "depends_on": ["sum"],
        },
    ],
}


@pytest.fixture(params=DURABLE)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


def at(stored: list[StoredEvent], kind: type[Event], **match: Any) -> StoredEvent:
    """The one stored event of ``kind`` whose fields are ``match``."""
    found = [s for s in stored if isinstance(s.event, kind) and all(getattr(s.event, k) == v for k, v in match.items())]
    assert len(found) == 1, found
    return found[0]


def named(receipt_event: Any, stored: StoredEvent) -> None:
    """The receipt names this stored event: its seq, kind and hash."""
    assert receipt_event is not None
    assert (receipt_event.seq, receipt_event.kind, receipt_event.hash) == (stored.seq, stored.event.kind, stored.hash)
    assert stored.hash is not None


async def test_a_plan_approval_leads_to_the_call_it_covers(durable: Backend) -> None:
    world = World()
    store = durable.open()
    try:
        approver = Approver("alice")
        agent = Agent(
            ScriptedModel([SUM_THEN_PUBLISH, {"answer": "published 5"}]),
            tools=world.tools,
            store=store,
            approvals=Approvals(approver=approver, plan=True),
            budget=SAFETY,
        )
        result = await agent.run("publish the sum of 2 and 3", run_id="pub")
        assert result.stop.kind == "goal_met", result.stop
        assert world.calls == ["publish 5"]
        receipts = await read_receipts(store, "pub")
        stored = await store.read("pub")
    finally:
        await store.close()

    assert receipts.chain is not None
    assert receipts.chain.intact
    assert receipts.chain.head == stored[-1].hash
    assert (receipts.run_id, receipts.events, receipts.problems) == ("pub", len(stored), ())
    (receipt,) = receipts.receipts  # add has no side effect: no receipt
    started = at(stored, StepStarted, step_id="pub")
    assert isinstance(started.event, StepStarted)
    assert (receipt.step_id, receipt.tool, receipt.made_by, receipt.call_id) == ("pub", "publish", "step", None)
    assert receipt.args == {"value": 5}, "the arguments as sent, bindings resolved"
    assert receipt.idempotency_key == started.event.idempotency_key is not None
    assert receipt.why == "tool publish has side effects"
    assert (receipt.outcome, receipt.detail) == ("succeeded", "published 5")
    named(receipt.started, started)
    named(receipt.ended, at(stored, StepSucceeded, step_id="pub"))
    assert receipt.call is None
    assert receipt.plan is not None
    assert (receipt.plan.version, receipt.plan.author, receipt.plan.reason) == (
        1,
        "planner",
        "add, then publish the sum",
    )
    named(receipt.plan.event, at(stored, PlanProposed))
    assert receipt.approved
    assert receipt.no_approval is None
    (approval,) = receipt.approvals
    asked = at(stored, ApprovalRequested)
    assert isinstance(asked.event, ApprovalRequested)
    assert (approval.approval_id, approval.subject, approval.by, approval.reason) == (
        asked.event.approval_id,
        "plan",
        "alice",
        "checked",
    )
    assert approval.covers == "plan v1, which holds step pub"
    named(approval.asked, asked)
    answered = at(stored, ApprovalDecided)
    named(approval.answered, answered)
    assert approval.at == answered.event.at
    assert approval.asked.seq < approval.answered.seq < receipt.started.seq < receipt.ended.seq  # type: ignore[union-attr]

    data = json.loads(json.dumps(receipts.json()))
    assert data["chain"]["intact"] is True
    assert data["chain"]["head"] == stored[-1].hash
    (entry,) = data["receipts"]
    assert entry["approved"] is True
    expected = {"seq": asked.seq, "kind": "approval_requested", "at": asked.event.at, "hash": asked.hash}
    assert entry["approvals"][0]["asked"] == expected
    assert entry["args"] == {"value": 5}


async def test_a_step_approval_names_who_answered_and_what_they_saw(tmp_path: Path) -> None:
    world = World()
    plan = {"steps": [{"id": "pay", "description": "Wire 40", "tool": "wire", "args": {"amount": 40}}]}
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        agent = Agent(
            ScriptedModel([plan, {"answer": "wired"}]),
            tools=world.tools,
            store=store,
            approvals=Approvals(approver=Approver("bob")),
            budget=SAFETY,
        )
        await agent.run("wire 40", run_id="pay")
        receipts = await read_receipts(store, "pay")
        stored = await store.read("pay")
    finally:
        await store.close()
    (receipt,) = receipts.receipts
    (approval,) = receipt.approvals
    assert (approval.subject, approval.by, approval.covers) == ("step", "bob", "step pay of plan v1, before it ran")
    # what the human was shown is what was sent
    assert approval.rule is not None
    assert approval.shown_args == receipt.args
    asked = at(stored, ApprovalRequested)
    named(approval.asked, asked)
    assert isinstance(asked.event, ApprovalRequested)
    assert asked.event.step_id == "pay"
    assert (receipt.outcome, receipt.detail, world.calls) == ("succeeded", "wired 40", ["wire 40"])


async def test_a_call_nobody_was_asked_about_says_so_and_why(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        agent = Agent(
            ScriptedModel([SUM_THEN_PUBLISH, {"answer": "published 5"}]), tools=world.tools, store=store, budget=SAFETY
        )
        await agent.run("publish the sum", run_id="free")
        receipts = await read_receipts(store, "free")
    finally:
        await store.close()
    (receipt,) = receipts.receipts
    assert not receipt.approved
    assert receipt.approvals == ()
    assert receipt.no_approval == (
        "no human approval: tool publish is not gated — it does not require approval and is not sensitive; "
        "the run asked about sensitive steps only, and not about plans"
    )


async def test_calls_a_model_driven_step_made_and_the_one_it_could_not(tmp_path: Path) -> None:
    world = World()
    executor = ScriptedModel(
        [
            tool_calls(("find", {"q": "price"})),
            tool_calls(("publish", {"value": 7})),
            tool_calls(("erase", {"path": "/tmp/x"})),  # refused, and the model is told so
            "published 7; erasing needs a step of its own",
        ]
    )
    allowed = ["find", "publish", "erase"]
    plan = {"steps": [{"id": "m", "description": "find and publish the price", "allowed_tools": allowed}]}
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        agent = Agent(
            ScriptedModel([plan, {"answer": "done"}]),
            tools=world.tools,
            executor=executor,
            store=store,
            approvals=Approvals(approver=Approver("nobody")),  # a sensitive tool is then asked about
            budget=SAFETY,
        )
        result = await agent.run("publish the price", run_id="model")
        assert result.stop.kind == "goal_met", result.stop
        executor.assert_consumed()
        receipts = await read_receipts(store, "model")
        stored = await store.read("model")
    finally:
        await store.close()
    assert world.calls == ["publish 7"]
    published, erased = receipts.receipts  # find has no side effect: no receipt
    for receipt in (published, erased):
        assert (receipt.step_id, receipt.made_by) == ("m", "model_step")
        named(receipt.started, at(stored, StepStarted, step_id="m"))
        assert receipt.call is not None
        assert receipt.call.kind == "tool_called"
        assert receipt.ended == receipt.call
        assert receipt.call.hash == next(s.hash for s in stored if s.seq == receipt.call.seq)
    assert (published.tool, published.args, published.outcome, published.detail) == (
        "publish",
        {"value": 7},
        "succeeded",
        "published 7",
    )
    assert published.no_approval is not None
    assert published.no_approval.startswith(
        "no human approval: called by model-driven step m, whose model chose the call; tool publish is not gated"
    )
    assert (erased.tool, erased.args, erased.outcome) == ("erase", {"path": "/tmp/x"}, "refused")
    assert erased.no_approval is not None
    assert "refused and never sent" in erased.no_approval
    assert "can only be called by a step of its own" in erased.no_approval


def _crashed_log(run_id: str) -> list[Event]:
    """A run whose process stopped during a call that is not safe to repeat, was held for a human,
    sent again on the human's word, then stopped during a second call whose outcome was never logged."""
    spec = {"name": "publish", "side_effect": True, "sensitive": False, "idempotent": False}
    plan = Plan(
        version=1,
        steps=(
            Step(id="pub", description="publish", tool="publish", args={"value": 1}),
            Step(id="again", description="publish again", tool="publish", args={"value": 2}, depends_on=("pub",)),
        ),
        reason="publish twice",
    )
    return [
        RunStarted(at=1.0, run_id=run_id, goal="publish", budget={}, config={"tools": [spec]}),
        PlanProposed(at=2.0, plan=plan),
        StepStarted(at=3.0, step_id="pub", executor="tools", tool="publish", args={"value": 1}, idempotency_key="k1"),
        RunResumed(at=4.0, events=3),
        StepHeld(at=4.1, step_id="pub", approval_id="ap-e", reason="the call may have happened"),
        ApprovalRequested(at=4.2, approval_id="ap-e", subject="effect", step_id="pub", plan_version=1, reason="?"),
        ApprovalDecided(at=5.0, approval_id="ap-e", approved=True, by="carol", choice="retry"),
        StepRequeued(at=5.1, step_id="pub", reason="retry chosen"),
        StepStarted(at=6.0, step_id="pub", executor="tools", tool="publish", args={"value": 1}, idempotency_key="k1"),
        StepSucceeded(at=7.0, step_id="pub", output="published 1", verdict=Verdict(passed=True)),
        StepStarted(at=8.0, step_id="again", executor="tools", tool="publish", args={"value": 2}, idempotency_key="k2"),
        RunFinished(at=9.0, stop=StopReason(kind="cancelled", detail="by a human")),
    ]


async def test_a_call_sent_again_shows_the_humans_choice_and_the_earlier_attempt(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        await store.append("crash", _crashed_log("crash"), expected_seq=0)
        receipts = await read_receipts(store, "crash")
    finally:
        await store.close()
    first, again, cut = receipts.receipts
    assert (first.outcome, first.started.seq, first.ended and first.ended.kind) == ("held", 3, "step_held")
    assert "held for a human (question ap-e)" in first.detail
    assert first.sent_before is None
    assert (again.outcome, again.started.seq, again.sent_before, again.idempotency_key) == ("succeeded", 9, 3, "k1")
    (resend,) = again.approvals
    assert (resend.subject, resend.by, resend.choice, resend.asked.seq, resend.answered.seq) == (
        "effect",
        "carol",
        "retry",
        6,
        7,
    )
    assert resend.covers == "sending the call again after its process stopped during it"
    assert first.no_approval is not None, "the first attempt had no yes behind it"
    assert (cut.step_id, cut.outcome, cut.ended and cut.ended.kind) == ("again", "unfinished", "run_finished")
    assert "does not say whether it happened" in cut.detail


def test_receipts_fold_from_the_log_alone() -> None:
    """Without a store: the events with their seqs (and no hashes) are enough; a log with a broken
    event keeps the receipts it can and says what it could not apply."""
    log = _crashed_log("pure")
    stored = [StoredEvent(seq=i, event=e) for i, e in enumerate(log, start=1)]
    receipts = fold_receipts(stored)
    assert isinstance(receipts, Receipts)
    assert receipts.chain is None
    assert [r.started.seq for r in receipts.receipts] == [3, 9, 11]
    assert {r.started.hash for r in receipts.receipts} == {None}
    stray = StoredEvent(seq=99, event=StepSucceeded(at=10.0, step_id="ghost", output=1, verdict=Verdict(passed=True)))
    damaged = fold_receipts([*stored[:-1], stray])
    assert len(damaged.receipts) == 3
    assert damaged.problems == ("event 99 (step_succeeded) cannot be applied: KeyError: 'ghost'",)


def load_fixture(path: Path, name: str) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.executescript((FIXTURES / name).read_text(encoding="utf-8"))


async def test_a_run_written_before_the_chain_still_loads_and_has_receipts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    load_fixture(path, "store_sqlite_v2.sql")
    store = SQLiteStore(path)
    try:
        stored = await store.read("before-the-chain")
        assert len(stored) == 13
        assert {s.hash for s in stored} == {None}
        receipts = await read_receipts(store, "before-the-chain")
        assert receipts.chain is not None
        assert (receipts.chain.intact, receipts.chain.begins_at, receipts.chain.unchained) == (True, None, 13)
        (receipt,) = receipts.receipts
        assert (receipt.tool, receipt.args, receipt.outcome) == ("publish", {"value": 5}, "succeeded")
        (approval,) = receipt.approvals
        assert (approval.subject, approval.by, approval.asked.hash) == ("plan", "alice", None)
        # a newer store appends: the chain begins there, covering what came before
        await store.append("before-the-chain", [RunResumed(at=stored[-1].event.at + 1, events=13)], expected_seq=13)
        report = (await read_receipts(store, "before-the-chain")).chain
        assert report is not None
        assert (report.intact, report.begins_at) == (True, 14)
    finally:
        await store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM planexec_schema").fetchall() == [(3,)]


async def test_receipts_of_a_changed_log_say_the_chain_is_broken(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store: RunStore = SQLiteStore(path)
    try:
        await store.append("crash", _crashed_log("crash"), expected_seq=0)
    finally:
        await store.close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:  # someone rewrites who said yes
        conn.execute("UPDATE planexec_events SET data = replace(data, '\"carol\"', '\"dave\"') WHERE seq = 7")
    store = SQLiteStore(path)
    try:
        receipts = await read_receipts(store, "crash")
    finally:
        await store.close()
    resend: Receipt = receipts.receipts[1]
    assert resend.approvals[0].by == "dave", "the log reads as changed"
    assert receipts.chain is not None
    assert receipts.chain.broken is not None
    assert (receipts.chain.broken.seq, receipts.chain.broken.problem) == (7, "changed")


async def test_an_unknown_run_has_no_receipts(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        receipts = await read_receipts(store, "nope")
    finally:
        await store.close()
    assert (receipts.receipts, receipts.events) == ((), 0)
    assert receipts.chain is not None
    assert receipts.chain.events == 0


def test_a_failed_call_keeps_its_error() -> None:
    log = _crashed_log("f")[:3]
    error = StepError(kind="tool_error", message="the service said no")
    from planexec.log import StepFailed

    log.append(StepFailed(at=3.5, step_id="pub", error=error))
    (receipt,) = fold_receipts([StoredEvent(seq=i, event=e) for i, e in enumerate(log, start=1)]).receipts
    assert (receipt.outcome, receipt.ended and receipt.ended.kind) == ("failed", "step_failed")
    assert "the service said no" in receipt.detail
