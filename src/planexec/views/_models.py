"""The view models: what a human is shown of a run's questions, typed so that every surface —
the CLI, its JSON, the HTTP API and its OpenAPI schema, the web page, the TypeScript client and the
MCP tools — renders the same content, made in one place (:mod:`planexec.views._question`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "AnswerOption",
    "AnsweredView",
    "ArgumentView",
    "BudgetView",
    "CheckView",
    "EffectView",
    "FieldChangeView",
    "ForecastView",
    "PlanChangeView",
    "PlanView",
    "ProvenanceView",
    "QuestionKind",
    "QuestionView",
    "RangeView",
    "SourceView",
    "SpendView",
    "StepView",
    "ViolationView",
]

QuestionKind = Literal["plan", "step", "effect", "question", "escalation", "review", "answer", "budget"]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class EffectView(_View):
    """How the engine treats a step's effect — what it enforces, not only what the plan claims."""

    changes_world: bool
    """Whether running the step may change something outside the run (the engine treats it as a
    write: its intent is logged first, it is never repeated silently)."""
    label: str
    """In words: ``read``, or ``write`` with ``sensitive``, ``requires approval``, ``idempotent``."""
    declared: Literal["read", "write"]
    """What the plan says of the step (a tool's own flags win when the plan says ``read``)."""
    sensitive: bool
    requires_approval: bool
    idempotent: bool
    """Calling it again with the same idempotency key has no further effect (the tool says so)."""
    through: list[str] = []
    """For a model-driven step: the tools it may call that change the world."""


class SourceView(_View):
    """One place a value came from (see ``planexec.trust.Source``)."""

    kind: Literal["goal", "constraint", "config", "tool", "model", "planner", "memory", "session", "human"]
    trusted: bool
    step: str | None = None
    """For a tool's or a model's output: the step it came from."""
    tool: str | None = None
    call: str | None = None
    text: str
    """In words: ``tool:fetch (fetch_page)``, ``planner after reading untrusted text``."""


class ProvenanceView(_View):
    """Where a value came from, and whether the run trusts it (see ``planexec.trust.Provenance``)."""

    trusted: bool
    text: str
    """In words: ``untrusted: tool:fetch (fetch_page)``, ``trusted: planner``."""
    sources: list[SourceView]
    confirmed_by: str | None = None
    """The human who confirmed the value, when one did."""


class ViolationView(_View):
    """A trust rule an argument of a call breaks, and why."""

    argument: str
    """The argument's name; ``*`` for the call itself."""
    rule: Literal["argument_rule", "untrusted_effect"]
    """``argument_rule``: a rule the developer set on the tool; ``untrusted_effect``: a call that
    changes the world would take an untrusted value."""
    requires: str
    """What the rule requires, in words."""
    reason: str
    """Why the argument fails it."""
    provenance: ProvenanceView
    text: str
    """The whole violation on one line."""


class ArgumentView(_View):
    """One argument of a step, as it will be sent: bindings resolved, redacted as the store
    redacts, a long value cut (``cut``) with its full size in ``size``."""

    name: str
    value: Any
    """The value (a cut value is its JSON text, cut, with a marker)."""
    text: str
    """The value on one line, for tables."""
    binding: str | None = None
    """The binding the plan wrote (``${quote.total}``), when the value comes from an earlier step."""
    resolved: bool = True
    """False when the value is not known yet (its step has not run): ``value`` is the binding."""
    size: int
    """Characters of the whole value as JSON."""
    cut: bool = False
    provenance: ProvenanceView | None = None
    """Where the value comes from and whether the run trusts it (None: not known yet, or a run
    logged before labels)."""


class StepView(_View):
    """A step as a human decides about it."""

    id: str
    description: str
    tool: str | None
    executor: str | None
    runs_on: str
    """``tool transfer``, or ``model (drafting)`` for a model-driven step."""
    arguments: list[ArgumentView]
    depends_on: list[str]
    effect: EffectView
    plan_version: int | None = None
    status: str | None = None
    """Where the step stands now (``pending``, ``succeeded``, …), when it is in the run."""
    change: Literal["added", "changed", "kept"] | None = None
    """Against the plan a human last approved (or the first plan): new, changed or the same."""
    changed_fields: list[str] = []
    expected: str | None = None
    allowed_tools: list[str] = []
    idempotency_key: str | None = None
    """For a side-effecting call under way: the key it was sent with."""
    tainted: bool = False
    """A planner wrote the step after reading untrusted text: its values, and the call it asks
    for, are untrusted."""
    output_provenance: ProvenanceView | None = None
    """For a step that ran: the label of its output."""


class FieldChangeView(_View):
    step_id: str
    field: str
    before: Any
    after: Any


class PlanChangeView(_View):
    """What a plan version changes against a base: the plan a human last approved, or (when
    nobody approved one) the version before it."""

    base_version: int | None
    """None: there is no earlier plan; everything is new."""
    base_approved: bool
    """Whether a human approved the base (approving now means approving this diff)."""
    added: list[str]
    removed: list[StepView]
    changed: list[FieldChangeView]
    kept: list[str]
    summary: str


class RangeView(_View):
    low: float
    high: float


class ForecastView(_View):
    """What a plan version is expected to cost from when it was proposed to the run's end."""

    planner_calls: RangeView
    executor_calls: RangeView
    tool_calls: RangeView
    input_tokens: RangeView
    output_tokens: RangeView
    cost: RangeView
    """US dollars at the providers' prices (models without a price count as free: ``unpriced``)."""
    unpriced: list[str]
    basis: list[str]
    """How the figures were made."""
    over: list[str]
    """The caps the forecast passes (with what is left of them)."""
    summary: str


class PlanView(_View):
    """A plan version put to a human: every step, the changes since the last yes, the forecast."""

    version: int
    author: str
    reason: str
    steps: list[StepView]
    changes: PlanChangeView
    forecast: ForecastView | None = None
    world_changing: list[str]
    """Ids of the steps that may change the world."""
    as_written: dict[str, Any]
    """The plan as its author wrote it (a ``Plan`` as JSON, redacted), to edit before approving."""


class CheckView(_View):
    name: str
    passed: bool
    detail: str


class SpendView(_View):
    """What a run has spent, and on what."""

    model_calls: int
    tool_calls: int
    steps: int
    input_tokens: int
    output_tokens: int
    cost: float
    by_role: dict[str, float]
    """Cost by model role (planner, executor, judge)."""
    by_tool: dict[str, int]
    """Calls by tool."""


class BudgetView(_View):
    """The cap a run reached, what it has spent, and what the rest of its plan is expected to cost."""

    name: str
    limit: float
    used: float
    needed: float
    caps: dict[str, float | None]
    """Every cap of the run as it is now (None: no cap)."""
    spent: SpendView
    rest: ForecastView | None = None
    """The forecast of what the rest of the plan costs, when there is one."""


class AnswerOption(_View):
    """One way to answer, and what it will do."""

    decision: Literal["approve", "reject", "answer"]
    choice: str | None = None
    label: str
    does: str
    """What the run does when the question is answered this way."""
    needs: list[str] = []
    """What the answer must carry: ``text``, ``reason``, ``output``, ``budget`` or ``checklist``;
    ``plan`` when an edited plan may be given instead."""


class AnsweredView(_View):
    approved: bool
    by: str
    at: float | None
    choice: str | None = None
    reason: str = ""
    text: str | None = None
    edited: bool = False
    raised: dict[str, float | None] | None = None


class QuestionView(_View):
    """A question to a human, with everything the decision needs: the goal, what is asked about
    (the step with its resolved arguments and effect, the plan as a graph with its changes and
    forecast, the result under review, the cap reached), why it is asked, and what each answer
    does."""

    run_id: str
    question_id: str
    kind: QuestionKind
    title: str
    about: str
    asked_at: float
    seq: int
    """The question's position in the run's log."""
    goal: str
    constraints: list[str]
    rule: str
    """The rule that asked, as a reason code (see ``planexec.log.QuestionRule``)."""
    why: str
    """Why it is asked, in words."""
    reason: str
    """The run's own words when it asked."""
    code: str | None = None
    """For an escalation: why the planner could not go on."""
    step: StepView | None = None
    plan: PlanView | None = None
    under_review: Any = None
    """For a review: the step's result; for an answer: the final answer (cut when long)."""
    under_review_size: int | None = None
    failed_checks: list[CheckView] = []
    checklist: list[str] = []
    budget: BudgetView | None = None
    answers: list[AnswerOption]
    choices: list[str] = []
    """For an uncertain effect or an escalation: the ``choice`` values an approval takes."""
    violations: list[ViolationView] = []
    """For a step: the trust rules its call breaks, each with the argument's label."""
    answered: AnsweredView | None = None
