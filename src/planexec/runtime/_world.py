"""The world a run lives in: everything the loop takes from outside itself.

The engine decides; the world supplies what it cannot decide — the time, new ids, models'
answers, the outcomes of steps, humans' answers, and the verdicts of the developer's own checks.
A :class:`LiveWorld` asks the real ones. A recorded world (``RecordedWorld``, for replays and
forks) serves them from a run's log until the log runs out or a fork point is reached, and
compares every event the engine decides with the one the log holds.

The loop asks the same questions of either world; it never asks which one it is in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from planexec.errors import Problem
from planexec.executor import StepError, Verdict
from planexec.log import AnswerReviewed, Event, PlanForecast, PlanRecalled, ToolsChanged
from planexec.models import ModelResponse
from planexec.plan import Step
from planexec.runtime._budget import BudgetHit
from planexec.trust import Violation

if TYPE_CHECKING:
    from planexec.runtime._settings import RunContext

__all__ = ["LiveWorld", "Outlet", "RecordedError", "StepOutcome", "World"]


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
    end: Callable[[list[Event]], None]
    """The rest of this stretch of the run happened outside the loop (a wall-time stop, a
    cancellation, a stopped process): copy these events and stop."""
    idempotency_key: Callable[[Step], str]


class RecordedError(Exception):
    """A model call that failed when the run was recorded; ``str`` is the recorded text."""


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
    """Everything outside the loop. Each question that a world answers with ``None`` is one the
    run answers live: it calls the model, runs the step, asks the human, runs the checks."""

    @property
    def serving(self) -> bool:
        """Whether what happens comes from a record (the engine's decisions are then compared
        with it, and what it served is not counted again)."""
        ...

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

    async def turn(self, wanted: Callable[[Event], bool]) -> None:
        """Wait until the run's next event may be one ``wanted`` (events that tasks emit after
        awaiting something come out in the recorded order, however the tasks wake)."""
        ...

    async def model_answer(
        self, role: str, purpose: str, step_id: str | None, on_step: Callable[[Step], None] | None
    ) -> ModelResponse | None:
        """A model's answer that is already known, or None to call the model."""
        ...

    async def step_outcome(self, step: Step) -> StepOutcome | None:
        """How ``step`` ended, when that is already known, or None to carry it out."""
        ...

    def decision(self, approval_id: str) -> Coroutine[Any, Any, None] | None:
        """A coroutine that logs a human's known answer when its time comes, or None to ask."""
        ...

    async def answer_checks(self) -> AnswerReviewed | None:
        """The verdict of the answer's checks when it is already known, or None to run them."""
        ...

    def tools_change(self) -> ToolsChanged | None:
        """The change of tools a record holds where the run now is (None: none, or live)."""
        ...

    def recorded_forecast(self) -> tuple[bool, PlanForecast | None]:
        """A plan version's forecast, when a record knows it: ``(True, event)``, or ``(True, None)``
        for a record with none here (it was written before forecasts, or made none); ``(False,
        None)``: make one."""
        ...

    def recorded_refusal(self) -> tuple[bool, tuple[Problem, ...]]:
        """Whether a record refused the planner's answer just given for its forecast: ``(True,
        problems)`` (none when it did not); ``(False, ())``: check it."""
        ...

    def recalled(self) -> tuple[bool, PlanRecalled | None]:
        """What plan memory offered where the run now is, when a record knows it: ``(True,
        event)``, or ``(True, None)`` for a record with no offer here; ``(False, None)``: ask."""
        ...

    def recorded_violations(self, step_id: str, call_id: str | None) -> tuple[bool, tuple[Violation, ...]]:
        """The trust rules a record says step ``step_id``'s call broke (rules that are the
        developer's code cannot be checked again): ``(True, violations)``; ``(False, ())``: check them."""
        ...


class LiveWorld:
    """The world as it is: the run's clock and ids, real models, tools and humans."""

    __slots__ = ("_context",)

    def __init__(self, context: RunContext) -> None:
        self._context = context

    @property
    def serving(self) -> bool:
        return False

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

    async def turn(self, wanted: Callable[[Event], bool]) -> None:
        return None

    async def model_answer(
        self, role: str, purpose: str, step_id: str | None, on_step: Callable[[Step], None] | None
    ) -> ModelResponse | None:
        return None

    async def step_outcome(self, step: Step) -> StepOutcome | None:
        return None

    def decision(self, approval_id: str) -> Coroutine[Any, Any, None] | None:
        return None

    async def answer_checks(self) -> AnswerReviewed | None:
        return None

    def tools_change(self) -> ToolsChanged | None:
        return None

    def recorded_forecast(self) -> tuple[bool, PlanForecast | None]:
        return False, None

    def recorded_refusal(self) -> tuple[bool, tuple[Problem, ...]]:
        return False, ()

    def recalled(self) -> tuple[bool, PlanRecalled | None]:
        return False, None

    def recorded_violations(self, step_id: str, call_id: str | None) -> tuple[bool, tuple[Violation, ...]]:
        return False, ()
