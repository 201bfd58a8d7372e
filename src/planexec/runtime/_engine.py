"""The run loop: plan, dispatch ready steps, judge results, patch on failure, stop with a reason.

One coroutine owns the run. Steps and planning rounds run as tasks and report back through one
queue; the loop alone decides what happens next, and every decision is an event appended to the
log (and folded into the state) before anything acts on it. With a store, the journal writes the
log as it grows, and a run can be resumed from it in another process.

The loop's parts each have a module: dispatch (``_dispatch``), what a step's result leads to
(``_step_results``), the caps and raising them (``_caps``), planning (``_planning``), humans
(``_humans``), model calls (``_model_calls``); how a run ends is in ``_run_end``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from planexec._util.plural import counted
from planexec.errors import Problem, UsageError
from planexec.log import (
    Event,
    InformationAdded,
    RunResumed,
    RunState,
    StallDetected,
    StallRule,
    StopReason,
)
from planexec.models import Model, ModelRequest, ModelResponse
from planexec.plan import Step, changes_world
from planexec.runtime._budget import BudgetHit
from planexec.runtime._caps import Caps, Raised, raised_caps
from planexec.runtime._core import EngineConfig
from planexec.runtime._dispatch import Dispatcher
from planexec.runtime._humans import Humans
from planexec.runtime._journal import Journal, JournalFailed
from planexec.runtime._model_calls import ModelCalls
from planexec.runtime._planning import PlanDone, Planning, executor_docs, plan_checks
from planexec.runtime._policies import PlanningPolicy, policy_of
from planexec.runtime._recovery import restore
from planexec.runtime._run_end import EndedOutside, RunEnd, Suspend, handoff_answer
from planexec.runtime._scheduler import ReadyQueue
from planexec.runtime._settings import ApprovalDecision
from planexec.runtime._stalls import RepeatWatch
from planexec.runtime._step_gate import StepGate
from planexec.runtime._step_results import StepResults
from planexec.runtime._step_rules import StepRules
from planexec.runtime._step_runner import StepDone, run_step
from planexec.runtime._stops import Stop, error_stop
from planexec.runtime._tool_specs import tools_changed
from planexec.runtime._trust import Trust
from planexec.runtime._world import Asking, LiveWorld, Outlet, ToolChange, World
from planexec.store import RunStore
from planexec.telemetry import run_telemetry
from planexec.tools import Toolset
from planexec.trust import Source

if TYPE_CHECKING:
    import random

__all__ = ["Engine", "handoff_answer"]


class _Wake:
    """Queued to make the loop look again (a task began waiting for a human)."""


class _News:
    """Queued when new information reached the log: the planner is to hear it."""


class _EndedOutside:
    """Queued when the world says the rest of this stretch of the run happened outside the loop:
    ``rest`` logs it."""

    __slots__ = ("rest",)

    def __init__(self, rest: Callable[[], None]) -> None:
        self.rest = rest


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
    ) -> None:
        self.world: World = world if world is not None else LiveWorld(config.context)
        """Everything outside the loop: the time, ids, models' answers, steps' outcomes, humans."""
        tools = self.world.tools_as_of(config.tools, history or [])
        if tools is not config.tools:
            config = replace(config, tools=tools)
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
        self._listeners: list[Callable[[Event], None]] = []
        self._clock = config.context.clock
        self._rng_made: random.Random | None = None
        self.queue: asyncio.Queue[StepDone | PlanDone | _Wake | _News | _EndedOutside | Raised] = asyncio.Queue()
        self.ready = ReadyQueue()
        self.helpers: set[asyncio.Task[None]] = set()
        """Tasks that end with the run (questions about caps, the world's own)."""
        self.repeats = RepeatWatch(config.limits.repeat_rounds)
        self.repeats.restore(self.state)
        self._told_early: list[InformationAdded] = []
        """What the run was told before its first event: logged right after ``run_started``."""
        self.unaddressed: list[str] = []
        """Failed steps of the current plan that no patch has answered yet."""
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
        self._set_up_humans()
        self._set_up_parts()

    def _set_up_humans(self) -> None:
        """Whether humans can be asked, whether the run is left while only they can move it on, and
        whether a cap the run reaches is put to them (as the world has it: a record, as it was)."""
        approvals = self.config.approvals
        can_ask = approvals.approver is not None or (approvals.deferred and self.journal is not None)
        suspends = self.journal is not None and approvals.approver is None and approvals.when_waiting == "suspend"
        rule = self.config.limits.on_budget
        asking = self.world.asking(
            Asking(
                can_ask=can_ask,
                suspends=suspends,
                raises_budget=can_ask if rule == "ask" else rule == "auto" and approvals.approver is not None,
            )
        )
        self.can_ask_humans = asking.can_ask
        """Whether questions can be asked at all (a callback, or a log to keep them in)."""
        self.suspends = asking.suspends
        """Whether the run is saved and left when only humans can move it on."""
        self.raises_budget = asking.raises_budget
        """Whether a cap the run reaches is put to a human to raise (``Limits.on_budget``)."""

    def _set_up_parts(self) -> None:
        """The loop's parts, each given the loop."""
        config = self.config
        self.caps = Caps(self, raised_caps(config.budget, self.state.approvals))
        """The run's caps, as humans raised them, and the question about raising one."""
        self.budget = self.caps.caps
        """The caps checked before each call (a world that serves its own wall-time stop lifts that cap)."""
        if not self.world.keeps_wall_time:
            self.budget = replace(self.caps.caps, wall_time=None)
        self.rules = StepRules(self)
        """What the run's configuration says about a step: its effects, retries, reviews."""
        self.trust = Trust(self, config.trust)
        """Trust labels and rules: what each value is labelled, which calls break a rule."""
        self.humans = Humans(self)
        self.gate = StepGate(self)
        """The gate before a step runs: the confidence gate, approvals, trust rules."""
        self.models = ModelCalls(self)
        self.dispatcher = Dispatcher(self, functools.partial(run_step, self))
        self.results = StepResults(self)
        self.planning = Planning(self, plan_checks(config), executor_docs(config))
        self.end = RunEnd(self)
        """How the run ends: stopped, suspended, cancelled, or as a record says."""

    # -- the event log ---------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

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

    def refresh_tools(self) -> None:
        """Before a planning round: take up the tools as they are now (an MCP server listed its
        tools again), logged as ``tools_changed``; a record serves the change it holds here."""
        change = self.world.tools_change(self.config.tools, self._tools_now)
        if change is not None:
            event, tools = change
            self.emit(event)
            self._use_tools(tools)

    def _tools_now(self) -> ToolChange | None:
        """The change of the run's tools since they were last read, and the tools now."""
        source = self.config.current_tools
        if source is None:
            return None
        tools = source()
        if tools is self._tools_seen:
            return None
        self._tools_seen = tools
        change = tools_changed(self.config.tools, tools, at=self.now())
        return None if change is None else (change, tools)

    def _use_tools(self, tools: Toolset) -> None:
        self.config = replace(self.config, tools=tools)
        self.planning.use_tools(tools)

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
            end=self._ended_outside,
            idempotency_key=self.idempotency_key,
        )

    def _ended_outside(self, rest: Callable[[], None]) -> None:
        """The world says the rest of this stretch of the run happened outside the loop."""
        self.queue.put_nowait(_EndedOutside(rest))

    def wake(self) -> None:
        self.queue.put_nowait(_Wake())

    def decide(self, approval_id: str, decision: ApprovalDecision) -> None:
        """Answer an open question of this run, from this process."""
        self.humans.decide(approval_id, decision)

    # -- what the parts see of each other ------------------------------------------------------

    @property
    def running_steps(self) -> dict[str, tuple[asyncio.Task[None], int]]:
        return self.dispatcher.running

    @property
    def planning_idle(self) -> bool:
        return self.planning.idle

    @property
    def steps_waiting_for_plan(self) -> Collection[str]:
        return self.planning.waiting

    @property
    def raising(self) -> BudgetHit | None:
        """The cap a human is asked to raise: nothing new starts until they answer."""
        return self.caps.raising

    def planning_context(self) -> contextvars.Context | None:
        """The context a planning task starts in: its round's span current, when the run is traced."""
        telemetry = self.telemetry
        return None if telemetry is None else telemetry.planning_context()

    def held_by_planning(self, step: Step) -> bool:
        return self.planning.holds(step)

    def may_change_world(self, step: Step) -> bool:
        """Whether running ``step`` may change something outside the run, by itself or through a
        tool its model may call (see :func:`~planexec.plan.changes_world`)."""
        return changes_world(step, self.config.tools)

    def side_effecting(self, step: Step) -> bool:
        return self.rules.side_effecting(step)

    def retries_on_fail(self, step: Step) -> int:
        return self.rules.retries_on_fail(step)

    def reviews_on_fail(self, step: Step) -> bool:
        return self.rules.reviews_on_fail(step)

    def idempotency_key(self, step: Step) -> str:
        """Stable across retries and restarts, new for each plan version that redefines the step."""
        return f"{self.run_id}:{step.id}:v{self.state.steps[step.id].plan_version}"

    def start_step(self, step: Step, *, held: str | None = None) -> None:
        self.dispatcher.start_step(step, held=held)

    def cancel_step(self, step_id: str) -> None:
        self.dispatcher.cancel_step(step_id)

    def budget_stop(self, hit: BudgetHit, *, redo: tuple[str, Any] | None = None) -> None:
        self.caps.stop(hit, redo=redo)

    def resume_raise(self, hit: BudgetHit, approval_id: str) -> None:
        self.caps.resume(hit, approval_id)

    def after_raise(self, what: str, arg: Any) -> None:
        self.caps.after_raise(what, arg)

    def replan_for_failures(self) -> None:
        """Ask the planner for a patch for the failed steps no patch has answered yet."""
        if self.budget.replans is not None and self.state.replans >= self.budget.replans:
            raise Stop(
                StopReason(
                    kind="max_replans",
                    detail=f"the plan was patched {counted(self.state.replans, 'time')}, the most allowed; "
                    f"still failing: {', '.join(self.unaddressed)}",
                )
            )
        failed = ", ".join(f"{sid} ({self.state.steps[sid].error})" for sid in self.unaddressed)
        self.planning.start("failure", f"these steps failed: {failed}")

    def stall(self, rule: StallRule, detail: str) -> None:
        self.emit(StallDetected(at=self.now(), rule=rule, detail=detail))
        raise Stop(StopReason(kind="stalled", detail=detail))

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

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> RunState:
        if self.end.finished:
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
            self.emit(self.end.started())
            for told in self._told_early:
                self.emit(replace(told, at=self.now()))
            self._told_early.clear()
        try:
            stop = await self._until_stopped()
        except Suspend:
            return await self.end.suspend()
        except EndedOutside as ended:
            return await self.end.ended_outside(ended.rest)
        except asyncio.CancelledError:
            await self.end.cancelled()
            raise
        except JournalFailed as e:
            stop = error_stop("log_failed", str(e))
        except UsageError as e:
            stop = error_stop("usage", str(e))
        except Exception as e:  # a defect must still end the run with a reason, never hang it
            stop = error_stop("internal", f"internal error: {type(e).__name__}: {e}")
        return await self.end.stopped(stop)

    async def _until_stopped(self) -> Stop:
        """Run the loop until it stops, within the wall-time budget the loop keeps (a human asked to
        raise it: no deadline until it is raised)."""
        cap = self.caps.caps.wall_time
        wall = None if cap is None else max(0.0, cap - self.state.active_time)
        if not self.world.keeps_wall_time:
            wall = None  # the world serves its own wall-time stop
        begin = True
        while True:
            try:
                async with asyncio.timeout(wall) as deadline:
                    self.caps.deadline = deadline
                    try:
                        await self._loop(begin=begin)
                    except Stop as s:
                        return s
            except TimeoutError:
                if not deadline.expired():
                    raise
                stop = await self._out_of_time()
                if stop is not None:
                    return stop
                begin, wall = False, None

    async def _out_of_time(self) -> Stop | None:
        running = [sid for sid in self.dispatcher.running if self.state.steps[sid].status == "running"]
        await self.end.shutdown("", log=False)
        return self.caps.out_of_time(running)

    def finish_unstarted(self) -> None:
        """Close the log of a run cancelled before its loop ever ran."""
        self.end.unstarted()

    async def _begin(self) -> None:
        self.helpers.update(self.world.start(self.outlet()))
        if self.journal is not None:
            await self.journal.flush()  # a store that cannot be written stops the run before it spends anything
        if self.resuming:
            restore(self)
        else:
            self.planning.start("initial", "the run started")

    async def _loop(self, *, begin: bool = True) -> None:
        if begin:
            await self._begin()
        while True:
            if self.journal is not None and self.journal.error is not None:
                raise JournalFailed(f"the run log could not be written: {self.journal.error}")
            self.dispatcher.dispatch()
            blocked = self.dispatcher.blocked
            if blocked is not None and not self.dispatcher.running and self.caps.raising is None:
                self.caps.stop(blocked)
            waiting_for_humans = False
            if not self.dispatcher.running and self.planning.idle:
                self._when_idle()
            elif self.humans.blocked() and not self.ready.any_ready(self._startable):
                self._when_blocked()
                waiting_for_humans = True
            done = await self._next(waiting_for_humans)
            if isinstance(done, PlanDone) and self.world.steps_first(self.dispatcher.running):
                done = await self._after_steps(done, waiting_for_humans)
            self._take(done)

    async def _after_steps(self, done: PlanDone, waiting_for_humans: bool) -> Any:
        """A planning round's outcome that the world says comes after what running steps report (a
        replay takes a step's end first where the recorded run did): what reports back first."""
        first: Any = done
        while isinstance(first, PlanDone) and self.world.steps_first(self.dispatcher.running):
            later, first = first, await self._next(waiting_for_humans)
            self.queue.put_nowait(later)
        return first

    async def _next(self, waiting_for_humans: bool) -> Any:
        """What reports back next; time spent waiting for a human does not count against wall time."""
        deadline = self.caps.deadline
        if not waiting_for_humans or deadline is None or deadline.when() is None:
            return await self.queue.get()
        loop = asyncio.get_running_loop()
        paused = loop.time()
        done = await self.queue.get()
        when = deadline.when()
        if when is not None:
            deadline.reschedule(when + loop.time() - paused)
        return done

    def _take(self, done: Any) -> None:
        """Act on what reported back."""
        if isinstance(done, StepDone):
            self.results.take(done)
        elif isinstance(done, PlanDone):
            self.planning.done(done)
        elif isinstance(done, _News):
            self.planning.news()
        elif isinstance(done, Raised):
            self.caps.answered(done.decision)
        elif isinstance(done, _EndedOutside):
            raise EndedOutside(done.rest)

    def _when_idle(self) -> None:
        """Nothing runs and nobody plans: replan, take the next turn, finish, or stop."""
        if self.caps.raising is not None:  # nothing goes on before a human says whether to raise the cap
            if self.humans.open_questions:
                self._when_blocked()
            return
        if self.unaddressed:
            self.replan_for_failures()
            return
        handed_off = self.end.handed_off()
        if handed_off is not None:
            raise handed_off
        plan = self.state.plan
        waiting = [s.id for s in plan.steps if self.state.steps[s.id].status == "pending"] if plan else []
        if waiting:
            raise error_stop("unrunnable", f"steps can never start: {', '.join(waiting)}")
        kind = self.policy.when_idle()
        self.planning.start(kind, "a step finished" if kind == "turn" else "every step finished")

    def _when_blocked(self) -> None:
        """Everything under way waits for a human."""
        if self.suspends:
            raise Suspend()

    def _startable(self, step: Step) -> bool:
        return not self.planning.holds(step)
