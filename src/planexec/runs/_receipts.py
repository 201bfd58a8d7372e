"""Receipts: for every side-effecting tool call a run made, the chain plan version → approval →
effect, each link a logged event named by its sequence number and its hash in the run's chain.

A receipt is folded from the log alone (:func:`fold_receipts`), so any process that can read the
store — the command line, the server — shows the same ones; :func:`read_receipts` reads a run's
log, folds it and verifies its chain, which says whether the hashes the receipts quote still hold.

Which calls count: a tool step whose tool, as the run knew it then (``run_started``'s tool specs,
then each ``tools_changed``), has ``side_effect``, or whose step declares ``effect: write``; and each
tool call a model-driven step made (``tool_called``) to such a tool, or from such a step — the
refused ones included, marked as never sent. Each time a step starts is a receipt of its own: a call
sent again after its process stopped shows the same idempotency key, and the human's choice to
send it again when one was asked.

Which yeses cover a call: the human's answer to the question about that very step (in its plan
version), an approval of the plan version the step belongs to, and for a call sent again, the
answer to the question about its uncertain effect. A receipt with none of them says plainly that
no human approved it, and why none was asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from planexec.errors import LogUnreadable
from planexec.log import (
    ApprovalDecided,
    ApprovalRecord,
    ApprovalRequested,
    PlanProposed,
    RunFinished,
    RunStarted,
    RunState,
    StepCancelled,
    StepFailed,
    StepHeld,
    StepRecord,
    StepRequeued,
    StepStarted,
    StepSucceeded,
    ToolCalled,
    ToolsChanged,
)
from planexec.plan import render_text
from planexec.runs._stored import check_run_id
from planexec.store import ChainReport, RunStore, StoredEvent, verify_chain

__all__ = [
    "ApprovalReceipt",
    "LoggedEvent",
    "PlanReceipt",
    "Receipt",
    "ReceiptOutcome",
    "Receipts",
    "fold_receipts",
    "read_receipts",
]

ReceiptOutcome = Literal["succeeded", "failed", "cancelled", "held", "requeued", "refused", "unfinished"]
"""How a call ended, as its log says: ``held`` (the process stopped during it and a human was
asked whether it happened), ``requeued`` (to run again), ``refused`` (never sent: the tool needs a
human's approval, and a model-driven step cannot get one), ``unfinished`` (the log records no
outcome: the run ended, or its process stopped, during the call)."""

_DETAIL_CHARS = 300


@dataclass(frozen=True, kw_only=True, slots=True)
class LoggedEvent:
    """One event of the log, named as a receipt names it: where it is and its hash in the chain."""

    seq: int
    kind: str
    at: float
    hash: str | None
    """As stored (64 hex digits); None for an event written before the store kept a chain."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanReceipt:
    """The plan version a call's step belongs to."""

    version: int
    author: str
    """Who made it: ``planner``, ``human`` (an edit approved instead) or ``memory``."""
    model: str | None = None
    """For a version the planner made: the model whose answer it is, when the log says."""
    reason: str
    event: LoggedEvent | None
    """The ``plan_proposed`` event that put the version in force (None when the log has none: a
    step started while its plan was still streaming, and the log ends before the plan did)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalReceipt:
    """A human's yes that covers a call."""

    approval_id: str
    subject: str
    """``step`` (this step), ``plan`` (the plan version holding it) or ``effect`` (sending it again)."""
    covers: str
    """What the yes was about, in words."""
    by: str
    at: float
    """When it was given."""
    reason: str
    choice: str | None
    asked: LoggedEvent
    """The ``approval_requested`` event: what the human was shown."""
    answered: LoggedEvent
    """The ``approval_decided`` event."""
    rule: str | None = None
    """The rule that asked (logs since event schema 11)."""
    shown_args: Any = None
    """For a step's question: the arguments the human was shown, as they were to be sent (logs since
    event schema 11); compare them with the call's ``args``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Receipt:
    """One side-effecting tool call: its plan version, the yeses behind it, and what it did."""

    step_id: str
    tool: str
    made_by: Literal["step", "model_step"]
    """``step``: a tool step called it; ``model_step``: a model-driven step's model did."""
    call_id: str | None
    """For a model-driven step's call: the call's id."""
    args: Any
    """The arguments as sent (as the log holds them: redacted)."""
    idempotency_key: str | None
    why: str
    """Why the call counts as a side effect."""
    plan: PlanReceipt | None
    approvals: tuple[ApprovalReceipt, ...]
    no_approval: str | None
    """When no human approved the call: ``no human approval: `` and why none was asked."""
    outcome: ReceiptOutcome
    detail: str
    """The output, the error, or what happened to the call, in a few words."""
    started: LoggedEvent
    """The ``step_started`` event of the step that made the call."""
    call: LoggedEvent | None
    """For a model-driven step's call: its ``tool_called`` event."""
    ended: LoggedEvent | None
    """The event that says how the call ended (``step_succeeded``, ``step_failed``, …); for a
    model-driven step's call, its ``tool_called`` event."""
    sent_before: int | None = None
    """For a call sent again after its process stopped: the seq of the ``step_started`` event of the
    earlier attempt, whose idempotency key it carries."""

    @property
    def approved(self) -> bool:
        return bool(self.approvals)


@dataclass(frozen=True, kw_only=True, slots=True)
class Receipts:
    """Every side-effecting call of a run, in log order, and whether the run's chain holds."""

    run_id: str
    receipts: tuple[Receipt, ...]
    chain: ChainReport | None = None
    """The verification of the run's chain (None when the receipts were folded without one)."""
    events: int = 0
    """How many events were folded."""
    problems: tuple[str, ...] = ()
    """Events that could not be read or applied, so what the receipts say may be incomplete."""

    def json(self) -> dict[str, Any]:
        """The receipts as JSON data."""
        return {
            "run_id": self.run_id,
            "events": self.events,
            "chain": None if self.chain is None else self.chain.json(),
            "receipts": [{**asdict(r), "approved": r.approved} for r in self.receipts],
            "problems": list(self.problems),
        }


@dataclass(slots=True)
class _Open:
    """A receipt whose call has not ended yet, in the log so far."""

    fields: dict[str, Any]
    version: int


@dataclass(slots=True)
class _Fold:
    run_id: str = ""
    state: RunState = field(default_factory=RunState)
    specs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    settings: Mapping[str, Any] | None = None
    """The run's approval settings (``run_started``'s ``config.approvals``), when it records them."""
    asked: dict[str, LoggedEvent] = field(default_factory=dict)
    answered: dict[str, LoggedEvent] = field(default_factory=dict)
    plan_events: dict[int, LoggedEvent] = field(default_factory=dict)
    started: dict[str, LoggedEvent] = field(default_factory=dict)
    """The latest ``step_started`` of each step."""
    keys: dict[tuple[str, str], int] = field(default_factory=dict)
    """The seq of the first ``step_started`` of each (step, idempotency key)."""
    resend: dict[str, str] = field(default_factory=dict)
    """Steps a human chose to send again (an uncertain effect's ``retry``): the approval id."""
    open: dict[str, _Open] = field(default_factory=dict)
    done: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def fold_receipts(stored: Sequence[StoredEvent], *, chain: ChainReport | None = None) -> Receipts:
    """The receipts of the run whose log is ``stored`` (as a store reads it: seq, event, hash)."""
    fold = _Fold()
    for item in stored:
        event = item.event
        ref = LoggedEvent(seq=item.seq, kind=event.kind, at=event.at, hash=item.hash)
        try:
            _before(fold, event, ref)
            fold.state.apply(event)
            _after(fold, event, ref)
        except Exception as e:  # an event that refers to one that is missing (a damaged log)
            fold.problems.append(f"event {item.seq} ({event.kind}) cannot be applied: {type(e).__name__}: {e}")
    for item_open in fold.open.values():
        item_open.fields.update(
            outcome="unfinished",
            detail="the log records no outcome: the run ended, or its process stopped, during the call",
            ended=None,
        )
        fold.done.append((item_open.fields, item_open.version))
    receipts = [
        Receipt(**fields, plan=_plan(fold, version))
        for fields, version in sorted(fold.done, key=lambda item: (item[0]["started"].seq, _call_seq(item[0])))
    ]
    run_id = fold.state.run_id or (chain.run_id if chain is not None else "")
    return Receipts(
        run_id=run_id, receipts=tuple(receipts), chain=chain, events=len(stored), problems=tuple(fold.problems)
    )


def _call_seq(fields: Mapping[str, Any]) -> int:
    call = fields.get("call")
    return call.seq if isinstance(call, LoggedEvent) else 0


async def read_receipts(store: RunStore, run_id: str) -> Receipts:
    """Read run ``run_id``'s log from ``store``, fold its receipts and verify its chain.

    A log with events that cannot be read gives the receipts of the others, with a problem line for
    each; an unknown run gives no receipts and an empty chain. Raises
    :class:`~planexec.UsageError` for an id that is not a run id, and what the store raises.
    """
    check_run_id(run_id)
    problems: list[str] = []
    try:
        stored = await store.read(run_id)
    except LogUnreadable as e:
        stored = [s for s in e.events if isinstance(s, StoredEvent)]
        problems = [f"run {run_id}: {p}" for p in e.problems]
    chain = await verify_chain(store, run_id)
    folded = fold_receipts(stored, chain=chain)
    return Receipts(
        run_id=run_id,
        receipts=folded.receipts,
        chain=chain,
        events=folded.events,
        problems=(*problems, *folded.problems),
    )


# -- the fold --------------------------------------------------------------------------------------


def _before(fold: _Fold, event: object, ref: LoggedEvent) -> None:
    """What must be read from the state before ``event`` is applied to it."""
    if isinstance(event, RunStarted):
        fold.run_id = event.run_id
        tools = event.config.get("tools")
        if isinstance(tools, list):
            fold.specs = {str(s["name"]): s for s in tools if isinstance(s, Mapping) and "name" in s}
        settings = event.config.get("approvals")
        fold.settings = settings if isinstance(settings, Mapping) else None
    elif isinstance(event, StepStarted):
        _step_started(fold, event, ref)
    elif isinstance(event, ToolCalled):
        _tool_called(fold, event, ref)


def _after(fold: _Fold, event: object, ref: LoggedEvent) -> None:
    """What must be read from the state after ``event`` is applied to it."""
    if isinstance(event, ApprovalRequested):
        fold.asked[event.approval_id] = ref
    elif isinstance(event, ApprovalDecided):
        fold.answered.setdefault(event.approval_id, ref)
        rec = fold.state.approvals.get(event.approval_id)
        if rec is not None and rec.subject == "effect" and rec.approved and rec.choice == "retry" and rec.step_id:
            fold.resend[rec.step_id] = rec.approval_id
    elif isinstance(event, PlanProposed):
        fold.plan_events.setdefault(event.plan.version, ref)
    elif isinstance(event, ToolsChanged):
        for name in event.removed:
            fold.specs.pop(name, None)
        for spec in event.tools:
            if "name" in spec:
                fold.specs[str(spec["name"])] = spec
    elif isinstance(event, StepSucceeded):
        _end(fold, event.step_id, ref, "succeeded", render_text(event.output))
    elif isinstance(event, StepFailed):
        _end(fold, event.step_id, ref, "failed", str(event.error))
    elif isinstance(event, StepCancelled):
        _end(fold, event.step_id, ref, "cancelled", event.reason)
    elif isinstance(event, StepHeld):
        why = f"held for a human (question {event.approval_id}): {event.reason}"
        _end(fold, event.step_id, ref, "held", why)
    elif isinstance(event, StepRequeued):
        _end(fold, event.step_id, ref, "requeued", event.reason)
    elif isinstance(event, RunFinished):
        for step_id in list(fold.open):
            why = f"the run finished ({event.stop.kind}) during the call: the log does not say whether it happened"
            _end(fold, step_id, ref, "unfinished", why)


def _end(fold: _Fold, step_id: str, ref: LoggedEvent, outcome: ReceiptOutcome, detail: str) -> None:
    found = fold.open.pop(step_id, None)
    if found is None:
        return
    found.fields.update(outcome=outcome, detail=_clip(detail), ended=ref)
    fold.done.append((found.fields, found.version))


def _spec(fold: _Fold, tool: str | None) -> Mapping[str, Any]:
    return fold.specs.get(tool, {}) if tool is not None else {}


def _step_started(fold: _Fold, event: StepStarted, ref: LoggedEvent) -> None:
    fold.started[event.step_id] = ref
    resend = fold.resend.pop(event.step_id, None)
    earlier = None
    if event.idempotency_key is not None:
        earlier = fold.keys.setdefault((event.step_id, event.idempotency_key), ref.seq)
    rec = fold.state.steps.get(event.step_id)
    tool = event.tool
    if rec is None or tool is None:
        return
    spec = _spec(fold, tool)
    if spec.get("side_effect"):
        why = f"tool {tool} has side effects"
    elif rec.step.effect == "write":
        why = f"step {event.step_id} declares that it writes (effect: write)"
    else:
        return
    approvals = _approvals(fold, rec, resend=resend)
    fields: dict[str, Any] = {
        "step_id": event.step_id,
        "tool": tool,
        "made_by": "step",
        "call_id": None,
        "args": event.args,
        "idempotency_key": event.idempotency_key,
        "why": why,
        "approvals": approvals,
        "no_approval": None if approvals else _why_none(fold, rec, spec),
        "started": ref,
        "call": None,
        "sent_before": earlier if earlier is not None and earlier != ref.seq else None,
    }
    fold.open[event.step_id] = _Open(fields=fields, version=rec.plan_version)


def _tool_called(fold: _Fold, event: ToolCalled, ref: LoggedEvent) -> None:
    rec = fold.state.steps.get(event.step_id)
    if rec is None:
        return
    spec = _spec(fold, event.tool)
    if spec.get("side_effect"):
        why = f"tool {event.tool} has side effects"
    elif rec.step.effect == "write":
        why = f"called by step {event.step_id}, which declares that it writes (effect: write)"
    else:
        return
    refused = event.attempts == 0 and event.error is not None
    approvals = () if refused else _approvals(fold, rec, resend=None, by_model=True)
    if refused and event.error is not None and event.error.kind == "rejected":
        none = (
            f"no human approval: refused and never sent — tool {event.tool} needs a human's approval, which a "
            "call made by a model-driven step cannot get (it can only be called by a step of its own)"
        )
    elif refused:
        none = f"no human approval: refused and never sent — {event.error}"
    elif approvals:
        none = None
    else:
        none = (
            f"no human approval: called by model-driven step {event.step_id}, whose model chose the call; "
            f"{_gate_text(fold, spec, event.tool)}"
        )
    outcome: ReceiptOutcome = "refused" if refused else "failed" if event.error is not None else "succeeded"
    detail = str(event.error) if event.error is not None else render_text(event.output)
    started = fold.started.get(event.step_id, ref)
    fields: dict[str, Any] = {
        "step_id": event.step_id,
        "tool": event.tool,
        "made_by": "model_step",
        "call_id": event.call_id,
        "args": event.args,
        "idempotency_key": None,
        "why": why,
        "approvals": approvals,
        "no_approval": none,
        "started": started,
        "call": ref,
        "outcome": outcome,
        "detail": _clip(detail),
        "ended": ref,
        "sent_before": None,
    }
    fold.done.append((fields, rec.plan_version))


def _approvals(
    fold: _Fold, rec: StepRecord, *, resend: str | None, by_model: bool = False
) -> tuple[ApprovalReceipt, ...]:
    """The yeses given so far that cover a call of ``rec``'s step, most specific first."""
    approvals = fold.state.approvals
    found: list[ApprovalReceipt] = []
    if resend is not None and resend in approvals:
        found += _receipt(fold, approvals[resend], "sending the call again after its process stopped during it")
    unseen = ", not the call its model chose" if by_model else ""
    step = None
    for a in approvals.values():
        if a.subject == "step" and a.step_id == rec.id and a.plan_version == rec.plan_version and a.approved:
            step = a
    if step is not None:
        found += _receipt(fold, step, f"step {rec.id} of plan v{rec.plan_version}, before it ran{unseen}")
    for a in approvals.values():
        if a.subject == "plan" and a.plan_version == rec.plan_version and a.approved:
            edited = " (as the human edited it)" if a.edited_plan is not None else ""
            found += _receipt(fold, a, f"plan v{rec.plan_version}{edited}, which holds step {rec.id}{unseen}")
    return tuple(found)


def _receipt(fold: _Fold, rec: ApprovalRecord, covers: str) -> list[ApprovalReceipt]:
    asked, answered = fold.asked.get(rec.approval_id), fold.answered.get(rec.approval_id)
    if asked is None or answered is None or rec.decided_at is None:
        return []
    return [
        ApprovalReceipt(
            approval_id=rec.approval_id,
            subject=rec.subject,
            covers=covers,
            by=rec.by or "human",
            at=rec.decided_at,
            reason=rec.decision_reason,
            choice=rec.choice,
            asked=asked,
            answered=answered,
            rule=rec.rule,
            shown_args=rec.args,
        )
    ]


def _why_none(fold: _Fold, rec: StepRecord, spec: Mapping[str, Any]) -> str:
    """Why no human approved a tool step's call."""
    tool = rec.step.tool or ""
    settings = fold.settings
    asks = settings is None or bool(settings.get("ask", True))
    gated = bool(spec.get("requires_approval")) or rec.step.approval == "always"
    if gated and not asks:
        return "no human approval: the step needed one, but the run had no approver"
    if settings is not None and settings.get("plan"):
        return (
            f"no human approval: plan v{rec.plan_version} was not approved before the call, and no question "
            f"about step {rec.id} was answered yes"
        )
    return f"no human approval: {_gate_text(fold, spec, tool)}"


def _gate_text(fold: _Fold, spec: Mapping[str, Any], tool: str) -> str:
    """Why the run asked nobody about calls of ``tool``."""
    if not spec:
        return f"the log records no spec of tool {tool}, so nothing says it was gated"
    settings = fold.settings
    if settings is None:
        return f"tool {tool} does not require approval, and the log does not record the run's approval settings"
    steps = settings.get("steps", "sensitive")
    asks = bool(settings.get("ask", True))
    if not spec.get("sensitive"):
        why = "it does not require approval and is not sensitive"
    elif not asks:
        why = "it is sensitive, but the run had no approver to ask"
    elif steps == "none":
        why = "it is sensitive, but the run's settings ask about no step"
    else:
        why = "it does not require approval"
    asked = {"all": "every step", "none": "no step", "sensitive": "sensitive steps only"}.get(str(steps), str(steps))
    plans = "and about plans" if settings.get("plan") else "and not about plans"
    return f"tool {tool} is not gated — {why}; the run asked about {asked}, {plans}"


def _plan(fold: _Fold, version: int) -> PlanReceipt | None:
    plan = next((p for p in fold.state.plans if p.version == version), None)
    event = fold.plan_events.get(version)
    if plan is None:
        return None if event is None else PlanReceipt(version=version, author="", reason="", event=event)
    model = fold.state.plan_models.get(version)
    return PlanReceipt(version=version, author=plan.author, model=model, reason=plan.reason, event=event)


def _clip(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"
