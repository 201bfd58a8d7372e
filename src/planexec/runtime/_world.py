"""The world a run lives in: everything the loop takes from outside itself.

The engine decides; the world supplies what it cannot decide — the time, new ids, models'
answers, the outcomes of steps, humans' answers, and the verdicts of the developer's own checks.
The engine asks each question with the live way to answer it; a :class:`LiveWorld` takes that
way. A recorded world (``RecordedWorld``, for replays and forks) serves the answers from a run's
log until the log runs out or a fork point is reached, and compares every event the engine
decides with the one the log holds.

The loop asks the same questions of either world, in the same way; it never asks which one it
is in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from planexec.errors import Problem
from planexec.executor import StepError, Verdict
from planexec.log import AnswerReviewed, Event, PlanForecast, PlanRecalled, ToolsChanged
from planexec.models import ModelResponse
from planexec.plan import Step
from planexec.runtime._budget import BudgetHit
from planexec.tools import Toolset
from planexec.trust import Violation

if TYPE_CHECKING:
    from planexec.runtime._settings import RunContext

__all__ = ["Asking", "LiveWorld", "Outlet", "RecordedError", "StepOutcome", "ToolChange", "World"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Outlet:
    """What a world may do to the run it serves."""

    run_id: str
    emit: Callable[[Event], None]
    """Log an event that happened outside the loop (a recorded answer, a recorded call)."""
    heard: Callable[[], None]
    """New information is in the log: the planner is to hear it."""
    answered: Callable[[list[Event]], None]
    """Answers to open questions are in the log: the questions waiting for them are to wake."""
    end: Callable[[Callable[[], None]], None]
    """The rest of this stretch of the run happened outside the loop (a wall-time stop, a
    cancellation, a stopped process): stop what is under way without logging it, call the
    function given, which logs what happened, and leave the run."""
    idempotency_key: Callable[[Step], str]


class RecordedError(Exception):
    """A model call that failed when the run was recorded; ``str`` is the recorded text."""


@dataclass(frozen=True, slots=True)
class Asking:
    """What a run does about humans."""

    can_ask: bool
    """Whether questions can be asked at all (a callback, or a log to keep them in)."""
    suspends: bool
    """Whether the run is saved and left when only humans can move it on."""
    raises_budget: bool
    """Whether a cap the run reaches is put to a human to raise (``Limits.on_budget``)."""


ToolChange = tuple[ToolsChanged, Toolset]
"""A change of the run's tools: its event, and the tools after it."""


@dataclass(slots=True)
class StepOutcome:
    """How a step ended, as a world already knows it (a recorded run)."""

    output: Any = None
    verdict: Verdict | None = None
    error: StepError | None = None
    attempts: int = 1
    budget: BudgetHit | None = None
    confidence: float | None = None
    held: str | None = None
    """Set when the step's call was cut off with its effect uncertain and the run held the step
    for a human: the question's reason."""
    violations: tuple[Violation, ...] = ()
    """Set when a call the step's model made broke a trust rule and the run stopped ``refused``."""


class World(Protocol):
    """Everything outside the loop. Each question comes with the live way to answer it (call the
    model, run the step, ask the memory, run the checks): a world that already knows the answer
    serves it instead, and compares what the engine decides with what it knows."""

    @property
    def keeps_wall_time(self) -> bool:
        """Whether the run's wall-time budget is kept by the loop's own timer (a record serves its
        wall-time stop where it happened instead)."""
        ...

    def now(self) -> float:
        """The time events are stamped with."""
        ...

    def new_id(self) -> str:
        """A new id for a question to a human."""
        ...

    def resume_at(self, events: int) -> None:
        """The run goes on after ``events`` logged events (a resumed run, a later stretch)."""
        ...

    def witness(self, event: Event) -> Event:
        """``event`` is about to be logged: the event as it is to be logged."""
        ...

    def start(self, outlet: Outlet) -> list[asyncio.Task[None]]:
        """Begin serving the run through ``outlet``; the tasks end with the run."""
        ...

    def asking(self, humans: Asking) -> Asking:
        """Whether the run asks humans, is left while only they can move it on, and puts a cap it
        reaches to them, given what the run's set-up says (a record: as the recorded run did)."""
        ...

    def tools_as_of(self, tools: Toolset, history: list[Event]) -> Toolset:
        """The run's tools where it goes on after ``history`` (a record: as the log changed them)."""
        ...

    def tools_change(self, tools: Toolset, live: Callable[[], ToolChange | None]) -> ToolChange | None:
        """The change of the run's ``tools`` before a planning round, and the tools after it
        (``live``: as the tools are now), or None."""
        ...

    async def turn(self, wanted: Callable[[Event], bool]) -> None:
        """Wait until the run's next event may be one ``wanted`` (events that tasks emit after
        awaiting something come out in the recorded order, however the tasks wake)."""
        ...

    def steps_first(self, running: Collection[str]) -> bool:
        """Whether what the running steps ``running`` report comes before a planning round's
        outcome (the recorded run heard a step end first, however the tasks wake now)."""
        ...

    def model_answer(
        self,
        role: str,
        purpose: str,
        step_id: str | None,
        on_step: Callable[[Step], None] | None,
        live: Callable[[], Awaitable[ModelResponse]],
    ) -> Awaitable[ModelResponse]:
        """A model's answer (``live``: call the model). A call that failed raises as it did;
        a model step's failed call, ``StepFailure``."""
        ...

    def step_outcome(self, step: Step, live: Callable[[], Awaitable[StepOutcome]]) -> Awaitable[StepOutcome]:
        """How ``step`` ended (``live``: carry it out)."""
        ...

    def decision(
        self, approval_id: str, live: Callable[[], Coroutine[Any, Any, None] | None]
    ) -> Coroutine[Any, Any, None] | None:
        """A coroutine that logs a human's answer when it comes (``live``: the approver callback's),
        or None: the answer is to come from elsewhere (``Run.decide``, another process)."""
        ...

    async def answer_checks(self, live: Callable[[], Awaitable[AnswerReviewed]]) -> AnswerReviewed:
        """The verdict of the final answer's checks, to be logged (``live``: run them)."""
        ...

    def forecast(self, version: int | None, live: Callable[[], PlanForecast]) -> PlanForecast | None:
        """A plan version's forecast, to be logged (``live``: make it), or None when a record has
        none here (it was written before forecasts, or made none; ``version``: none for that
        version)."""
        ...

    def forecast_refusal(self, live: Callable[[], list[Problem]]) -> list[Problem]:
        """The problems the planner's answer just given has for its forecast (``live``: check it)."""
        ...

    async def recall(self, live: Callable[[], Awaitable[PlanRecalled | None]]) -> PlanRecalled | None:
        """What plan memory offers where the run now is (``live``: ask the memory)."""
        ...

    def violations(
        self, step_id: str, call_id: str | None, live: Callable[[], tuple[Violation, ...]]
    ) -> tuple[Violation, ...]:
        """The trust rules step ``step_id``'s call breaks, for rules that are the developer's code
        (a record says what they found: they cannot be checked again). ``live``: check them."""
        ...


class LiveWorld:
    """The world as it is: the run's clock and ids, real models, tools and humans."""

    __slots__ = ("_context",)

    def __init__(self, context: RunContext) -> None:
        self._context = context

    @property
    def keeps_wall_time(self) -> bool:
        return True

    def now(self) -> float:
        return self._context.clock()

    def new_id(self) -> str:
        return self._context.new_id()

    def resume_at(self, events: int) -> None:
        return None

    def witness(self, event: Event) -> Event:
        return event

    def start(self, outlet: Outlet) -> list[asyncio.Task[None]]:
        return []

    def asking(self, humans: Asking) -> Asking:
        return humans

    def tools_as_of(self, tools: Toolset, history: list[Event]) -> Toolset:
        return tools

    def tools_change(self, tools: Toolset, live: Callable[[], ToolChange | None]) -> ToolChange | None:
        return live()

    async def turn(self, wanted: Callable[[Event], bool]) -> None:
        return None

    def steps_first(self, running: Collection[str]) -> bool:
        return False  # live: whatever reports back first is first

    def model_answer(
        self,
        role: str,
        purpose: str,
        step_id: str | None,
        on_step: Callable[[Step], None] | None,
        live: Callable[[], Awaitable[ModelResponse]],
    ) -> Awaitable[ModelResponse]:
        return live()  # awaited by the caller: no coroutine of its own in between

    def step_outcome(self, step: Step, live: Callable[[], Awaitable[StepOutcome]]) -> Awaitable[StepOutcome]:
        return live()

    def decision(
        self, approval_id: str, live: Callable[[], Coroutine[Any, Any, None] | None]
    ) -> Coroutine[Any, Any, None] | None:
        return live()

    async def answer_checks(self, live: Callable[[], Awaitable[AnswerReviewed]]) -> AnswerReviewed:
        return await live()

    def forecast(self, version: int | None, live: Callable[[], PlanForecast]) -> PlanForecast | None:
        return live()

    def forecast_refusal(self, live: Callable[[], list[Problem]]) -> list[Problem]:
        return live()

    async def recall(self, live: Callable[[], Awaitable[PlanRecalled | None]]) -> PlanRecalled | None:
        return await live()

    def violations(
        self, step_id: str, call_id: str | None, live: Callable[[], tuple[Violation, ...]]
    ) -> tuple[Violation, ...]:
        return live()
