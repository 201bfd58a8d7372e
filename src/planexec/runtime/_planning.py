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
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from planexec.errors import Problem
from planexec.executor import Executor, executor_profile
from planexec.log import ApprovalRecord, PlannerOutputRejected, PlanningStarted, QuestionRule, StepStreamed
from planexec.models import Model, ModelRequest, ModelResponse, cancelled_for_real
from planexec.plan import CheckContext, CompiledArgs, IncrementalChecker, Plan, PlanDraft, Step, Turn, compile_args
from planexec.planner import PlannerEscalated, PlannerGaveUp, PlanningContext, describe_heard, with_finished
from planexec.runtime._budget import BudgetHit
from planexec.runtime._core import EngineConfig
from planexec.runtime._decisions import recorded_decision
from planexec.runtime._final_answer import AnswerChecks, AnswerLoop, Guarded
from planexec.runtime._humans import Humans
from planexec.runtime._plan_outcomes import OutcomeLoop, PlanDone, RoundOutcomes
from planexec.runtime._plan_questions import PlannerQuestions, guidance
from planexec.runtime._plan_versions import PlanVersions, VersionLoop, succeeded, succeeded_ids
from planexec.runtime._policies import PlanKind
from planexec.runtime._recall import direct_plan, memory_answer, recall_for, with_example
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest
from planexec.tools import Toolset
from planexec.trust import Provenance, Source

__all__ = ["PlanDone", "Planning", "PlanningLoop", "executor_docs", "plan_checks"]


class PlanningLoop(VersionLoop, OutcomeLoop, AnswerLoop, Protocol):
    """What planning sees of the loop, beyond what its parts see."""

    constraints: tuple[str, ...]
    humans: Humans
    queue: asyncio.Queue[Any]

    def refresh_tools(self) -> None: ...

    def planning_context(self) -> contextvars.Context | None: ...


class Planning:
    """Owns the one planning task a run has at a time."""

    def __init__(self, engine: PlanningLoop, checks: CheckContext, executor_docs: dict[str, str]) -> None:
        self._engine = engine
        self._executor_docs = executor_docs
        self.versions = PlanVersions(engine, checks)
        """Plan versions: made, forecast and put in force."""
        self.questions = PlannerQuestions(engine)
        """What the rounds ask humans."""
        self.answers = AnswerChecks(engine, self.questions.ask)
        """The final answer's review, and the trust policy's hold on it."""
        self._outcomes = RoundOutcomes(engine, self)
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

    def use_tools(self, tools: Toolset) -> None:
        """Check plans against ``tools`` from now on (the run's tools changed)."""
        self.versions.use_tools(tools)

    def load(self, plan: Plan) -> None:
        """Index a plan version for dispatch (a resumed run's plan in force)."""
        self.versions.load(plan)

    def compiled_args(self, step: Step) -> CompiledArgs:
        """``step``'s bindings, compiled once."""
        return self.versions.compiled_args(step)

    def forecast_rest(self, plan: Plan) -> None:
        """Log what the rest of ``plan`` is expected to cost from now (for a question about raising a cap)."""
        self.versions.costs.rest(plan)

    # -- rounds -------------------------------------------------------------------------------

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

    def done(self, done: PlanDone) -> None:
        """Act on a planning round's outcome: install a plan, stop, or plan again."""
        self.task = None
        self._outcomes.act(done)

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

    def _context(self) -> PlanningContext:
        engine = self._engine
        budget = engine.budget
        rules = engine.config.escalation
        can_ask = engine.can_ask_humans
        costs = self.versions.costs
        return PlanningContext(
            goal=engine.goal,
            constraints=engine.constraints,
            state=engine.state,
            tools=engine.config.tools,
            executors=self._executor_docs,
            checks=self.versions.checks,
            step_budget=budget.steps,
            budget_left=budget.left(engine.state, engine.now()),
            call=self._call,
            rejected=self._rejected,
            record=engine.config.planner.describe(engine.state),
            call_stream=self._call_streaming,
            on_step=self.streamed_step,
            escalate=self.questions.escalate if can_ask else None,
            ask_user=self.questions.ask_user if can_ask else None,
            confidence_floor=rules.confidence_floor,
            low_confidence_stops=rules.on_low_confidence == "stop",
            empty_plan_ok=engine.config.review is not None,
            new_step_id=self._new_step_id,
            heard=describe_heard(
                engine.state, sealed=engine.config.planner.sealed, answer_checks=self.answers.check_names()
            ),
            conversation=engine.config.conversation,
            plan_problems=costs.problems if costs.refuses() else None,
        )

    async def _plan(self, kind: PlanKind, why: str, failed: frozenset[str], ctx: PlanningContext) -> None:
        engine = self._engine
        done = PlanDone(kind=kind, failed_at_start=failed)
        try:
            ctx = await self._from_memory(done, ctx)
            if done.result is None:
                done.result = await engine.policy.ask(engine.config.planner, kind, ctx, why)
            await self._approval(done, why)
            answer = _final_answer(done.result)
            if answer is not None and engine.config.review is not None:
                done.refused = await self.answers.review(answer)
            if answer is not None and done.refused is None:
                _guarded(done, await self.answers.guard(done.author, answer))
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

    async def _from_memory(self, done: PlanDone, ctx: PlanningContext) -> PlanningContext:
        """What plan memory gives the round: a remembered plan or answer (``done.result``), or an
        example for the planner (in the context returned)."""
        engine = self._engine
        if engine.config.planner.sealed:
            return ctx
        if done.kind == "initial":  # a remembered plan may hold values read from untrusted text
            recalled = await recall_for(engine, ctx)
            if recalled is not None and recalled.mode == "direct":
                done.result, done.author = direct_plan(recalled), "memory"
            return with_example(ctx, recalled)
        if done.kind in ("finish", "turn"):
            answer = memory_answer(engine.state)
            if answer is not None:
                done.result, done.author = answer, "memory"
        return ctx

    async def _approval(self, done: PlanDone, why: str) -> None:
        """Ask a human about the proposed plan where the run says so: every plan, or a plan whose
        cost forecast passes a cap."""
        engine = self._engine
        steps = _proposed_steps(done.result)
        if steps is None:
            return
        approvals = engine.config.approvals
        asks_over = engine.config.limits.over_forecast == "ask" and engine.can_ask_humans
        if not approvals.plan and not asks_over:
            return
        if approvals.plan and not engine.can_ask_humans:
            done.rejected = "every plan needs a human's approval, and nobody can be asked"
            return
        assert done.result is not None
        template = self.versions.answer_of(done.result) if isinstance(done.result, PlanDraft) else None
        plan = self.versions.next_plan(steps, reason=_reason(done.result), author=done.author, answer=template)
        over = self.versions.costs.forecast(plan)
        rule: QuestionRule
        if approvals.plan:
            reason, rule = why, "plan_approval"
        elif over:
            reason, rule = f"its cost forecast passes the {', '.join(over)} cap", "plan_over_budget"
        else:
            return
        request = ApprovalRequest(
            approval_id="", run_id=engine.run_id, subject="plan", plan=plan, reason=reason, rule=rule
        )
        _approved(done, await self.questions.approve(request, plan.version, None))

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
            self._streamed = IncrementalChecker(with_finished(self.versions.checks, state, left))
        if self._streamed.add(step):
            self._streaming_open = False
            return
        tainted = engine.trust.on and self.tainted_now()
        engine.emit(StepStreamed(at=engine.now(), step=step, plan_version=len(state.plans) + 1, tainted=tainted))
        self.versions.compiled[step.id] = (step, compile_args(step.args))
        engine.ready.add(step, succeeded_ids(engine))
        engine.wake()

    # -- after a restart ----------------------------------------------------------------------

    def resume_approval(self, kind: PlanKind, plan: Plan, approval_id: str) -> None:
        """After a restart: wait again for the answer about a plan the planner already proposed."""
        engine = self._engine
        record = engine.state.approvals[approval_id]
        steps = [s for s in plan.steps if engine.state.steps.get(s.id) is None or not succeeded(engine, s.id)]
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
            _approved(done, await self.questions.approve(request, plan.version, record))
            engine.queue.put_nowait(done)

        self.round = kind
        self.task = asyncio.create_task(wait(), name="planner:approval")

    def resume_question(self, kind: PlanKind, record: ApprovalRecord) -> None:
        """After a restart: wait again for the answer to a question the planning round asked, then
        go on with the round (the planner sees the answer, or the guidance, in what it is told)."""
        engine = self._engine
        failed = frozenset(engine.unaddressed)

        async def wait() -> None:
            done = PlanDone(kind=kind, failed_at_start=failed)
            try:
                ended = await self._answered_question(done, record)
            except PlannerEscalated as e:
                done.escalated, ended = e, True
            except Exception as e:
                done.crash, ended = e, True
            if ended:
                engine.queue.put_nowait(done)
                return
            self.task = None
            self.start(kind, f"resumed after {record.subject} {record.approval_id} was answered", announce=False)

        self.round = kind
        self.task = asyncio.create_task(wait(), name="planner:question")

    async def _answered_question(self, done: PlanDone, record: ApprovalRecord) -> bool:
        """The answer to a question a round asked before a restart, taken up: True when it ends
        the round (an answer about the final answer), False when the round is to be asked again."""
        if record.approved is None:
            request = ApprovalRequest(
                approval_id=record.approval_id,
                run_id=self._engine.run_id,
                subject=record.subject,
                reason=record.reason,
                code=record.code,
                output=record.asked_output,
                checklist=record.checklist,
                rule=record.rule,
                provenance=record.provenance,
            )
            decision = await self.questions.ask(request, existing=record)
        else:
            decision = recorded_decision(record)
        if record.subject == "escalation":
            guidance(record.code or "escalation", record.reason, decision)
        elif record.subject == "answer" and record.rule == "untrusted_answer":
            done.result = str(record.asked_output or "")
            label = (record.provenance or {}).get("answer") or Provenance(trusted=False)
            if decision.approved:
                done.answer_label = label.confirmed(decision.by)
            else:
                _guarded(done, self.answers.withheld("planner", label))
            return True
        elif record.subject == "answer":
            answer = str(record.asked_output or "")
            done.result = answer
            done.refused = self.answers.checklist_verdict(answer, decision)
            if done.refused is None:
                _guarded(done, await self.answers.guard(done.author, answer))
            return True
        return False


_REPLACING: frozenset[PlanKind | None] = frozenset({"failure", "after_step", "information", "review", "turn"})
"""Rounds that may replace the plan in force (the first plan and the final answer replace nothing)."""


def plan_checks(config: EngineConfig) -> CheckContext:
    """What the run's plans are checked against."""
    return CheckContext(
        tools=config.tools,
        executors={name: e.kind for name, e in config.executors.items()},
        default_executor=config.default_executor,
        predicates=tuple(config.acceptance.predicates),
        workflows=config.workflows,
        sealed=config.planner.sealed,
        extractors=() if config.planner.extractor_name is None else (config.planner.extractor_name,),
    )


def executor_docs(config: EngineConfig) -> dict[str, str]:
    """What the planner is told about each executor (a record's profiles, where it has them)."""
    profiles = config.executor_profiles or {}
    executors: Mapping[str, Executor] = config.executors
    return {
        name: (profiles.get(name) or executor_profile(e)).text()
        for name, e in executors.items()
        if e.kind == "model" or name != "tools"
    }


def _approved(done: PlanDone, decision: ApprovalDecision) -> None:
    """A human's answer about the proposed plan, in the round's outcome."""
    if not decision.approved:
        done.rejected = decision.reason or "no reason given"
    elif decision.edited_plan is not None:
        done.edited = decision.edited_plan
        done.approver = decision.by


def _guarded(done: PlanDone, guarded: Guarded | None) -> None:
    """What the trust policy made of the final answer, in the round's outcome."""
    if guarded is None:
        return
    done.answer_label = guarded.label
    if guarded.answer is None:  # confirmed by a human as it is
        return
    done.withheld = guarded.withheld
    if isinstance(done.result, Turn):
        done.result = done.result.model_copy(update={"answer": guarded.answer})
    else:
        done.result = guarded.answer


def _final_answer(result: PlanDraft | Turn | str | None) -> str | None:
    if isinstance(result, str):
        return result
    if isinstance(result, Turn) and result.stop:
        return result.answer
    return None


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
