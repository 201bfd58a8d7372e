"""RunState: a fold over a run's events. The runtime, the CLI and every later view read it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.executor import StepError, Verdict
from planexec.log._events import (
    EVENT_KINDS,
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    ApprovalSubject,
    BudgetExhaustedEvent,
    ChecklistResult,
    EffectChoice,
    Event,
    Forecast,
    InformationAdded,
    ModelAttemptFailed,
    ModelCalled,
    PlanForecast,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    PlanRecalled,
    QuestionRule,
    RunFinished,
    RunResumed,
    RunStarted,
    RunSuspended,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepStreamed,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    ToolsChanged,
)
from planexec.log._stop import BudgetName, StopReason
from planexec.models import Usage
from planexec.plan import Plan, Step
from planexec.trust import Provenance, Source, Violation

__all__ = ["ApprovalRecord", "RoleTally", "RunState", "StepRecord", "StepStatus", "canonical_call"]

StepStatus = Literal["pending", "running", "held", "succeeded", "failed", "cancelled", "dropped"]


def canonical_call(tool: str, args: Any) -> str:
    """One string per distinct call: the tool and its arguments with sorted keys."""
    return tool + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(kw_only=True, slots=True)
class StepRecord:
    """Everything known about one step: its definition, status, arguments, output and timings."""

    step: Step
    plan_version: int
    status: StepStatus = "pending"
    executor: str | None = None
    args: dict[str, Any] | None = None
    output: Any = None
    error: StepError | None = None
    verdict: Verdict | None = None
    attempts: int = 0
    attempt_errors: list[StepError] = field(default_factory=list)
    tool_calls: list[ToolCalled] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    cancel_reason: str | None = None
    confidence: float | None = None
    """The confidence the executor reported with the result, when it did."""
    progress: ToolProgress | None = None
    """The last progress a tool of the step reported."""
    idempotency_key: str | None = None
    """The key its tool call was sent with, once it started."""
    provenance: dict[str, Provenance] | None = None
    """Each argument's label, as the arguments were sent (None: not started, or an older log)."""
    output_provenance: Provenance | None = None
    """The label of its output (or of its failure's text), once it ended."""
    tainted: bool = False
    """A planner wrote the step after reading untrusted text."""
    violations: tuple[Violation, ...] = ()
    """The trust rules its call broke, when it was refused for them."""

    @property
    def id(self) -> str:
        return self.step.id

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def done(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled", "dropped")


@dataclass(kw_only=True, slots=True)
class RoleTally:
    """The answered model calls of one role (planner, executor, judge): how many, and the sizes of
    their requests and replies, for forecasts."""

    calls: int = 0
    request_chars: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    largest_input: int = 0
    largest_output: int = 0


@dataclass(kw_only=True, slots=True)
class ApprovalRecord:
    """An approval asked for, and its answer once given."""

    approval_id: str
    subject: ApprovalSubject
    step_id: str | None
    plan_version: int | None
    reason: str
    requested_at: float
    plan: Plan | None = None
    approved: bool | None = None
    by: str | None = None
    decision_reason: str = ""
    choice: EffectChoice | None = None
    output: Any = None
    edited_plan: Plan | None = None
    decided_at: float | None = None
    code: str | None = None
    """For an escalation: its reason code."""
    asked_output: Any = None
    """For a review: the step's result; for an answer: the answer reviewed."""
    verdict: Verdict | None = None
    checklist: tuple[str, ...] = ()
    text: str | None = None
    """The user's answer to a question, or a human's guidance for an escalation."""
    checklist_results: tuple[ChecklistResult, ...] = ()
    rule: QuestionRule | None = None
    """The rule that asked (None for questions logged before event schema 11)."""
    args: dict[str, Any] | None = None
    """For a step: its arguments as they were to be sent."""
    budget: BudgetName | None = None
    """For a budget question: the cap the run reached."""
    budget_hit: BudgetExhaustedEvent | None = None
    """For a budget question: what the run had spent of that cap, and what it needed, when asked."""
    raised: dict[str, float | int | None] | None = None
    """For a budget question answered yes: the caps raised."""
    provenance: dict[str, Provenance] | None = None
    """For a step: each argument's label, as the human was shown it."""
    violations: tuple[Violation, ...] = ()
    """For a step: the trust rules its call breaks, when they are why it was asked."""
    seq: int = 0
    """The position of the question in the run's log (1-based)."""

    @property
    def approved_plan(self) -> Plan | None:
        """For a plan question answered yes: the plan a human approved (their edit, when they made one)."""
        if self.subject != "plan" or not self.approved:
            return None
        return self.edited_plan or self.plan


@dataclass(kw_only=True, slots=True)
class RunState:
    """The state of a run, folded from its events; ``RunState.fold(events)`` rebuilds it."""

    run_id: str = ""
    goal: str = ""
    constraints: tuple[str, ...] = ()
    policy: str = ""
    replan: str = ""
    budget: dict[str, float | int | None] = field(default_factory=dict)
    tools: tuple[str, ...] = ()
    """The names of the tools the run may use now (as it started, then as ``tools_changed`` says)."""
    tool_changes: list[ToolsChanged] = field(default_factory=list)
    run_config: dict[str, Any] = field(default_factory=dict)
    """How the run was set up, as ``run_started`` records it (``config``)."""
    tool_specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What the log records of each tool the run may use now (its schema and safety flags), by name;
    empty for runs whose ``run_started`` does not record them."""
    forecasts: dict[int, Forecast] = field(default_factory=dict)
    """Each plan version's cost forecast (``plan_forecast``), by version."""
    over_forecast: dict[int, tuple[BudgetName, ...]] = field(default_factory=dict)
    """For each forecast plan version: the caps its forecast passes."""
    started_at: float = 0.0
    finished_at: float | None = None
    plans: list[Plan] = field(default_factory=list)
    steps: dict[str, StepRecord] = field(default_factory=dict)
    """The latest record of every step id in the run."""
    superseded: list[StepRecord] = field(default_factory=list)
    """Earlier records of ids that a patch defined again, and pending steps a patch dropped."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """Outputs of the steps that succeeded, by id."""
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    tallies: dict[str, RoleTally] = field(default_factory=dict)
    """The answered model calls of each role, with their sizes."""
    cost_by_role: dict[str, float] = field(default_factory=dict)
    """Cost of the model calls of each role (``planner``, ``executor``, ``judge``)."""
    calls_by_tool: dict[str, int] = field(default_factory=dict)
    """Tool calls made, by tool (a step's tool and the calls model-driven steps made)."""
    model_calls: int = 0
    tool_calls: int = 0
    steps_started: int = 0
    replans: int = 0
    rounds_since_progress: int = 0
    """Planning rounds (failure patches, step-by-step turns) since a step last succeeded."""
    failed_calls: dict[str, int] = field(default_factory=dict)
    """How often each canonical tool call has finally failed."""
    repairs: int = 0
    planner_model: str | None = None
    """The planning model that answered last (a ``model_called`` event of the planner)."""
    plan_models: dict[int, str] = field(default_factory=dict)
    """For each plan version the planner authored: the model whose answer it is (with a planner
    ensemble, which of its models), as the ``model_called`` events before it say."""
    approvals: dict[str, ApprovalRecord] = field(default_factory=dict)
    planning: PlanningStarted | None = None
    """The planning round under way, if any."""
    information: list[InformationAdded] = field(default_factory=list)
    """What the user told the run while it ran, in order."""
    heard: int = 0
    """How many of ``information`` the latest planning round was started with."""
    reviews: list[AnswerReviewed] = field(default_factory=list)
    """Every final answer judged, in order."""
    rejections: list[PlannerOutputRejected] = field(default_factory=list)
    """Every planner answer that failed its checks, with its problems."""
    stalls: list[StallDetected] = field(default_factory=list)
    budget_hit: BudgetExhaustedEvent | None = None
    suspended: RunSuspended | None = None
    recalled: PlanRecalled | None = None
    """What plan memory offered for the goal, if anything (``plan_recalled``)."""
    """Set while the run waits for a human with its process gone; cleared when it is resumed."""
    resumes: int = 0
    active_time: float = 0.0
    """Seconds the run has been running, not counting the time it was suspended, its process was
    gone, or it waited for a human's answer (the time up to an ``approval_decided`` event)."""
    last_at: float = 0.0
    """The latest ``at`` of the events so far (a clock that went back, or an answer stamped by
    another machine's clock, never moves it back)."""
    stop: StopReason | None = None
    answer: str | None = None
    answer_provenance: Provenance | None = None
    """The final answer's label (None: no answer, or an older log)."""
    withheld: tuple[str, ...] = ()
    """The steps whose untrusted output was withheld from the answer (``*``: all of it)."""
    plan_reads: dict[int, tuple[Source, ...]] = field(default_factory=dict)
    """For each plan version whose planning round read untrusted text: what it read."""
    round_read: tuple[Source, ...] = ()
    """The untrusted sources the planning round under way (or the last one) has read so far."""
    events: int = 0

    @classmethod
    def fold(cls, events: Iterable[Event]) -> RunState:
        state = cls()
        for e in events:
            state.apply(e)
        return state

    @property
    def finished(self) -> bool:
        return self.stop is not None

    @property
    def status(self) -> Literal["running", "waiting", "finished"]:
        if self.stop is not None:
            return "finished"
        return "waiting" if self.suspended is not None else "running"

    @property
    def plan(self) -> Plan | None:
        return self.plans[-1] if self.plans else None

    @property
    def pending_approvals(self) -> list[ApprovalRecord]:
        return [a for a in self.approvals.values() if a.approved is None]

    def last_approved_plan(self, before: int | None = None) -> Plan | None:
        """The plan a human last approved (their edit, when they made one), among the questions
        asked before log position ``before`` (None: all of them)."""
        found = None
        for rec in self.approvals.values():
            if before is not None and rec.seq >= before:
                continue
            plan = rec.approved_plan
            if plan is not None:
                found = plan
        return found

    def apply(self, event: Event) -> None:
        """Fold one event into the state."""
        self.events += 1
        at = event.at
        if at > self.last_at:
            kind = type(event)
            if self.last_at and self.suspended is None and kind is not RunResumed and kind is not ApprovalDecided:
                self.active_time += at - self.last_at
            self.last_at = at
        _HANDLERS[type(event)](self, event)

    # -- handlers, one per event kind ------------------------------------------------------

    def _run_started(self, e: RunStarted) -> None:
        self.run_id, self.goal, self.constraints = e.run_id, e.goal, e.constraints
        self.policy, self.replan, self.budget, self.tools = e.policy, e.replan, dict(e.budget), e.tools
        self.started_at = e.at
        self.run_config = e.config if isinstance(e.config, dict) else {}
        specs = self.run_config.get("tools")
        if isinstance(specs, list):
            self.tool_specs = {
                name: spec for spec in specs if isinstance(spec, dict) and isinstance(name := spec.get("name"), str)
            }

    def _model_called(self, e: ModelCalled) -> None:
        self.model_calls += 1
        self.usage = self.usage + e.usage
        self.cost += e.cost
        if e.cost:
            self.cost_by_role[e.role] = self.cost_by_role.get(e.role, 0.0) + e.cost
        if e.response is not None:
            tally = self.tallies.get(e.role)
            if tally is None:
                tally = self.tallies[e.role] = RoleTally()
            usage = e.usage
            tally.calls += 1
            tally.request_chars += e.request_chars
            tally.input_tokens += usage.input_tokens
            tally.output_tokens += usage.output_tokens
            tally.largest_input = max(tally.largest_input, usage.input_tokens)
            tally.largest_output = max(tally.largest_output, usage.output_tokens)
        if e.role == "planner" and e.response is not None:
            self.planner_model = e.answered_by or e.model
        if e.read:
            self.round_read = (*self.round_read, *(s for s in e.read if s not in self.round_read))

    def _model_attempt_failed(self, e: ModelAttemptFailed) -> None:
        self.usage = self.usage + Usage(requests=1, failed_requests=1)

    def _planning_started(self, e: PlanningStarted) -> None:
        self.planning = e
        self.heard = len(self.information)
        self.round_read = ()

    def _output_rejected(self, e: PlannerOutputRejected) -> None:
        self.repairs += 1
        self.rejections.append(e)

    def _information_added(self, e: InformationAdded) -> None:
        self.information.append(e)

    def _answer_reviewed(self, e: AnswerReviewed) -> None:
        self.reviews.append(e)

    def _plan_proposed(self, e: PlanProposed) -> None:
        self.planning = None
        self.plans.append(e.plan)
        if e.plan.author == "planner" and self.planner_model is not None:
            self.plan_models[e.plan.version] = self.planner_model
        if e.trigger == "failure":
            self.replans += 1
        if e.trigger in ("failure", "turn"):
            self.rounds_since_progress += 1
        if e.read:
            self.plan_reads[e.plan.version] = e.read
        tainted = set(e.tainted)
        in_plan = set()
        for step in e.plan.steps:
            in_plan.add(step.id)
            old = self.steps.get(step.id)
            if old is not None and (
                old.status == "succeeded" or (old.step == step and old.status in ("pending", "running"))
            ):
                if old.status != "succeeded":
                    old.tainted = step.id in tainted
                continue
            if old is not None:
                self.superseded.append(old)
            self.steps[step.id] = StepRecord(step=step, plan_version=e.plan.version, tainted=step.id in tainted)
        for sid, rec in list(self.steps.items()):
            if sid not in in_plan and rec.status == "pending":
                rec.status = "dropped"
                self.superseded.append(self.steps.pop(sid))

    def _step_streamed(self, e: StepStreamed) -> None:
        old = self.steps.get(e.step.id)
        if old is not None:
            self.superseded.append(old)
        self.steps[e.step.id] = StepRecord(step=e.step, plan_version=e.plan_version, tainted=e.tainted)

    def _approval_requested(self, e: ApprovalRequested) -> None:
        self.approvals[e.approval_id] = ApprovalRecord(
            approval_id=e.approval_id,
            subject=e.subject,
            step_id=e.step_id,
            plan_version=e.plan_version,
            reason=e.reason,
            requested_at=e.at,
            plan=e.plan,
            code=e.code,
            asked_output=e.output,
            verdict=e.verdict,
            checklist=e.checklist,
            rule=e.rule,
            args=e.args,
            budget=e.budget,
            budget_hit=self.budget_hit if e.budget is not None else None,
            provenance=e.provenance,
            violations=e.violations,
            seq=self.events,
        )

    def _approval_decided(self, e: ApprovalDecided) -> None:
        rec = self.approvals.get(e.approval_id)
        if rec is not None and rec.approved is None:
            rec.approved, rec.by, rec.decision_reason, rec.decided_at = e.approved, e.by, e.reason, e.at
            rec.choice, rec.output, rec.edited_plan = e.choice, e.output, e.edited_plan
            rec.text, rec.checklist_results = e.text, e.checklist
            if rec.subject == "budget" and e.approved and e.budget:
                rec.raised = dict(e.budget)
                self.budget.update(e.budget)
                self.budget_hit = None

    def _step_started(self, e: StepStarted) -> None:
        rec = self.steps[e.step_id]
        rec.status, rec.executor, rec.args, rec.started_at, rec.attempts = "running", e.executor, e.args, e.at, 1
        rec.idempotency_key = e.idempotency_key
        rec.provenance = e.provenance
        self.steps_started += 1
        if e.tool is not None:
            self.tool_calls += 1
            self.calls_by_tool[e.tool] = self.calls_by_tool.get(e.tool, 0) + 1

    def _attempt_failed(self, e: StepAttemptFailed) -> None:
        rec = self.steps[e.step_id]
        rec.attempt_errors.append(e.error)
        if e.retry_in is not None:
            rec.attempts = e.attempt + 1
            tool = rec.step.tool
            if tool is not None:
                self.tool_calls += 1
                self.calls_by_tool[tool] = self.calls_by_tool.get(tool, 0) + 1

    def _tool_progress(self, e: ToolProgress) -> None:
        rec = self.steps.get(e.step_id)
        if rec is not None:
            rec.progress = e

    def _plan_recalled(self, e: PlanRecalled) -> None:
        self.recalled = e

    def _plan_forecast(self, e: PlanForecast) -> None:
        self.forecasts[e.plan_version] = e.forecast
        self.over_forecast[e.plan_version] = e.over

    def _tools_changed(self, e: ToolsChanged) -> None:
        gone = set(e.removed)
        kept = [n for n in self.tools if n not in gone]
        self.tools = (*kept, *(n for spec in e.tools if (n := str(spec.get("name", ""))) and n not in kept))
        self.tool_changes.append(e)
        if self.tool_specs or e.tools:
            specs = {name: spec for name, spec in self.tool_specs.items() if name not in gone}
            specs.update({n: spec for spec in e.tools if (n := str(spec.get("name", "")))})
            self.tool_specs = specs

    def _tool_called(self, e: ToolCalled) -> None:
        self.steps[e.step_id].tool_calls.append(e)
        self.tool_calls += e.attempts
        self.calls_by_tool[e.tool] = self.calls_by_tool.get(e.tool, 0) + e.attempts

    def _step_requeued(self, e: StepRequeued) -> None:
        rec = self.steps[e.step_id]
        rec.status, rec.finished_at = "pending", None

    def _step_held(self, e: StepHeld) -> None:
        self.steps[e.step_id].status = "held"

    def _step_succeeded(self, e: StepSucceeded) -> None:
        rec = self.steps[e.step_id]
        rec.status, rec.output, rec.verdict, rec.finished_at, rec.attempts = (
            "succeeded",
            e.output,
            e.verdict,
            e.at,
            e.attempts,
        )
        rec.confidence = e.confidence
        rec.output_provenance = e.provenance
        self.outputs[e.step_id] = e.output
        self.rounds_since_progress = 0

    def _step_failed(self, e: StepFailed) -> None:
        rec = self.steps[e.step_id]
        rec.status, rec.error, rec.verdict, rec.finished_at, rec.attempts = (
            "failed",
            e.error,
            e.verdict,
            e.at,
            e.attempts,
        )
        if e.output is not None:
            rec.output = e.output
        rec.output_provenance = e.provenance
        rec.violations = e.violations
        if rec.step.tool is not None and e.started and rec.args is not None:
            key = canonical_call(rec.step.tool, rec.args)
            self.failed_calls[key] = self.failed_calls.get(key, 0) + 1

    def _step_cancelled(self, e: StepCancelled) -> None:
        rec = self.steps[e.step_id]
        rec.status, rec.finished_at, rec.cancel_reason = "cancelled", e.at, e.reason

    def _budget_exhausted(self, e: BudgetExhaustedEvent) -> None:
        self.budget_hit = e

    def _stall(self, e: StallDetected) -> None:
        self.stalls.append(e)

    def _run_suspended(self, e: RunSuspended) -> None:
        self.suspended = e

    def _run_resumed(self, e: RunResumed) -> None:
        self.suspended = None
        self.resumes += 1

    def _run_finished(self, e: RunFinished) -> None:
        self.stop, self.answer, self.finished_at, self.planning = e.stop, e.answer, e.at, None
        self.answer_provenance, self.withheld = e.answer_provenance, e.withheld
        for rec in self.steps.values():
            if rec.status == "running":
                rec.status, rec.finished_at = "cancelled", e.at


_HANDLERS: dict[type, Callable[[RunState, Any], None]] = {
    RunStarted: RunState._run_started,
    ModelCalled: RunState._model_called,
    ModelAttemptFailed: RunState._model_attempt_failed,
    PlanningStarted: RunState._planning_started,
    PlannerOutputRejected: RunState._output_rejected,
    PlanProposed: RunState._plan_proposed,
    StepStreamed: RunState._step_streamed,
    ApprovalRequested: RunState._approval_requested,
    ApprovalDecided: RunState._approval_decided,
    StepStarted: RunState._step_started,
    StepAttemptFailed: RunState._attempt_failed,
    ToolProgress: RunState._tool_progress,
    ToolsChanged: RunState._tools_changed,
    PlanRecalled: RunState._plan_recalled,
    PlanForecast: RunState._plan_forecast,
    ToolCalled: RunState._tool_called,
    StepRequeued: RunState._step_requeued,
    StepHeld: RunState._step_held,
    StepSucceeded: RunState._step_succeeded,
    StepFailed: RunState._step_failed,
    StepCancelled: RunState._step_cancelled,
    BudgetExhaustedEvent: RunState._budget_exhausted,
    StallDetected: RunState._stall,
    RunSuspended: RunState._run_suspended,
    RunResumed: RunState._run_resumed,
    InformationAdded: RunState._information_added,
    AnswerReviewed: RunState._answer_reviewed,
    RunFinished: RunState._run_finished,
}

_UNFOLDED = [kind for kind, cls in EVENT_KINDS.items() if cls not in _HANDLERS]
if _UNFOLDED:  # a kind added to the log without saying how it changes the state
    raise TypeError(f"RunState has no handler for the event kinds {', '.join(_UNFOLDED)}")
