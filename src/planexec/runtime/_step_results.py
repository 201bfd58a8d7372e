"""What the loop does when a step reports how it ended: log its success or failure, route a
failure (a patch, a stall, a stop), wait for a raised cap, or stop the run on a refused call."""

from __future__ import annotations

from typing import Any, Protocol

from planexec._util.plural import counted
from planexec.executor import StepError
from planexec.log import StallRule, StepFailed, StepRequeued, StepSucceeded, StopReason, canonical_call
from planexec.plan import Step
from planexec.runtime._budget import BudgetHit
from planexec.runtime._core import Core
from planexec.runtime._dispatch import Dispatcher
from planexec.runtime._planning import Planning
from planexec.runtime._policies import PlanningPolicy
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._stalls import RepeatWatch
from planexec.runtime._step_runner import StepDone
from planexec.runtime._stops import Stop, crash_stop, error_stop
from planexec.runtime._trust import Trust
from planexec.trust import Violation

__all__ = ["ResultLoop", "StepResults"]


class ResultLoop(Core, Protocol):
    """What taking a step's result sees of the loop, beyond :class:`Core`."""

    dispatcher: Dispatcher
    planning: Planning
    policy: PlanningPolicy
    ready: ReadyQueue
    repeats: RepeatWatch
    trust: Trust
    unaddressed: list[str]
    raises_budget: bool

    @property
    def raising(self) -> BudgetHit | None: ...

    def may_change_world(self, step: Step) -> bool: ...

    def budget_stop(self, hit: BudgetHit, *, redo: tuple[str, Any] | None = None) -> None: ...

    def stall(self, rule: StallRule, detail: str) -> None: ...

    def replan_for_failures(self) -> None: ...


class StepResults:
    """Takes each step's result into the log and decides what follows from it."""

    def __init__(self, engine: ResultLoop) -> None:
        self._engine = engine

    def take(self, done: StepDone) -> None:
        """A step reported how it ended (an attempt that was cancelled or superseded is ignored)."""
        engine = self._engine
        if not engine.dispatcher.is_current(done.step_id, done.token):
            return
        engine.dispatcher.release(done.step_id)
        if done.crash is not None:
            raise crash_stop(done.crash)
        if done.budget is not None:
            self._over_budget(done, done.budget)
            return
        if done.refused is not None:
            self._refused(done, done.refused)
        if done.error is None:
            self._succeeded(done)
            return
        step = engine.state.steps[done.step_id].step
        trust = engine.trust
        engine.emit(
            StepFailed(
                at=engine.now(),
                step_id=done.step_id,
                error=done.error,
                verdict=done.verdict,
                output=done.output if done.verdict is not None else None,
                attempts=done.attempts,
                started=done.started,
                provenance=trust.failure(step, done.error, done.started) if trust.on else None,
            )
        )
        self._route_failure(done.step_id, done.error)

    def _succeeded(self, done: StepDone) -> None:
        engine = self._engine
        step = engine.state.steps[done.step_id].step
        assert done.verdict is not None
        trust = engine.trust
        label = None
        if trust.on:
            label = trust.human_output(step.id) if done.by_human else trust.output(step)
        engine.emit(
            StepSucceeded(
                at=engine.now(),
                step_id=done.step_id,
                output=done.output,
                verdict=done.verdict,
                attempts=done.attempts,
                confidence=done.confidence,
                provenance=label,
            )
        )
        engine.ready.succeeded(done.step_id)
        repeated = engine.repeats.succeeded(engine.state.steps[done.step_id])
        if repeated is not None:
            engine.stall(*repeated)
        planning = engine.planning
        if engine.policy.after_step() and engine.state.steps[done.step_id].step.tool not in engine.config.workflows:
            planning.after_step_wanted = True
            if planning.idle:
                planning.start("after_step", f"step {done.step_id} finished")

    def _over_budget(self, done: StepDone, hit: BudgetHit) -> None:
        """A cap stopped the step: it waits for the cap to be raised, or fails and the run stops."""
        engine = self._engine
        if engine.raises_budget and self._safe_to_rerun(done):  # run it again once the cap is raised
            reason = f"waits for a raised budget: {hit}"
            engine.emit(StepRequeued(at=engine.now(), step_id=done.step_id, reason=reason))
            engine.budget_stop(hit, redo=("step", done.step_id))
            return
        error = StepError(kind="budget", message=str(hit))
        budget_step = engine.state.steps[done.step_id].step
        engine.emit(
            StepFailed(
                at=engine.now(),
                step_id=done.step_id,
                error=error,
                attempts=done.attempts,
                started=done.started,
                provenance=engine.trust.failure(budget_step, error, done.started) if engine.trust.on else None,
            )
        )
        if engine.raises_budget:  # it ran part of the way: patched once the cap is raised
            engine.unaddressed.append(done.step_id)
        engine.budget_stop(hit)

    def _refused(self, done: StepDone, violations: tuple[Violation, ...]) -> None:
        """A call of the step broke a trust rule and was not made: the run stops ``refused``."""
        engine = self._engine
        step = engine.state.steps[done.step_id].step
        first = violations[0]
        more = f" (and {counted(len(violations) - 1, 'more rule')} broken)" if len(violations) > 1 else ""
        detail = f"step {done.step_id}: {first}{more}"
        error = StepError(kind="untrusted", message=f"refused: {first}{more}")
        engine.emit(
            StepFailed(
                at=engine.now(),
                step_id=done.step_id,
                error=error,
                attempts=done.attempts,
                started=done.started,
                provenance=engine.trust.failure(step, error, done.started),
                violations=violations,
            )
        )
        raise Stop(StopReason(kind="refused", detail=detail, violations=violations))

    def _safe_to_rerun(self, done: StepDone) -> bool:
        """Whether a step a cap stopped may simply run again: it was refused before it started, it
        cannot change the world, or (a model-driven step) it had called no tool yet."""
        if not done.started:
            return True
        rec = self._engine.state.steps[done.step_id]
        return not self._engine.may_change_world(rec.step) or (rec.step.tool is None and not rec.tool_calls)

    def _route_failure(self, step_id: str, error: StepError) -> None:
        engine = self._engine
        if error.kind == "rejected":
            raise Stop(StopReason(kind="rejected", detail=f"step {step_id}: {error.message}"))
        rec = engine.state.steps[step_id]
        if rec.step.tool is not None and rec.args is not None:
            key = canonical_call(rec.step.tool, rec.args)
            if engine.state.failed_calls.get(key, 0) >= 2:
                engine.stall(
                    "repeated_failure", f"{rec.step.tool} failed again with the same arguments: {error.message}"
                )
        if not engine.policy.replans_failures():
            raise error_stop("step_failed", f"step {step_id} failed ({error}) and replanning is off")
        engine.unaddressed.append(step_id)
        if engine.planning.idle and engine.raising is None:
            engine.replan_for_failures()
