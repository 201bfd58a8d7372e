"""The run loop: plan, dispatch ready steps, judge results, patch on failure, stop with a reason.

One coroutine owns the run. Steps and planning rounds run as tasks and report back through one
queue; the loop alone decides what happens next, and every decision is an event appended to the
log (and folded into the state) before anything acts on it. With a store, the journal writes the
log as it grows, and a run can be resumed from it in another process.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from planexec._util.plural import counted
from planexec._util.tasks import abandon
from planexec.errors import Problem, UsageError
from planexec.executor import Executor, StepError, executor_profile
from planexec.log import (
    BudgetExhaustedEvent,
    Event,
    InformationAdded,
    RunFinished,
    RunResumed,
    RunStarted,
    RunState,
    RunSuspended,
    StallDetected,
    StallRule,
    StepCancelled,
    StepFailed,
    StepRequeued,
    StepSucceeded,
    StopReason,
    ToolsChanged,
    canonical_call,
)
from planexec.models import Model, ModelRequest, ModelResponse
from planexec.plan import BindingError, CheckContext, Step, changes_world, render_text
from planexec.runtime._budget import BudgetHit, used_of
from planexec.runtime._core import EngineConfig
from planexec.runtime._humans import Humans
from planexec.runtime._journal import Journal, JournalFailed
from planexec.runtime._model_calls import ModelCalls
from planexec.runtime._planning import PlanDone, Planning, Stop, crash_stop, error_stop
from planexec.runtime._policies import PlanKind, PlanningPolicy, policy_of
from planexec.runtime._recall import report_to_memory
from planexec.runtime._recovery import restore
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest
from planexec.runtime._stalls import RepeatWatch
from planexec.runtime._step_runner import StepDone, run_step
from planexec.runtime._tool_specs import tools_changed, with_change
from planexec.runtime._trust import Trust
from planexec.runtime._world import LiveWorld, Outlet, World
from planexec.store import RunStore
from planexec.telemetry import run_telemetry
from planexec.tools import Tool, Toolset
from planexec.trust import Source, Violation

if TYPE_CHECKING:
    import random

__all__ = ["Engine", "handoff_answer"]


def handoff_answer(output: Any) -> str:
    """A workflow's output as the run's final answer: text as it is, other data as JSON."""
    try:
        return render_text(output)
    except BindingError as e:
        return f"(the workflow's output cannot be shown as text: {e})"


class _Suspend(Exception):
    """Internal signal: only humans can move the run on, and it is to be saved and left."""


class _Wake:
    """Queued to make the loop look again (a task began waiting for a human)."""


class _News:
    """Queued when new information reached the log: the planner is to hear it."""


@dataclass(slots=True)
class _Raised:
    """Queued when a human answered whether to raise the cap the run reached."""

    decision: ApprovalDecision


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
        world: World | None = None,
        recorded: Mapping[str, Any] | None = None,
    ) -> None:
        self.world: World = world if world is not None else LiveWorld(config.context)
        """Everything outside the loop: the time, ids, models' answers, steps' outcomes, humans."""
        if self.world.serving:  # a record: its tools as they were where it goes on
            for event in history or []:
                if isinstance(event, ToolsChanged):
                    config = replace(config, tools=with_change(config.tools, event))
        self.config = config
        self._tools_seen: Toolset = config.tools
        self.goal = goal
        self.constraints = constraints
        self.run_id = run_id
        self.state = RunState.fold(history or [])
        self.events: list[Event] = list(history or [])
        self.history_length = len(self.events)
        self.resuming = bool(history)
        self.policy: PlanningPolicy = policy_of(config.planner)
        """When the planner is consulted, and what it is asked for."""
        self.world.resume_at(len(self.events))
        raised: dict[str, Any] = {}
        for rec in self.state.approvals.values():
            if rec.raised:
                raised.update(rec.raised)
        self.caps = replace(config.budget, **raised) if raised else config.budget
        """The run's caps: the agent's, as humans raised them since."""
        self.budget = self.caps
        """The caps checked before each call (a world that serves its own wall-time stop lifts that cap)."""
        if not self.world.keeps_wall_time:
            self.budget = replace(self.caps, wall_time=None)
        self._listeners: list[Callable[[Event], None]] = []
        self._clock = config.context.clock
        self._rng_made: random.Random | None = None
        self.queue: asyncio.Queue[StepDone | PlanDone | _Wake | _News | _Recorded | _Raised] = asyncio.Queue()
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
        self._inner_tool_calls_in_flight = 0
        self._helpers: set[asyncio.Task[None]] = set()
        self._budget_blocked: BudgetHit | None = None
        """A step or tool-call cap that refused a ready step: no more steps start, and the run stops
        once the steps already under way have finished (or a human is asked to raise the cap)."""
        self.raising: BudgetHit | None = None
        """The cap a human is asked to raise: nothing new starts until they answer."""
        self._after_raise: list[tuple[str, Any]] = []
        """What was refused for the cap, to do again once it is raised: steps, planning rounds."""
        self._deadline: asyncio.Timeout | None = None
        self.repeats = RepeatWatch(config.limits.repeat_rounds)
        self.repeats.restore(self.state)
        self._told_early: list[InformationAdded] = []
        """What the run was told before its first event: logged right after ``run_started``."""
        self.unaddressed: list[str] = []
        """Failed steps of the current plan that no patch has answered yet."""
        self._finished = self.state.finished
        self.detaching = False
        """This process leaves the run unfinished (``Run.detach``): a cancellation ends no run."""
        self.journal: Journal | None = None
        if store is not None:
            self.journal = Journal(store, run_id, persisted=len(self.events), on_foreign=self._foreign)
        self.telemetry = run_telemetry(
            config.telemetry,
            run_id=run_id,
            agent=config.agent_name,
            state=self.state,
            store_redactor=getattr(store, "redactor", None),
        )
        """The run's spans, metrics and log records (None: nothing to make)."""
        self.trust = Trust(self, config.trust)
        """Trust labels and rules: what each value is labelled, which calls break a rule."""
        self.humans = Humans(self)
        self.models = ModelCalls(self)
        approvals = config.approvals
        self.can_ask_humans = approvals.approver is not None or (approvals.deferred and self.journal is not None)
        """Whether questions can be asked at all (a callback, or a log to keep them in)."""
        self.suspends = self.journal is not None and approvals.approver is None and approvals.when_waiting == "suspend"
        """Whether the run is saved and left when only humans can move it on."""
        rule = config.limits.on_budget
        self.raises_budget = self.can_ask_humans if rule == "ask" else rule == "auto" and approvals.approver is not None
        """Whether a cap the run reaches is put to a human to raise (``Limits.on_budget``)."""
        if recorded is not None:  # a replay decides as the recorded run did
            self.can_ask_humans = bool(recorded.get("ask", self.can_ask_humans))
            self.suspends = bool(recorded.get("suspends", self.suspends))
            self.raises_budget = bool(recorded.get("raises", False))
        executors = {name: e.kind for name, e in config.executors.items()}
        checks = CheckContext(
            tools=config.tools,
            executors=executors,
            default_executor=config.default_executor,
            predicates=tuple(config.acceptance.predicates),
            workflows=config.workflows,
            sealed=config.planner.sealed,
            extractors=() if config.planner.extractor_name is None else (config.planner.extractor_name,),
        )
        profiles = config.executor_profiles or {}
        executor_docs = {
            name: (profiles.get(name) or executor_profile(e)).text()
            for name, e in config.executors.items()
            if e.kind == "model" or name != "tools"
        }
        self.planning = Planning(self, checks, executor_docs)

    # -- the event log ---------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    def refresh_tools(self) -> None:
        """Before a planning round: take up the tools as they are now (an MCP server listed its
        tools again), logged as ``tools_changed``; a record serves the change it holds here."""
        if self.world.serving:
            recorded = self.world.tools_change()
            if recorded is None:
                return
            self.emit(recorded)
            self._use_tools(with_change(self.config.tools, recorded))
            return
        source = self.config.current_tools
        if source is None:
            return
        tools = source()
        if tools is self._tools_seen:
            return
        self._tools_seen = tools
        change = tools_changed(self.config.tools, tools, at=self.now())
        if change is not None:
            self.emit(change)
            self._use_tools(tools)

    def _use_tools(self, tools: Toolset) -> None:
        self.config = replace(self.config, tools=tools)
        self.planning.use_tools(tools)

    def unsubscribe(self, listener: Callable[[Event], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def emit(self, event: Event) -> None:
        event = self.world.witness(event)
        self.events.append(event)
        self.state.apply(event)
        if self.journal is not None:
            self.journal.add(event)
        if self.telemetry is not None:
            self.telemetry.on_event(event)
        for listener in self._listeners:
            listener(event)

    def _foreign(self, events: list[Event], unwritten: int) -> None:
        """Answers another process wrote to the store: they go before our unwritten events."""
        at = len(self.events) - unwritten
        self.events[at:at] = events
        for e in events:
            self.state.apply(e)
            if self.telemetry is not None:
                self.telemetry.on_event(e)
            for listener in self._listeners:
                listener(e)
        self.humans.answered_elsewhere(events)
        if any(isinstance(e, InformationAdded) for e in events):
            self.heard()

    def tell(self, text: str, *, by: str = "user", constraint: bool = False) -> None:
        """New information or a changed constraint, from this process: logged, then planned with."""
        problems = []
        if not isinstance(text, str) or not text.strip():
            problems.append(Problem(code="tell", where="text", message="must be non-empty text"))
        elif len(text) > self.config.limits.max_output_chars:
            limit = self.config.limits.max_output_chars
            problems.append(Problem(code="tell", where="text", message=f"is longer than {limit:,} characters"))
        if not isinstance(by, str):
            problems.append(Problem(code="tell", where="by", message="must be text"))
        if self.state.finished:
            problems.append(Problem(code="finished", where=f"run {self.run_id}", message="it has finished"))
        if problems:
            raise UsageError("cannot tell the run", problems)
        told = InformationAdded(at=self.now(), text=text, by=by, constraint=bool(constraint))
        if not self.events:  # told before the run's first event: logged right after it, before it plans
            self._told_early.append(told)
            return
        self.emit(told)
        self.heard()

    def heard(self) -> None:
        """New information is in the log: have the loop take it to the planner."""
        self.queue.put_nowait(_News())

    def now(self) -> float:
        """The time events are stamped with (the world's)."""
        return self.world.now()

    def clock(self) -> float:
        """The run's own clock, for the budgets (a recorded world may stamp events with recorded times)."""
        return self._clock()

    def new_id(self) -> str:
        return self.world.new_id()

    @property
    def rng(self) -> random.Random:
        """The run's randomness (retry jitter), made when first needed: seeding is not free."""
        if self._rng_made is None:
            self._rng_made = self.config.context.rng()
        return self._rng_made

    def outlet(self) -> Outlet:
        """What the world may do to this run."""
        return Outlet(
            run_id=self.run_id,
            emit=self.emit,
            heard=self.heard,
            answered=self.humans.answered_elsewhere,
            end=self.end_as_recorded,
            idempotency_key=self.idempotency_key,
        )

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

    @property
    def steps_waiting_for_plan(self) -> Collection[str]:
        return self.planning.waiting

    def planning_context(self) -> contextvars.Context | None:
        """The context a planning task starts in: its round's span current, when the run is traced."""
        telemetry = self.telemetry
        return None if telemetry is None else telemetry.planning_context()

    def decide(self, approval_id: str, decision: ApprovalDecision) -> None:
        """Answer an open question of this run, from this process."""
        self.humans.decide(approval_id, decision)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> RunState:
        if self._finished:
            return self.state
        telemetry = self.telemetry
        if telemetry is None:
            return await self._run()
        telemetry.begin(self.events)
        try:
            return await self._run()
        finally:
            telemetry.end()

    async def _run(self) -> RunState:
        if self.resuming:
            self.emit(RunResumed(at=self.now(), events=len(self.events)))
        else:
            self.emit(self._started())
            for told in self._told_early:
                self.emit(replace(told, at=self.now()))
            self._told_early.clear()
        cap = self.caps.wall_time
        wall = None if cap is None else max(0.0, cap - self.state.active_time)
        if not self.world.keeps_wall_time:
            wall = None  # the world serves its own wall-time stop
        stop: Stop | None = None
        begin = True
        try:
            while stop is None:
                try:
                    async with asyncio.timeout(wall) as deadline:
                        self._deadline = deadline
                        try:
                            await self._loop(begin=begin)
                        except Stop as s:
                            stop = s
                except TimeoutError:
                    if not deadline.expired():
                        raise
                    stop = await self._out_of_time()
                    begin, wall = False, None  # asked to raise it: no deadline until it is raised
        except _Suspend:
            return await self._suspend()
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
            if self.detaching:  # left, not ended: the log stops here, as a stopped process's would
                await self._shutdown("", log=False)
                await self._close_journal()
                raise
            await self._shutdown("run cancelled")
            self._finish(Stop(StopReason(kind="cancelled", detail="the run was cancelled")))
            await self._close_journal()
            raise
        except JournalFailed as e:
            stop = error_stop("log_failed", str(e))
        except UsageError as e:
            stop = error_stop("usage", str(e))
        except Exception as e:  # a defect must still end the run with a reason, never hang it
            stop = error_stop("internal", f"internal error: {type(e).__name__}: {e}")
        assert stop is not None
        try:
            await self._shutdown(f"run stopped: {stop.reason.kind}")
            if self.journal is not None and stop.reason.code != "log_failed":
                try:
                    await self.journal.flush()  # a run whose log is incomplete cannot report success
                except JournalFailed as e:
                    stop = error_stop("log_failed", str(e))
        except asyncio.CancelledError:  # cancelled while ending: it ended as decided, and its log says so
            self._finish(stop)
            await self._close_journal()
            raise
        self._finish(stop)
        await self._close_journal()
        if self.config.memory is not None and self.state.finished:
            await report_to_memory(self.config, self.run_id, self.state, self.events)
        return self.state

    async def _out_of_time(self) -> Stop | None:
        """The wall-time budget ran out: steps under way fail as timed out, and the run stops — or,
        when a human is asked to raise the cap, waits for the answer (None)."""
        limit = self.caps.wall_time or 0.0
        running = [sid for sid in self._running if self.state.steps[sid].status == "running"]
        await self._shutdown("", log=False)
        used = used_of("wall_time", self.state, self.now())
        self.emit(BudgetExhaustedEvent(at=self.now(), budget="wall_time", limit=limit, used=round(used, 6)))
        for sid in running:
            rec = self.state.steps[sid]
            message = f"the run's wall-time budget of {limit:g}s ran out while the step ran"
            self.emit(
                StepFailed(
                    at=self.now(),
                    step_id=sid,
                    error=StepError(kind="timeout", message=message),
                    attempts=rec.attempts,
                    started=True,
                )
            )
        if self.raises_budget and self.raising is None:
            self.unaddressed += [sid for sid in running if sid not in self.unaddressed]
            self._ask_to_raise(BudgetHit("wall_time", limit, round(used, 6)))
            return None
        detail = f"wall time of {limit:g}s used up"
        return Stop(StopReason(kind="budget_exhausted", budget="wall_time", detail=detail))

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
            trace=self.telemetry.carrier() if self.telemetry is not None else {},
        )

    def finish_unstarted(self) -> None:
        """Close the log of a run cancelled before its loop ever ran."""
        if not self.events:
            self.emit(self._started())
        self._finish(Stop(StopReason(kind="cancelled", detail="the run was cancelled before it started")))

    def _finish(self, stop: Stop) -> None:
        if not self._finished:
            self._finished = True
            label = stop.provenance if stop.answer is not None else None
            self.emit(
                RunFinished(
                    at=self.now(), stop=stop.reason, answer=stop.answer, answer_provenance=label, withheld=stop.withheld
                )
            )

    async def _close_journal(self) -> None:
        try:
            await self.humans.close()
            for task in self._helpers:
                task.cancel()
            if self._helpers:
                await self._settle(self._helpers)
                self._helpers.clear()
        finally:  # cancelled on the way, the log is closed all the same
            await self._close_log()

    async def _close_log(self) -> None:
        if self.journal is None:
            return
        try:
            await self.journal.close()
        except JournalFailed as e:
            # The last events could not be saved: the run must not look as if it had ended well.
            last = self.events[-1] if self.events else None
            if isinstance(last, RunFinished):
                if last.stop.code != "log_failed":
                    stop = StopReason(kind="error", code="log_failed", detail=str(e))
                    last = self.events[-1] = replace(last, stop=stop, answer=None)
                    self.state.stop, self.state.answer = stop, None
                await self.journal.close_failed(last)

    async def _suspend(self) -> RunState:
        questions = tuple(a.approval_id for a in self.state.pending_approvals)
        suspended = RunSuspended(at=self.now(), reason="waiting for a human's answer", approvals=questions)
        try:
            await self._shutdown("", log=False)
            if self.journal is not None:
                await self.journal.flush()  # the questions must be saved before the process may go
        except JournalFailed as e:
            self._finish(error_stop("log_failed", str(e)))
            await self._close_journal()
            return self.state
        except asyncio.CancelledError:  # cancelled while suspending: the questions are saved all the same
            self.emit(replace(suspended, at=self.now()))
            await self._close_journal()
            raise
        self.emit(replace(suspended, at=self.now()))
        await self._close_journal()
        return self.state

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
            await self._settle(tasks)

    async def _settle(self, tasks: Collection[asyncio.Task[None]]) -> None:
        """Wait for cancelled tasks to finish; one that ignores its cancellation is abandoned after
        ``Limits.cancel_grace`` seconds, so that no tool can keep the run from ending."""
        _done, stuck = await asyncio.wait(tasks, timeout=self.config.limits.cancel_grace)
        for task in stuck:
            abandon(task)

    async def _loop(self, *, begin: bool = True) -> None:
        if begin:
            self._helpers.update(self.world.start(self.outlet()))
            if self.journal is not None:
                await self.journal.flush()  # a store that cannot be written stops the run before it spends anything
            if self.resuming:
                restore(self)
            else:
                self.planning.start("initial", "the run started")
        loop = asyncio.get_running_loop()
        while True:
            if self.journal is not None and self.journal.error is not None:
                raise JournalFailed(f"the run log could not be written: {self.journal.error}")
            self._dispatch()
            if self._budget_blocked is not None and not self._running and self.raising is None:
                self.budget_stop(self._budget_blocked)
            waiting_for_humans = False
            if not self._running and self.planning.idle:
                self._when_idle()
            elif self.humans.blocked() and not self.ready.any_ready(self._startable):
                self._when_blocked()
                waiting_for_humans = True
            if waiting_for_humans and self._deadline is not None and self._deadline.when() is not None:
                paused = loop.time()
                done = await self.queue.get()
                deadline = self._deadline.when()
                if deadline is not None:  # time spent waiting for a human does not count against wall time
                    self._deadline.reschedule(deadline + loop.time() - paused)
            else:
                done = await self.queue.get()
            if isinstance(done, StepDone):
                self._step_done(done)
            elif isinstance(done, PlanDone):
                self.planning.done(done)
            elif isinstance(done, _News):
                self.planning.news()
            elif isinstance(done, _Raised):
                self._raised(done.decision)
            elif isinstance(done, _Recorded):
                raise _EndSegment(done.events)

    def _when_idle(self) -> None:
        """Nothing runs and nobody plans: replan, take the next turn, finish, or stop."""
        if self.raising is not None:  # nothing goes on before a human says whether to raise the cap
            if self.humans.open_questions:
                self._when_blocked()
            return
        if self.unaddressed:
            self.replan_for_failures()
            return
        handed_off = self._handed_off()
        if handed_off is not None:
            raise handed_off
        plan = self.state.plan
        waiting = [s.id for s in plan.steps if self.state.steps[s.id].status == "pending"] if plan else []
        if waiting:
            raise error_stop("unrunnable", f"steps can never start: {', '.join(waiting)}")
        kind = self.policy.when_idle()
        self.planning.start(kind, "a step finished" if kind == "turn" else "every step finished")

    def _handed_off(self) -> Stop | None:
        """The run's end, when the plan's hand-off to a workflow has succeeded: the workflow's
        output, as text, is the final answer, with no further planner call. With an answer review
        set, the planner writes the answer from the record instead, and it is reviewed as usual."""
        plan = self.state.plan
        workflows = self.config.workflows
        if plan is None or not workflows or self.config.review is not None:
            return None
        for step in reversed(plan.steps):
            rec = self.state.steps.get(step.id)
            if step.tool in workflows and rec is not None and rec.status == "succeeded":
                detail = f"workflow {step.tool} finished the work (step {step.id})"
                label = rec.output_provenance if self.trust.on else None
                return Stop(StopReason(kind="goal_met", detail=detail), handoff_answer(rec.output), label)
        return None

    def _when_blocked(self) -> None:
        """Everything under way waits for a human."""
        if self.suspends:
            raise _Suspend()

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        room = self.config.limits.max_concurrency - len(self._running)
        if room <= 0 or not self.ready.has_ready or self._budget_blocked is not None:
            return
        for step in self.ready.pop(self._reserve, room):
            self.start_step(step)

    def start_step(self, step: Step, *, held: str | None = None) -> None:
        token = self._tokens.get(step.id, 0) + 1
        self._tokens[step.id] = token
        if held is not None:
            self._count(step, +1)  # dispatched steps were counted when reserved
        coro = run_step(self, step, self._executor_of(step), token, held)
        self._running[step.id] = (asyncio.create_task(coro, name=f"step:{step.id}"), token)

    def _startable(self, step: Step) -> bool:
        return not self.planning.holds(step)

    def _reserve(self, step: Step) -> bool:
        """Whether the limits let ``step`` start now; if so, count it against them at once.

        A step that may change things outside the run waits while the plan is being replaced
        (``Planning.holds``). When the step or its tool call would go over a budget, no more steps
        start from then on.
        """
        if self.planning.holds(step):
            return False
        executor = self._executor_of(step)
        if step.tool is not None and step.tool in self.config.tools:
            cap = self.config.tools.get(step.tool).max_concurrency
            if cap is not None and self._per_tool.get(step.tool, 0) >= cap:
                return False
        cap = executor.max_concurrency
        if cap is not None and self._per_executor.get(executor.name, 0) >= cap:
            return False
        if self._budget_blocked is not None:
            return False
        budget = self.budget
        try:
            budget.check_step(self.state, in_flight=self._unstarted)
            if step.tool is not None:
                budget.check_tool_call(self.state, self.now(), in_flight=self._unstarted_tool_calls)
        except BudgetHit as hit:
            self._budget_blocked = hit  # the steps allowed still start; the run stops once they finish
            return False
        if step.tool is not None:
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

    def may_change_world(self, step: Step) -> bool:
        """Whether running ``step`` may change something outside the run, by itself or through a
        tool its model may call (see :func:`~planexec.plan.changes_world`)."""
        return changes_world(step, self.config.tools)

    def side_effecting(self, step: Step) -> bool:
        """Whether running ``step`` may change something outside the run."""
        if step.effect == "write":
            return True
        tools = self.config.tools
        return step.tool is not None and step.tool in tools and tools.get(step.tool).side_effect

    def fail_rule(self, step: Step) -> str:
        """What happens when ``step``'s result fails its checks: the plan's rule for the step, unless
        the developer's rule is a human review (a plan cannot lift it)."""
        rule = self.config.escalation.on_fail
        return rule if rule == "review" or step.on_fail is None else step.on_fail

    def retries_on_fail(self, step: Step) -> int:
        """Attempts more a step whose result failed its checks gets: only when running it again is safe."""
        if self.fail_rule(step) != "retry":
            return 0
        tools = self.config.tools
        idempotent = step.tool is not None and step.tool in tools and tools.get(step.tool).idempotent
        if self.side_effecting(step) and not idempotent:
            return 0
        for name in step.allowed_tools:  # a model step may have called a tool that changes the world
            if name in tools and tools.get(name).side_effect and not tools.get(name).idempotent:
                return 0
        return self.config.escalation.retries

    def reviews_on_fail(self, step: Step) -> bool:
        """Whether a human reviews ``step``'s result when it fails its checks (someone must be able to)."""
        return self.fail_rule(step) == "review" and self.can_ask_humans

    def idempotency_key(self, step: Step) -> str:
        """Stable across retries and restarts, new for each plan version that redefines the step."""
        return f"{self.run_id}:{step.id}:v{self.state.steps[step.id].plan_version}"

    # -- one step --------------------------------------------------------------------------

    def check_inner_tool_call(self) -> None:
        """A model step's tool call is about to be attempted: check it against the tool-call budget,
        with every call committed to or under way, and count it as under way."""
        in_flight = self._unstarted_tool_calls + self._inner_tool_calls_in_flight
        self.budget.check_tool_call(self.state, self.clock(), in_flight=in_flight)
        self._inner_tool_calls_in_flight += 1

    def inner_tool_calls_ended(self, count: int) -> None:
        self._inner_tool_calls_in_flight -= count

    def inner_limit(self, tool: Tool) -> asyncio.Semaphore | None:
        """The limit a tool's calls from model steps share (``Tool.max_concurrency``), if any."""
        if tool.max_concurrency is None:
            return None
        return self._inner_limits.setdefault(tool.name, asyncio.Semaphore(tool.max_concurrency))

    def unreserve(self, step: Step) -> None:
        self._unstarted -= 1
        if step.tool is not None:
            self._unstarted_tool_calls -= 1

    def _step_done(self, done: StepDone) -> None:
        current = self._running.get(done.step_id)
        if current is None or current[1] != done.token:
            return  # a cancelled or superseded attempt
        self._release(done.step_id)
        if done.crash is not None:
            raise crash_stop(done.crash)
        if done.budget is not None:
            if self.raises_budget and self._safe_to_rerun(done):  # run it again once the cap is raised
                reason = f"waits for a raised budget: {done.budget}"
                self.emit(StepRequeued(at=self.now(), step_id=done.step_id, reason=reason))
                self.budget_stop(done.budget, redo=("step", done.step_id))
                return
            error = StepError(kind="budget", message=str(done.budget))
            budget_step = self.state.steps[done.step_id].step
            self.emit(
                StepFailed(
                    at=self.now(),
                    step_id=done.step_id,
                    error=error,
                    attempts=done.attempts,
                    started=done.started,
                    provenance=self.trust.failure(budget_step, error, done.started) if self.trust.on else None,
                )
            )
            if self.raises_budget:  # it ran part of the way: patched once the cap is raised
                self.unaddressed.append(done.step_id)
            self.budget_stop(done.budget)
            return
        step = self.state.steps[done.step_id].step
        trust = self.trust
        if done.refused is not None:
            self._refused(done, done.refused)
        if done.error is None:
            assert done.verdict is not None
            label = None
            if trust.on:
                label = trust.human_output(step.id) if done.by_human else trust.output(step)
            self.emit(
                StepSucceeded(
                    at=self.now(),
                    step_id=done.step_id,
                    output=done.output,
                    verdict=done.verdict,
                    attempts=done.attempts,
                    confidence=done.confidence,
                    provenance=label,
                )
            )
            self.ready.succeeded(done.step_id)
            repeated = self.repeats.succeeded(self.state.steps[done.step_id])
            if repeated is not None:
                self.stall(*repeated)
            if self.policy.after_step() and self.state.steps[done.step_id].step.tool not in self.config.workflows:
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
                provenance=trust.failure(step, done.error, done.started) if trust.on else None,
            )
        )
        self._route_failure(done.step_id, done.error)

    def _refused(self, done: StepDone, violations: tuple[Violation, ...]) -> None:
        """A call of the step broke a trust rule and was not made: the run stops ``refused``."""
        step = self.state.steps[done.step_id].step
        first = violations[0]
        more = f" (and {counted(len(violations) - 1, 'more rule')} broken)" if len(violations) > 1 else ""
        detail = f"step {done.step_id}: {first}{more}"
        error = StepError(kind="untrusted", message=f"refused: {first}{more}")
        self.emit(
            StepFailed(
                at=self.now(),
                step_id=done.step_id,
                error=error,
                attempts=done.attempts,
                started=done.started,
                provenance=self.trust.failure(step, error, done.started),
                violations=violations,
            )
        )
        raise Stop(StopReason(kind="refused", detail=detail, violations=violations))

    def _safe_to_rerun(self, done: StepDone) -> bool:
        """Whether a step a cap stopped may simply run again: it was refused before it started, it
        cannot change the world, or (a model-driven step) it had called no tool yet."""
        if not done.started:
            return True
        rec = self.state.steps[done.step_id]
        return not self.may_change_world(rec.step) or (rec.step.tool is None and not rec.tool_calls)

    def _route_failure(self, step_id: str, error: StepError) -> None:
        if error.kind == "rejected":
            raise Stop(StopReason(kind="rejected", detail=f"step {step_id}: {error.message}"))
        rec = self.state.steps[step_id]
        if rec.step.tool is not None and rec.args is not None:
            key = canonical_call(rec.step.tool, rec.args)
            if self.state.failed_calls.get(key, 0) >= 2:
                self.stall("repeated_failure", f"{rec.step.tool} failed again with the same arguments: {error.message}")
        if not self.policy.replans_failures():
            raise error_stop("step_failed", f"step {step_id} failed ({error}) and replanning is off")
        self.unaddressed.append(step_id)
        if self.planning.idle and self.raising is None:
            self.replan_for_failures()

    def replan_for_failures(self) -> None:
        if self.budget.replans is not None and self.state.replans >= self.budget.replans:
            raise Stop(
                StopReason(
                    kind="max_replans",
                    detail=f"the plan was patched {counted(self.state.replans, 'time')}, the most allowed; "
                    f"still failing: {', '.join(self.unaddressed)}",
                )
            )
        failed = ", ".join(f"{sid} ({self.state.steps[sid].error})" for sid in self.unaddressed)
        kind: PlanKind = "failure"
        self.planning.start(kind, f"these steps failed: {failed}")

    def stall(self, rule: StallRule, detail: str) -> None:
        self.emit(StallDetected(at=self.now(), rule=rule, detail=detail))
        raise Stop(StopReason(kind="stalled", detail=detail))

    def budget_stop(self, hit: BudgetHit, *, redo: tuple[str, Any] | None = None) -> None:
        """The run reached a cap: stop it, reporting what it has actually spent of that budget — or,
        when a human is asked to raise caps, ask (once for caps reached together) and hold ``redo``
        (what the cap refused) until the answer."""
        used = used_of(hit.budget, self.state, self.now())
        if hit.budget == "wall_time":
            used = round(used, 6)
        final = BudgetHit(hit.budget, hit.limit, used, needed=hit.needed)
        self.emit(BudgetExhaustedEvent(at=self.now(), budget=hit.budget, limit=hit.limit, used=used, needed=hit.needed))
        if not self.raises_budget:
            raise Stop(StopReason(kind="budget_exhausted", budget=hit.budget, detail=str(final)))
        if redo is not None:
            self._after_raise.append(redo)
        if self._budget_blocked is None:
            self._budget_blocked = final
        if self.raising is None:
            self._ask_to_raise(final)

    def _ask_to_raise(self, hit: BudgetHit) -> None:
        """Ask a human whether to raise ``hit``'s cap (with the forecast of the rest of the plan);
        the answer comes back through the queue."""
        self.raising = hit
        plan = self.state.plan
        if plan is not None:
            self.planning.forecast_rest(plan)
        request = ApprovalRequest(
            approval_id="",
            run_id=self.run_id,
            subject="budget",
            reason=f"{hit}: raise the cap to go on, or stop the run",
            rule="budget_cap",
            budget=hit.budget,
        )

        async def ask() -> None:
            self.wake()  # the loop looks again once the question is open
            decision = await self.humans.ask(request, version=plan.version if plan is not None else None)
            self.queue.put_nowait(_Raised(decision))

        task = asyncio.create_task(ask(), name=f"budget:{self.run_id}")
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)

    def resume_raise(self, hit: BudgetHit, approval_id: str) -> None:
        """After a restart: wait again for the answer to the question about raising ``hit``'s cap."""
        self.raising = hit
        self._budget_blocked = hit
        record = self.state.approvals[approval_id]
        request = ApprovalRequest(
            approval_id=approval_id,
            run_id=self.run_id,
            subject="budget",
            reason=record.reason,
            rule="budget_cap",
            budget=hit.budget,
        )

        async def ask() -> None:
            self.wake()
            decision = await self.humans.ask(request, version=record.plan_version, existing=record)
            self.queue.put_nowait(_Raised(decision))

        task = asyncio.create_task(ask(), name=f"budget:{self.run_id}")
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)

    def after_raise(self, what: str, arg: Any) -> None:
        """Do ``what`` once the cap a human is asked about is raised (``plan``: a planning round)."""
        self._after_raise.append((what, arg))

    def _raised(self, decision: ApprovalDecision) -> None:
        """A human answered: go on with the caps raised, or stop."""
        hit = self.raising
        assert hit is not None
        self.raising = None
        if not decision.approved:
            by = decision.by or "a human"
            detail = f"{hit}; {by} did not raise it: {decision.reason or 'no reason given'}"
            raise Stop(StopReason(kind="budget_exhausted", budget=hit.budget, detail=detail))
        self.apply_raise(dict(decision.budget or {}))
        self._budget_blocked = None
        redo, self._after_raise = self._after_raise, []
        succeeded = {sid for sid, rec in self.state.steps.items() if rec.status == "succeeded"}
        for what, arg in redo:
            if what == "step":
                rec = self.state.steps.get(arg)
                if rec is not None and rec.status == "pending":
                    self.ready.add(rec.step, succeeded)
            elif what == "plan" and self.planning.idle:
                kind, why = arg
                self.planning.start(kind, why)

    def apply_raise(self, caps: Mapping[str, Any]) -> None:
        """Take up raised caps: checked before each call from now on; a raised wall time moves the
        deadline (what the run has used stays counted)."""
        if not caps:
            return
        self.caps = replace(self.caps, **caps)
        self.budget = replace(
            self.budget, **{k: v for k, v in caps.items() if k != "wall_time" or self.world.keeps_wall_time}
        )
        if "wall_time" in caps and self._deadline is not None and self.world.keeps_wall_time:
            cap = caps["wall_time"]
            if cap is None:
                self._deadline.reschedule(None)
            else:
                left = max(0.0, cap - used_of("wall_time", self.state, self.now()))
                self._deadline.reschedule(asyncio.get_running_loop().time() + left)

    # -- calls on behalf of the planner and executors ---------------------------------------

    async def call_model(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        on_step: Callable[[Step], None] | None = None,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse:
        return await self.models.call(role, model, request, step_id, on_step=on_step, read=read)

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
    ) -> ModelResponse:
        return await self.models.call_streaming(role, model, request, step_id, on_text, on_step, read=read)
