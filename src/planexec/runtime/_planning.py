"""The engine's planning rounds: ask the planner, have a human approve where asked, install the
new plan version (cancelling in-flight steps it makes obsolete), or stop with the answer.

A new plan version replaces every unfinished step, and side effects must never happen twice
because of it. Two rules keep that promise:

* **No side effect starts while the plan is being replaced.** While a round that may replace the
  plan in force is under way (a patch after a failure, after a step, for new information or a
  refused answer; a step-by-step turn), a step that may change things outside the run
  (:func:`~planexec.plan.changes_world`) does not start: it is not dispatched, and one dispatched
  before the round began waits before its call. It starts once the new version is in force, if
  that version still wants it (a step of the patch being streamed waits for the whole patch too).
  Read-only steps start as before.
* **A step whose call may have happened is never called back.** A running step that may change
  things outside the run stays in every new plan version, whatever the planner sends: it is not
  cancelled, it runs to its end, and its result is recorded and shown to the planner like any
  other. The planner saw it running when its round began (nothing of the kind starts during a
  round, so the record it was given is not stale about it) and is told it cannot be stopped; an
  answer that gives its id to a different step fails the static checks (``running_id``).
  Read-only steps the new version drops or changes are cancelled, as before.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec.errors import BindingError, Problem, UsageError
from planexec.log import (
    AnswerReviewed,
    ApprovalRecord,
    BudgetExhaustedEvent,
    BudgetName,
    ErrorCode,
    Forecast,
    PlanForecast,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    PlanTrigger,
    StallRule,
    StepCancelled,
    StepStreamed,
    StopReason,
)
from planexec.models import (
    Message,
    Model,
    ModelCrashed,
    ModelRequest,
    ModelResponse,
    OutputSpec,
    cancelled_for_real,
    resolve_model,
)
from planexec.plan import (
    ANSWER_CHARS,
    ANSWER_VALUE_CHARS,
    PLAIN_PLAN_VERSION,
    PLAN_SCHEMA_VERSION,
    Author,
    CheckContext,
    CompiledArgs,
    IncrementalChecker,
    Plan,
    PlanDraft,
    Step,
    Turn,
    check_steps,
    compile_args,
    fill_template,
    placeholders,
    template_problems,
)
from planexec.planner import (
    PlannerEscalated,
    PlannerGaveUp,
    PlanningContext,
    describe_heard,
    with_finished,
)
from planexec.runtime._budget import BudgetHit, used_of
from planexec.runtime._core import Core
from planexec.runtime._forecast import ACTING_CAPS, forecast_problem, forecast_steps, over_caps
from planexec.runtime._humans import Humans
from planexec.runtime._journal import JournalFailed
from planexec.runtime._policies import PlanKind, PlanningPolicy
from planexec.runtime._recall import direct_plan, memory_answer, recall_for, with_example
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._sealed import AnswerUnfilled, carried_answer, default_template
from planexec.runtime._settings import AnswerCheck, ApprovalDecision, ApprovalRequest
from planexec.runtime._trust import Trust
from planexec.runtime._world import RecordedError
from planexec.tools import ToolCrashed, Toolset, run_in_thread
from planexec.trust import Provenance, Source

__all__ = ["PlanDone", "Planning", "Stop", "crash_stop", "error_stop"]


class _Loop(Core, Protocol):
    """What planning sees of the loop, beyond :class:`Core`."""

    goal: str
    constraints: tuple[str, ...]
    policy: PlanningPolicy
    humans: Humans
    queue: asyncio.Queue[Any]
    ready: ReadyQueue
    unaddressed: list[str]
    trust: Trust

    @property
    def running_steps(self) -> Mapping[str, tuple[asyncio.Task[None], int]]: ...

    def cancel_step(self, step_id: str) -> None: ...

    def replan_for_failures(self) -> None: ...

    def stall(self, rule: StallRule, detail: str) -> None: ...

    def budget_stop(self, hit: BudgetHit, *, redo: tuple[str, Any] | None = None) -> None: ...

    def refresh_tools(self) -> None: ...

    def planning_context(self) -> contextvars.Context | None: ...

    def may_change_world(self, step: Step) -> bool: ...

    async def call_model(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        on_step: Callable[[Step], None] | None = None,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse: ...

    async def call_model_streaming(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        on_text: Callable[[str], None],
        on_step: Callable[[Step], None],
        *,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse: ...


class Stop(Exception):
    """Internal signal: the run ends with ``reason`` (and ``answer`` when the goal was met)."""

    def __init__(
        self,
        reason: StopReason,
        answer: str | None = None,
        provenance: Provenance | None = None,
        withheld: tuple[str, ...] = (),
    ) -> None:
        self.reason = reason
        self.answer = answer
        self.provenance = provenance
        """The answer's label (None: no answer, or a run that labels nothing)."""
        self.withheld = withheld
        """The steps whose untrusted output was withheld from the answer (``*``: all of it)."""
        super().__init__(str(reason))


def error_stop(code: ErrorCode, detail: str) -> Stop:
    """The signal that ends a run with an error of kind ``code``."""
    return Stop(StopReason(kind="error", code=code, detail=detail))


def crash_stop(crash: BaseException, *, planner: bool = False, problems: str = "") -> Stop:
    """The stop for an error a planning round or a step could not route: its code says whose it was.

    ``problems``: what was wrong with the planner's last answers in the round, when any was
    refused: the root cause, named before whatever failed after it."""
    if planner and problems and not isinstance(crash, JournalFailed | ToolCrashed | ModelCrashed):
        text = str(crash) if isinstance(crash, RecordedError) else f"{type(crash).__name__}: {crash}"
        return error_stop("planner_output", f"the planner's output kept failing its checks: {problems} (then: {text})")
    if isinstance(crash, AnswerUnfilled):
        return error_stop("answer_template", str(crash))
    code: ErrorCode
    if isinstance(crash, JournalFailed):
        code = "log_failed"
    elif isinstance(crash, ToolCrashed):
        code = "tool_crashed"
    elif isinstance(crash, ModelCrashed):
        code = "model_crashed"
    elif planner:
        text = str(crash) if isinstance(crash, RecordedError) else f"{type(crash).__name__}: {crash}"
        return error_stop("planner_failed", f"the planner failed: {text}")
    elif isinstance(crash, UsageError):
        code = "usage"
    else:
        return error_stop("internal", f"internal error: {type(crash).__name__}: {crash}")
    prefix = "the planner failed: " if planner else ""
    return error_stop(code, f"{prefix}{crash}")


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
    left once its untrusted parts were withheld); None: as :meth:`Planning._answer_label` says."""
    withheld: tuple[str, ...] = ()
    """The steps whose untrusted output was withheld from the final answer (``*``: all of it)."""


class Planning:
    """Owns the one planning task a run has at a time."""

    def __init__(self, engine: _Loop, checks: CheckContext, executor_docs: dict[str, str]) -> None:
        self._engine = engine
        self._checks = checks
        self._executor_docs = executor_docs
        self._quiet = asyncio.Event()
        """Set while no planning round is under way."""
        self._quiet.set()
        self._task: asyncio.Task[None] | None = None
        self.round: PlanKind | None = None
        """The kind of the round under way (or of the last one)."""
        self.waiting: set[str] = set()
        """Steps dispatched before the round under way began that wait for it to end (``holds``)."""
        self.after_step_wanted = False
        self.last_failure_patch: str | None = None
        self.compiled: dict[str, tuple[Step, CompiledArgs]] = {}
        self._streamed: IncrementalChecker | None = None
        """The steps of the answer now streaming that were handed on early, checked one by one."""
        self._streaming_open = False
        self.news_wanted = False
        """New information arrived while the planner worked: plan again once it is done."""
        self.round_problems = ""
        """The problems of the planner's last refused answer in the round under way."""
        self.reading: tuple[Source, ...] = ()
        """The untrusted sources the planner's request now in flight carries (logged with its answer)."""

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The planning round under way, if any."""
        return self._task

    @task.setter
    def task(self, task: asyncio.Task[None] | None) -> None:
        self._task = task
        if task is None:
            self._quiet.set()
        else:
            self._quiet.clear()

    @property
    def idle(self) -> bool:
        return self._task is None

    def holds(self, step: Step) -> bool:
        """Whether ``step`` may not start now: a round that may replace the plan in force is under
        way, and the step may change things outside the run (see the module's docstring). A step
        of the patch being streamed waits too: a repair of the patch could drop it."""
        if self._task is None or self.round not in _REPLACING:
            return False
        return self._engine.may_change_world(step)

    async def until_free(self, step: Step) -> None:
        """Wait until ``step`` is no longer held (the new plan version is in force). A step that
        waits here waits for the planner, and through it perhaps for a human."""
        if not self.holds(step):
            return
        self.waiting.add(step.id)
        self._engine.wake()
        try:
            while self.holds(step):
                await self._quiet.wait()
        finally:
            self.waiting.discard(step.id)

    def unstoppable(self, step_id: str) -> bool:
        """Whether ``step_id`` is running and may already have changed things outside the run: no
        new plan version can cancel or redefine it."""
        rec = self._engine.state.steps.get(step_id)
        return rec is not None and rec.status == "running" and self._engine.may_change_world(rec.step)

    def use_tools(self, tools: Toolset) -> None:
        """Check plans against ``tools`` from now on (the run's tools changed)."""
        self._checks = replace(self._checks, tools=tools)

    def start(self, kind: PlanKind, why: str, *, announce: bool = True) -> None:
        engine = self._engine
        state = engine.state
        if kind in ("failure", "turn") and state.rounds_since_progress >= engine.config.limits.stall_rounds:
            engine.stall("no_progress", f"no step finished in the last {state.rounds_since_progress} planning rounds")
        if kind == "after_step":
            self.after_step_wanted = False
        failed = frozenset(engine.unaddressed)
        self.round_problems = ""
        self.round = kind
        engine.refresh_tools()
        if announce:
            engine.emit(PlanningStarted(at=engine.now(), trigger=kind, why=why))
        # what the planner may rely on is fixed when the round starts, so a replay decides the same
        ctx = self._context()
        self._streamed = None
        self._streaming_open = kind != "finish"
        self.task = asyncio.create_task(
            self._plan(kind, why, failed, ctx), name=f"planner:{kind}", context=engine.planning_context()
        )

    def resume_approval(self, kind: PlanKind, plan: Plan, approval_id: str) -> None:
        """After a restart: wait again for the answer about a plan the planner already proposed."""
        engine = self._engine
        record = engine.state.approvals[approval_id]
        steps = [s for s in plan.steps if engine.state.steps.get(s.id) is None or not _done(engine, s.id)]
        draft = PlanDraft(reason=plan.reason, steps=steps, answer=plan.answer)
        failed = frozenset(engine.unaddressed)

        async def wait() -> None:
            done = PlanDone(kind=kind, result=draft, failed_at_start=failed)
            request = ApprovalRequest(
                approval_id=approval_id,
                run_id=engine.run_id,
                subject="plan",
                plan=plan,
                reason=record.reason,
                rule=record.rule or "plan_approval",
            )
            await self._approve(done, request, plan.version, record)
            engine.queue.put_nowait(done)

        self.round = kind
        self.task = asyncio.create_task(wait(), name="planner:approval")

    def _context(self) -> PlanningContext:
        engine = self._engine
        budget = engine.budget
        rules = engine.config.escalation
        can_ask = engine.can_ask_humans
        return PlanningContext(
            goal=engine.goal,
            constraints=engine.constraints,
            state=engine.state,
            tools=engine.config.tools,
            executors=self._executor_docs,
            checks=self._checks,
            step_budget=budget.steps,
            budget_left=budget.left(engine.state, engine.now()),
            call=self._call,
            rejected=self._rejected,
            record=engine.config.planner.describe(engine.state),
            call_stream=self._call_streaming,
            on_step=self.streamed_step,
            escalate=self._escalate if can_ask else None,
            ask_user=self._ask_user if can_ask else None,
            confidence_floor=rules.confidence_floor,
            low_confidence_stops=rules.on_low_confidence == "stop",
            empty_plan_ok=engine.config.review is not None,
            new_step_id=self._new_step_id,
            heard=describe_heard(
                engine.state, sealed=engine.config.planner.sealed, answer_checks=self._answer_check_names()
            ),
            conversation=engine.config.conversation,
            plan_problems=self._forecast_problems if self._forecast_refuses() else None,
        )

    def _answer_check_names(self) -> tuple[str, ...]:
        """The names of the final answer's deterministic checks (what a sealed planner is told of
        a refusal by them)."""
        review = self._engine.config.review
        return () if review is None else tuple(_name_of(check) for check in review.checks)

    def answer_of(self, result: PlanDraft) -> str | None:
        """The answer template of the plan version ``result`` makes (sealed planning; else None)."""
        engine = self._engine
        if not engine.config.planner.sealed:
            return None
        return carried_answer(result, engine.state, engine.config.workflows)

    # -- the planner's requests ---------------------------------------------------------------

    def _read(self, request: ModelRequest) -> tuple[Source, ...]:
        """What untrusted text ``request`` carries (the run's one test, whatever planner built it)."""
        self.reading = self._engine.trust.read(request)
        return self.reading

    async def _call(self, model: Model, request: ModelRequest) -> ModelResponse:
        read = self._read(request)
        try:
            return await self._engine.call_model("planner", model, request, None, read=read)
        finally:
            self.reading = ()

    async def _call_streaming(
        self, model: Model, request: ModelRequest, on_text: Callable[[str], None]
    ) -> ModelResponse:
        read = self._read(request)
        try:
            return await self._engine.call_model_streaming(
                "planner", model, request, None, on_text, self.streamed_step, read=read
            )
        finally:
            self.reading = ()

    def tainted_now(self) -> bool:
        """Whether what the planner writes now in this round comes after it read untrusted text."""
        return bool(self._engine.state.round_read or self.reading)

    # -- cost forecasts -----------------------------------------------------------------------

    def _forecast_refuses(self) -> bool:
        """Whether a plan whose forecast passes a cap is refused as a plan problem."""
        engine = self._engine
        rule = engine.config.limits.over_forecast
        if rule == "run":
            return False
        return rule == "replan" or not engine.can_ask_humans

    def forecast_of(self, steps: Sequence[Step]) -> tuple[Forecast, tuple[BudgetName, ...]]:
        """What a plan version of ``steps`` is expected to cost from now, and the caps it passes."""
        engine = self._engine
        planner = engine.config.planner
        forecast = forecast_steps(
            engine.config, engine.state, engine.budget, steps, policy=planner.policy, replan=planner.replan
        )
        return forecast, over_caps(forecast, engine.state, engine.budget)

    def _forecast_problems(self, steps: Sequence[Step]) -> list[Problem]:
        """A plan problem when ``steps`` are forecast to pass a cost or token cap (a record says
        what it decided)."""
        engine = self._engine
        known, recorded = engine.world.recorded_refusal()
        if known:
            return list(recorded)
        plan = self.next_plan(list(steps), reason="")
        forecast, over = self.forecast_of(plan.steps)
        acting = [name for name in over if name in ACTING_CAPS]
        if not acting:
            return []
        message = forecast_problem(forecast, acting, engine.state, engine.budget)
        return [Problem(code="over_budget", where=f"budget.{acting[0]}", message=message)]

    def forecast_rest(self, plan: Plan) -> None:
        """Log what the rest of ``plan`` is expected to cost from now (for a question about raising
        a cap; a record's, where it has one)."""
        engine = self._engine
        known, recorded = engine.world.recorded_forecast()
        if known:
            if recorded is not None:
                engine.emit(recorded)
            return
        forecast, over = self.forecast_of(plan.steps)
        engine.emit(PlanForecast(at=engine.now(), plan_version=plan.version, forecast=forecast, over=over))

    def forecast(self, plan: Plan) -> tuple[BudgetName, ...]:
        """Log plan version ``plan``'s cost forecast (once a version; a record's, as it has it);
        the caps it passes that a forecast acts on (cost and tokens)."""
        engine = self._engine
        state = engine.state
        if plan.version not in state.forecasts:
            known, recorded = engine.world.recorded_forecast()
            if known:
                if recorded is None or recorded.plan_version != plan.version:
                    return ()
                engine.emit(recorded)
            else:
                forecast, over = self.forecast_of(plan.steps)
                engine.emit(PlanForecast(at=engine.now(), plan_version=plan.version, forecast=forecast, over=over))
        return tuple(name for name in state.over_forecast.get(plan.version, ()) if name in ACTING_CAPS)

    def _rejected(self, attempt: int, problems: list[Problem]) -> None:
        engine = self._engine
        self.round_problems = "; ".join(map(str, problems))
        engine.emit(PlannerOutputRejected(at=engine.now(), attempt=attempt, problems=tuple(problems)))

    def _new_step_id(self) -> str:
        """``s1``, ``s2``, ...: the first such id no step of the run has used."""
        state = self._engine.state
        used = {*state.steps, *(rec.id for rec in state.superseded)}
        n = len(used) + 1
        while f"s{n}" in used:
            n += 1
        return f"s{n}"

    async def _ask_human(self, request: ApprovalRequest, existing: ApprovalRecord | None = None) -> ApprovalDecision:
        """Ask a human on the planner's behalf; the planning round waits (and the run may suspend)."""
        humans = self._engine.humans
        humans.planning_waits = True
        self._engine.wake()
        try:
            return await humans.ask(request, version=None, existing=existing)
        finally:
            humans.planning_waits = False

    async def _escalate(self, code: str, detail: str) -> str | None:
        engine = self._engine
        request = ApprovalRequest(
            approval_id="",
            run_id=engine.run_id,
            subject="escalation",
            reason=detail,
            code=code,
            rule=code if code in ("unknown_tool", "low_confidence", "planner_gave_up") else None,  # type: ignore[arg-type]
        )
        decision = await self._ask_human(request)
        return _guidance(code, detail, decision)

    async def _ask_user(self, question: str) -> str:
        engine = self._engine
        request = ApprovalRequest(
            approval_id="", run_id=engine.run_id, subject="question", reason=question, rule="planner_question"
        )
        decision = await self._ask_human(request)
        return decision.text or ""

    def resume_question(self, kind: PlanKind, record: ApprovalRecord) -> None:
        """After a restart: wait again for the answer to a question the planning round asked, then
        go on with the round (the planner sees the answer, or the guidance, in what it is told)."""
        engine = self._engine
        failed = frozenset(engine.unaddressed)

        async def wait() -> None:
            done = PlanDone(kind=kind, failed_at_start=failed)
            try:
                if record.approved is None:
                    request = ApprovalRequest(
                        approval_id=record.approval_id,
                        run_id=engine.run_id,
                        subject=record.subject,
                        reason=record.reason,
                        code=record.code,
                        output=record.asked_output,
                        checklist=record.checklist,
                        rule=record.rule,
                        provenance=record.provenance,
                    )
                    decision = await self._ask_human(request, existing=record)
                else:
                    decision = _decision_of(record)
                if record.subject == "escalation":
                    _guidance(record.code or "escalation", record.reason, decision)
                elif record.subject == "answer" and record.rule == "untrusted_answer":
                    done.result = str(record.asked_output or "")
                    label = (record.provenance or {}).get("answer") or Provenance(trusted=False)
                    if decision.approved:
                        done.answer_label = label.confirmed(decision.by)
                    else:
                        done.result, done.withheld, done.answer_label = self._withheld_answer("planner", label)
                    engine.queue.put_nowait(done)
                    return
                elif record.subject == "answer":
                    answer = str(record.asked_output or "")
                    refused = self._checklist_verdict(answer, decision)
                    done.result = answer
                    done.refused = refused
                    if refused is None:
                        await self._guard_answer(done, answer)
                    engine.queue.put_nowait(done)
                    return
            except PlannerEscalated as e:
                done.escalated = e
                engine.queue.put_nowait(done)
                return
            except Exception as e:
                done.crash = e
                engine.queue.put_nowait(done)
                return
            self.task = None
            self.start(kind, f"resumed after {record.subject} {record.approval_id} was answered", announce=False)

        self.round = kind
        self.task = asyncio.create_task(wait(), name="planner:question")

    def streamed_step(self, step: Step) -> None:
        """A step of the answer still streaming: check it against what is known, and let it start.

        Early steps must come in an order that needs nothing later (dependencies first), must be new
        ids (or ids of steps that failed), and must pass the same static checks; the first that
        does not stops early starting for the rest of the answer, which is then checked whole.
        """
        engine = self._engine
        state = engine.state
        if not self._streaming_open or self.task is None:
            return
        if engine.config.escalation.confidence_floor is not None:
            self._streaming_open = False  # nothing starts before the whole answer's confidence is known
            return
        if engine.config.approvals.plan and engine.can_ask_humans:
            self._streaming_open = False  # nothing starts before a human has seen the whole plan
            return
        old = state.steps.get(step.id)
        if old is not None and old.status not in ("failed", "cancelled", "dropped"):
            self._streaming_open = False
            return
        if self._streamed is None:
            budget = engine.budget
            left = None if budget.steps is None else budget.steps - state.steps_started
            self._streamed = IncrementalChecker(with_finished(self._checks, state, left))
        if self._streamed.add(step):
            self._streaming_open = False
            return
        tainted = engine.trust.on and self.tainted_now()
        engine.emit(StepStreamed(at=engine.now(), step=step, plan_version=len(state.plans) + 1, tainted=tainted))
        self.compiled[step.id] = (step, compile_args(step.args))
        succeeded = {sid for sid, rec in state.steps.items() if rec.status == "succeeded"}
        engine.ready.add(step, succeeded)
        engine.wake()

    async def _plan(self, kind: PlanKind, why: str, failed: frozenset[str], ctx: PlanningContext) -> None:
        engine = self._engine
        done = PlanDone(kind=kind, failed_at_start=failed)
        sealed = engine.config.planner.sealed
        try:
            if kind == "initial" and not sealed:  # a remembered plan may hold values read from untrusted text
                recalled = await recall_for(engine, ctx)
                if recalled is not None and recalled.mode == "direct":
                    done.result, done.author = direct_plan(recalled), "memory"
                ctx = with_example(ctx, recalled)
            elif kind in ("finish", "turn") and not sealed:
                answer = memory_answer(engine.state)
                if answer is not None:
                    done.result, done.author = answer, "memory"
            if done.result is None:
                done.result = await engine.policy.ask(engine.config.planner, kind, ctx, why)
            approvals = engine.config.approvals
            steps = _proposed_steps(done.result)
            template = self.answer_of(done.result) if isinstance(done.result, PlanDraft) else None
            if approvals.plan and steps is not None:
                if not engine.can_ask_humans:
                    done.rejected = "every plan needs a human's approval, and nobody can be asked"
                else:
                    plan = self.next_plan(steps, reason=_reason(done.result), author=done.author, answer=template)
                    self.forecast(plan)
                    request = ApprovalRequest(
                        approval_id="",
                        run_id=engine.run_id,
                        subject="plan",
                        plan=plan,
                        reason=why,
                        rule="plan_approval",
                    )
                    await self._approve(done, request, plan.version, None)
            elif steps is not None and engine.config.limits.over_forecast == "ask" and engine.can_ask_humans:
                plan = self.next_plan(steps, reason=_reason(done.result), author=done.author, answer=template)
                over = self.forecast(plan)
                if over:
                    request = ApprovalRequest(
                        approval_id="",
                        run_id=engine.run_id,
                        subject="plan",
                        plan=plan,
                        reason=f"its cost forecast passes the {', '.join(over)} cap",
                        rule="plan_over_budget",
                    )
                    await self._approve(done, request, plan.version, None)
            answer = _final_answer(done.result)
            if answer is not None and engine.config.review is not None:
                done.refused = await self._review(answer)
            if answer is not None and done.refused is None:
                await self._guard_answer(done, answer)
        except PlannerGaveUp as e:
            done.gave_up = e
        except PlannerEscalated as e:
            done.escalated = e
        except BudgetHit as hit:
            done.budget = hit
        except Exception as e:
            done.crash = e
        except BaseException as e:  # a real cancellation goes on; nothing else may end the task unreported
            if cancelled_for_real(e):
                raise
            done.crash = e
        engine.queue.put_nowait(done)

    # -- the final answer's review ------------------------------------------------------------

    async def _review(self, answer: str) -> tuple[str, ...] | None:
        """Judge ``answer`` with every reviewer set, in order; the reasons it was refused, or None."""
        engine = self._engine
        review = engine.config.review
        assert review is not None
        if review.checks:
            known = await engine.world.answer_checks()  # the checks are code: a record knows their verdict
            if known is not None:
                if not known.passed:
                    return known.problems
            else:
                found = [await _run_check(check, answer) for check in review.checks]
                problems = tuple(p for p in found if p is not None)
                engine.emit(
                    AnswerReviewed(
                        at=engine.now(), answer=answer, passed=not problems, reviewer="checks", problems=problems
                    )
                )
                if problems:
                    return problems
        if review.judge is not None and review.rubric is not None:
            problems = await self._rubric(answer)
            engine.emit(
                AnswerReviewed(
                    at=engine.now(), answer=answer, passed=not problems, reviewer="rubric", problems=problems
                )
            )
            if problems:
                return problems
        if review.checklist:
            request = ApprovalRequest(
                approval_id="",
                run_id=engine.run_id,
                subject="answer",
                reason="review the final answer before the run ends with it",
                output=answer,
                checklist=tuple(review.checklist),
                rule="answer_checklist",
            )
            decision = await self._ask_human(request)
            return self._checklist_verdict(answer, decision)
        return None

    def _checklist_verdict(self, answer: str, decision: ApprovalDecision) -> tuple[str, ...] | None:
        engine = self._engine
        problems = [f"{r.item}: {r.note or 'failed'}" for r in decision.checklist if not r.passed]
        if not decision.approved:
            problems.insert(0, f"refused by {decision.by}: {decision.reason or 'no reason given'}")
        engine.emit(
            AnswerReviewed(
                at=engine.now(), answer=answer, passed=not problems, reviewer="human", problems=tuple(problems)
            )
        )
        return tuple(problems) if problems else None

    async def _rubric(self, answer: str) -> tuple[str, ...]:
        engine = self._engine
        review = engine.config.review
        assert review is not None
        assert review.judge is not None
        request = ModelRequest(
            messages=(
                Message(
                    role="system",
                    content="You review the final answer of an agent against a rubric. Reply with passed "
                    "(true or false) and a one-sentence reason.",
                ),
                Message(role="user", content=f"Goal: {engine.goal}\nRubric: {review.rubric}\nAnswer: {answer}"),
            ),
            output=OutputSpec(name="verdict", json_schema=_VERDICT_SCHEMA),
            settings=review.judge_settings,
            purpose="answer_review",
        )
        judge = resolve_model(review.judge, providers=engine.config.providers)
        response = await engine.call_model("judge", judge, request, None)
        parsed = response.parsed
        if not isinstance(parsed, dict) or not isinstance(parsed.get("passed"), bool):
            return (f"the judge's reply was unreadable: {response.text[:200]!r}",)
        if parsed["passed"]:
            return ()
        return (clip(f"rubric: {parsed.get('reason') or 'failed'}", REASON_CHARS),)

    async def _approve(
        self, done: PlanDone, request: ApprovalRequest, version: int, existing: ApprovalRecord | None
    ) -> None:
        humans = self._engine.humans
        if existing is not None and existing.approved is not None:  # answered before a restart
            decision = ApprovalDecision(
                approved=existing.approved,
                reason=existing.decision_reason,
                by=existing.by or "human",
                edited_plan=existing.edited_plan,
            )
        else:
            humans.planning_waits = True
            self._engine.wake()
            try:
                decision = await humans.ask(request, version=version, existing=existing)
            finally:
                humans.planning_waits = False
        if not decision.approved:
            done.rejected = decision.reason or "no reason given"
        elif decision.edited_plan is not None:
            done.edited = decision.edited_plan
            done.approver = decision.by

    def done(self, done: PlanDone) -> None:
        """Act on a planning round's outcome: install a plan, stop, or plan again."""
        engine = self._engine
        self.task = None
        if done.budget is not None:
            engine.budget_stop(done.budget, redo=("plan", (done.kind, f"the {done.budget.budget} cap was raised")))
            return
        if done.crash is not None:
            raise crash_stop(done.crash, planner=True, problems=self.round_problems)
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
            if self._news_before_answer():
                return
            if done.author == "memory":
                detail = "the remembered plan's answer"
            elif engine.config.planner.sealed:
                detail = "the plan's answer, filled in from the outputs"
            else:
                detail = "the planner gave the final answer"
            if done.withheld:
                detail += "; its untrusted parts withheld"
            raise Stop(StopReason(kind="goal_met", detail=detail), result, self._label_of(done), done.withheld)
        if isinstance(result, Turn):
            if result.stop:
                if self._news_before_answer():
                    return
                if result.answer is None:  # the planner is asked for the answer, as at the end of a plan
                    self.start("finish", "the planner stopped without the final answer")
                    return
                detail = result.thought or "the planner stopped"
                if done.withheld:
                    detail += "; the answer withheld: it was written after reading untrusted text"
                raise Stop(
                    StopReason(kind="goal_met", detail=detail), result.answer, self._label_of(done), done.withheld
                )
            assert result.step is not None
            trigger: PlanTrigger = (
                "initial"
                if done.kind == "initial"
                else "failure"
                if done.failed_at_start
                else done.kind
                if done.kind in ("information", "review")
                else "turn"
            )
            steps: list[Step] = [result.step]
            author: Author = "planner"
            reason = result.thought
            if done.edited is not None:
                steps, author, reason = self._edited(done)
            self.install(steps, trigger, reason, done.failed_at_start, author=author)
            return
        assert isinstance(result, PlanDraft)
        if set(engine.unaddressed) - done.failed_at_start:
            engine.replan_for_failures()  # steps failed while the planner worked: its plan is stale
            return
        if done.kind == "failure":
            fingerprint = json.dumps([s.model_dump(mode="json") for s in result.steps], sort_keys=True)
            if fingerprint == self.last_failure_patch:
                engine.stall("identical_patch", "the planner proposed the same patch again")
            self.last_failure_patch = fingerprint
        trigger = done.kind if done.kind in ("initial", "failure", "information", "review") else "after_step"
        steps, author, reason = result.steps, done.author, result.reason
        answer = self.answer_of(result)
        if done.edited is not None:
            steps, author, reason = self._edited(done)
            answer = done.edited.answer
        self.install(steps, trigger, reason, done.failed_at_start, author=author, answer=answer)
        if engine.unaddressed:
            engine.replan_for_failures()
        elif self.news_wanted:
            self.news()
        elif self.after_step_wanted and engine.running_steps:
            self.start("after_step", "steps finished while planning")

    def _label_of(self, done: PlanDone) -> Provenance | None:
        return done.answer_label if done.answer_label is not None else self._answer_label(done.author)

    async def _guard_answer(self, done: PlanDone, answer: str) -> None:
        """Hold a final answer that holds untrusted text to the trust policy's ``answer`` setting:
        ask a human about it, or withhold its untrusted parts (``done`` carries the outcome)."""
        engine = self._engine
        policy = engine.trust.policy
        if policy is None or policy.answer == "label":
            return
        label = self._answer_label(done.author)
        if label is None or label.trusted:
            return
        if policy.answer == "ask" and engine.can_ask_humans:
            request = ApprovalRequest(
                approval_id="",
                run_id=engine.run_id,
                subject="answer",
                reason=f"the final answer holds text the run does not trust ({label})",
                output=answer,
                provenance={"answer": label},
                rule="untrusted_answer",
            )
            decision = await self._ask_human(request)
            if decision.approved:
                done.answer_label = label.confirmed(decision.by)
                return
        kept, done.withheld, done.answer_label = self._withheld_answer(done.author, label)
        if isinstance(done.result, Turn):
            done.result = done.result.model_copy(update={"answer": kept})
        else:
            done.result = kept

    def _withheld_answer(self, author: Author, label: Provenance) -> tuple[str, tuple[str, ...], Provenance]:
        """The final answer without its untrusted parts, the steps left out (``*``: all of it) and
        the label of what is left. A template's placeholders of untrusted outputs say so in their
        place; an answer a planner wrote after reading untrusted text is withheld whole."""
        engine = self._engine
        trust, state = engine.trust, engine.state
        template: str | None = None
        writer_trusted = True
        if author == "memory":
            recalled = state.recalled
            template = recalled.answer if recalled is not None else None
        elif engine.config.planner.sealed and state.plan is not None:
            plan = state.plan
            template = plan.answer if plan.answer is not None else default_template(plan)
            writer_trusted = plan.author == "human" or not state.plan_reads.get(plan.version, ())
        if template is not None and writer_trusted:
            quoted = dict.fromkeys(p.ref.step_id for p in placeholders(template))
            out = tuple(sid for sid in quoted if not trust.output_of(sid).trusted)
            try:
                kept = fill_template(
                    template, state.outputs, max_value_chars=ANSWER_VALUE_CHARS, max_chars=ANSWER_CHARS, withhold=out
                )
            except BindingError:
                kept = None
            if kept is not None:
                sources = tuple(s for s in label.sources if s.trusted)
                return kept, out, Provenance(trusted=True, sources=sources)
        read = ", ".join(str(s) for s in label.untrusted_sources) or "untrusted text"
        notice = f"[withheld: the answer was written after reading untrusted text ({read}); the run's log keeps it]"
        return clip(notice, ANSWER_VALUE_CHARS), ("*",), Provenance(trusted=True)

    def _answer_label(self, author: Author) -> Provenance | None:
        """The final answer's label: an answer filled in from a template (plan memory's, a sealed
        plan's) is as trusted as the template's author and the outputs it quotes; the planner's
        own answer, as the round that wrote it."""
        engine = self._engine
        trust = engine.trust
        if not trust.on:
            return None
        state = engine.state
        if author == "memory":
            recalled = state.recalled
            template = recalled.answer if recalled is not None and recalled.answer is not None else ""
            memory = Provenance.of(Source(kind="memory", trusted=True))
            return trust.template_answer(template, memory)
        plan = state.plan
        if engine.config.planner.sealed and plan is not None:
            template = plan.answer if plan.answer is not None else default_template(plan) or ""
            read = state.plan_reads.get(plan.version, ())
            if plan.author == "human":
                writer = Provenance.of(Source(kind="human", trusted=True))
            else:
                writer = Provenance(trusted=not read, sources=(Source(kind="planner", trusted=not read), *read))
            return trust.template_answer(template, writer)
        return trust.answer(state)

    def _news_before_answer(self) -> bool:
        """New information arrived while the planner wrote its final answer, which did not see it:
        the planner plans again with it instead of ending the run (True when it does)."""
        state = self._engine.state
        if state.heard >= len(state.information):
            return False
        self.news_wanted = False
        kind = self._engine.policy.round_after("news_before_answer")
        news = state.information[-1].text[:200]
        self.start(kind, f"new information arrived while the final answer was written: {news}")
        return True

    def news(self) -> None:
        """New information is in the log: plan with it at the next safe point. With the upfront
        policy, a patch round starts now (or once the round under way ends); step by step, the
        next turn reads it."""
        engine = self._engine
        state = engine.state
        self.news_wanted = False
        if state.finished or state.heard >= len(state.information):
            return
        if not self.idle:
            self.news_wanted = True
            return
        kind = engine.policy.news_round(state)
        if kind is not None:
            self.start(kind, "new information: " + state.information[-1].text[:200])

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
        self.start(kind, f"the final answer was refused: {why}")

    def _gave_up(self, gave_up: PlannerGaveUp) -> None:
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

    def _edited(self, done: PlanDone) -> tuple[list[Step], Author, str]:
        """A human's edit of the proposed plan: its unfinished steps, checked like the planner's."""
        engine = self._engine
        assert done.edited is not None
        steps = [s for s in done.edited.steps if not _done(engine, s.id)]
        budget = engine.budget
        max_steps = None if budget.steps is None else budget.steps - engine.state.steps_started
        checks = with_finished(self._checks, engine.state, max_steps)
        problems = check_steps(steps, checks)
        template = done.edited.answer
        if template is not None and not engine.config.planner.sealed:
            message = "only a sealed planner's plan carries an answer template (the planner writes this run's answer)"
            problems.append(Problem(code="answer_template", where="answer", message=message))
        elif template is not None:
            problems += template_problems(template, {*(s.id for s in steps), *checks.finished, *checks.running})
        if problems:
            detail = "the edited plan failed its static checks: " + "; ".join(map(str, problems))
            raise error_stop("usage", detail)
        return steps, "human", done.edited.reason or f"edited by {done.approver}"

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
        engine = self._engine
        plan = self.next_plan(steps, reason=reason, author=author, answer=answer)
        new = {s.id: s for s in plan.steps}
        running = engine.running_steps
        # a running step that may have changed the world is in ``new`` unchanged: it is never cancelled
        obsolete = [sid for sid in running if sid not in new or new[sid] != engine.state.steps[sid].step]
        for sid in obsolete:
            engine.cancel_step(sid)
            engine.emit(StepCancelled(at=engine.now(), step_id=sid, reason=f"obsolete after plan v{plan.version}"))
        self.forecast(plan)
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
        succeeded = {sid for sid, rec in state.steps.items() if rec.status == "succeeded"}
        engine.ready.load(plan.steps, succeeded, waiting)

    def compiled_args(self, step: Step) -> CompiledArgs:
        cached = self.compiled.get(step.id)
        if cached is None or cached[0] is not step:
            cached = (step, compile_args(step.args))
            self.compiled[step.id] = cached
        return cached[1]


_REPLACING: frozenset[PlanKind | None] = frozenset({"failure", "after_step", "information", "review", "turn"})
"""Rounds that may replace the plan in force (the first plan and the final answer replace nothing)."""


_VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"passed": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["passed", "reason"],
    "additionalProperties": False,
}


REASON_CHARS = 2_000
"""The most of a reviewer's reason (a check's objection, the judge's) that is kept: it is logged,
shown and sent to the planner with every round."""


async def _run_check(check: AnswerCheck, answer: str) -> str | None:
    """A deterministic answer check's objection, or None when it accepts the answer.

    The check runs in a worker thread, so one that never returns leaves the run to its wall-time
    budget and to cancellation rather than stopping the event loop; an awaitable it returns (an
    ``async def`` check) is awaited. Whatever goes wrong in it is an objection that says why."""
    name = _name_of(check)
    try:
        result = await run_in_thread(functools.partial(check, answer))  # in a copy of the context
        if inspect.isawaitable(result):
            result = await result
    except Exception as e:
        return clip(f"{name}: the check raised {_described(e)}", REASON_CHARS)
    if result is None or result is True:
        return None
    if result is False:
        return f"{name}: refused"
    if isinstance(result, str):
        return clip(f"{name}: {result}", REASON_CHARS)
    return f"{name}: refused (it returned a {type(result).__name__}, not True, None, False or text)"


def _name_of(check: object) -> str:
    try:
        name = getattr(check, "__name__", None)
    except Exception:
        name = None
    return clip(name, 200) if isinstance(name, str) else type(check).__name__


def _described(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:
        text = "(its message cannot be shown)"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _guidance(code: str, detail: str, decision: ApprovalDecision) -> str | None:
    """A human's answer to an escalation: guidance text, None (plan again), or a stop."""
    if not decision.approved:
        why = decision.reason or "no reason given"
        raise PlannerEscalated(code, f"{detail}; {decision.by} stopped the run: {why}")
    return decision.text if decision.choice != "replan" else None


def _decision_of(record: ApprovalRecord) -> ApprovalDecision:
    return ApprovalDecision(
        approved=bool(record.approved),
        reason=record.decision_reason,
        by=record.by or "human",
        choice=record.choice,
        text=record.text,
        checklist=record.checklist_results,
    )


def _final_answer(result: PlanDraft | Turn | str | None) -> str | None:
    if isinstance(result, str):
        return result
    if isinstance(result, Turn) and result.stop:
        return result.answer
    return None


def _done(engine: _Loop, step_id: str) -> bool:
    rec = engine.state.steps.get(step_id)
    return rec is not None and rec.status == "succeeded"


def _proposed_steps(result: PlanDraft | Turn | str | None) -> list[Step] | None:
    if isinstance(result, PlanDraft):
        return result.steps
    if isinstance(result, Turn) and not result.stop and result.step is not None:
        return [result.step]
    return None


def _reason(result: PlanDraft | Turn | str | None) -> str:
    if isinstance(result, PlanDraft):
        return result.reason
    if isinstance(result, Turn):
        return result.thought
    return ""
