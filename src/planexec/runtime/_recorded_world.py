"""The recorded world: run the engine again over a recorded log, with no model and no tool called.

Everything that came from outside the engine — model responses, tool outcomes and verdicts,
humans' answers, the clock, new ids, a wall-time stop or a cancellation — is served from the log,
each when the log says it happened. Everything the engine decides — plans installed, steps
started, failures routed, stalls, budgets, stop reasons — is decided again and compared, event
by event, with the log. A faithful replay reproduces the log exactly.

From a chosen event on (``fork_at``), or from a step whose outcome is replaced by an injected
fault, the replay stops serving the log and the run goes on live, with the models and tools of
the agent that forks it: from then on, this world asks the live one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planexec.errors import Problem
from planexec.executor import ErrorKind, StepError, StepFailure
from planexec.log import (
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    InformationAdded,
    ModelAttemptFailed,
    ModelCalled,
    PlanForecast,
    PlannerOutputRejected,
    PlanRecalled,
    RunFinished,
    RunResumed,
    RunStarted,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepStarted,
    StepStreamed,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    ToolsChanged,
)
from planexec.models import ModelCrashed, ModelResponse
from planexec.runtime._budget import BudgetHit
from planexec.runtime._tool_specs import with_change
from planexec.runtime._world import Asking, Outlet, RecordedError, StepOutcome, ToolChange
from planexec.tools import Toolset
from planexec.trust import Violation

if TYPE_CHECKING:
    from planexec.faults import FaultProfile, FaultyModel
    from planexec.plan import Step
    from planexec.runtime._settings import RunContext

__all__ = ["Fault", "RecordedWorld"]

WATCHDOG_SECONDS = 5.0
"""A replay serves everything at once; a log position that does not move for this long means the
engine took another path than the log."""


class _Divergence(Exception):
    """The engine decided something other than what the log records."""

    def __init__(self, index: int, expected: Event | None, got: Event | None) -> None:
        self.index = index
        self.expected = expected
        self.got = got
        want = expected.kind if expected is not None else "the end of the log"
        have = got.kind if got is not None else "nothing"
        super().__init__(f"event {index + 1}: the log has {want}, the replay produced {have}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Fault:
    """Fail ``step_id`` (its first run in the log) with ``kind`` instead of its recorded outcome."""

    step_id: str
    kind: ErrorKind = "tool_error"
    message: str = "fault injected by replay"


@dataclass
class RecordedWorld:
    """A run's world as its log recorded it (see the module's docstring)."""

    log: list[Event]
    context: RunContext
    """The clock and ids of the live world a fork goes on in."""
    fork_at: int | None = None
    """Serve the log up to this many events, then go on live (None: replay the whole log)."""
    fault: Fault | None = None
    faults: FaultProfile | None = None
    """A fault profile: the replay goes on live at the first call the profile would spoil."""
    wrappers: dict[str, FaultyModel] = field(default_factory=dict)
    """The live models, by role, wrapped with ``faults``: told where the replay left off."""
    cursor: int = 0
    divergence: _Divergence | None = None
    abort: Callable[[], None] | None = None
    """Called once, on the first divergence: the driver stops the engine."""
    _outlet: Outlet | None = None
    _moved: asyncio.Condition = field(default_factory=asyncio.Condition)
    _ids: list[str] = field(default_factory=list)
    _served_faults: set[str] = field(default_factory=set)
    _model_calls: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ids = [e.approval_id for e in self.log if isinstance(e, ApprovalRequested)]

    @property
    def live(self) -> bool:
        limit = len(self.log) if self.fork_at is None else self.fork_at
        return self.cursor >= limit

    @property
    def forking(self) -> bool:
        """A fork or a fault: a new run that follows the log only up to a point."""
        return self.fork_at is not None or self.fault is not None or self.faults is not None

    # -- the world's questions ----------------------------------------------------------------

    @property
    def keeps_wall_time(self) -> bool:
        return False  # a recorded wall-time stop is served where the log has it

    def now(self) -> float:
        """Until the fork point, an exact replay keeps the recorded times; a fork's own are now."""
        if self.live or self.forking:
            return self.context.clock()
        return self.log[self.cursor].at if self.cursor < len(self.log) else self.log[-1].at

    def new_id(self) -> str:
        if self.live:
            return self.context.new_id()
        used = sum(1 for e in self.log[: self.cursor] if isinstance(e, ApprovalRequested))
        return self._ids[used] if used < len(self._ids) else f"replay-{used}"

    def resume_at(self, events: int) -> None:
        self.cursor = max(self.cursor, events)

    def asking(self, humans: Asking) -> Asking:
        """A replay asks humans, suspends and raises caps as the recorded run did."""
        first = self.log[0]
        recorded = first.config.get("approvals") if isinstance(first, RunStarted) else None
        if recorded is None:
            return humans
        return Asking(
            can_ask=bool(recorded.get("ask", humans.can_ask)),
            suspends=bool(recorded.get("suspends", humans.suspends)),
            raises_budget=bool(recorded.get("raises", False)),
        )

    def tools_as_of(self, tools: Toolset, history: list[Event]) -> Toolset:
        """The tools as the log changed them up to where the run goes on."""
        if self.live:
            return tools
        for event in history:
            if isinstance(event, ToolsChanged):
                tools = with_change(tools, event)
        return tools

    def witness(self, event: Event) -> Event:
        if self.forking and not self.live:
            # A fork is a run of its own: what it serves from the log happens now, on its clock.
            event = replace(event, at=self.context.clock())
        self.check(event)
        return event

    def start(self, outlet: Outlet) -> list[asyncio.Task[None]]:
        self._outlet = outlet
        return [
            asyncio.create_task(self._external_stops(outlet), name="replay:external"),
            asyncio.create_task(self._external_news(outlet), name="replay:news"),
        ]

    @property
    def outlet(self) -> Outlet:
        assert self._outlet is not None, "the recorded world serves a run once the run started it"
        return self._outlet

    def check(self, event: Event) -> None:
        """Compare an event the engine emits with the log; advance. After a divergence, nothing
        is compared any more: the driver is stopping the engine."""
        if self.live or self.divergence is not None:
            return
        expected = self.log[self.cursor]
        if not _same(expected, event, forked=self.forking):
            self._diverged(_Divergence(self.cursor, expected, event))
            return
        self.cursor += 1
        self._notify()

    def _diverged(self, divergence: _Divergence) -> None:
        if self.divergence is None:
            self.divergence = divergence
            if self.abort is not None:
                self.abort()
        self._notify()

    def _notify(self) -> None:
        async def notify() -> None:
            async with self._moved:
                self._moved.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def _until(self, wanted: Any) -> Event:
        """Wait until the event at the cursor satisfies ``wanted``; return it."""
        async with self._moved:
            while True:
                if self.divergence is not None:
                    raise self.divergence
                if self.cursor < len(self.log) and not self.live and wanted(self.log[self.cursor]):
                    return self.log[self.cursor]
                try:
                    async with asyncio.timeout(WATCHDOG_SECONDS):
                        await self._moved.wait()
                except TimeoutError:
                    expected = self.log[self.cursor] if self.cursor < len(self.log) else None
                    self._diverged(_Divergence(self.cursor, expected, None))
                    assert self.divergence is not None
                    raise self.divergence from None

    def _goes_live_for_step(self, step: Step) -> bool:
        """With a fault profile: go on live here when the profile spoils this step's first call."""
        if self.faults is None or self.live or step.tool is None:
            return False
        key = self.outlet.idempotency_key(step).removeprefix(f"{self.outlet.run_id}:")
        if self.faults.tool_fault(step.tool, key, 1) is None:
            return False
        self._go_live()
        return True

    def _goes_live_for_model(self, role: str, purpose: str) -> bool:
        """With a fault profile: go on live here when the profile spoils this model answer."""
        if self.faults is None or self.live:
            return False
        count = self._model_calls.get((role, purpose), 0) + 1
        self._model_calls[(role, purpose)] = count
        storm = self.faults.rate_limit_storm > 0 and sum(self._model_calls.values()) == 1
        if not storm and self.faults.model_fault(role, purpose, count) is None:
            return False
        self._model_calls[(role, purpose)] = count - 1  # the live model answers this call
        self._go_live(storm=storm)
        return True

    def _go_live(self, *, storm: bool = False) -> None:
        self.fork_at = self.cursor
        for role, model in self.wrappers.items():
            answered = {p: n for (r, p), n in self._model_calls.items() if r == role}
            storm_calls = 0 if storm else self.faults.rate_limit_storm if self.faults else 0
            model.continue_from(answered, calls=sum(answered.values()) + storm_calls)

    async def turn(self, wanted: Callable[[Event], bool]) -> None:
        """Wait until the log's next event is one ``wanted``: events a task emits after awaiting
        something come out in the recorded order, whatever order the tasks wake up in."""
        if not self.live:
            await self._until(wanted)

    async def model_answer(
        self,
        role: str,
        purpose: str,
        step_id: str | None,
        on_step: Callable[[Step], None] | None,
        live: Callable[[], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        """The recorded answer — a recorded failure raises as the call did: ``ModelCrashed``, a
        model step's ``StepFailure``, else ``RecordedError`` — or, once the run goes on live,
        ``live``'s."""
        if self.live or self._goes_live_for_model(role, purpose):
            return await live()

        def mine(e: Event) -> bool:
            if on_step is not None and isinstance(e, StepStreamed):
                return True  # a step the answer streamed before it was complete
            return (
                isinstance(e, ModelCalled | ModelAttemptFailed)
                and e.role == role
                and e.purpose == purpose
                and e.step_id == step_id
            )

        while True:
            event = await self._until(mine)
            if isinstance(event, ModelAttemptFailed):  # an attempt that failed before the answer came
                self.outlet.emit(event)
                continue
            if isinstance(event, StepStreamed):
                assert on_step is not None
                before = self.cursor
                on_step(event.step)
                if self.cursor == before:  # the engine did not take it where the recorded run did
                    self._diverged(_Divergence(self.cursor, event, None))
                continue
            break
        assert isinstance(event, ModelCalled)
        self.outlet.emit(event)
        if event.response is None:
            error = event.error or "the model failed"
            if error.startswith(_CRASHED):  # the run stopped on it: it stops the replay the same way
                raise ModelCrashed(event.model, None, message=error.removeprefix(_CRASHED))
            if role == "executor":  # the model step failed
                raise StepFailure(StepError(kind="executor", message=f"the model failed: {error}"))
            raise RecordedError(error)
        return event.response

    async def step_outcome(self, step: Step, live: Callable[[], Awaitable[StepOutcome]]) -> StepOutcome:
        """Re-emit what happened inside the step, then hand back how it ended (``live``'s, once the
        run goes on live)."""
        if self.live or self._goes_live_for_step(step):
            return await live()
        if self.fault is not None and self.fault.step_id == step.id and step.id not in self._served_faults:
            self._served_faults.add(step.id)
            self.fork_at = self.cursor  # from here on, the run is live
            return StepOutcome(error=StepError(kind=self.fault.kind, message=self.fault.message))

        def mine(e: Event) -> bool:
            if isinstance(e, StepAttemptFailed | ToolCalled | ToolProgress | StepSucceeded | StepFailed):
                return e.step_id == step.id
            if isinstance(e, ApprovalRequested):
                return e.subject in ("review", "effect") and e.step_id == step.id
            return isinstance(e, ModelCalled) and e.step_id == step.id

        while True:
            event = await self._until(mine)
            if isinstance(event, ApprovalRequested) and event.subject == "effect":  # cut off; held for a human
                return StepOutcome(held=event.reason, attempts=event_attempts(self.log, step.id))
            if isinstance(event, ApprovalRequested):  # the result failed its checks; a human reviews it
                return StepOutcome(
                    output=event.output, verdict=event.verdict, attempts=event_attempts(self.log, step.id)
                )
            if isinstance(event, StepSucceeded):
                return StepOutcome(
                    output=event.output, verdict=event.verdict, attempts=event.attempts, confidence=event.confidence
                )
            if isinstance(event, StepFailed):
                outcome = StepOutcome(
                    error=event.error, verdict=event.verdict, attempts=event.attempts, violations=event.violations
                )
                if event.verdict is not None:
                    outcome.output = event.output
                if event.error.kind == "budget":
                    outcome.budget = self._budget_after(self.cursor)
                return outcome
            self.outlet.emit(event)  # attempts, tool and model calls inside the step, as they were

    def _budget_after(self, index: int) -> BudgetHit:
        for e in self.log[index:]:
            if isinstance(e, BudgetExhaustedEvent):
                return BudgetHit(e.budget, e.limit, e.used, needed=e.needed)
        return BudgetHit("wall_time", 0.0, 0.0)  # a log cut short; the comparison reports it

    def decision(
        self, approval_id: str, live: Callable[[], Coroutine[Any, Any, None] | None]
    ) -> Coroutine[Any, Any, None] | None:
        """Serve a human's recorded answer when the log reaches it (``live``'s once live)."""
        if self.live:
            return live()
        return self._decision(approval_id)

    async def _decision(self, approval_id: str) -> None:
        event = await self._until(lambda e: isinstance(e, ApprovalDecided) and e.approval_id == approval_id)
        assert isinstance(event, ApprovalDecided)
        self.outlet.emit(event)
        self.outlet.answered([event])

    async def answer_checks(self, live: Callable[[], Awaitable[AnswerReviewed]]) -> AnswerReviewed:
        """The checks are the developer's code: their recorded verdict is served as it was."""
        if self.live:
            return await live()
        event = await self._until(lambda e: isinstance(e, AnswerReviewed))
        assert isinstance(event, AnswerReviewed)
        return event

    def steps_first(self, running: Collection[str]) -> bool:
        if self.live:
            return False
        event = self._next_event()
        reported = isinstance(event, StepAttemptFailed | ToolCalled | ToolProgress | StepSucceeded | StepFailed)
        return reported and getattr(event, "step_id", None) in running

    def _next_event(self) -> Event | None:
        return self.log[self.cursor] if self.cursor < len(self.log) else None

    async def recall(self, live: Callable[[], Awaitable[PlanRecalled | None]]) -> PlanRecalled | None:
        if self.live:
            return await live()
        event = self._next_event()
        return event if isinstance(event, PlanRecalled) else None

    def violations(
        self, step_id: str, call_id: str | None, live: Callable[[], tuple[Violation, ...]]
    ) -> tuple[Violation, ...]:
        """What the log says the step's call broke: the next question about the step, or its
        refusal, holds the violations; its start, none."""
        if self.live:
            return live()
        for e in self.log[self.cursor :]:
            if call_id is not None:
                if isinstance(e, ToolCalled) and e.step_id == step_id and e.call_id == call_id:
                    return tuple(v for v in e.violations if v.rule == "argument_rule")
                continue
            if isinstance(e, ApprovalRequested) and e.subject == "step" and e.step_id == step_id:
                return tuple(v for v in e.violations if v.rule == "argument_rule")
            if isinstance(e, StepFailed) and e.step_id == step_id:
                return e.violations
            if isinstance(e, StepStarted) and e.step_id == step_id:
                return ()
        return ()

    def tools_change(self, tools: Toolset, live: Callable[[], ToolChange | None]) -> ToolChange | None:
        """The change of tools the log holds where the run now is: its event, and the recorded
        tools after it."""
        if self.live:
            return live()
        event = self._next_event()
        return (event, with_change(tools, event)) if isinstance(event, ToolsChanged) else None

    def forecast(self, version: int | None, live: Callable[[], PlanForecast]) -> PlanForecast | None:
        if self.live:
            return live()
        event = self._next_event()
        if not isinstance(event, PlanForecast) or (version is not None and event.plan_version != version):
            return None
        return event

    def forecast_refusal(self, live: Callable[[], list[Problem]]) -> list[Problem]:
        if self.live:
            return live()
        event = self._next_event()
        if not isinstance(event, PlannerOutputRejected):
            return []
        return [p for p in event.problems if p.code == "over_budget"]

    async def _external_news(self, outlet: Outlet) -> None:
        """Information another process added to the run: emit it where the log has it. (No
        watchdog: this waits for as long as the replay runs, and ends when it goes live.)"""
        async with self._moved:
            while not self.live and self.divergence is None:
                event = self.log[self.cursor]
                if isinstance(event, InformationAdded):
                    outlet.emit(event)
                    outlet.heard()
                    continue
                await self._moved.wait()

    async def _external_stops(self, outlet: Outlet) -> None:
        """A wall-time stop or a cancellation came from outside the engine: copy it from the log."""

        def external(e: Event) -> bool:
            if isinstance(e, BudgetExhaustedEvent):
                return e.budget == "wall_time"
            if isinstance(e, StepCancelled):
                return e.reason == "run cancelled"
            return isinstance(e, RunFinished) and e.stop.kind == "cancelled"

        try:
            await self._until(lambda e: external(e) or isinstance(e, RunResumed))
        except _Divergence:
            return  # the engine reports it
        rest = self.log[self.cursor :]

        def copy() -> None:
            for event in rest:
                if isinstance(event, RunResumed):  # the recorded process stopped here
                    break
                outlet.emit(event)

        outlet.end(copy)


_CRASHED = f"{ModelCrashed.__name__}: "


def event_attempts(log: list[Event], step_id: str) -> int:
    """The attempts a step's final event records (for a step whose review a replay reaches)."""
    for e in log:
        if isinstance(e, StepSucceeded | StepFailed) and e.step_id == step_id:
            return e.attempts
    return 1


def _same(expected: Event, got: Event, *, forked: bool) -> bool:
    if isinstance(expected, RunStarted) and isinstance(got, RunStarted):
        # how the run was set up is given, not decided: a replay or a fork may set it up otherwise
        return (expected.goal, expected.constraints) == (got.goal, got.constraints)
    if not forked:
        return expected == got
    # a fork is a new run: its events happen on its own clock, and its calls carry keys of their own
    expected = replace(expected, at=got.at)
    if isinstance(expected, StepStarted) and isinstance(got, StepStarted):
        expected = replace(expected, idempotency_key=got.idempotency_key)
    return expected == got
