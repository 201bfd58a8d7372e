"""Humans in the loop: asking them, and their answers from anywhere; reviews of results that
failed their checks, and steps held after an uncertain effect. (The gate before a step runs is
``_step_gate``; what makes an answer fit its question, ``_decisions``.)

Every question is an ``approval_requested`` event with a stable id, and every answer an
``approval_decided`` event, whoever gives it: the approver callback in this process, a caller of
``Run.decide`` (an API, a web page), or another process writing the answer into the run's store
(the CLI). Many questions can be open at once; each waits on its own future, so other branches
keep running meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, Protocol

from planexec.errors import UsageError
from planexec.executor import CheckResult, Verdict
from planexec.log import ApprovalDecided, ApprovalRecord, ApprovalRequested, Event
from planexec.models import cancelled_for_real
from planexec.plan import Step
from planexec.runtime._core import Core
from planexec.runtime._decisions import check_decision, decided_event, recorded_decision, refusal
from planexec.runtime._journal import Journal
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest
from planexec.store import Redactor
from planexec.views import QuestionView, question_view

__all__ = ["Humans", "check_decision", "decided_event"]


class Loop(Core, Protocol):
    """What the humans in the loop see of it, beyond :class:`Core`."""

    journal: Journal | None

    @property
    def planning_idle(self) -> bool: ...

    @property
    def running_steps(self) -> Mapping[str, tuple[asyncio.Task[None], int]]: ...

    @property
    def steps_waiting_for_plan(self) -> Collection[str]: ...


class Humans:
    """The engine's side of every question to a human."""

    def __init__(self, engine: Loop) -> None:
        self._engine = engine
        self._futures: dict[str, asyncio.Future[ApprovalDecision]] = {}
        self.waiting_steps: set[str] = set()
        """Steps whose task is blocked on a human's answer."""
        self.planning_waits = False
        self._callbacks: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None

    @property
    def open_questions(self) -> list[str]:
        return list(self._futures)

    def earlier(self, step_id: str, subject: str, version: int) -> ApprovalRecord | None:
        """The newest question already asked about this step in this plan version (after a restart)."""
        found = None
        for rec in self._engine.state.approvals.values():
            if rec.subject == subject and rec.step_id == step_id and rec.plan_version == version:
                found = rec
        return found

    # -- asking, and answers from anywhere ---------------------------------------------------

    async def ask(
        self, request: ApprovalRequest, *, version: int | None, existing: ApprovalRecord | None = None
    ) -> ApprovalDecision:
        """Ask (or, after a restart, ask again under the same id) and wait for the answer."""
        engine = self._engine
        if existing is not None:
            approval_id = existing.approval_id
        else:
            step_id = request.step.id if request.step else None
            await engine.world.turn(lambda e: isinstance(e, ApprovalRequested) and e.step_id == step_id)
            approval_id = engine.new_id()
            engine.emit(
                ApprovalRequested(
                    at=engine.now(),
                    approval_id=approval_id,
                    subject=request.subject,
                    step_id=request.step.id if request.step else None,
                    plan_version=version,
                    reason=request.reason,
                    plan=request.plan if request.subject == "plan" else None,
                    code=request.code,  # type: ignore[arg-type]
                    output=request.output,
                    verdict=request.verdict,
                    checklist=request.checklist,
                    rule=request.rule,
                    args=request.args,
                    budget=request.budget,
                    provenance=dict(request.provenance) if request.provenance is not None else None,
                    violations=request.violations,
                )
            )
        request = replace(request, approval_id=approval_id, view=self.view(approval_id))
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._futures[approval_id] = future
        approver = engine.config.approvals.approver
        asked = request
        answer = engine.world.decision(approval_id, lambda: self._ask_callback(asked) if approver is not None else None)
        if answer is not None:  # the approver callback, or the answer a record holds
            task = asyncio.create_task(answer, name=f"approval:{approval_id}")
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)
        elif engine.journal is not None:
            await engine.journal.flush()  # the question is saved before anyone is expected to answer it
            if engine.config.approvals.when_waiting == "wait":
                self._watch_store()
        try:
            return await future
        finally:
            self._futures.pop(approval_id, None)

    async def _ask_callback(self, request: ApprovalRequest) -> None:
        """Ask the approver callback. Whatever goes wrong with it — it raises, it answers something
        that is not ``True``, ``False`` or a valid :class:`ApprovalDecision` — counts as a refusal
        that says why: a broken approver never approves."""
        approver = self._engine.config.approvals.approver
        assert approver is not None
        try:
            decision = self._checked(request.approval_id, await approver(request))
        except Exception as e:
            decision = refusal(f"the approver failed: {type(e).__name__}: {e}")
        except BaseException as e:  # a real cancellation goes on
            if cancelled_for_real(e):
                raise
            decision = refusal(f"the approver raised {type(e).__name__}")
        if request.approval_id in self._futures:
            self.decide(request.approval_id, decision)

    def _checked(self, approval_id: str, answer: object) -> ApprovalDecision:
        if type(answer) is bool:
            return ApprovalDecision(approved=answer)
        if not isinstance(answer, ApprovalDecision):
            return refusal(
                f"the approver answered with {type(answer).__name__}, not True, False or an ApprovalDecision"
            )
        if type(answer.approved) is not bool:
            return refusal(f"the approver's decision has approved={answer.approved!r}, not True or False")
        record = self._engine.state.approvals.get(approval_id)
        problems = check_decision(record, answer) if record is not None else []
        if problems:
            return refusal("the approver's decision is invalid: " + "; ".join(p.message for p in problems))
        return answer

    def decide(self, approval_id: str, decision: ApprovalDecision) -> None:
        """Record a human's answer (from this process) and release whoever waits for it."""
        engine = self._engine
        record = engine.state.approvals.get(approval_id)
        if record is None:
            raise UsageError(f"run {engine.run_id} has no approval {approval_id!r}")
        problems = check_decision(record, decision)
        if problems:
            raise UsageError(f"invalid answer to approval {approval_id}", problems)
        engine.emit(decided_event(approval_id, decision, at=engine.now()))
        self._release(approval_id)

    def answered_elsewhere(self, events: list[Event]) -> None:
        """Answers another process wrote into the store: they are in the log; release the waiters."""
        for e in events:
            if isinstance(e, ApprovalDecided):
                self._release(e.approval_id)

    def _release(self, approval_id: str) -> None:
        future = self._futures.get(approval_id)
        record = self._engine.state.approvals.get(approval_id)
        if future is not None and not future.done() and record is not None and record.approved is not None:
            future.set_result(recorded_decision(record))

    def _watch_store(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name=f"approvals:{self._engine.run_id}")

    async def _poll(self) -> None:
        engine = self._engine
        journal = engine.journal
        assert journal is not None
        while self._futures:  # woken by the store when an answer is stored, from any process it hears
            await journal.store.wait_for_events(
                engine.run_id, after=journal.persisted, within=engine.config.approvals.poll_interval
            )
            await journal.catch_up()

    async def review(self, step: Step, output: Any, verdict: Verdict) -> Verdict:
        """A human reviews a result that failed its checks: accepted, it passes (the review is
        added to the verdict); refused, it keeps failing, with the human's reason."""
        engine = self._engine
        failures = "; ".join(f"{c.name}: {c.detail}" for c in verdict.failures)
        request = ApprovalRequest(
            approval_id="",
            run_id=engine.run_id,
            subject="review",
            step=step,
            reason=f"the result failed its checks ({failures}): accept it or refuse it",
            output=output,
            verdict=verdict,
            rule="result_failed_checks",
        )
        version = engine.state.steps[step.id].plan_version
        earlier = self.earlier(step.id, "review", version)
        self.waiting_steps.add(step.id)
        engine.wake()
        try:
            if earlier is not None and earlier.approved is not None:
                decision = recorded_decision(earlier)
            else:
                decision = await self.ask(request, version=version, existing=earlier)
        finally:
            self.waiting_steps.discard(step.id)
        why = decision.reason or "no reason given"
        result = CheckResult(
            name="review",
            passed=decision.approved,
            detail=f"{'accepted' if decision.approved else 'refused'} by {decision.by}: {why}",
        )
        return Verdict(passed=decision.approved, checks=(*verdict.checks, result))

    async def await_effect(self, step: Step, approval_id: str) -> ApprovalDecision:
        """Wait for a human to settle a held step: retry, skip, or mark it done."""
        self.waiting_steps.add(step.id)
        self._engine.wake()
        try:
            record = self._engine.state.approvals[approval_id]
            if record.approved is not None:
                return ApprovalDecision(
                    approved=record.approved,
                    reason=record.decision_reason,
                    choice=record.choice,
                    output=record.output,
                )
            request = ApprovalRequest(
                approval_id=approval_id,
                run_id=self._engine.run_id,
                subject="effect",
                step=step,
                reason=record.reason,
                rule="effect_uncertain",
                args=record.args,
            )
            return await self.ask(request, version=record.plan_version, existing=record)
        finally:
            self.waiting_steps.discard(step.id)

    def view(self, approval_id: str) -> QuestionView | None:
        """What a human is shown of question ``approval_id``, redacted as the run's store redacts."""
        engine = self._engine
        record = engine.state.approvals.get(approval_id)
        if record is None:
            return None
        journal = engine.journal
        found = getattr(journal.store, "redactor", None) if journal is not None else None
        redactor = found if isinstance(found, Redactor) else _DEFAULT_REDACTOR
        return question_view(engine.state, record, redactor=redactor, run_id=engine.run_id)

    def blocked(self) -> bool:
        """Whether everything under way waits for a human."""
        if not self._futures:
            return False
        engine = self._engine
        running = engine.running_steps.keys() - self.waiting_steps
        if not running:
            return engine.planning_idle or self.planning_waits
        # steps that wait for the planning round to end wait for a human too when the round does
        return self.planning_waits and running <= set(engine.steps_waiting_for_plan)

    async def close(self) -> None:
        tasks = [*self._callbacks, *([self._poller] if self._poller is not None else [])]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


_DEFAULT_REDACTOR = Redactor()
"""What a run without a store redacts from what it shows a human (as a store would by default)."""
