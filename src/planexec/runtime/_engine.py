"""The run loop: plan, dispatch ready steps, judge results, patch on failure, stop with a reason.

One coroutine owns the run. Steps and planning rounds run as tasks and report back through one
queue; the loop alone decides what happens next, and every decision is an event appended to the
log (and folded into the state) before anything acts on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from planexec._errors import UsageError
from planexec.executor._acceptance import Acceptance
from planexec.executor._base import Executor, StepFailure
from planexec.executor._outcome import StepError, Verdict
from planexec.models._base import Model, ModelRequest, ModelResponse, ToolCall, estimate_tokens
from planexec.plan._bindings import BindingError, CompiledArgs, compile_args
from planexec.plan._checks import CheckContext
from planexec.plan._plan import Plan, PlanDraft, Turn
from planexec.plan._step import Step
from planexec.planner._planner import Planner, PlannerGaveUp, PlanningContext, with_finished
from planexec.runtime._budget import Budget, BudgetHit
from planexec.runtime._events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    ModelCalled,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    PlanTrigger,
    RunFinished,
    RunStarted,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepStarted,
    StepSucceeded,
    ToolCalled,
)
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest, Approvals, Limits, RunContext
from planexec.runtime._state import RunState, canonical_call
from planexec.runtime._stop import StopReason
from planexec.tools._tool import Tool, ToolContext, call_with_timeout
from planexec.tools._toolset import Toolset

if TYPE_CHECKING:
    import random

__all__ = ["Engine", "EngineConfig"]

PlanKind = Literal["initial", "failure", "after_step", "turn", "finish"]


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    planner: Planner
    tools: Toolset
    executors: Mapping[str, Executor]
    default_executor: str | None
    budget: Budget
    limits: Limits
    acceptance: Acceptance
    approvals: Approvals
    context: RunContext


class _Stop(Exception):
    def __init__(self, reason: StopReason, answer: str | None = None) -> None:
        self.reason = reason
        self.answer = answer
        super().__init__(str(reason))


@dataclass(slots=True)
class _StepDone:
    step_id: str
    token: int
    output: Any = None
    verdict: Verdict | None = None
    error: StepError | None = None
    attempts: int = 1
    started: bool = True
    budget: BudgetHit | None = None
    crash: BaseException | None = None


@dataclass(slots=True)
class _PlanDone:
    kind: PlanKind
    result: PlanDraft | Turn | str | None = None
    failed_at_start: frozenset[str] = frozenset()
    gave_up: PlannerGaveUp | None = None
    budget: BudgetHit | None = None
    rejected: str | None = None
    crash: BaseException | None = None


class Engine:
    """Runs one goal to a stop. Build it, then ``await engine.run()``; events stream meanwhile."""

    def __init__(self, config: EngineConfig, *, goal: str, constraints: tuple[str, ...], run_id: str) -> None:
        self.config = config
        self.goal = goal
        self.constraints = constraints
        self.run_id = run_id
        self.state = RunState()
        self.events: list[Event] = []
        self._listeners: list[Callable[[Event], None]] = []
        self._clock = config.context.clock
        self._rng: random.Random = config.context.rng()
        self._queue: asyncio.Queue[_StepDone | _PlanDone] = asyncio.Queue()
        self._ready = ReadyQueue()
        self._compiled: dict[str, tuple[Step, CompiledArgs]] = {}
        self._running: dict[str, tuple[asyncio.Task[None], int]] = {}
        self._tokens: dict[str, int] = {}
        self._per_tool: dict[str, int] = {}
        self._per_executor: dict[str, int] = {}
        self._inner_limits: dict[str, asyncio.Semaphore] = {}
        # Committed to but not in the log yet: counted against the budgets so that work started
        # together cannot overrun a cap together.
        self._unstarted = 0
        self._unstarted_tool_calls = 0
        self._model_calls_in_flight = 0
        self._model_tokens_in_flight = 0
        self._inner_tool_calls_in_flight = 0
        self._planning: asyncio.Task[None] | None = None
        self._unaddressed: list[str] = []
        self._after_step_wanted = False
        self._last_failure_patch: str | None = None
        self._finished = False
        executors = {name: e.kind for name, e in config.executors.items()}
        self._checks = CheckContext(
            tools=config.tools,
            executors=executors,
            default_executor=config.default_executor,
            predicates=tuple(config.acceptance.predicates),
        )
        self._executor_docs = {
            name: ("runs tool steps" if e.kind == "tools" else "a model that reasons and may call tools")
            for name, e in config.executors.items()
            if e.kind == "model" or name != "tools"
        }

    # -- the event log ---------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[Event], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event: Event) -> None:
        self.events.append(event)
        self.state.apply(event)
        for listener in self._listeners:
            listener(event)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> RunState:
        cfg = self.config
        self.emit(self._started())
        stop: _Stop
        try:
            async with asyncio.timeout(cfg.budget.wall_time) as deadline:
                try:
                    await self._loop()
                except _Stop as s:
                    stop = s
        except TimeoutError:
            if not deadline.expired():
                raise
            limit = cfg.budget.wall_time or 0.0
            self.emit(BudgetExhaustedEvent(at=self._clock(), budget="wall_time", limit=limit, used=limit))
            stop = _Stop(
                StopReason(kind="budget_exhausted", budget="wall_time", detail=f"wall time of {limit:g}s used up")
            )
        except asyncio.CancelledError:
            await self._shutdown("run cancelled")
            self._finish(_Stop(StopReason(kind="cancelled", detail="the run was cancelled")))
            raise
        except UsageError as e:
            stop = _Stop(StopReason(kind="error", detail=str(e)))
        except Exception as e:  # a defect must still end the run with a reason, never hang it
            stop = _Stop(StopReason(kind="error", detail=f"internal error: {type(e).__name__}: {e}"))
        await self._shutdown(f"run stopped: {stop.reason.kind}")
        self._finish(stop)
        return self.state

    def _started(self) -> RunStarted:
        cfg = self.config
        return RunStarted(
            at=self._clock(),
            run_id=self.run_id,
            goal=self.goal,
            constraints=self.constraints,
            policy=cfg.planner.policy,
            replan=cfg.planner.replan,
            budget=cfg.budget.as_dict(),
            tools=cfg.tools.names,
        )

    def finish_unstarted(self) -> None:
        """Close the log of a run cancelled before its loop ever ran."""
        if not self.events:
            self.emit(self._started())
        self._finish(_Stop(StopReason(kind="cancelled", detail="the run was cancelled before it started")))

    def _finish(self, stop: _Stop) -> None:
        if not self._finished:
            self._finished = True
            self.emit(RunFinished(at=self._clock(), stop=stop.reason, answer=stop.answer))

    async def _shutdown(self, reason: str) -> None:
        tasks: list[asyncio.Task[None]] = []
        for sid, (task, _token) in list(self._running.items()):
            task.cancel()
            tasks.append(task)
            if not self._finished:
                self.emit(StepCancelled(at=self._clock(), step_id=sid, reason=reason))
        self._running.clear()
        if self._planning is not None:
            self._planning.cancel()
            tasks.append(self._planning)
            self._planning = None
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self) -> None:
        self._start_planning("initial", "the run started")
        while True:
            self._dispatch()
            if not self._running and self._planning is None:
                self._when_idle()
            done = await self._queue.get()
            if isinstance(done, _StepDone):
                self._step_done(done)
            else:
                self._plan_done(done)

    def _when_idle(self) -> None:
        """Nothing runs and nobody plans: replan, take the next turn, finish, or stop."""
        if self._unaddressed:
            self._replan_for_failures()
            return
        plan = self.state.plan
        waiting = [s.id for s in plan.steps if self.state.steps[s.id].status == "pending"] if plan else []
        if waiting:
            raise _Stop(StopReason(kind="error", detail=f"steps can never start: {', '.join(waiting)}"))
        if self.config.planner.policy == "step":
            self._start_planning("turn", "a step finished")
        else:
            self._start_planning("finish", "every step finished")

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        room = self.config.limits.max_concurrency - len(self._running)
        if room <= 0 or not self._ready.has_ready:
            return
        try:
            steps = self._ready.pop(self._reserve, room)
        except BudgetHit as hit:
            self._budget_stop(hit)
        for step in steps:
            token = self._tokens.get(step.id, 0) + 1
            self._tokens[step.id] = token
            task = asyncio.create_task(self._run_step(step, self._executor_of(step), token), name=f"step:{step.id}")
            self._running[step.id] = (task, token)

    def _reserve(self, step: Step) -> bool:
        """Whether the limits let ``step`` start now; if so, count it against them at once.

        Raises ``BudgetHit`` when the step or its tool call would go over a budget.
        """
        executor = self._executor_of(step)
        if step.tool is not None and step.tool in self.config.tools:
            cap = self.config.tools.get(step.tool).max_concurrency
            if cap is not None and self._per_tool.get(step.tool, 0) >= cap:
                return False
        cap = executor.max_concurrency
        if cap is not None and self._per_executor.get(executor.name, 0) >= cap:
            return False
        budget = self.config.budget
        budget.check_step(self.state, in_flight=self._unstarted)
        if step.tool is not None:
            budget.check_tool_call(self.state, self._clock(), in_flight=self._unstarted_tool_calls)
            self._per_tool[step.tool] = self._per_tool.get(step.tool, 0) + 1
            self._unstarted_tool_calls += 1
        self._per_executor[executor.name] = self._per_executor.get(executor.name, 0) + 1
        self._unstarted += 1
        return True

    def _executor_of(self, step: Step) -> Executor:
        name = step.executor or ("tools" if step.tool is not None else self.config.default_executor)
        return self.config.executors[name or "tools"]

    def _release(self, step_id: str) -> None:
        self._running.pop(step_id, None)
        step = self.state.steps[step_id].step
        if step.tool is not None:
            self._per_tool[step.tool] -= 1
        self._per_executor[self._executor_of(step).name] -= 1

    # -- one step --------------------------------------------------------------------------

    async def _run_step(self, step: Step, executor: Executor, token: int) -> None:
        ctx = _StepCtx(self, step)
        done = _StepDone(step_id=step.id, token=token, started=False)
        reserved = True
        try:
            await self._gate(step)
            try:
                args = self._compiled[step.id][1].resolve(self.state.outputs)
            except BindingError as e:
                raise StepFailure(StepError(kind="binding", message=str(e), problems=tuple(e.problems))) from None
            done.started = True
            reserved = False
            self._unreserve(step)
            self.emit(StepStarted(at=self._clock(), step_id=step.id, executor=executor.name, tool=step.tool, args=args))
            done.output = await executor.run(step, args, ctx)
            done.verdict = await self.config.acceptance.verdict(step, done.output, ctx)
            if not done.verdict.passed:
                reasons = "; ".join(f"{c.name}: {c.detail}" for c in done.verdict.failures)
                done.error = StepError(kind="acceptance", message=f"acceptance checks failed: {reasons}")
        except StepFailure as f:
            done.error = f.error
        except BudgetHit as hit:
            done.budget = hit
        except UsageError as e:
            done.crash = e
        except asyncio.CancelledError:
            raise
        except Exception as e:
            done.error = StepError(kind="tool_error", message=f"{type(e).__name__}: {e}")
        finally:
            if reserved:
                self._unreserve(step)
        done.attempts = ctx.attempts
        self._queue.put_nowait(done)

    def _unreserve(self, step: Step) -> None:
        self._unstarted -= 1
        if step.tool is not None:
            self._unstarted_tool_calls -= 1

    async def _gate(self, step: Step) -> None:
        """The confidence gate and step approvals, before a step runs."""
        cfg = self.config
        approver = cfg.approvals.approver
        tool = cfg.tools.get(step.tool) if step.tool is not None and step.tool in cfg.tools else None
        sensitive = (tool is not None and tool.sensitive) or step.approval == "always"
        low = step.confidence is not None and step.confidence < cfg.limits.confidence_threshold
        ask = step.approval == "always" or (
            approver is not None
            and step.approval != "never"
            and (cfg.approvals.steps == "all" or (cfg.approvals.steps == "sensitive" and sensitive))
        )
        if sensitive and low:
            if approver is None:
                raise StepFailure(
                    StepError(
                        kind="low_confidence",
                        message=f"sensitive step not run: confidence {step.confidence:.2f} is under "
                        f"{cfg.limits.confidence_threshold:.2f} and no human can approve it",
                    )
                )
            ask = True
        if not ask:
            return
        if approver is None:
            raise StepFailure(
                StepError(kind="rejected", message="the step needs a human's approval and no approver is configured")
            )
        if sensitive and low:
            why = f"low confidence ({step.confidence:.2f}) on a sensitive step"
        elif tool is not None and tool.sensitive:
            why = f"sensitive tool {tool.name}"
        else:
            why = f"approval policy {step.approval!r}"
        decision = await self._ask(
            ApprovalRequest(approval_id="", run_id=self.run_id, subject="step", step=step, reason=why)
        )
        if not decision.approved:
            raise StepFailure(StepError(kind="rejected", message=f"a human rejected the step: {decision.reason}"))

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        approver = self.config.approvals.approver
        assert approver is not None
        approval_id = self.config.context.new_id()
        request = ApprovalRequest(
            approval_id=approval_id,
            run_id=request.run_id,
            subject=request.subject,
            reason=request.reason,
            plan=request.plan,
            step=request.step,
        )
        self.emit(
            ApprovalRequested(
                at=self._clock(),
                approval_id=approval_id,
                subject=request.subject,
                step_id=request.step.id if request.step else None,
                plan_version=request.plan.version if request.plan else None,
                reason=request.reason,
            )
        )
        answer = await approver(request)
        decision = answer if isinstance(answer, ApprovalDecision) else ApprovalDecision(approved=bool(answer))
        self.emit(
            ApprovalDecided(
                at=self._clock(),
                approval_id=approval_id,
                approved=decision.approved,
                by=decision.by,
                reason=decision.reason,
            )
        )
        return decision

    def _step_done(self, done: _StepDone) -> None:
        current = self._running.get(done.step_id)
        if current is None or current[1] != done.token:
            return  # a cancelled or superseded attempt
        self._release(done.step_id)
        if done.crash is not None:
            raise _Stop(StopReason(kind="error", detail=str(done.crash)))
        if done.budget is not None:
            self.emit(
                StepFailed(
                    at=self._clock(),
                    step_id=done.step_id,
                    error=StepError(kind="budget", message=str(done.budget)),
                    attempts=done.attempts,
                    started=done.started,
                )
            )
            self._budget_stop(done.budget)
        if done.error is None:
            assert done.verdict is not None
            self.emit(
                StepSucceeded(
                    at=self._clock(),
                    step_id=done.step_id,
                    output=done.output,
                    verdict=done.verdict,
                    attempts=done.attempts,
                )
            )
            self._ready.succeeded(done.step_id)
            if self.config.planner.replan == "after_each_step" and self.config.planner.policy == "upfront":
                self._after_step_wanted = True
                if self._planning is None:
                    self._start_planning("after_step", f"step {done.step_id} finished")
            return
        self.emit(
            StepFailed(
                at=self._clock(),
                step_id=done.step_id,
                error=done.error,
                verdict=done.verdict,
                output=done.output if done.verdict is not None else None,
                attempts=done.attempts,
                started=done.started,
            )
        )
        self._route_failure(done.step_id, done.error)

    def _route_failure(self, step_id: str, error: StepError) -> None:
        if error.kind == "rejected":
            raise _Stop(StopReason(kind="rejected", detail=f"step {step_id}: {error.message}"))
        rec = self.state.steps[step_id]
        if rec.step.tool is not None and rec.args is not None:
            key = canonical_call(rec.step.tool, rec.args)
            if self.state.failed_calls.get(key, 0) >= 2:
                self._stall(
                    "repeated_failure", f"{rec.step.tool} failed again with the same arguments: {error.message}"
                )
        if self.config.planner.replan == "never":
            raise _Stop(StopReason(kind="error", detail=f"step {step_id} failed ({error}) and replanning is off"))
        self._unaddressed.append(step_id)
        if self._planning is None:
            self._replan_for_failures()

    def _replan_for_failures(self) -> None:
        if self.state.replans >= self.config.budget.replans:
            raise _Stop(
                StopReason(
                    kind="max_replans",
                    detail=f"the plan was patched {self.state.replans} time(s), the most allowed; "
                    f"still failing: {', '.join(self._unaddressed)}",
                )
            )
        failed = ", ".join(f"{sid} ({self.state.steps[sid].error})" for sid in self._unaddressed)
        self._start_planning("failure", f"these steps failed: {failed}")

    def _stall(self, rule: Literal["repeated_failure", "identical_patch", "no_progress"], detail: str) -> None:
        self.emit(StallDetected(at=self._clock(), rule=rule, detail=detail))
        raise _Stop(StopReason(kind="stalled", detail=detail))

    def _budget_stop(self, hit: BudgetHit) -> None:
        self.emit(BudgetExhaustedEvent(at=self._clock(), budget=hit.budget, limit=hit.limit, used=hit.used))
        raise _Stop(StopReason(kind="budget_exhausted", budget=hit.budget, detail=str(hit)))

    # -- planning --------------------------------------------------------------------------

    def _start_planning(self, kind: PlanKind, why: str) -> None:
        if kind in ("failure", "turn") and self.state.rounds_since_progress >= self.config.limits.stall_rounds:
            self._stall(
                "no_progress", f"no step finished in the last {self.state.rounds_since_progress} planning rounds"
            )
        if kind == "after_step":
            self._after_step_wanted = False
        failed = frozenset(self._unaddressed)
        self.emit(PlanningStarted(at=self._clock(), trigger=kind, why=why))
        self._planning = asyncio.create_task(self._plan(kind, why, failed), name=f"planner:{kind}")

    def _planning_context(self) -> PlanningContext:
        budget = self.config.budget
        left = budget.left(self.state, self._clock())
        max_steps = None if budget.steps is None else budget.steps - self.state.steps_started
        return PlanningContext(
            goal=self.goal,
            constraints=self.constraints,
            state=self.state,
            tools=self.config.tools,
            executors=self._executor_docs,
            checks=with_finished(self._checks, self.state, max_steps),
            budget_left=left,
            call=lambda model, request: self.call_model("planner", model, request, None),
            rejected=lambda attempt, problems: self.emit(
                PlannerOutputRejected(at=self._clock(), attempt=attempt, problems=tuple(problems))
            ),
        )

    async def _plan(self, kind: PlanKind, why: str, failed: frozenset[str]) -> None:
        planner = self.config.planner
        done = _PlanDone(kind=kind, failed_at_start=failed)
        try:
            ctx = self._planning_context()
            if planner.policy == "step" and kind != "finish":
                done.result = await planner.turn(ctx)
            elif kind == "initial":
                done.result = await planner.propose(ctx)
            elif kind in ("failure", "after_step"):
                done.result = await planner.patch(ctx, why)
            else:
                done.result = await planner.finish(ctx)
            if self.config.approvals.plan and self.config.approvals.approver is not None:
                steps = self._proposed_steps(done.result)
                if steps is not None:
                    plan = self._next_plan(steps, reason=_reason(done.result))
                    decision = await self._ask(
                        ApprovalRequest(approval_id="", run_id=self.run_id, subject="plan", plan=plan, reason=why)
                    )
                    if not decision.approved:
                        done.rejected = decision.reason or "no reason given"
        except PlannerGaveUp as e:
            done.gave_up = e
        except BudgetHit as hit:
            done.budget = hit
        except asyncio.CancelledError:
            raise
        except Exception as e:
            done.crash = e
        self._queue.put_nowait(done)

    def _plan_done(self, done: _PlanDone) -> None:
        self._planning = None
        if done.budget is not None:
            self._budget_stop(done.budget)
        if done.crash is not None:
            raise _Stop(
                StopReason(kind="error", detail=f"the planner failed: {type(done.crash).__name__}: {done.crash}")
            )
        if done.gave_up is not None:
            problems = done.gave_up.problems
            step_budget = [p for p in problems if p.code == "budget_steps"]
            if step_budget and self.config.budget.steps is not None:
                limit = self.config.budget.steps
                self.emit(
                    BudgetExhaustedEvent(at=self._clock(), budget="steps", limit=limit, used=self.state.steps_started)
                )
                raise _Stop(StopReason(kind="budget_exhausted", budget="steps", detail=step_budget[0].message))
            raise _Stop(
                StopReason(
                    kind="error",
                    detail=f"the planner's output was still invalid after {self.config.planner.max_repairs} "
                    f"repair(s): " + "; ".join(map(str, problems)),
                )
            )
        if done.rejected is not None:
            raise _Stop(StopReason(kind="rejected", detail=f"a human rejected the plan: {done.rejected}"))
        result = done.result
        if isinstance(result, str):
            raise _Stop(StopReason(kind="goal_met", detail="the planner gave the final answer"), answer=result)
        if isinstance(result, Turn):
            if result.stop:
                raise _Stop(StopReason(kind="goal_met", detail=result.thought), answer=result.answer)
            assert result.step is not None
            trigger: PlanTrigger = (
                "initial" if done.kind == "initial" else "failure" if done.failed_at_start else "turn"
            )
            self._install([result.step], trigger, result.thought, done.failed_at_start)
            return
        assert isinstance(result, PlanDraft)
        if set(self._unaddressed) - done.failed_at_start:
            self._replan_for_failures()  # steps failed while the planner worked: its plan is stale
            return
        if done.kind == "failure":
            fingerprint = json.dumps([s.model_dump(mode="json") for s in result.steps], sort_keys=True)
            if fingerprint == self._last_failure_patch:
                self._stall("identical_patch", "the planner proposed the same patch again")
            self._last_failure_patch = fingerprint
        trigger = "initial" if done.kind == "initial" else "failure" if done.kind == "failure" else "after_step"
        self._install(result.steps, trigger, result.reason, done.failed_at_start)
        if self._unaddressed:
            self._replan_for_failures()
        elif self._after_step_wanted and self._running:
            self._start_planning("after_step", "steps finished while planning")

    def _proposed_steps(self, result: PlanDraft | Turn | str | None) -> list[Step] | None:
        if isinstance(result, PlanDraft):
            return result.steps
        if isinstance(result, Turn) and not result.stop and result.step is not None:
            return [result.step]
        return None

    def _next_plan(self, steps: list[Step], *, reason: str) -> Plan:
        kept = [rec.step for rec in self.state.steps.values() if rec.status == "succeeded"]
        new_ids = {s.id for s in steps}
        # The steps were validated when they were parsed and checked; do not validate them again.
        return Plan.model_construct(
            version=len(self.state.plans) + 1,
            steps=(*[s for s in kept if s.id not in new_ids], *steps),
            author="planner",
            reason=reason,
        )

    def _install(self, steps: list[Step], trigger: PlanTrigger, reason: str, addressed: frozenset[str]) -> None:
        plan = self._next_plan(steps, reason=reason)
        new = {s.id: s for s in steps}
        obsolete = [sid for sid in self._running if sid not in new or new[sid] != self.state.steps[sid].step]
        for sid in obsolete:
            task, _ = self._running[sid]
            task.cancel()
            self._release(sid)
            self.emit(StepCancelled(at=self._clock(), step_id=sid, reason=f"obsolete after plan v{plan.version}"))
        self.emit(PlanProposed(at=self._clock(), plan=plan, trigger=trigger, cancelled=tuple(obsolete)))
        self._unaddressed = [sid for sid in self._unaddressed if sid not in addressed]
        waiting = set()
        for s in plan.steps:
            if self.state.steps[s.id].status == "pending" and s.id not in self._running:
                waiting.add(s.id)
                cached = self._compiled.get(s.id)
                if cached is None or cached[0] is not s:
                    self._compiled[s.id] = (s, compile_args(s.args))
        succeeded = {sid for sid, rec in self.state.steps.items() if rec.status == "succeeded"}
        self._ready.load(plan.steps, succeeded, waiting)

    # -- calls on behalf of the planner and executors ---------------------------------------

    async def call_model(self, role: str, model: Model, request: ModelRequest, step_id: str | None) -> ModelResponse:
        """One model call on the run's behalf: budgets checked before it, the answer logged after.

        Calls in flight count against the budgets, so calls made at once cannot overrun a cap.
        """
        estimate = estimate_tokens("".join(m.content for m in request.messages))
        self.config.budget.check_model_call(
            self.state,
            self._clock(),
            estimate,
            in_flight=self._model_calls_in_flight,
            in_flight_tokens=self._model_tokens_in_flight,
        )
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._model_calls_in_flight += 1
        self._model_tokens_in_flight += estimate
        error: Exception | None = None
        try:
            response = await model.request(request)
        except Exception as e:
            error = e
        finally:
            self._model_calls_in_flight -= 1
            self._model_tokens_in_flight -= estimate
        record = ModelCalled(
            at=self._clock(),
            role=role,
            purpose=request.purpose,
            model=model.name,
            step_id=step_id,
            request_chars=request.chars,
            duration=loop.time() - t0,
        )
        if error is not None:
            self.emit(replace(record, error=f"{type(error).__name__}: {error}"))
            if isinstance(error, UsageError) or role != "executor":
                raise error
            raise StepFailure(
                StepError(kind="executor", message=f"the model failed: {type(error).__name__}: {error}")
            ) from error
        self.emit(replace(record, response=response, usage=response.usage, cost=response.cost or 0.0))
        return response


def _reason(result: PlanDraft | Turn | str | None) -> str:
    if isinstance(result, PlanDraft):
        return result.reason
    if isinstance(result, Turn):
        return result.thought
    return ""


class _StepCtx:
    """The :class:`StepContext` an executor gets: calls go through the engine's checks and log."""

    __slots__ = ("_engine", "attempts", "step")

    def __init__(self, engine: Engine, step: Step) -> None:
        self._engine = engine
        self.step = step
        self.attempts = 1

    @property
    def run_id(self) -> str:
        return self._engine.run_id

    @property
    def tools(self) -> Toolset:
        return self._engine.config.tools

    async def call_model(self, model: Model, request: ModelRequest) -> ModelResponse:
        role = "judge" if request.purpose == "judge" else "executor"
        return await self._engine.call_model(role, model, request, self.step.id)

    def refuse_tool_call(self, call: ToolCall, error: StepError) -> None:
        engine = self._engine
        engine.emit(
            ToolCalled(
                at=engine._clock(),
                step_id=self.step.id,
                call_id=call.id,
                tool=call.name,
                args=call.arguments,
                error=error,
                attempts=0,
            )
        )

    async def call_tool(self, tool: Tool, args: dict[str, Any], *, call_id: str | None = None) -> Any:
        """Call ``tool`` with timeout, retries and output check; every attempt counted and checked
        against the tool-call budget before it is made."""
        engine = self._engine
        inner = call_id is not None
        key = f"{engine.run_id}:{self.step.id}" + (f":{call_id}" if inner else "")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        attempt = 0
        try:
            while True:
                attempt += 1
                if inner:  # the step's own first call was checked and counted when it was dispatched
                    engine.config.budget.check_tool_call(
                        engine.state,
                        engine._clock(),
                        in_flight=engine._unstarted_tool_calls + engine._inner_tool_calls_in_flight,
                    )
                    engine._inner_tool_calls_in_flight += 1
                try:
                    output = await self._attempt(tool, args, attempt, key, inner)
                except (asyncio.CancelledError, StepFailure, BudgetHit):
                    raise
                except Exception as e:
                    error = _tool_error(tool, e)
                    if not (tool.retry.retries(e) and attempt < tool.retry.max_attempts):
                        raise StepFailure(error) from None
                    delay = tool.retry.delay(attempt, engine._rng)
                    if not inner:
                        engine.config.budget.check_tool_call(engine.state, engine._clock())
                        engine.emit(
                            StepAttemptFailed(
                                at=engine._clock(), step_id=self.step.id, attempt=attempt, error=error, retry_in=delay
                            )
                        )
                        self.attempts = attempt + 1
                    await asyncio.sleep(delay)
                    continue
                if inner:
                    self._log_inner(call_id or "", tool, args, attempt, loop.time() - t0, output=output)
                return output
        except StepFailure as f:
            if inner:
                self._log_inner(call_id or "", tool, args, attempt, loop.time() - t0, error=f.error)
            raise
        finally:
            if inner:
                engine._inner_tool_calls_in_flight -= attempt

    async def _attempt(self, tool: Tool, args: dict[str, Any], attempt: int, key: str, inner: bool) -> Any:
        tctx = ToolContext(run_id=self._engine.run_id, step_id=self.step.id, attempt=attempt, idempotency_key=key)
        limit: asyncio.Semaphore | None = None
        if inner and tool.max_concurrency is not None:
            limit = self._engine._inner_limits.setdefault(tool.name, asyncio.Semaphore(tool.max_concurrency))
        if limit is None:
            raw = await call_with_timeout(tool, args, tctx)
        else:
            async with limit:
                raw = await call_with_timeout(tool, args, tctx)
        try:
            return tool.check_output(raw)
        except ValueError as e:
            message = f"the output of {tool.name} does not fit its schema: {e}"
            raise StepFailure(StepError(kind="invalid_output", message=message)) from None

    def _log_inner(
        self,
        call_id: str,
        tool: Tool,
        args: dict[str, Any],
        attempts: int,
        duration: float,
        *,
        output: Any = None,
        error: StepError | None = None,
    ) -> None:
        engine = self._engine
        engine.emit(
            ToolCalled(
                at=engine._clock(),
                step_id=self.step.id,
                call_id=call_id,
                tool=tool.name,
                args=args,
                output=output,
                error=error,
                attempts=attempts,
                duration=duration,
            )
        )


def _tool_error(tool: Tool, e: Exception) -> StepError:
    if isinstance(e, TimeoutError):
        return StepError(kind="timeout", message=f"{tool.name} timed out after {tool.timeout:g}s")
    kind: Literal["transient", "tool_error"] = "transient" if tool.retry.retries(e) else "tool_error"
    text = str(e) or type(e).__name__
    return StepError(kind=kind, message=f"{tool.name}: {text}")
