"""Picking a run up from its log after its process stopped (a crash, a kill, a suspension).

Finished steps are never run again. A step that was under way when the process stopped is run
again only when that is safe: it has no side effect, or its tool is idempotent (it is called with
the same idempotency key). Any other is held for a human — retry, skip, or mark done — and never
silently repeated. A planning round under way is asked again; a plan waiting for approval waits
again under the same approval id, and a question the planner asked a human (a clarifying question,
an escalation, the review of the final answer) waits again under its id; once answered, the round
goes on with the answer. Information told while the run was suspended is planned with.
"""

from __future__ import annotations

from typing import Any, Protocol

from planexec.log import ApprovalRequested, StepHeld, StepRequeued, StopReason
from planexec.plan import Step
from planexec.runtime._budget import BudgetHit
from planexec.runtime._core import Core
from planexec.runtime._planning import Planning
from planexec.runtime._stops import Stop

__all__ = ["restore"]


class _Loop(Core, Protocol):
    """What recovery sees of the loop, beyond :class:`Core`."""

    planning: Planning
    unaddressed: list[str]

    def side_effecting(self, step: Step) -> bool: ...

    def start_step(self, step: Step, *, held: str | None = None) -> None: ...

    def replan_for_failures(self) -> None: ...

    def resume_raise(self, hit: BudgetHit, approval_id: str) -> None: ...

    def after_raise(self, what: str, arg: Any) -> None: ...


def _budget_question(engine: _Loop) -> bool:
    """A question about raising a cap, when the run's last one waits for its answer (True): the
    run waits for it again, and starts nothing new before; refused while the run was suspended, the
    run stops."""
    asked = [a for a in engine.state.approvals.values() if a.subject == "budget"]
    if not asked:
        return False
    last = asked[-1]
    hit = last.budget_hit
    name = last.budget or (hit.budget if hit is not None else "cost")
    reached = BudgetHit(name, hit.limit, hit.used, needed=hit.needed) if hit is not None else BudgetHit(name, 0, 0)
    if last.approved is False:
        detail = f"{reached}; {last.by or 'a human'} did not raise it: {last.decision_reason or 'no reason given'}"
        raise Stop(StopReason(kind="budget_exhausted", budget=name, detail=detail))
    if last.approved is None:
        engine.resume_raise(reached, last.approval_id)
        return True
    return False


def restore(engine: _Loop) -> None:
    state = engine.state
    raising = _budget_question(engine)
    plan = state.plan
    if plan is not None:
        for step in plan.steps:
            rec = state.steps[step.id]
            if rec.status != "running":
                continue
            tools = engine.config.tools
            idempotent = step.tool is not None and step.tool in tools and tools.get(step.tool).idempotent
            if not engine.side_effecting(step):
                engine.emit(StepRequeued(at=engine.now(), step_id=step.id, reason="interrupted; it has no side effect"))
            elif idempotent:
                reason = "interrupted; its tool is idempotent and is called again with the same key"
                engine.emit(StepRequeued(at=engine.now(), step_id=step.id, reason=reason))
            else:
                approval_id = engine.new_id()
                reason = (
                    f"effect uncertain: the process stopped while {step.id} ({step.tool or step.executor}) was "
                    "running, and its effect is not safe to repeat: retry, skip, or mark done"
                )
                engine.emit(
                    ApprovalRequested(
                        at=engine.now(),
                        approval_id=approval_id,
                        subject="effect",
                        step_id=step.id,
                        plan_version=rec.plan_version,
                        reason=reason,
                    )
                )
                engine.emit(StepHeld(at=engine.now(), step_id=step.id, approval_id=approval_id, reason=reason))
        engine.unaddressed[:] = [s.id for s in plan.steps if state.steps[s.id].status == "failed"]
        engine.planning.load(plan)
        for step in plan.steps:
            if state.steps[step.id].status == "held":
                engine.start_step(step, held=_held_by(engine, step.id))

    if raising:  # the rest waits for the answer: planning goes on once the cap is raised
        if state.planning is not None:
            engine.after_raise("plan", (state.planning.trigger, f"resumed: {state.planning.why}"))
        return
    if state.planning is not None:
        trigger = state.planning.trigger
        questions = [
            a
            for a in state.approvals.values()
            if a.subject in ("question", "escalation", "answer") and a.requested_at >= state.planning.at
        ]
        if questions:
            engine.planning.resume_question(trigger, questions[-1])
            return
        asked = [
            a
            for a in state.approvals.values()
            if a.subject == "plan" and a.plan is not None and a.requested_at >= state.planning.at
        ]
        if asked and asked[-1].approved is not False and asked[-1].plan is not None:
            engine.planning.resume_approval(trigger, asked[-1].plan, asked[-1].approval_id)
        else:
            engine.planning.start(trigger, f"resumed: {state.planning.why}")
    elif plan is None:
        engine.planning.start("initial", "the run started")
    elif engine.unaddressed:
        engine.replan_for_failures()
    else:
        engine.planning.news()  # information told while the run was suspended


def _held_by(engine: _Loop, step_id: str) -> str:
    """The approval that holds ``step_id``: the newest question about its effect."""
    found = ""
    for a in engine.state.approvals.values():
        if a.subject == "effect" and a.step_id == step_id:
            found = a.approval_id
    return found
