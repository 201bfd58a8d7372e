"""The checks a planner's answer meets before the run acts on it, besides its shape: a plan's (or
patch's) and a turn's."""

from __future__ import annotations

from planexec.errors import Problem
from planexec.plan import PlanDraft, Turn, capped, check_steps, template_problems
from planexec.planner._context import PlanningContext
from planexec.planner._handoff import take_handoff

__all__ = ["draft_problems", "turn_problems"]

_EMPTY = Problem(
    code="empty_plan",
    where="steps",
    message="no step has been tried: plan the work that meets the goal (an answer with no work done "
    "is accepted only when the run reviews its final answer)",
)


def draft_problems(draft: PlanDraft, ctx: PlanningContext, *, sealed: bool) -> list[Problem]:
    """What keeps a plan (or patch) from being acted on: its steps' static checks, a sealed
    answer template's, a hand-off's, and the run's own checks of the plan."""
    answer = _answer_problems(draft, ctx) if sealed else []
    handoff = take_handoff(draft, ctx.checks, ctx.state)
    if handoff:
        return capped([*handoff, *answer, *check_steps(draft.steps, ctx.current_checks())])
    if answer:
        return capped([*answer, *check_steps(draft.steps, ctx.current_checks())])
    if draft.question is not None or draft.give_up is not None:
        if draft.steps:
            return [Problem(code="plan", where="steps", message="a question or giving up comes with no steps")]
        return []
    if not draft.steps and not _work_done(ctx):
        return [_EMPTY]
    problems = check_steps(draft.steps, ctx.current_checks())
    if not problems and draft.steps and ctx.plan_problems is not None:
        problems = ctx.plan_problems(draft.steps)
    return problems


def _answer_problems(draft: PlanDraft, ctx: PlanningContext) -> list[Problem]:
    """A sealed answer's problems: its answer template (or, for a patch that gives none, the
    plan's, which it keeps) must name only steps of the new plan version or finished ones; a
    hand-off gives the answer itself."""
    if draft.question is not None or draft.give_up is not None:
        return []
    if draft.handoff is not None:
        if draft.answer is None:
            return []
        message = "a hand-off's output is the final answer: give no answer template with it"
        return [Problem(code="answer_template", where="answer", message=message)]
    template, kept = draft.answer, False
    if template is None:
        plan = ctx.state.plan
        template, kept = (plan.answer if plan is not None else None), True
    if template is None:
        return []
    checks = ctx.current_checks()
    known = {*(s.id for s in draft.steps), *checks.finished, *checks.running}
    problems = template_problems(template, known)
    if kept:
        problems = [
            Problem(
                code=p.code,
                where=p.where,
                message=f"{p.message}: the plan's answer template is kept when a patch gives none; give answer again",
            )
            for p in problems
        ]
    return problems


def turn_problems(turn: Turn, ctx: PlanningContext) -> list[Problem]:
    """What keeps a turn from being acted on (a stop with no work done, a step with no confidence,
    the step's static checks); fills the step's thought and confidence in from the turn's."""
    if turn.question is not None or turn.give_up is not None:
        if turn.stop or turn.step is not None:
            what = "a question" if turn.question is not None else "giving up"
            return [Problem(code="turn", where="turn", message=f"{what} comes with no step and no stop")]
        return []
    if turn.stop:
        # Stop wins over a step given with it (the step is not run); with no answer (none, or
        # empty), the run asks the planner for it (``finish``).
        if turn.answer is not None and not turn.answer.strip():
            turn.answer = None
        if not _work_done(ctx):
            return [_EMPTY]
        return []
    if turn.step is None:
        return [Problem(code="turn", where="step", message="stop is false, so a step is required")]
    step = turn.step
    if turn.confidence is None and step.confidence is None:
        return [Problem(code="turn", where="confidence", message="a turn with a step needs a confidence (0 to 1)")]
    if step.confidence is None or step.thought is None:
        step = step.model_copy(
            update={
                "confidence": turn.confidence if step.confidence is None else step.confidence,
                "thought": turn.thought if step.thought is None else step.thought,
            }
        )
        turn.step = step
    return check_steps([step], ctx.current_checks())


def _work_done(ctx: PlanningContext) -> bool:
    """Whether an answer may come with no more steps: some step was tried, or answers are reviewed."""
    return ctx.empty_plan_ok or bool(ctx.state.steps)
