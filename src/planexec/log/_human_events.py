"""Humans' events: the questions a run asks them, their answers, and final answers judged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from planexec.executor import Verdict
from planexec.log._stop import BudgetName, EscalationCode
from planexec.plan import Plan
from planexec.trust import Provenance, Violation

__all__ = [
    "AnswerReviewed",
    "ApprovalDecided",
    "ApprovalRequested",
    "ApprovalSubject",
    "ChecklistResult",
    "EffectChoice",
    "QuestionRule",
]


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
class AnswerReviewed:
    """A final answer was judged before the run could end with it."""

    kind: Literal["answer_reviewed"] = "answer_reviewed"
    at: float
    answer: str
    passed: bool
    reviewer: Literal["checks", "rubric", "human"]
    problems: tuple[str, ...] = ()
    """Why it failed: each failed check, the rubric's reason, or the checklist items failed."""
