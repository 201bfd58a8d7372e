"""Events: the one source of truth of a run. Every state change is appended here first.

Events are frozen, keyword-only values tagged by ``kind`` and serialized by one shared adapter,
so that the store, the API, the CLI and replay all read the same thing.

Event schema changelog (bump ``EVENT_SCHEMA_VERSION`` and add a line on every change; keep a
fixture log of every version loadable in the tests):
    1: first version.
    2: run_suspended, run_resumed, step_requeued and step_held (durable runs, crash recovery and
       humans); step_started records the idempotency key; approval_requested carries the proposed
       plan and may concern an uncertain effect; approval_decided may carry a choice, an output or
       an edited plan. Version 1 logs load unchanged.
    3: step_streamed (a step started while its plan was still streaming). Older logs load unchanged.
    4: run_finished's stop may carry an error code; budget_exhausted records what the refused call
       or step needed (``used`` is what was actually spent); stall_detected has the rules
       repeated_success and ping_pong; plans may be plan schema 2 (``allowed_tools``); values that
       are not JSON (NaN, Infinity) are refused, never written as null. Older logs load unchanged.
    5: questions to humans gain the subjects question (the planner asks the user), escalation
       (a reason ``code``: unknown_tool, low_confidence, planner_gave_up), review (a step's result
       that failed its checks, with ``output`` and ``verdict``) and answer (the final answer, with
       a ``checklist``); approval_decided may carry ``text`` (an answer, or guidance) and checklist
       results, and the choices guidance and replan; information_added (the user told the run
       something new); answer_reviewed (a final answer judged); step_succeeded may carry the
       executor's ``confidence``; planning rounds may be triggered by information or a review;
       runs may stop ``escalated``; plans may be plan schema 3 (``on_fail``). Older logs load
       unchanged.
    6: model_attempt_failed (each failed attempt of a model call: its status, its error, the wait
       before the next attempt and the wait the provider asked for); model_called may name the
       model that answered for a fallback list (``answered_by``); usage counts failed requests
       (``failed_requests``), reasoning tokens (``reasoning_tokens``) and tokens written to a
       prompt cache (``cache_write_tokens``). Older logs load unchanged.
    7: tool_progress (a tool said how far it has come: an MCP server's progress notifications,
       or a tool calling ``ToolContext.report``). Older logs load unchanged.
    8: tools_changed (the tools a run may use changed while it ran: an MCP server said its tools
       changed and listed them again; the event holds the new or redefined tools' specs and the
       names of the tools gone). Older logs load unchanged.
    9: run_started may carry ``trace``, the run's trace context (W3C ``traceparent``) when it was
       traced, so that a run resumed elsewhere continues the same trace. Older logs load unchanged.
    10: plan_recalled (plan memory offered a remembered plan for the goal: the entry, the
       similarity, ``direct`` or ``guided`` reuse, the steps re-bound to the goal and the answer
       template); plan versions may be authored by ``memory``. Older logs load unchanged.
    11: approval_requested names the ``rule`` that asks (a reason code), carries a step's
       ``args`` as they will be sent (bindings resolved), and may be about a ``budget`` (the run
       reached a cap: raise it or stop); approval_decided may carry the raised ``budget`` caps;
       plan_forecast (what a plan version is expected to cost, and which caps it would pass).
       Older logs load unchanged.
    12: plans may be plan schema 4 (``answer``: a sealed plan's answer template); a run may stop
       with the error code ``answer_template`` (a sealed plan's answer could not be filled in from
       the outputs). Older logs load unchanged.
    13: trust labels (see :mod:`planexec.trust`): model_called records, for a planner's request,
       the untrusted sources it carried (``read``); step_started records each argument's label
       (``provenance``); step_succeeded and step_failed the label of the output (or the error's
       text); tool_called the labels of a model-driven step's call's arguments and of its output;
       plan_proposed the steps a planner wrote after reading untrusted text (``tainted``) and the
       untrusted sources that round read (``read``), step_streamed whether the step is tainted;
       approval_requested the labels of a step's arguments and the rules they break
       (``violations``, with the rules ``argument_rule`` and ``untrusted_effect``); step_failed
       and tool_called the rules a refused call broke (error kind ``untrusted``); run_finished the
       answer's label (``answer_provenance``) and may stop ``refused`` (a call broke a rule; its
       stop names the violations). Older logs load unchanged; their values carry no label.
    14: approval_requested may ask about an untrusted final answer (rule ``untrusted_answer``,
       ``TrustPolicy(answer="ask")``); run_finished names the steps whose untrusted output was
       withheld from the answer (``withheld``; ``*``: the whole answer). Older logs load unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import ConfigDict, Field, TypeAdapter

from planexec.errors import Problem
from planexec.executor import StepError, Verdict
from planexec.log._stop import BudgetName, EscalationCode, StopReason
from planexec.models import ModelResponse, Usage
from planexec.plan import Plan, Step
from planexec.trust import Provenance, Source, Violation

__all__ = [
    "EVENT_SCHEMA_VERSION",
    "AnswerReviewed",
    "ApprovalDecided",
    "ApprovalRequested",
    "BudgetExhaustedEvent",
    "ChecklistResult",
    "EscalationCode",
    "Event",
    "Forecast",
    "InformationAdded",
    "ModelAttemptFailed",
    "ModelCalled",
    "PlanForecast",
    "PlanProposed",
    "PlanRecalled",
    "PlannerOutputRejected",
    "PlanningStarted",
    "QuestionRule",
    "RunFinished",
    "RunResumed",
    "RunStarted",
    "RunSuspended",
    "StallDetected",
    "StallRule",
    "StepAttemptFailed",
    "StepCancelled",
    "StepFailed",
    "StepHeld",
    "StepRequeued",
    "StepStarted",
    "StepStreamed",
    "StepSucceeded",
    "ToolCalled",
    "ToolProgress",
    "ToolsChanged",
    "dump_event",
    "load_event",
]

EVENT_SCHEMA_VERSION = 14
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)

PlanTrigger = Literal["initial", "failure", "after_step", "turn", "human", "information", "review"]
PlanningTrigger = Literal["initial", "failure", "after_step", "turn", "finish", "information", "review"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    kind: Literal["run_started"] = "run_started"
    at: float
    run_id: str
    goal: str
    constraints: tuple[str, ...] = ()
    policy: str = "upfront"
    replan: str = "on_failure"
    budget: dict[str, float | int | None]
    tools: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    """How the run was set up, as far as data can say: tool specs, executors, limits, and for runs
    started from the command line the model strings and tool references to rebuild the agent."""
    trace: dict[str, str] = field(default_factory=dict)
    """The run's trace context (``traceparent``, ``tracestate``) when it was traced."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCalled:
    """A model answered (or failed to). The whole response is kept, so a run can be replayed."""

    kind: Literal["model_called"] = "model_called"
    at: float
    role: str
    """``planner``, ``executor`` or ``judge``."""
    purpose: str
    model: str
    step_id: str | None = None
    request_chars: int = 0
    response: ModelResponse | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    duration: float = 0.0
    answered_by: str | None = None
    """For a fallback list: the model of the list that answered."""
    read: tuple[Source, ...] = ()
    """For a planner's request: the untrusted sources whose text it carried (see
    :mod:`planexec.trust`). What the planner writes from then on in the round is untrusted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelAttemptFailed:
    """One attempt of a model call failed: ``retry_in`` seconds later the call is tried again
    (None: it is not; the call fails with this error). ``retry_after`` is the wait the provider
    asked for, when it asked."""

    kind: Literal["model_attempt_failed"] = "model_attempt_failed"
    at: float
    role: str
    purpose: str
    model: str
    step_id: str | None = None
    attempt: int
    status: int | None = None
    error: str
    retry_in: float | None = None
    retry_after: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanningStarted:
    """The planner was asked for a plan, a patch, a turn or the final answer, and why."""

    kind: Literal["planning_started"] = "planning_started"
    at: float
    trigger: PlanningTrigger
    why: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannerOutputRejected:
    """The planner's output was invalid; the problems were sent back for repair."""

    kind: Literal["planner_output_rejected"] = "planner_output_rejected"
    at: float
    attempt: int
    problems: tuple[Problem, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanProposed:
    """A new plan version passed its static checks (and approval, where asked) and is in force."""

    kind: Literal["plan_proposed"] = "plan_proposed"
    at: float
    plan: Plan
    trigger: PlanTrigger = "initial"
    cancelled: tuple[str, ...] = ()
    """In-flight steps this version made obsolete."""
    tainted: tuple[str, ...] = ()
    """The steps of this version a planner wrote after reading untrusted text (in this round or
    an earlier one): the values they hold are untrusted, and so is the call each asks for."""
    read: tuple[Source, ...] = ()
    """The untrusted sources the planning round that made this version read (empty: none)."""


StallRule = Literal["repeated_failure", "repeated_success", "ping_pong", "identical_patch", "no_progress"]
"""``repeated_failure``: the same call failed again; ``repeated_success``: the same call succeeded
with the same output in several planning rounds; ``ping_pong``: the planner alternates between two
calls that keep giving the same outputs; ``identical_patch``: the same patch again;
``no_progress``: no step finished for several planning rounds."""

ApprovalSubject = Literal["plan", "step", "effect", "question", "escalation", "review", "answer", "budget"]
"""``plan``: a plan version before it runs; ``step``: a step before it runs; ``effect``: a
side-effecting call that may or may not have happened (the process stopped during it);
``question``: the planner asks the user (answered with text); ``escalation``: the planner's output
cannot be acted on (its ``code`` says why) and a human gives guidance, lets it plan again, or stops
the run; ``review``: a step's result failed its checks and a human accepts or refuses it;
``answer``: the final answer, reviewed against a checklist before the run ends; ``budget``: the run
reached a cap (``budget`` names it): a human raises the caps and the run goes on, or it stops."""

QuestionRule = Literal[
    "plan_approval",
    "plan_over_budget",
    "tool_requires_approval",
    "step_always",
    "all_steps",
    "sensitive_tool",
    "low_confidence",
    "unapproved_change",
    "patched_effect",
    "untrusted_effect",
    "argument_rule",
    "effect_uncertain",
    "result_failed_checks",
    "answer_checklist",
    "untrusted_answer",
    "planner_question",
    "unknown_tool",
    "planner_gave_up",
    "budget_cap",
]
"""The rule that asked a question, as a reason code:

``plan_approval``: every plan version is approved (``Approvals(plan=True)``); ``plan_over_budget``:
the plan's forecast passes a cap and the run asks about such plans; ``tool_requires_approval``: the
step's tool always needs a human's yes; ``step_always``: the plan marked the step ``approval:
"always"``; ``all_steps``: every step is approved (``Approvals(steps="all")``); ``sensitive_tool``:
the step's tool is sensitive (``Approvals(steps="sensitive")``); ``low_confidence``: a sensitive
step the planner is not confident about; ``unapproved_change``: a step that changes the world, in a
plan version no human approved (with plan approval on); ``patched_effect``: a step that changes the
world, added or changed by a patch after the first plan (asked whenever a human can be asked);
``untrusted_effect``: a step that changes the world takes an untrusted value, or a planner wrote it
after reading untrusted text (``TrustPolicy(untrusted_effects=True)``, asked whenever a human can be
asked); ``argument_rule``: an argument breaks a rule the developer set on the tool
(``violations`` says which); ``effect_uncertain``: a side-effecting call under way when its process
stopped; ``result_failed_checks``: a step's result failed its acceptance checks and a human reviews
it; ``answer_checklist``: the final answer is reviewed against a checklist; ``untrusted_answer``: the
final answer holds text the run does not trust (``TrustPolicy(answer="ask")``); ``planner_question``:
the planner asks the user; ``unknown_tool``, ``low_confidence`` and ``planner_gave_up`` for
escalations (as their ``code``); ``budget_cap``: the run reached a cap."""

EffectChoice = Literal["retry", "skip", "done", "guidance", "replan"]
"""For an uncertain effect: ``retry``, ``skip`` or ``done``; for an escalation: ``guidance`` (with
``text``) or ``replan``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChecklistResult:
    """One item of a reviewer's checklist: ticked (passed) or failed, with a note."""

    item: str
    passed: bool
    note: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStreamed:
    """A step of a plan still streaming from the planner passed its checks and may start now."""

    kind: Literal["step_streamed"] = "step_streamed"
    at: float
    step: Step
    plan_version: int
    """The plan version the step will belong to once the whole plan has arrived."""
    tainted: bool = False
    """The planner wrote the step after reading untrusted text."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequested:
    kind: Literal["approval_requested"] = "approval_requested"
    at: float
    approval_id: str
    subject: ApprovalSubject
    step_id: str | None = None
    plan_version: int | None = None
    """For a plan: the version asked about; for a step or an effect: the version its record is from."""
    reason: str = ""
    plan: Plan | None = None
    """For a plan: the plan asked about, so that the question survives a restart."""
    code: EscalationCode | None = None
    """For an escalation: why the planner's output could not be acted on."""
    output: Any = None
    """For a review: the step's result; for an answer: the final answer."""
    verdict: Verdict | None = None
    """For a review: the verdict of the checks the result failed."""
    checklist: tuple[str, ...] = ()
    """For an answer: the items the reviewer ticks or fails."""
    rule: QuestionRule | None = None
    """The rule that asks (None in logs older than schema 11)."""
    args: dict[str, Any] | None = None
    """For a step: its arguments as they will be sent, every binding resolved."""
    budget: BudgetName | None = None
    """For a budget question: the cap the run reached (``budget_exhausted`` before it says by how much)."""
    provenance: dict[str, Provenance] | None = None
    """For a step: each argument's label (None in logs older than schema 13)."""
    violations: tuple[Violation, ...] = ()
    """For a step: the trust rules its call breaks, when they are why it is asked."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalDecided:
    kind: Literal["approval_decided"] = "approval_decided"
    at: float
    approval_id: str
    approved: bool
    by: str = "human"
    reason: str = ""
    choice: EffectChoice | None = None
    """For an uncertain effect: run the call again, skip the step (it fails), or mark it done."""
    output: Any = None
    """For an effect marked done: the step's output, as the human gives it."""
    edited_plan: Plan | None = None
    """For a plan: the plan the human approved instead (it becomes a version authored by a human)."""
    text: str | None = None
    """For a question: the user's answer; for an escalation: the human's guidance."""
    checklist: tuple[ChecklistResult, ...] = ()
    """For an answer: each item of the checklist, ticked or failed."""
    budget: dict[str, float | int | None] | None = None
    """For a budget question answered yes: the caps raised (by name; None lifts a cap)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Forecast:
    """What a plan version is expected to cost from the moment it is proposed to the run's end, as
    ranges (``low``, ``high``): the planner's and the executors' model calls, the tool calls, the
    tokens and the money at the providers' prices. ``unpriced`` names models with no known price
    (their calls count as free); ``basis`` says how the figures were made."""

    planner_calls: tuple[int, int]
    executor_calls: tuple[int, int]
    tool_calls: tuple[int, int]
    input_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    cost: tuple[float, float]
    unpriced: tuple[str, ...] = ()
    basis: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanForecast:
    """A plan version's cost forecast, made before it runs (and before a human is asked about it).
    ``over``: the caps the forecast passes, as far as is left of them (the low end of a range
    passing a cap counts)."""

    kind: Literal["plan_forecast"] = "plan_forecast"
    at: float
    plan_version: int
    forecast: Forecast
    over: tuple[BudgetName, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStarted:
    kind: Literal["step_started"] = "step_started"
    at: float
    step_id: str
    executor: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    """The arguments after binding resolution."""
    idempotency_key: str | None = None
    """For a tool call: the key passed to the tool, the same on every retry and after a restart."""
    provenance: dict[str, Provenance] | None = None
    """Each argument's label, as the arguments were sent (a human's yes confirms them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepAttemptFailed:
    """One attempt failed; ``retry_in`` is the backoff before the next (None: no retry)."""

    kind: Literal["step_attempt_failed"] = "step_attempt_failed"
    at: float
    step_id: str
    attempt: int
    error: StepError
    retry_in: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolsChanged:
    """The tools the run may use changed, between two planning rounds: ``tools`` are the specs of
    the tools that are new or redefined (as ``run_started`` records its tools in ``config``),
    ``removed`` the names of the tools that are gone. The next plan is checked against the tools
    as they are now; a replay uses the same."""

    kind: Literal["tools_changed"] = "tools_changed"
    at: float
    tools: tuple[dict[str, Any], ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRecalled:
    """Plan memory offered a remembered plan for the run's goal, before the first plan.

    ``entry_id``: the memory entry; ``goal``: the goal it met; ``similarity``: how alike the two
    goals are (0 to 1); ``mode``: ``direct`` (``steps`` run as the first plan, with no planner
    call, and ``answer``, a template over their outputs, is the final answer when it is set) or
    ``guided`` (the planner is shown ``steps`` as a worked example); ``bindings``: each value of
    the remembered goal replaced by the new goal's; ``why_not_direct``: for guided reuse, why the
    plan could not run as it is. A replay takes the recall from here, never from the memory."""

    kind: Literal["plan_recalled"] = "plan_recalled"
    at: float
    entry_id: str
    goal: str
    similarity: float
    mode: Literal["direct", "guided"]
    steps: tuple[Step, ...]
    answer: str | None = None
    bindings: tuple[tuple[str, str], ...] = ()
    why_not_direct: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolProgress:
    """A tool said how far its call has come: ``progress`` of ``total`` (when it knows the total),
    with a ``message``. ``call_id``: the call of a model-driven step it belongs to (None: the
    step's own tool call). A run logs a call's progress at most every ``PROGRESS_INTERVAL`` seconds
    and a step's at most ``MAX_PROGRESS_EVENTS`` times (see :mod:`planexec.runtime`)."""

    kind: Literal["tool_progress"] = "tool_progress"
    at: float
    step_id: str
    progress: float
    total: float | None = None
    message: str | None = None
    call_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCalled:
    """A tool call made by a model-driven executor inside a step."""

    kind: Literal["tool_called"] = "tool_called"
    at: float
    step_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    output: Any = None
    error: StepError | None = None
    attempts: int = 1
    duration: float = 0.0
    provenance: dict[str, Provenance] | None = None
    """Each argument's label: what the step's model had read when it asked for the call."""
    output_provenance: Provenance | None = None
    """The label of the call's output (or its error's text)."""
    violations: tuple[Violation, ...] = ()
    """For a call refused by a trust rule (error kind ``untrusted``): the rules it broke."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRequeued:
    """A step goes back to waiting to run: interrupted by a stop and safe to run again, or a human
    chose to retry an uncertain effect."""

    kind: Literal["step_requeued"] = "step_requeued"
    at: float
    step_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StepHeld:
    """A side-effecting call was under way when the process stopped and is not safe to repeat:
    the step waits for a human to retry it, skip it or mark it done."""

    kind: Literal["step_held"] = "step_held"
    at: float
    step_id: str
    approval_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StepSucceeded:
    kind: Literal["step_succeeded"] = "step_succeeded"
    at: float
    step_id: str
    output: Any
    verdict: Verdict
    attempts: int = 1
    confidence: float | None = None
    """The confidence a model-driven executor reported with its result, 0 to 1."""
    provenance: Provenance | None = None
    """The output's label (None in logs older than schema 13)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepFailed:
    kind: Literal["step_failed"] = "step_failed"
    at: float
    step_id: str
    error: StepError
    verdict: Verdict | None = None
    output: Any = None
    attempts: int = 1
    started: bool = True
    """False when the step was refused before it ran (a gate, a binding)."""
    provenance: Provenance | None = None
    """The label of the failure's text and of the output it failed with."""
    violations: tuple[Violation, ...] = ()
    """For a call refused by a trust rule (error kind ``untrusted``): the rules it broke."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCancelled:
    kind: Literal["step_cancelled"] = "step_cancelled"
    at: float
    step_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetExhaustedEvent:
    kind: Literal["budget_exhausted"] = "budget_exhausted"
    at: float
    budget: BudgetName
    limit: float
    used: float
    """What the run had actually spent of this budget when it stopped."""
    needed: float = 0.0
    """What the refused call or step (with others committed to at the same time) would have added."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StallDetected:
    kind: Literal["stall_detected"] = "stall_detected"
    at: float
    rule: StallRule
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSuspended:
    """Nothing can go on until a human answers: the run is saved and its process may exit."""

    kind: Literal["run_suspended"] = "run_suspended"
    at: float
    reason: str
    approvals: tuple[str, ...] = ()
    """The approvals it waits for."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResumed:
    """A run was picked up again from its log, in this or another process."""

    kind: Literal["run_resumed"] = "run_resumed"
    at: float
    events: int
    """How many events the log held when it was resumed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InformationAdded:
    """Someone told the run something new, or changed a constraint: the planner replans with it at
    the next safe point (finished work is kept)."""

    kind: Literal["information_added"] = "information_added"
    at: float
    text: str
    by: str = "user"
    constraint: bool = False
    """True when it is a constraint the plan must meet from now on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerReviewed:
    """A final answer was judged before the run could end with it."""

    kind: Literal["answer_reviewed"] = "answer_reviewed"
    at: float
    answer: str
    passed: bool
    reviewer: Literal["checks", "rubric", "human"]
    problems: tuple[str, ...] = ()
    """Why it failed: each failed check, the rubric's reason, or the checklist items failed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    kind: Literal["run_finished"] = "run_finished"
    at: float
    stop: StopReason
    answer: str | None = None
    answer_provenance: Provenance | None = None
    """The answer's label: a planner's answer is as trusted as the round that wrote it; a
    workflow's, as its output."""
    withheld: tuple[str, ...] = ()
    """The steps whose untrusted output was withheld from the answer (``TrustPolicy(answer=
    "withhold")``, or a human's no to it); ``*``: the whole answer was."""


Event: TypeAlias = Annotated[
    RunStarted
    | ModelCalled
    | ModelAttemptFailed
    | PlanningStarted
    | PlannerOutputRejected
    | PlanProposed
    | PlanRecalled
    | PlanForecast
    | StepStreamed
    | ApprovalRequested
    | ApprovalDecided
    | StepStarted
    | StepAttemptFailed
    | ToolProgress
    | ToolsChanged
    | ToolCalled
    | StepRequeued
    | StepHeld
    | StepSucceeded
    | StepFailed
    | StepCancelled
    | BudgetExhaustedEvent
    | StallDetected
    | RunSuspended
    | RunResumed
    | InformationAdded
    | AnswerReviewed
    | RunFinished,
    Field(discriminator="kind"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(ser_json_inf_nan="constants"))
"""Keeps NaN and Infinity as they are when dumping, so that the store refuses them instead of
silently writing null."""
EVENTS_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def dump_event(event: Event) -> dict[str, Any]:
    """An event as JSON data, in an envelope that names the schema version."""
    return {"v": EVENT_SCHEMA_VERSION, "event": EVENT_ADAPTER.dump_python(event, mode="json")}


def load_event(data: dict[str, Any]) -> Event:
    """Load an event dumped by any schema version so far."""
    version = data.get("v")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ValueError(f"unknown event schema version {version!r} (this planexec reads {readable})")
    return EVENT_ADAPTER.validate_python(data["event"])
