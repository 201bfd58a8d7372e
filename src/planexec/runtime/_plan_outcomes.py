"""What the loop does with a planning round's outcome: put the new plan version in force, end the
run with the final answer, plan again (a refused answer, news the answer did not see, failures
while the planner worked), or stop with the reason the round gives (a cap, a crash, a planner that
gave up or escalated, a human who rejected the plan)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from planexec._util.plural import counted
from planexec.log import BudgetExhaustedEvent, BudgetName, PlanTrigger, StallRule, StopReason
from planexec.plan import Author, Plan, PlanDraft, Step, Turn
from planexec.planner import PlannerEscalated, PlannerGaveUp
from planexec.runtime._budget import BudgetHit, used_of
from planexec.runtime._core import Core
from planexec.runtime._final_answer import AnswerChecks
from planexec.runtime._forecast import ACTING_CAPS
from planexec.runtime._plan_versions import PlanVersions
from planexec.runtime._policies import PlanKind, PlanningPolicy
from planexec.runtime._stops import Stop, crash_stop, error_stop
from planexec.trust import Provenance

__all__ = ["OutcomeLoop", "PlanDone", "RoundOutcomes", "Rounds"]


@dataclass(slots=True)
class PlanDone:
    """A planning round's outcome, as it reaches the loop."""

    kind: PlanKind
    result: PlanDraft | Turn | str | None = None
    failed_at_start: frozenset[str] = frozenset()
    gave_up: PlannerGaveUp | None = None
    budget: BudgetHit | None = None
    rejected: str | None = None
    edited: Plan | None = None
    approver: str = "human"
    crash: BaseException | None = None
    escalated: PlannerEscalated | None = None
    refused: tuple[str, ...] | None = None
    """The final answer failed its review, for these reasons."""
    author: Author = "planner"
    """Who wrote ``result``: the planner, or plan memory (a remembered plan or answer)."""
    answer_label: Provenance | None = None
    """The final answer's label when the trust policy judged it (confirmed by a human, or what is
    left once its untrusted parts were withheld); None: as ``AnswerChecks.label`` says."""
    withheld: tuple[str, ...] = ()
    """The steps whose untrusted output was withheld from the final answer (``*``: all of it)."""


class OutcomeLoop(Core, Protocol):
    """What acting on a round's outcome sees of the loop, beyond :class:`Core`."""

    policy: PlanningPolicy
    unaddressed: list[str]

    @property
    def running_steps(self) -> Mapping[str, tuple[asyncio.Task[None], int]]: ...

    def replan_for_failures(self) -> None: ...

    def stall(self, rule: StallRule, detail: str) -> None: ...

    def budget_stop(self, hit: BudgetHit, *, redo: tuple[str, Any] | None = None) -> None: ...


class Rounds(Protocol):
    """What acting on a round's outcome sees of planning."""

    versions: PlanVersions
    answers: AnswerChecks
    round_problems: str
    news_wanted: bool
    after_step_wanted: bool
    last_failure_patch: str | None

    def start(self, kind: PlanKind, why: str, *, announce: bool = True) -> None: ...

    def news(self) -> None: ...


class RoundOutcomes:
    """Acts on each planning round's outcome (one decision a method)."""

    def __init__(self, engine: OutcomeLoop, rounds: Rounds) -> None:
        self._engine = engine
        self._rounds = rounds

    def act(self, done: PlanDone) -> None:
        """Act on a planning round's outcome: install a plan, stop, or plan again."""
        engine = self._engine
        if done.budget is not None:
            engine.budget_stop(done.budget, redo=("plan", (done.kind, f"the {done.budget.budget} cap was raised")))
            return
        if done.crash is not None:
            raise crash_stop(done.crash, planner=True, problems=self._rounds.round_problems)
        if done.gave_up is not None:
            self._gave_up(done.gave_up)
        if done.escalated is not None:
            code = done.escalated.code
            raise Stop(StopReason(kind="escalated", code=code, detail=done.escalated.detail))  # type: ignore[arg-type]
        if done.refused is not None:
            self._refused(done)
            return
        if done.rejected is not None:
            raise Stop(StopReason(kind="rejected", detail=f"a human rejected the plan: {done.rejected}"))
        result = done.result
        if isinstance(result, str):
            self._answered(done, result)
        elif isinstance(result, Turn):
            self._turn(done, result)
        else:
            assert isinstance(result, PlanDraft)
            self._draft(done, result)

    def _answered(self, done: PlanDone, answer: str) -> None:
        """The round gave the final answer: the run ends with it (unless news came meanwhile)."""
        if self._news_before_answer():
            return
        if done.author == "memory":
            detail = "the remembered plan's answer"
        elif self._engine.config.planner.sealed:
            detail = "the plan's answer, filled in from the outputs"
        else:
            detail = "the planner gave the final answer"
        if done.withheld:
            detail += "; its untrusted parts withheld"
        raise Stop(StopReason(kind="goal_met", detail=detail), answer, self._label_of(done), done.withheld)

    def _turn(self, done: PlanDone, turn: Turn) -> None:
        """A step-by-step turn: the next step goes in force, or the planner stopped."""
        if turn.stop:
            if self._news_before_answer():
                return
            if turn.answer is None:  # the planner is asked for the answer, as at the end of a plan
                self._rounds.start("finish", "the planner stopped without the final answer")
                return
            detail = turn.thought or "the planner stopped"
            if done.withheld:
                detail += "; the answer withheld: it was written after reading untrusted text"
            raise Stop(StopReason(kind="goal_met", detail=detail), turn.answer, self._label_of(done), done.withheld)
        assert turn.step is not None
        trigger: PlanTrigger = (
            "initial"
            if done.kind == "initial"
            else "failure"
            if done.failed_at_start
            else done.kind
            if done.kind in ("information", "review")
            else "turn"
        )
        steps: list[Step] = [turn.step]
        author: Author = "planner"
        reason = turn.thought
        versions = self._rounds.versions
        if done.edited is not None:
            steps, author, reason = versions.edited(done.edited, done.approver)
        versions.install(steps, trigger, reason, done.failed_at_start, author=author)

    def _draft(self, done: PlanDone, draft: PlanDraft) -> None:
        """A plan (or a patch): its version goes in force, unless steps failed while it was written."""
        engine, rounds = self._engine, self._rounds
        if set(engine.unaddressed) - done.failed_at_start:
            engine.replan_for_failures()  # steps failed while the planner worked: its plan is stale
            return
        if done.kind == "failure":
            fingerprint = json.dumps([s.model_dump(mode="json") for s in draft.steps], sort_keys=True)
            if fingerprint == rounds.last_failure_patch:
                engine.stall("identical_patch", "the planner proposed the same patch again")
            rounds.last_failure_patch = fingerprint
        trigger: PlanTrigger = (
            done.kind if done.kind in ("initial", "failure", "information", "review") else "after_step"
        )
        steps, author, reason = draft.steps, done.author, draft.reason
        answer = rounds.versions.answer_of(draft)
        if done.edited is not None:
            steps, author, reason = rounds.versions.edited(done.edited, done.approver)
            answer = done.edited.answer
        rounds.versions.install(steps, trigger, reason, done.failed_at_start, author=author, answer=answer)
        if engine.unaddressed:
            engine.replan_for_failures()
        elif rounds.news_wanted:
            rounds.news()
        elif rounds.after_step_wanted and engine.running_steps:
            rounds.start("after_step", "steps finished while planning")

    def _label_of(self, done: PlanDone) -> Provenance | None:
        return done.answer_label if done.answer_label is not None else self._rounds.answers.label(done.author)

    def _news_before_answer(self) -> bool:
        """New information arrived while the planner wrote its final answer, which did not see it:
        the planner plans again with it instead of ending the run (True when it does)."""
        state = self._engine.state
        if state.heard >= len(state.information):
            return False
        self._rounds.news_wanted = False
        kind = self._engine.policy.round_after("news_before_answer")
        news = state.information[-1].text[:200]
        self._rounds.start(kind, f"new information arrived while the final answer was written: {news}")
        return True

    def _refused(self, done: PlanDone) -> None:
        """The final answer failed its review: back to the planner with the reasons, or stop."""
        engine = self._engine
        review = engine.config.review
        assert review is not None
        assert done.refused is not None
        refusals = sum(1 for r in engine.state.reviews if not r.passed)
        why = "; ".join(done.refused)
        if refusals >= review.max_rounds:
            detail = f"the final answer was refused {counted(refusals, 'time')}, the most allowed: {why}"
            raise Stop(StopReason(kind="escalated", code="answer_rejected", detail=detail))
        kind = engine.policy.round_after("answer_refused")
        self._rounds.start(kind, f"the final answer was refused: {why}")

    def _gave_up(self, gave_up: PlannerGaveUp) -> None:
        """The planner's answers kept failing their checks: stop, on a cap when that was why."""
        engine = self._engine
        problems = gave_up.problems
        step_budget = [p for p in problems if p.code == "budget_steps"]
        if step_budget and engine.budget.steps is not None:
            limit = engine.budget.steps
            engine.emit(
                BudgetExhaustedEvent(
                    at=engine.now(), budget="steps", limit=limit, used=engine.state.steps_started, needed=0.0
                )
            )
            raise Stop(StopReason(kind="budget_exhausted", budget="steps", detail=step_budget[0].message))
        over = [p for p in problems if p.code == "over_budget"]
        if over and len(over) == len(problems):
            name = over[0].where.removeprefix("budget.")
            cap = getattr(engine.budget, name, None)
            if name in ACTING_CAPS and cap is not None:
                budget = cast(BudgetName, name)
                used = used_of(budget, engine.state, engine.now())
                engine.emit(BudgetExhaustedEvent(at=engine.now(), budget=budget, limit=cap, used=used, needed=0.0))
                detail = f"no plan the planner proposed fits the {name} budget: {over[0].message}"
                raise Stop(StopReason(kind="budget_exhausted", budget=budget, detail=detail))
        repairs = engine.config.planner.max_repairs
        detail = f"the planner's output was still invalid after {counted(repairs, 'repair')}: " + "; ".join(
            map(str, problems)
        )
        raise error_stop("planner_output", detail)
