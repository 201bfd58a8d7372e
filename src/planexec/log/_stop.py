"""Why a run ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planexec.trust import Violation

__all__ = ["BudgetName", "ErrorCode", "EscalationCode", "StopKind", "StopReason"]

StopKind = Literal[
    "goal_met",
    "budget_exhausted",
    "max_replans",
    "stalled",
    "rejected",
    "refused",
    "escalated",
    "error",
    "cancelled",
    "waiting",
]
"""``refused``: a call broke a trust rule and was not made (the stop's ``violations`` say which
tool, argument, rule and label). ``escalated``: the planner could not go on by itself — see
:data:`EscalationCode` — and either nobody could be asked or a human chose to stop. ``waiting``
is not an end: the run is saved, waiting for a human's answer; resume it after."""

EscalationCode = Literal["unknown_tool", "low_confidence", "planner_gave_up", "clarification_needed", "answer_rejected"]
"""Why a run was escalated: ``unknown_tool``: the planner chose a tool that does not exist;
``low_confidence``: the planner's confidence was under the run's floor; ``planner_gave_up``: the
planner said the goal cannot be met; ``clarification_needed``: the planner asked the user a
question and nobody can answer; ``answer_rejected``: the final answer failed its review as often
as allowed."""

BudgetName = Literal[
    "model_calls", "input_tokens", "output_tokens", "cost", "wall_time", "tool_calls", "steps", "replans"
]

ErrorCode = Literal[
    "log_failed",
    "tool_crashed",
    "model_crashed",
    "planner_failed",
    "planner_output",
    "step_failed",
    "unrunnable",
    "answer_template",
    "usage",
    "internal",
]
"""What kind of error ended a run whose stop kind is ``error``:

``log_failed``: the run log could not be written (the store failed, or a value could not be stored);
``tool_crashed``: a tool raised something that is not an ordinary error (``KeyboardInterrupt``,
``SystemExit``, ``GeneratorExit``, a bare ``BaseException``, a ``CancelledError`` of its own);
``model_crashed``: a model (or a human approver's callback) did the same;
``planner_failed``: the planner's model call failed; ``planner_output``: the planner's output was
still invalid after every repair allowed; ``step_failed``: a step failed and replanning is off;
``unrunnable``: steps of the plan can never start; ``answer_template``: a sealed plan's answer
template could not be filled in from the outputs (a step with no output, a path an output lacks);
``usage``: planexec was used wrongly during the
run (a test double's script ran out, an edited plan failed its checks); ``internal``: a defect.
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class StopReason:
    """Why a run ended: its kind, a readable detail, which budget when one ran out, and which kind
    of error when the kind is ``error``."""

    kind: StopKind
    detail: str = ""
    budget: BudgetName | None = None
    code: ErrorCode | EscalationCode | None = None
    """For ``error``: which kind of error; for ``escalated``: why."""
    violations: tuple[Violation, ...] = ()
    """For ``refused``: the rules the refused call broke."""

    @property
    def ok(self) -> bool:
        return self.kind == "goal_met"

    def __str__(self) -> str:
        which = f" ({self.budget})" if self.budget else f" ({self.code})" if self.code else ""
        return f"{self.kind}{which}: {self.detail}" if self.detail else f"{self.kind}{which}"
