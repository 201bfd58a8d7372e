"""What a planning round asks humans: to approve a proposed plan, to answer the planner's
clarifying question, to give guidance on an escalation. The round waits for the answer (and the run
may be suspended meanwhile); after a restart it waits again under the question's id."""

from __future__ import annotations

from typing import Protocol

from planexec.log import ApprovalRecord
from planexec.planner import PlannerEscalated
from planexec.runtime._core import Core
from planexec.runtime._humans import Humans
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest

__all__ = ["PlannerQuestions", "QuestionLoop", "guidance"]


class QuestionLoop(Core, Protocol):
    """What the planner's questions see of the loop, beyond :class:`Core`."""

    humans: Humans


class PlannerQuestions:
    """Asks humans on the planner's behalf."""

    def __init__(self, engine: QuestionLoop) -> None:
        self._engine = engine

    async def ask(self, request: ApprovalRequest, existing: ApprovalRecord | None = None) -> ApprovalDecision:
        """Ask a human on the planner's behalf; the planning round waits (and the run may suspend)."""
        return await self._waiting(request, None, existing)

    async def _waiting(
        self, request: ApprovalRequest, version: int | None, existing: ApprovalRecord | None
    ) -> ApprovalDecision:
        humans = self._engine.humans
        humans.planning_waits = True
        self._engine.wake()
        try:
            return await humans.ask(request, version=version, existing=existing)
        finally:
            humans.planning_waits = False

    async def escalate(self, code: str, detail: str) -> str | None:
        """The planner escalates: a human gives guidance (its text), has it plan again (None), or
        stops the run (``PlannerEscalated``)."""
        engine = self._engine
        request = ApprovalRequest(
            approval_id="",
            run_id=engine.run_id,
            subject="escalation",
            reason=detail,
            code=code,
            rule=code if code in ("unknown_tool", "low_confidence", "planner_gave_up") else None,  # type: ignore[arg-type]
        )
        decision = await self.ask(request)
        return guidance(code, detail, decision)

    async def ask_user(self, question: str) -> str:
        """The planner's clarifying question: the human's answer."""
        engine = self._engine
        request = ApprovalRequest(
            approval_id="", run_id=engine.run_id, subject="question", reason=question, rule="planner_question"
        )
        decision = await self.ask(request)
        return decision.text or ""

    async def approve(
        self, request: ApprovalRequest, version: int, existing: ApprovalRecord | None
    ) -> ApprovalDecision:
        """A human's answer about a proposed plan (given before a restart, or asked now)."""
        if existing is not None and existing.approved is not None:  # answered before a restart
            return ApprovalDecision(
                approved=existing.approved,
                reason=existing.decision_reason,
                by=existing.by or "human",
                edited_plan=existing.edited_plan,
            )
        return await self._waiting(request, version, existing)


def guidance(code: str, detail: str, decision: ApprovalDecision) -> str | None:
    """A human's answer to an escalation: guidance text, None (plan again), or a stop."""
    if not decision.approved:
        why = decision.reason or "no reason given"
        raise PlannerEscalated(code, f"{detail}; {decision.by} stopped the run: {why}")
    return decision.text if decision.choice != "replan" else None
