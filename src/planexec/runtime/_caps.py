"""A run's caps, and the human asked to raise one the run reached.

When a cap is reached the run stops — or, where ``Limits.on_budget`` says a human is asked, it asks
once for the caps reached together and holds what the cap refused (steps, planning rounds) until
the answer. A raised cap is checked before each call from then on; a raised wall time moves the
deadline. Time spent waiting for the answer does not count against the wall-time budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from planexec.executor import StepError
from planexec.log import ApprovalRecord, BudgetExhaustedEvent, StepFailed, StopReason
from planexec.plan import Plan
from planexec.runtime._budget import Budget, BudgetHit, used_of
from planexec.runtime._core import Core
from planexec.runtime._dispatch import Dispatcher
from planexec.runtime._humans import Humans
from planexec.runtime._policies import PlanKind
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest
from planexec.runtime._stops import Stop

__all__ = ["CapLoop", "Caps", "Raised", "raised_caps"]


@dataclass(slots=True)
class Raised:
    """Queued when a human answered whether to raise the cap the run reached."""

    decision: ApprovalDecision


class PlanRounds(Protocol):
    """What the caps see of planning."""

    @property
    def idle(self) -> bool: ...

    def start(self, kind: PlanKind, why: str, *, announce: bool = True) -> None: ...

    def forecast_rest(self, plan: Plan) -> None: ...


class CapLoop(Core, Protocol):
    """What the caps see of the loop, beyond :class:`Core`."""

    dispatcher: Dispatcher
    humans: Humans
    ready: ReadyQueue
    unaddressed: list[str]
    raises_budget: bool
    queue: asyncio.Queue[Any]
    helpers: set[asyncio.Task[None]]

    @property
    def planning(self) -> PlanRounds: ...


def raised_caps(budget: Budget, approvals: Mapping[str, ApprovalRecord]) -> Budget:
    """``budget`` as humans raised it in answer to the run's questions so far."""
    raised: dict[str, Any] = {}
    for rec in approvals.values():
        if rec.raised:
            raised.update(rec.raised)
    return replace(budget, **raised) if raised else budget


class Caps:
    """The run's caps as humans raised them, and the question about raising one."""

    def __init__(self, engine: CapLoop, caps: Budget) -> None:
        self._engine = engine
        self.caps = caps
        """The run's caps: the agent's, as humans raised them since."""
        self.raising: BudgetHit | None = None
        """The cap a human is asked to raise: nothing new starts until they answer."""
        self._redo: list[tuple[str, Any]] = []
        """What was refused for the cap, to do again once it is raised: steps, planning rounds."""
        self.deadline: asyncio.Timeout | None = None
        """The run's wall-time deadline, when the loop keeps one."""

    def stop(self, hit: BudgetHit, *, redo: tuple[str, Any] | None = None) -> None:
        """The run reached a cap: stop it, reporting what it has actually spent of that budget — or,
        when a human is asked to raise caps, ask (once for caps reached together) and hold ``redo``
        (what the cap refused) until the answer."""
        engine = self._engine
        used = used_of(hit.budget, engine.state, engine.now())
        if hit.budget == "wall_time":
            used = round(used, 6)
        final = BudgetHit(hit.budget, hit.limit, used, needed=hit.needed)
        engine.emit(
            BudgetExhaustedEvent(at=engine.now(), budget=hit.budget, limit=hit.limit, used=used, needed=hit.needed)
        )
        if not engine.raises_budget:
            raise Stop(StopReason(kind="budget_exhausted", budget=hit.budget, detail=str(final)))
        if redo is not None:
            self._redo.append(redo)
        if engine.dispatcher.blocked is None:
            engine.dispatcher.blocked = final
        if self.raising is None:
            self._ask(final)

    def out_of_time(self, running: list[str]) -> Stop | None:
        """The wall-time budget ran out (the steps under way, ``running``, are stopped): they fail
        as timed out, and the run stops — or, when a human is asked to raise the cap, waits for the
        answer (None)."""
        engine = self._engine
        limit = self.caps.wall_time or 0.0
        used = used_of("wall_time", engine.state, engine.now())
        engine.emit(BudgetExhaustedEvent(at=engine.now(), budget="wall_time", limit=limit, used=round(used, 6)))
        for sid in running:
            rec = engine.state.steps[sid]
            message = f"the run's wall-time budget of {limit:g}s ran out while the step ran"
            engine.emit(
                StepFailed(
                    at=engine.now(),
                    step_id=sid,
                    error=StepError(kind="timeout", message=message),
                    attempts=rec.attempts,
                    started=True,
                )
            )
        if engine.raises_budget and self.raising is None:
            engine.unaddressed += [sid for sid in running if sid not in engine.unaddressed]
            self._ask(BudgetHit("wall_time", limit, round(used, 6)))
            return None
        detail = f"wall time of {limit:g}s used up"
        return Stop(StopReason(kind="budget_exhausted", budget="wall_time", detail=detail))

    def _ask(self, hit: BudgetHit) -> None:
        """Ask a human whether to raise ``hit``'s cap (with the forecast of the rest of the plan);
        the answer comes back through the queue."""
        engine = self._engine
        self.raising = hit
        plan = engine.state.plan
        if plan is not None:
            engine.planning.forecast_rest(plan)
        request = ApprovalRequest(
            approval_id="",
            run_id=engine.run_id,
            subject="budget",
            reason=f"{hit}: raise the cap to go on, or stop the run",
            rule="budget_cap",
            budget=hit.budget,
        )
        self._wait(request, plan.version if plan is not None else None, None)

    def resume(self, hit: BudgetHit, approval_id: str) -> None:
        """After a restart: wait again for the answer to the question about raising ``hit``'s cap."""
        engine = self._engine
        self.raising = hit
        engine.dispatcher.blocked = hit
        record = engine.state.approvals[approval_id]
        request = ApprovalRequest(
            approval_id=approval_id,
            run_id=engine.run_id,
            subject="budget",
            reason=record.reason,
            rule="budget_cap",
            budget=hit.budget,
        )
        self._wait(request, record.plan_version, record)

    def _wait(self, request: ApprovalRequest, version: int | None, existing: ApprovalRecord | None) -> None:
        engine = self._engine

        async def ask() -> None:
            engine.wake()  # the loop looks again once the question is open
            decision = await engine.humans.ask(request, version=version, existing=existing)
            engine.queue.put_nowait(Raised(decision))

        task = asyncio.create_task(ask(), name=f"budget:{engine.run_id}")
        engine.helpers.add(task)
        task.add_done_callback(engine.helpers.discard)

    def after_raise(self, what: str, arg: Any) -> None:
        """Do ``what`` once the cap a human is asked about is raised (``plan``: a planning round)."""
        self._redo.append((what, arg))

    def answered(self, decision: ApprovalDecision) -> None:
        """A human answered: go on with the caps raised, or stop."""
        engine = self._engine
        hit = self.raising
        assert hit is not None
        self.raising = None
        if not decision.approved:
            by = decision.by or "a human"
            detail = f"{hit}; {by} did not raise it: {decision.reason or 'no reason given'}"
            raise Stop(StopReason(kind="budget_exhausted", budget=hit.budget, detail=detail))
        self.apply(dict(decision.budget or {}))
        engine.dispatcher.blocked = None
        redo, self._redo = self._redo, []
        succeeded = {sid for sid, rec in engine.state.steps.items() if rec.status == "succeeded"}
        for what, arg in redo:
            if what == "step":
                rec = engine.state.steps.get(arg)
                if rec is not None and rec.status == "pending":
                    engine.ready.add(rec.step, succeeded)
            elif what == "plan" and engine.planning.idle:
                kind, why = arg
                engine.planning.start(kind, why)

    def apply(self, caps: Mapping[str, Any]) -> None:
        """Take up raised caps: checked before each call from now on; a raised wall time moves the
        deadline (what the run has used stays counted)."""
        if not caps:
            return
        engine = self._engine
        keeps_time = engine.world.keeps_wall_time
        self.caps = replace(self.caps, **caps)
        engine.budget = replace(engine.budget, **{k: v for k, v in caps.items() if k != "wall_time" or keeps_time})
        if "wall_time" in caps and self.deadline is not None and keeps_time:
            cap = caps["wall_time"]
            if cap is None:
                self.deadline.reschedule(None)
            else:
                left = max(0.0, cap - used_of("wall_time", engine.state, engine.now()))
                self.deadline.reschedule(asyncio.get_running_loop().time() + left)
