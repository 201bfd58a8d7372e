"""What a human is shown: one view model per question, folded from a run's log, that every
surface renders alike — the CLI (its tables and ``--json``), the terminal prompt and approver
callbacks, the HTTP API (its OpenAPI schema, the web page, the TypeScript client) and the MCP tools.

A :class:`QuestionView` carries the goal and constraints; for a step, its description, tool,
effect as the engine applies it and its arguments as they will be sent (bindings resolved,
redacted as the store redacts, long values cut with their size); for a plan, every step with its
arguments or the bindings they will take, its changes since the plan a human last approved and its
cost forecast; the result or answer under review; the cap a run reached and what it spent; the
rule that asked (a reason code) and why in words; and what each answer does. Each argument
carries its trust label (where it came from, whether the run trusts it), and a step's question
the trust rules its call breaks (see :mod:`planexec.trust`).
"""

from planexec.views._diff import FieldChange, PlanDiff, StepChange, diff_plans
from planexec.views._effects import effect_of
from planexec.views._models import (
    AnsweredView,
    AnswerOption,
    ArgumentView,
    BudgetView,
    CheckView,
    EffectView,
    FieldChangeView,
    ForecastView,
    PlanChangeView,
    PlanView,
    ProvenanceView,
    QuestionKind,
    QuestionView,
    RangeView,
    SourceView,
    SpendView,
    StepView,
    ViolationView,
)
from planexec.views._question import about, forecast_view, plan_view, question_view, rule_of, step_view
from planexec.views._text import REASON_SHOWN, argument_text, provenance_text, question_lines, step_lines
from planexec.views._trust import provenance_view, violation_view

__all__ = [
    "REASON_SHOWN",
    "AnswerOption",
    "AnsweredView",
    "ArgumentView",
    "BudgetView",
    "CheckView",
    "EffectView",
    "FieldChange",
    "FieldChangeView",
    "ForecastView",
    "PlanChangeView",
    "PlanDiff",
    "PlanView",
    "ProvenanceView",
    "QuestionKind",
    "QuestionView",
    "RangeView",
    "SourceView",
    "SpendView",
    "StepChange",
    "StepView",
    "ViolationView",
    "about",
    "argument_text",
    "diff_plans",
    "effect_of",
    "forecast_view",
    "plan_view",
    "provenance_text",
    "provenance_view",
    "question_lines",
    "question_view",
    "rule_of",
    "step_lines",
    "step_view",
    "violation_view",
]
