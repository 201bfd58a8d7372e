"""Plan versions: the version a planner's (or a human's) steps make, and putting it in force —
obsolete steps cancelled, its forecast and ``plan_proposed`` logged, its steps indexed for dispatch.

A running step that may already have changed things outside the run is never cancelled or
redefined by a new version (see :mod:`planexec.runtime._planning`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from planexec.errors import Problem
from planexec.log import PlanProposed, PlanTrigger, StepCancelled
from planexec.plan import (
    PLAIN_PLAN_VERSION,
    PLAN_SCHEMA_VERSION,
    Author,
    CheckContext,
    CompiledArgs,
    Plan,
    PlanDraft,
    Step,
    check_steps,
    compile_args,
    template_problems,
)
from planexec.planner import with_finished
from planexec.runtime._core import Core
from planexec.runtime._plan_costs import PlanForecasts
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._sealed import carried_answer
from planexec.runtime._stops import error_stop
from planexec.runtime._trust import Trust
from planexec.tools import Toolset
from planexec.trust import Source

__all__ = ["PlanVersions", "VersionLoop", "succeeded", "succeeded_ids"]


class VersionLoop(Core, Protocol):
    """What putting plan versions in force sees of the loop, beyond :class:`Core`."""

    ready: ReadyQueue
    unaddressed: list[str]
    trust: Trust

    @property
    def running_steps(self) -> Mapping[str, tuple[asyncio.Task[None], int]]: ...

    def cancel_step(self, step_id: str) -> None: ...

    def may_change_world(self, step: Step) -> bool: ...


class PlanVersions:
    """Makes plan versions and puts them in force; checks plans against the run's tools."""

    def __init__(self, engine: VersionLoop, checks: CheckContext) -> None:
        self._engine = engine
        self.checks = checks
        """What a plan is checked against (the run's tools as they are now)."""
        self.compiled: dict[str, tuple[Step, CompiledArgs]] = {}
        self.costs = PlanForecasts(engine, lambda steps: self.next_plan(steps, reason=""))
        """The versions' cost forecasts."""

    def use_tools(self, tools: Toolset) -> None:
        """Check plans against ``tools`` from now on (the run's tools changed)."""
        self.checks = replace(self.checks, tools=tools)

    def unstoppable(self, step_id: str) -> bool:
        """Whether ``step_id`` is running and may already have changed things outside the run: no
        new plan version can cancel or redefine it."""
        rec = self._engine.state.steps.get(step_id)
        return rec is not None and rec.status == "running" and self._engine.may_change_world(rec.step)

    def answer_of(self, result: PlanDraft) -> str | None:
        """The answer template of the plan version ``result`` makes (sealed planning; else None)."""
        engine = self._engine
        if not engine.config.planner.sealed:
            return None
        return carried_answer(result, engine.state, engine.config.workflows)

    def edited(self, plan: Plan, approver: str) -> tuple[list[Step], Author, str]:
        """A human's edit of the proposed plan: its unfinished steps, checked like the planner's."""
        engine = self._engine
        steps = [s for s in plan.steps if not succeeded(engine, s.id)]
        budget = engine.budget
        max_steps = None if budget.steps is None else budget.steps - engine.state.steps_started
        checks = with_finished(self.checks, engine.state, max_steps)
        problems = check_steps(steps, checks)
        template = plan.answer
        if template is not None and not engine.config.planner.sealed:
            message = "only a sealed planner's plan carries an answer template (the planner writes this run's answer)"
            problems.append(Problem(code="answer_template", where="answer", message=message))
        elif template is not None:
            problems += template_problems(template, {*(s.id for s in steps), *checks.finished, *checks.running})
        if problems:
            detail = "the edited plan failed its static checks: " + "; ".join(map(str, problems))
            raise error_stop("usage", detail)
        return steps, "human", plan.reason or f"edited by {approver}"

    def next_plan(
        self, steps: list[Step], *, reason: str, author: Author = "planner", answer: str | None = None
    ) -> Plan:
        """The plan version ``steps`` make: finished steps kept, and running steps that may have
        changed things outside the run kept as they are (the checks refuse a plan that redefines
        one; should one get this far, the running step stays). ``answer``: its answer template
        (sealed planning)."""
        state = self._engine.state
        running = {sid: rec.step for sid, rec in state.steps.items() if self.unstoppable(sid)}
        if running:
            steps = [running.get(s.id, s) for s in steps]
        kept = [rec.step for rec in state.steps.values() if rec.status == "succeeded" or rec.id in running]
        new_ids = {s.id for s in steps}
        # The steps were validated when they were parsed and checked; do not validate them again.
        return Plan.model_construct(
            schema_version=PLAN_SCHEMA_VERSION if answer is not None else PLAIN_PLAN_VERSION,
            version=len(state.plans) + 1,
            steps=(*[s for s in kept if s.id not in new_ids], *steps),
            author=author,
            reason=reason,
            answer=answer,
        )

    def install(
        self,
        steps: list[Step],
        trigger: PlanTrigger,
        reason: str,
        addressed: frozenset[str],
        *,
        author: Author = "planner",
        answer: str | None = None,
    ) -> None:
        """Put the plan version ``steps`` make in force; ``addressed``: the failed steps it answers."""
        engine = self._engine
        plan = self.next_plan(steps, reason=reason, author=author, answer=answer)
        new = {s.id: s for s in plan.steps}
        running = engine.running_steps
        # a running step that may have changed the world is in ``new`` unchanged: it is never cancelled
        obsolete = [sid for sid in running if sid not in new or new[sid] != engine.state.steps[sid].step]
        for sid in obsolete:
            engine.cancel_step(sid)
            engine.emit(StepCancelled(at=engine.now(), step_id=sid, reason=f"obsolete after plan v{plan.version}"))
        self.costs.forecast(plan)
        tainted, read = self._tainted(plan, author)
        engine.emit(
            PlanProposed(
                at=engine.now(), plan=plan, trigger=trigger, cancelled=tuple(obsolete), tainted=tainted, read=read
            )
        )
        engine.unaddressed[:] = [sid for sid in engine.unaddressed if sid not in addressed]
        self.load(plan)

    def _tainted(self, plan: Plan, author: Author) -> tuple[tuple[str, ...], tuple[Source, ...]]:
        """The steps of ``plan`` a planner wrote after reading untrusted text — those this round
        wrote or changed, when it read some, and those still tainted from an earlier round — and
        what this round read."""
        engine = self._engine
        if not engine.trust.on or author == "human":  # a human's edit: they wrote, or saw, every step
            return (), ()
        state = engine.state
        read = state.round_read if author == "planner" else ()
        tainted = []
        for step in plan.steps:
            rec = state.steps.get(step.id)
            same = rec is not None and rec.step == step
            if same and rec is not None and (rec.status == "succeeded" or rec.status in ("pending", "running")):
                if rec.tainted:
                    tainted.append(step.id)
            elif read:
                tainted.append(step.id)
        return tuple(tainted), read

    def load(self, plan: Plan) -> None:
        """Index a plan version for dispatch: steps still to run, bindings compiled once."""
        engine = self._engine
        state = engine.state
        running = engine.running_steps
        waiting = set()
        for s in plan.steps:
            if state.steps[s.id].status == "pending" and s.id not in running:
                waiting.add(s.id)
                cached = self.compiled.get(s.id)
                if cached is None or cached[0] is not s:
                    self.compiled[s.id] = (s, compile_args(s.args))
        engine.ready.load(plan.steps, succeeded_ids(engine), waiting)

    def compiled_args(self, step: Step) -> CompiledArgs:
        cached = self.compiled.get(step.id)
        if cached is None or cached[0] is not step:
            cached = (step, compile_args(step.args))
            self.compiled[step.id] = cached
        return cached[1]


def succeeded(engine: Core, step_id: str) -> bool:
    """Whether step ``step_id`` of the run has succeeded."""
    rec = engine.state.steps.get(step_id)
    return rec is not None and rec.status == "succeeded"


def succeeded_ids(engine: Core) -> set[str]:
    """The steps of the run that have succeeded."""
    return {sid for sid, rec in engine.state.steps.items() if rec.status == "succeeded"}
