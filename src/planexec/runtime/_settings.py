"""Typed settings for a run: limits, approvals and the run context (time, ids, randomness)."""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from planexec.errors import Problem, UsageError
from planexec.executor import Verdict
from planexec.log import BudgetName, ChecklistResult, EffectChoice, QuestionRule
from planexec.models import ModelSettings
from planexec.plan import OnFail, Plan, Step
from planexec.trust import Provenance, Violation
from planexec.views import QuestionView

if TYPE_CHECKING:
    from planexec.models import Model

__all__ = [
    "AnswerCheck",
    "AnswerReview",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "Approver",
    "ChecklistResult",
    "Escalation",
    "Limits",
    "RunContext",
]


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Where a run gets time, ids and randomness, so that tests and replays can fix them."""

    clock: Callable[[], float] = time.time
    new_id: Callable[[], str] = _new_id
    seed: int | None = None

    def rng(self) -> random.Random:
        return random.Random(self.seed)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How a run is bounded besides its budget.

    ``max_concurrency``: steps running at once. ``stall_rounds``: planning rounds without a newly
    finished step before the run counts as stalled. ``repeat_rounds``: planning rounds in which the
    same call may succeed with the same output before the run counts as stalled.
    ``confidence_threshold``: a sensitive step below it is not run without a human's approval.
    ``max_output_chars``: the largest output (or arguments) a step, a tool call or a human may
    hand the run, measured as JSON text; a larger one fails its step. ``max_reply_chars``: the
    largest model reply accepted; a larger one fails the call. ``cancel_grace``: seconds a
    cancelled step is given to finish before it is abandoned.
    """

    max_concurrency: int = 16
    over_forecast: Literal["replan", "ask", "run"] = "replan"
    """A plan whose cost forecast passes a cap (its low end passes what is left of ``cost``, the
    token caps, ``model_calls`` or ``tool_calls``): ``replan`` refuses it as a plan problem (the
    planner is asked for a cheaper plan, within its repairs); ``ask`` asks a human whether to run
    it (and refuses it when nobody can be asked); ``run`` runs it (the caps still stop the run)."""
    on_budget: Literal["auto", "ask", "stop"] = "auto"
    """When the run reaches a cap: ``ask`` a human whether to raise it (the run waits — or, with
    questions kept in the log, suspends durably — and goes on where it stopped once the caps are
    raised, or stops ``budget_exhausted`` on a no); ``stop`` at once; ``auto`` asks when an
    approver callback is configured, and stops otherwise. Plans larger than the step cap and
    plans no cheaper plan replaced are not asked about (they stop as before)."""
    stall_rounds: int = 3
    repeat_rounds: int = 3
    confidence_threshold: float = 0.6
    max_output_chars: int = 1_000_000
    max_reply_chars: int = 1_000_000
    cancel_grace: float = 1.0

    def __post_init__(self) -> None:
        problems = []
        for name, least in (
            ("max_concurrency", 1),
            ("stall_rounds", 1),
            ("repeat_rounds", 2),
            ("max_output_chars", 1),
            ("max_reply_chars", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                problems.append(
                    Problem(code="limits", where=name, message=f"must be a whole number of at least {least}")
                )
        if self.on_budget not in ("auto", "ask", "stop"):
            problems.append(Problem(code="limits", where="on_budget", message="must be 'auto', 'ask' or 'stop'"))
        if self.over_forecast not in ("replan", "ask", "run"):
            problems.append(Problem(code="limits", where="over_forecast", message="must be 'replan', 'ask' or 'run'"))
        grace = self.cancel_grace
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace < math.inf:
            problems.append(
                Problem(code="limits", where="cancel_grace", message="must be a finite number of seconds >= 0")
            )
        threshold = self.confidence_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            problems.append(Problem(code="limits", where="confidence_threshold", message="must be from 0 to 1"))
        if problems:
            raise UsageError("invalid limits", problems)


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """What a human is asked (``subject`` says what about):

    - ``plan`` / ``step``: approve a plan version or a step before it runs;
    - ``effect``: what to do about a side-effecting call that may or may not have happened;
    - ``question``: the planner asks the user ``reason``; answer with ``text``;
    - ``escalation``: the planner's output cannot be acted on (``code`` says why): give guidance
      (``choice="guidance"`` with ``text``), let it plan again (``choice="replan"``), or refuse to stop
      the run;
    - ``review``: a step's result (``output``) failed its checks (``verdict``): accept or refuse it;
    - ``answer``: the final answer (``output``): approve or refuse it, ticking each ``checklist`` item;
    - ``budget``: the run reached its ``budget`` cap: approve with raised caps
      (``ApprovalDecision(budget={...})``) to go on, or refuse to stop the run.

    ``view`` is everything a human needs to decide, as every surface shows it (the goal, the step
    with its arguments as they will be sent and its effect, the plan with its changes since the
    last yes and its cost forecast, why it is asked and what each answer does), redacted as the
    run's store redacts: render it rather than the raw fields.
    """

    approval_id: str
    run_id: str
    subject: Literal["plan", "step", "effect", "question", "escalation", "review", "answer", "budget"]
    reason: str
    plan: Plan | None = None
    step: Step | None = None
    code: str | None = None
    output: Any = None
    verdict: Verdict | None = None
    checklist: tuple[str, ...] = ()
    rule: QuestionRule | None = None
    """The rule that asks, as a reason code."""
    args: dict[str, Any] | None = None
    """For a step: its arguments as they will be sent."""
    budget: BudgetName | None = None
    """For a budget question: the cap the run reached."""
    provenance: Mapping[str, Provenance] | None = None
    """For a step: where each argument comes from, and whether the run trusts it."""
    violations: tuple[Violation, ...] = ()
    """For a step: the trust rules its call breaks (the developer's, and the default rule on
    untrusted values steering effects), when they are why it is asked."""
    view: QuestionView | None = None


@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    """A human's answer. For a plan, ``edited_plan`` approves a changed plan instead; for an
    uncertain effect, ``choice`` says what to do (``output`` is the step's result when ``done``);
    for a question, ``text`` is the answer; for an escalation, ``choice`` is ``guidance`` (with
    ``text``) or ``replan``, and a refusal stops the run; for a final answer, ``checklist`` ticks or
    fails each item (a refusal sends the answer back to the planner with the notes)."""

    approved: bool
    reason: str = ""
    by: str = "human"
    choice: EffectChoice | None = None
    output: Any = None
    edited_plan: Plan | None = None
    text: str | None = None
    checklist: tuple[ChecklistResult, ...] = ()
    budget: Mapping[str, float | int | None] | None = None
    """For a budget question: the caps to raise, by name (``{"cost": 2.0}``; None lifts a cap)."""


Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision | bool]]


@dataclass(frozen=True, kw_only=True)
class Approvals:
    """Who approves, and what. ``approver``: a callback asked in this process; ``deferred``: no
    callback, questions wait in the run's log. ``plan``: every plan version; ``steps``:
    ``sensitive`` (steps whose tool is sensitive or whose policy is ``always``), ``all``, or
    ``none``. Uncertain effects after a restart are always asked, whatever these say."""

    approver: Approver | None = None
    deferred: bool = False
    """With no approver: save each question in the run's log, to be answered later from anywhere
    (``Run.decide``, ``planexec approve``). Needs a store. Off: with no approver, steps that need
    a human are refused."""
    plan: bool = False
    steps: Literal["sensitive", "all", "none"] = "sensitive"
    when_waiting: Literal["suspend", "wait"] = "suspend"
    """When only questions in the log hold the run up: ``suspend`` saves it and ends this
    process's part (resume it after answering); ``wait`` keeps waiting, reading the store for
    answers other processes write."""
    poll_interval: float = 0.5
    """With ``wait``: how often, at the longest, the store is read for answers given by other
    processes (the store wakes the run as soon as it hears one: see ``RunStore.wait_for_events``)."""
    patched_effects: bool = True
    """Whenever a human can be asked: a step that changes the world, added or changed by a plan
    version after the first (a patch the planner made after reading the run's results), is asked
    about before it runs, as if its tool were sensitive — even with plan approval off. False lets
    such steps run as the other gates say."""


NO_APPROVALS = Approvals()


AnswerCheck = Callable[[str], bool | str | Awaitable[bool | str | None] | None]
"""A deterministic check of a final answer: True or None accepts it; False or a string (why)
refuses it. It runs in a worker thread (an ``async def`` check is awaited), so a check that never
returns is ended by the run's wall-time budget or its cancellation; anything else it returns, or
raises, refuses the answer and says so."""


@dataclass(frozen=True, kw_only=True)
class AnswerReview:
    """The final answer's own acceptance: it must pass before a run ends ``goal_met``.

    ``checks``: deterministic checks, in order; ``rubric`` with ``judge``: a model grades the answer
    against the rubric, asked with ``judge_settings``; ``checklist``: a human reviewer ticks or
    fails each item (needs an approver, or deferred approvals with a store). Each reviewer that is
    set must pass, in that order. A
    refused answer goes back to the planner with the reasons, at most ``max_rounds`` times; then the
    run stops ``escalated`` (``answer_rejected``). With a review set, a plan with no steps may end
    the run, when its answer passes.
    """

    checks: Sequence[AnswerCheck] = ()
    rubric: str | None = None
    judge: Model | str | None = None
    checklist: Sequence[str] = ()
    max_rounds: int = 2
    judge_settings: ModelSettings = field(default_factory=ModelSettings)

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.judge_settings, ModelSettings):
            problems.append(Problem(code="review", where="judge_settings", message="must be a ModelSettings(...)"))
        if (self.rubric is None) != (self.judge is None):
            problems.append(Problem(code="review", where="rubric", message="a rubric and a judge go together"))
        if self.rubric is not None and not self.rubric.strip():
            problems.append(Problem(code="review", where="rubric", message="is empty"))
        checklist: Sequence[object] = self.checklist
        if isinstance(checklist, str) or not isinstance(checklist, Sequence):
            problems.append(Problem(code="review", where="checklist", message="must be a list of items (text)"))
            checklist = ()
        seen: set[str] = set()
        for i, item in enumerate(checklist):
            if not isinstance(item, str) or not item.strip():
                problems.append(Problem(code="review", where=f"checklist[{i}]", message="must be non-empty text"))
            elif item in seen:
                problems.append(Problem(code="review", where=f"checklist[{i}]", message=f"{item!r} is listed twice"))
            else:
                seen.add(item)
        checks: Sequence[object] = self.checks
        if isinstance(checks, str) or not isinstance(checks, Sequence):
            problems.append(Problem(code="review", where="checks", message="must be a list of functions"))
            checks = ()
        for i, check in enumerate(checks):
            if not callable(check):
                problems.append(Problem(code="review", where=f"checks[{i}]", message="is not callable"))
        rounds = self.max_rounds
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            problems.append(Problem(code="review", where="max_rounds", message="must be a whole number of at least 1"))
        if not (self.checks or self.rubric or self.checklist):
            problems.append(Problem(code="review", where="review", message="set checks, a rubric or a checklist"))
        if problems:
            raise UsageError("invalid answer review", problems)


@dataclass(frozen=True, kw_only=True)
class Escalation:
    """When the planner cannot go on by itself, and what happens then.

    - An unknown tool in the planner's output: a human, when one can be asked, gives guidance, lets
      the planner try again, or stops the run; with nobody to ask, the planner gets one repair and
      then the run stops ``escalated``. The same holds for a planner that gives up, or asks the
      user a question nobody can answer.
    - ``confidence_floor``: a planner's turn (or plan) whose confidence is under it is not acted on;
      ``on_low_confidence="ask"`` asks a human (stop when nobody can be asked), ``"stop"`` stops the
      run ``escalated``. This is not the gate on sensitive tools (``Limits.confidence_threshold``).
    - ``on_fail``: when a step's result fails its acceptance checks: ``patch`` (the planner patches
      the plan), ``retry`` (the step runs again up to ``retries`` times when that is safe, then
      patch), ``review`` (a human accepts or refuses the result; with nobody to ask, patch). A plan
      may set ``on_fail`` per step, except that it cannot lift ``review``.
    """

    confidence_floor: float | None = None
    on_low_confidence: Literal["ask", "stop"] = "ask"
    on_fail: OnFail = "patch"
    retries: int = 1

    def __post_init__(self) -> None:
        problems = []
        floor = self.confidence_floor
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 1):
            problems.append(Problem(code="escalation", where="confidence_floor", message="must be from 0 to 1"))
        if self.on_low_confidence not in ("ask", "stop"):
            problems.append(Problem(code="escalation", where="on_low_confidence", message="must be 'ask' or 'stop'"))
        if self.on_fail not in ("patch", "retry", "review"):
            problems.append(Problem(code="escalation", where="on_fail", message="must be 'patch', 'retry' or 'review'"))
        retries = self.retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            problems.append(Problem(code="escalation", where="retries", message="must be a whole number of at least 1"))
        if problems:
            raise UsageError("invalid escalation rules", problems)
