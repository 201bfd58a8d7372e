"""The run loop: plan, dispatch ready steps, judge results, patch on failure, stop with a reason.

One coroutine owns the run. Steps and planning rounds run as tasks and report back through one
queue; the loop alone decides what happens next, and every decision is an event appended to the
log (and folded into the state) before anything acts on it. With a store, the journal writes the
log as it grows, and a run can be resumed from it in another process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from planexec._errors import UsageError
from planexec.executor._acceptance import Acceptance
from planexec.executor._base import Executor, StepFailure
from planexec.executor._outcome import PASSED, StepError, Verdict
from planexec.models._base import (
    Model,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    StreamingModel,
    estimate_tokens,
)
from planexec.models._prices import Price, price_for
from planexec.plan._bindings import BindingError
from planexec.plan._checks import CheckContext
from planexec.plan._step import Step
from planexec.planner._planner import Planner
from planexec.runtime._budget import Budget, BudgetHit
from planexec.runtime._events import (
    BudgetExhaustedEvent,
    Event,
    ModelCalled,
    RunFinished,
    RunResumed,
    RunStarted,
    RunSuspended,
    StallDetected,
    StepCancelled,
    StepFailed,
    StepStarted,
    StepSucceeded,
)
from planexec.runtime._humans import Humans
from planexec.runtime._journal import Journal, JournalFailed
from planexec.runtime._planning import PlanDone, PlanKind, Planning, Stop
from planexec.runtime._recovery import restore
from planexec.runtime._replay import RecordedError, Replayer
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest, Approvals, Limits, RunContext
from planexec.runtime._state import RunState, canonical_call
from planexec.runtime._stepctx import StepCtx
from planexec.runtime._stop import StopReason
from planexec.store._base import RunStore
from planexec.tools._toolset import Toolset

if TYPE_CHECKING:
    import random

__all__ = ["Engine", "EngineConfig"]


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
    metadata: Mapping[str, Any]


class _Suspend(Exception):
    """Internal signal: only humans can move the run on, and it is to be saved and left."""


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


class _Wake:
    """Queued to make the loop look again (a task began waiting for a human)."""


@dataclass(slots=True)
class _Recorded:
    """Replay: what remains of a segment that ended from outside (a wall-time stop, a
    cancellation, a stopped process)."""

    events: list[Event]


class _EndSegment(Exception):
    def __init__(self, events: list[Event]) -> None:
        self.events = events
        super().__init__("the recorded segment ended")


class Engine:
    """Runs one goal to a stop. Build it, then ``await engine.run()``; events stream meanwhile.

    With ``history`` (a run's logged events) it resumes that run instead of starting one.
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        goal: str,
        constraints: tuple[str, ...],
        run_id: str,
        store: RunStore | None = None,
        history: list[Event] | None = None,
        replay: Replayer | None = None,
        recorded: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.goal = goal
        self.constraints = constraints
        self.run_id = run_id
        self.state = RunState.fold(history or [])
        self.events: list[Event] = list(history or [])
        self.history_length = len(self.events)
        self.resuming = bool(history)
        self.replay = replay
        self.budget = config.budget
        """The caps checked before each call (in a replay, a recorded wall-time stop is served instead)."""
        if replay is not None:
            replay.cursor = max(replay.cursor, len(self.events))
            self.budget = replace(config.budget, wall_time=None)
        self._listeners: list[Callable[[Event], None]] = []
        self._clock = config.context.clock
        self._rng: random.Random = config.context.rng()
        self.queue: asyncio.Queue[_StepDone | PlanDone | _Wake | _Recorded] = asyncio.Queue()
        self.ready = ReadyQueue()
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
        self._helpers: set[asyncio.Task[None]] = set()
        self.unaddressed: list[str] = []
        """Failed steps of the current plan that no patch has answered yet."""
        self._finished = self.state.finished
        self.journal: Journal | None = None
        if store is not None:
            self.journal = Journal(store, run_id, persisted=len(self.events), on_foreign=self._foreign)
        self.humans = Humans(self)
        approvals = config.approvals
        self.can_ask_humans = approvals.approver is not None or (approvals.deferred and self.journal is not None)
        """Whether questions can be asked at all (a callback, or a log to keep them in)."""
        self.suspends = self.journal is not None and approvals.approver is None and approvals.when_waiting == "suspend"
        """Whether the run is saved and left when only humans can move it on."""
        if recorded is not None:  # a replay decides as the recorded run did
            self.can_ask_humans = bool(recorded.get("ask", self.can_ask_humans))
            self.suspends = bool(recorded.get("suspends", self.suspends))
        executors = {name: e.kind for name, e in config.executors.items()}
        checks = CheckContext(
            tools=config.tools,
            executors=executors,
            default_executor=config.default_executor,
            predicates=tuple(config.acceptance.predicates),
        )
        executor_docs = {
            name: ("runs tool steps" if e.kind == "tools" else "a model that reasons and may call tools")
            for name, e in config.executors.items()
            if e.kind == "model" or name != "tools"
        }
        self.planning = Planning(self, checks, executor_docs)

    # -- the event log ---------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[Event], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event: Event) -> None:
        if self.replay is not None:
            self.replay.check(event)
        self.events.append(event)
        self.state.apply(event)
        if self.journal is not None:
            self.journal.add(event)
        for listener in self._listeners:
            listener(event)

    def _foreign(self, events: list[Event], unwritten: int) -> None:
        """Answers another process wrote to the store: they go before our unwritten events."""
        at = len(self.events) - unwritten
        self.events[at:at] = events
        for e in events:
            self.state.apply(e)
            for listener in self._listeners:
                listener(e)
        self.humans.answered_elsewhere(events)

    def now(self) -> float:
        if self.replay is not None and not self.replay.live:
            return self.replay.now()
        return self._clock()

    def new_id(self) -> str:
        if self.replay is not None and not self.replay.live:
            return self.replay.new_id()
        return self.config.context.new_id()

    @property
    def replaying(self) -> bool:
        return self.replay is not None and not self.replay.live

    def end_as_recorded(self, events: list[Event]) -> None:
        """Replay: the rest of this segment came from outside the engine; copy it and stop."""
        self.queue.put_nowait(_Recorded(events))

    def wake(self) -> None:
        self.queue.put_nowait(_Wake())

    @property
    def running_steps(self) -> dict[str, tuple[asyncio.Task[None], int]]:
        return self._running

    @property
    def planning_idle(self) -> bool:
        return self.planning.idle

    def decide(self, approval_id: str, decision: ApprovalDecision) -> None:
        """Answer an open question of this run, from this process."""
        self.humans.decide(approval_id, decision)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> RunState:
        if self._finished:
            return self.state
        cfg = self.config
        if self.resuming:
            self.emit(RunResumed(at=self.now(), events=len(self.events)))
        else:
            self.emit(self._started())
        wall = None if cfg.budget.wall_time is None else max(0.0, cfg.budget.wall_time - self.state.active_time)
        if self.replay is not None:
            wall = None  # a recorded wall-time stop is served from the log
        stop: Stop | None = None
        try:
            async with asyncio.timeout(wall) as deadline:
                try:
                    await self._loop()
                except Stop as s:
                    stop = s
        except TimeoutError:
            if not deadline.expired():
                raise
            limit = cfg.budget.wall_time or 0.0
            self.emit(BudgetExhaustedEvent(at=self.now(), budget="wall_time", limit=limit, used=limit))
            detail = f"wall time of {limit:g}s used up"
            stop = Stop(StopReason(kind="budget_exhausted", budget="wall_time", detail=detail))
        except _Suspend:
            await self._suspend()
            return self.state
        except _EndSegment as end:
            await self._shutdown("", log=False)
            for event in end.events:
                if isinstance(event, RunResumed):
                    break
                self.emit(event)
            self._finished = self.state.finished
            await self._close_journal()
            return self.state
        except asyncio.CancelledError:
            await self._shutdown("run cancelled")
            self._finish(Stop(StopReason(kind="cancelled", detail="the run was cancelled")))
            await self._close_journal()
            raise
        except JournalFailed as e:
            stop = Stop(StopReason(kind="error", detail=str(e)))
        except UsageError as e:
            stop = Stop(StopReason(kind="error", detail=str(e)))
        except Exception as e:  # a defect must still end the run with a reason, never hang it
            stop = Stop(StopReason(kind="error", detail=f"internal error: {type(e).__name__}: {e}"))
        assert stop is not None
        await self._shutdown(f"run stopped: {stop.reason.kind}")
        self._finish(stop)
        await self._close_journal()
        return self.state

    def _started(self) -> RunStarted:
        cfg = self.config
        return RunStarted(
            at=self.now(),
            run_id=self.run_id,
            goal=self.goal,
            constraints=self.constraints,
            policy=cfg.planner.policy,
            replan=cfg.planner.replan,
            budget=cfg.budget.as_dict(),
            tools=cfg.tools.names,
            config=dict(cfg.metadata),
        )

    def finish_unstarted(self) -> None:
        """Close the log of a run cancelled before its loop ever ran."""
        if not self.events:
            self.emit(self._started())
        self._finish(Stop(StopReason(kind="cancelled", detail="the run was cancelled before it started")))

    def _finish(self, stop: Stop) -> None:
        if not self._finished:
            self._finished = True
            self.emit(RunFinished(at=self.now(), stop=stop.reason, answer=stop.answer))

    async def _close_journal(self) -> None:
        await self.humans.close()
        for task in self._helpers:
            task.cancel()
        if self._helpers:
            await asyncio.gather(*self._helpers, return_exceptions=True)
            self._helpers.clear()
        if self.journal is not None:
            # A failed log already shows in the stop reason where it mattered; nothing more can be saved.
            with contextlib.suppress(JournalFailed):
                await self.journal.close()

    async def _suspend(self) -> None:
        questions = tuple(a.approval_id for a in self.state.pending_approvals)
        await self._shutdown("", log=False)
        self.emit(RunSuspended(at=self.now(), reason="waiting for a human's answer", approvals=questions))
        await self._close_journal()

    async def _shutdown(self, reason: str, *, log: bool = True) -> None:
        tasks: list[asyncio.Task[None]] = []
        for sid, (task, _token) in list(self._running.items()):
            task.cancel()
            tasks.append(task)
            if log and not self._finished and self.state.steps[sid].status == "running":
                self.emit(StepCancelled(at=self.now(), step_id=sid, reason=reason))
        self._running.clear()
        if self.planning.task is not None:
            self.planning.task.cancel()
            tasks.append(self.planning.task)
            self.planning.task = None
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self) -> None:
        if self.replay is not None:
            watcher = asyncio.create_task(self.replay.external_stops(self), name="replay:external")
            self._helpers.add(watcher)
        if self.resuming:
            restore(self)
        else:
            self.planning.start("initial", "the run started")
        while True:
            if self.journal is not None and self.journal.error is not None:
                raise JournalFailed(f"the run log could not be written: {self.journal.error}")
            self._dispatch()
            if not self._running and self.planning.idle:
                self._when_idle()
            elif self.humans.blocked() and not self.ready.has_ready:
                self._when_blocked()
            done = await self.queue.get()
            if isinstance(done, _StepDone):
                self._step_done(done)
            elif isinstance(done, PlanDone):
                self.planning.done(done)
            elif isinstance(done, _Recorded):
                raise _EndSegment(done.events)

    def _when_idle(self) -> None:
        """Nothing runs and nobody plans: replan, take the next turn, finish, or stop."""
        if self.unaddressed:
            self.replan_for_failures()
            return
        plan = self.state.plan
        waiting = [s.id for s in plan.steps if self.state.steps[s.id].status == "pending"] if plan else []
        if waiting:
            raise Stop(StopReason(kind="error", detail=f"steps can never start: {', '.join(waiting)}"))
        if self.config.planner.policy == "step":
            self.planning.start("turn", "a step finished")
        else:
            self.planning.start("finish", "every step finished")

    def _when_blocked(self) -> None:
        """Everything under way waits for a human."""
        if self.suspends:
            raise _Suspend()

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        room = self.config.limits.max_concurrency - len(self._running)
        if room <= 0 or not self.ready.has_ready:
            return
        try:
            steps = self.ready.pop(self._reserve, room)
        except BudgetHit as hit:
            self.budget_stop(hit)
        for step in steps:
            self.start_step(step)

    def start_step(self, step: Step, *, held: str | None = None) -> None:
        token = self._tokens.get(step.id, 0) + 1
        self._tokens[step.id] = token
        if held is not None:
            self._count(step, +1)  # dispatched steps were counted when reserved
        coro = self._run_step(step, self._executor_of(step), token, held)
        self._running[step.id] = (asyncio.create_task(coro, name=f"step:{step.id}"), token)

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
        budget = self.budget
        budget.check_step(self.state, in_flight=self._unstarted)
        if step.tool is not None:
            budget.check_tool_call(self.state, self.now(), in_flight=self._unstarted_tool_calls)
            self._unstarted_tool_calls += 1
        self._unstarted += 1
        self._count(step, +1)
        return True

    def _count(self, step: Step, delta: int) -> None:
        if step.tool is not None:
            self._per_tool[step.tool] = self._per_tool.get(step.tool, 0) + delta
        name = self._executor_of(step).name
        self._per_executor[name] = self._per_executor.get(name, 0) + delta

    def _executor_of(self, step: Step) -> Executor:
        name = step.executor or ("tools" if step.tool is not None else self.config.default_executor)
        return self.config.executors[name or "tools"]

    def _release(self, step_id: str) -> None:
        self._running.pop(step_id, None)
        self._count(self.state.steps[step_id].step, -1)

    def cancel_step(self, step_id: str) -> None:
        task, _ = self._running[step_id]
        task.cancel()
        self._release(step_id)

    def side_effecting(self, step: Step) -> bool:
        """Whether running ``step`` may change something outside the run."""
        if step.effect == "write":
            return True
        tools = self.config.tools
        return step.tool is not None and step.tool in tools and tools.get(step.tool).side_effect

    def idempotency_key(self, step: Step) -> str:
        """Stable across retries and restarts, new for each plan version that redefines the step."""
        return f"{self.run_id}:{step.id}:v{self.state.steps[step.id].plan_version}"

    # -- one step --------------------------------------------------------------------------

    async def _run_step(self, step: Step, executor: Executor, token: int, held: str | None) -> None:
        ctx = StepCtx(self, step)
        done = _StepDone(step_id=step.id, token=token, started=False)
        reserved = held is None
        try:
            if held is not None:
                decision = await self._await_effect(step, held)
                if decision.choice == "done":
                    done.output, done.verdict = decision.output, PASSED
                    raise _Settled()
                if decision.choice == "skip" or not decision.approved:
                    message = f"a human skipped the step after an uncertain effect: {decision.reason or 'no reason'}"
                    raise StepFailure(StepError(kind="tool_error", message=message))
            elif self.humans.may_ask(step):
                await self.humans.gate(step)
            try:
                args = self.planning.compiled_args(step).resolve(self.state.outputs)
            except BindingError as e:
                raise StepFailure(StepError(kind="binding", message=str(e), problems=tuple(e.problems))) from None
            done.started = True
            if reserved:
                reserved = False
                self._unreserve(step)
            key = self.idempotency_key(step) if step.tool is not None else None
            if self.replay is not None and not self.replay.live:
                await self.replay.turn(lambda e: isinstance(e, StepStarted) and e.step_id == step.id)
            self.emit(
                StepStarted(
                    at=self.now(),
                    step_id=step.id,
                    executor=executor.name,
                    tool=step.tool,
                    args=args,
                    idempotency_key=key,
                )
            )
            if self.journal is not None and self.side_effecting(step):
                await self.journal.flush()  # the intent is saved before the effect can happen
            if self.replay is not None and not self.replay.live:
                await self._replayed_step(step, done)
            else:
                done.output = await executor.run(step, args, ctx)
                acceptance = self.config.acceptance
                done.verdict = (
                    await acceptance.verdict(step, done.output, ctx) if acceptance.checks_anything(step) else PASSED
                )
            if done.verdict is not None and not done.verdict.passed:
                reasons = "; ".join(f"{c.name}: {c.detail}" for c in done.verdict.failures)
                done.error = StepError(kind="acceptance", message=f"acceptance checks failed: {reasons}")
        except _Settled:
            pass
        except StepFailure as f:
            done.error = f.error
        except BudgetHit as hit:
            done.budget = hit
        except (UsageError, JournalFailed) as e:
            done.crash = e
        except asyncio.CancelledError:
            raise
        except Exception as e:
            done.error = StepError(kind="tool_error", message=f"{type(e).__name__}: {e}")
        finally:
            if reserved:
                self._unreserve(step)
        if not self.replaying:
            done.attempts = ctx.attempts
        self.queue.put_nowait(done)

    async def _replayed_step(self, step: Step, done: _StepDone) -> None:
        assert self.replay is not None
        outcome = await self.replay.step_outcome(self, step)
        done.output, done.verdict, done.attempts = outcome.output, outcome.verdict, outcome.attempts
        if outcome.budget is not None:
            raise outcome.budget
        if outcome.error is not None and outcome.error.kind != "acceptance":
            raise StepFailure(outcome.error)

    async def _await_effect(self, step: Step, approval_id: str) -> ApprovalDecision:
        self.humans.waiting_steps.add(step.id)
        self.wake()
        try:
            record = self.state.approvals[approval_id]
            if record.approved is not None:
                return ApprovalDecision(
                    approved=record.approved,
                    reason=record.decision_reason,
                    choice=record.choice,
                    output=record.output,
                )
            request = ApprovalRequest(
                approval_id=approval_id, run_id=self.run_id, subject="effect", step=step, reason=record.reason
            )
            return await self.humans.ask(request, version=record.plan_version, existing=record)
        finally:
            self.humans.waiting_steps.discard(step.id)

    def _unreserve(self, step: Step) -> None:
        self._unstarted -= 1
        if step.tool is not None:
            self._unstarted_tool_calls -= 1

    def _step_done(self, done: _StepDone) -> None:
        current = self._running.get(done.step_id)
        if current is None or current[1] != done.token:
            return  # a cancelled or superseded attempt
        self._release(done.step_id)
        if done.crash is not None:
            raise Stop(StopReason(kind="error", detail=str(done.crash)))
        if done.budget is not None:
            error = StepError(kind="budget", message=str(done.budget))
            self.emit(
                StepFailed(
                    at=self.now(), step_id=done.step_id, error=error, attempts=done.attempts, started=done.started
                )
            )
            self.budget_stop(done.budget)
        if done.error is None:
            assert done.verdict is not None
            self.emit(
                StepSucceeded(
                    at=self.now(),
                    step_id=done.step_id,
                    output=done.output,
                    verdict=done.verdict,
                    attempts=done.attempts,
                )
            )
            self.ready.succeeded(done.step_id)
            planner = self.config.planner
            if planner.replan == "after_each_step" and planner.policy == "upfront":
                self.planning.after_step_wanted = True
                if self.planning.idle:
                    self.planning.start("after_step", f"step {done.step_id} finished")
            return
        self.emit(
            StepFailed(
                at=self.now(),
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
            raise Stop(StopReason(kind="rejected", detail=f"step {step_id}: {error.message}"))
        rec = self.state.steps[step_id]
        if rec.step.tool is not None and rec.args is not None:
            key = canonical_call(rec.step.tool, rec.args)
            if self.state.failed_calls.get(key, 0) >= 2:
                self.stall("repeated_failure", f"{rec.step.tool} failed again with the same arguments: {error.message}")
        if self.config.planner.replan == "never":
            raise Stop(StopReason(kind="error", detail=f"step {step_id} failed ({error}) and replanning is off"))
        self.unaddressed.append(step_id)
        if self.planning.idle:
            self.replan_for_failures()

    def replan_for_failures(self) -> None:
        if self.state.replans >= self.budget.replans:
            raise Stop(
                StopReason(
                    kind="max_replans",
                    detail=f"the plan was patched {self.state.replans} time(s), the most allowed; "
                    f"still failing: {', '.join(self.unaddressed)}",
                )
            )
        failed = ", ".join(f"{sid} ({self.state.steps[sid].error})" for sid in self.unaddressed)
        kind: PlanKind = "failure"
        self.planning.start(kind, f"these steps failed: {failed}")

    def stall(self, rule: Literal["repeated_failure", "identical_patch", "no_progress"], detail: str) -> None:
        self.emit(StallDetected(at=self.now(), rule=rule, detail=detail))
        raise Stop(StopReason(kind="stalled", detail=detail))

    def budget_stop(self, hit: BudgetHit) -> None:
        self.emit(BudgetExhaustedEvent(at=self.now(), budget=hit.budget, limit=hit.limit, used=hit.used))
        raise Stop(StopReason(kind="budget_exhausted", budget=hit.budget, detail=str(hit)))

    # -- calls on behalf of the planner and executors ---------------------------------------

    async def call_model_streaming(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        on_text: Callable[[str], None],
        on_step: Callable[[Step], None],
    ) -> ModelResponse:
        """A model call whose answer streams: each piece of text goes to ``on_text`` as it comes (in
        a replay, the recorded early steps go to ``on_step`` where the log has them)."""
        assert isinstance(model, StreamingModel)

        async def streamed(request: ModelRequest) -> ModelResponse:
            response: ModelResponse | None = None
            async for item in model.stream(request):
                if isinstance(item, ModelResponse):
                    response = item
                else:
                    on_text(item.text)
            if response is None:
                raise ModelCallError(
                    f"{model.name} ended its stream without a response", provider=model.name, retryable=False
                )
            return response

        return await self.call_model(role, model, request, step_id, send=streamed, on_step=on_step)

    async def call_model(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        send: Callable[[ModelRequest], Awaitable[ModelResponse]] | None = None,
        on_step: Callable[[Step], None] | None = None,
    ) -> ModelResponse:
        """One model call on the run's behalf: budgets checked before it, the answer logged after.

        Calls in flight count against the budgets, so calls made at once cannot overrun a cap.
        """
        estimate = estimate_tokens("".join(m.content for m in request.messages))
        price = getattr(model, "price", None)
        price = price if isinstance(price, Price) else price_for(model.name)
        self.budget.check_model_call(
            self.state,
            self.now(),
            estimate,
            in_flight=self._model_calls_in_flight,
            in_flight_tokens=self._model_tokens_in_flight,
            estimated_cost=estimate * price.input / 1e6 if price is not None else 0.0,
        )
        if self.replay is not None and not self.replay.live:
            try:
                return await self.replay.model_call(self, role, request.purpose, step_id, on_step=on_step)
            except RecordedError as e:
                if role != "executor":
                    raise
                raise StepFailure(StepError(kind="executor", message=f"the model failed: {e}")) from None
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._model_calls_in_flight += 1
        self._model_tokens_in_flight += estimate
        error: Exception | None = None
        try:
            response = await (send or model.request)(request)
        except Exception as e:
            error = e
        finally:
            self._model_calls_in_flight -= 1
            self._model_tokens_in_flight -= estimate
        record = ModelCalled(
            at=self.now(),
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


class _Settled(Exception):
    """Internal: a held step was settled by a human without running it."""
