"""Sealed planning in a run: the final answer filled in from the plan's answer template, with no
planner call, and the template carried from one plan version to the next.

A sealed planner writes the answer with its plan, as a template over the steps' outputs
(``{{step_id}}``, ``{{step_id.field.0}}``); once every step has finished, the run fills it in from
the log's outputs — a pure function of the log, so a resumed or replayed run gives the same
answer. A plan with no template answers with its last step's output (``{{last_step_id}}``). Each
value is cut to :data:`~planexec.plan.ANSWER_VALUE_CHARS` characters, all of them together to
:data:`~planexec.plan.ANSWER_CHARS`; text an output brings in is never read as a placeholder. A
template that cannot be filled (a step with no output, a path an output lacks) stops the run with
the error code ``answer_template``, saying which placeholder and why.
"""

from __future__ import annotations

from collections.abc import Collection

from planexec._util.clip import clip
from planexec.errors import BindingError
from planexec.log import RunState
from planexec.plan import ANSWER_CHARS, ANSWER_VALUE_CHARS, Plan, PlanDraft, fill_template

__all__ = ["AnswerUnfilled", "carried_answer", "default_template", "sealed_answer"]


class AnswerUnfilled(Exception):
    """A sealed plan's answer template cannot be filled in from the outputs."""


def default_template(plan: Plan) -> str | None:
    """The template of a plan that gives none: its last step's whole output (None: no steps)."""
    return "{{" + plan.steps[-1].id + "}}" if plan.steps else None


def sealed_answer(state: RunState) -> str:
    """The final answer of a sealed run whose steps have all finished: the plan in force's answer
    template (else its last step's output) filled in from the outputs. Raises
    :class:`AnswerUnfilled` saying which placeholders cannot be filled, and why."""
    plan = state.plan
    template = None if plan is None else plan.answer if plan.answer is not None else default_template(plan)
    if template is None:
        raise AnswerUnfilled("the run has no plan step to answer from")
    try:
        return fill_template(template, state.outputs, max_value_chars=ANSWER_VALUE_CHARS, max_chars=ANSWER_CHARS)
    except BindingError as e:
        which = "; ".join(f"{p.where}: {p.message}" for p in e.problems)
        raise AnswerUnfilled(clip(f"the plan's answer template cannot be filled in: {which}", 2_000)) from None


def carried_answer(draft: PlanDraft, state: RunState, workflows: Collection[str]) -> str | None:
    """The answer template of the plan version ``draft`` makes: its own, else (a patch that gives
    none) the plan in force's — unless the draft hands off to a workflow, whose output is the answer."""
    if draft.answer is not None:
        return draft.answer
    if any(s.tool is not None and s.tool in workflows for s in draft.steps):
        return None
    plan = state.plan
    return plan.answer if plan is not None else None
