"""Budgets: caps on what a run may spend, checked before every call, not only after.

Every run is bounded unless its developer says otherwise: ``Budget()`` has default caps on steps,
model calls, tool calls, wall time and replans (``DEFAULT_CAPS``). A cap is lifted only by naming
it: ``Budget(steps=None)`` has no step cap, ``Budget.unbounded()`` no cap at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from planexec.errors import BudgetHit, Problem, UsageError
from planexec.log import BudgetName

if TYPE_CHECKING:
    from planexec.log import RunState

__all__ = ["DEFAULT_CAPS", "Budget", "BudgetHit", "caps_from_json"]

DEFAULT_CAPS: dict[str, float | int] = {
    "model_calls": 200,
    "wall_time": 600.0,
    "tool_calls": 1000,
    "steps": 100,
    "replans": 3,
}
"""The caps every run has unless its developer sets them (``None`` lifts one)."""

_INTEGERS = frozenset({"model_calls", "input_tokens", "output_tokens", "tool_calls", "steps", "replans"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """Caps on one run; ``None`` means no cap. ``cost`` is in US dollars, ``wall_time`` in seconds
    (time spent waiting for a human's answer does not count).

    The defaults bound every run: 100 steps, 200 model calls, 1,000 tool calls, 600 seconds and 3
    replans. Lift a cap by setting it to ``None``; ``Budget.unbounded()`` lifts them all.
    """

    model_calls: int | None = 200
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    wall_time: float | None = 600.0
    tool_calls: int | None = 1000
    steps: int | None = 100
    replans: int | None = 3

    def __post_init__(self) -> None:
        problems = [p for f in fields(self) if (p := _problem(f.name, getattr(self, f.name))) is not None]
        if problems:
            raise UsageError("invalid budget", problems)

    @classmethod
    def unbounded(cls) -> Budget:
        """No cap at all: the run ends only when its planner stops, it fails, or it is cancelled."""
        return cls(model_calls=None, wall_time=None, tool_calls=None, steps=None, replans=None)

    def as_dict(self) -> dict[str, float | int | None]:
        return {name: getattr(self, name) for name in _NAMES}

    def left(self, state: RunState, now: float) -> dict[str, float | int]:
        """What is left of each capped budget, for the planner's prompt. Wall time is given in whole
        seconds (rounded up), so that the prompt of a quick run does not change from run to run."""
        left: dict[str, float | int] = {}
        for name in _NAMES:
            cap = getattr(self, name)
            if cap is None:
                continue
            used = _USED[name](state, now)
            if name == "wall_time":
                left[name] = max(0, math.ceil(cap - used))
            else:
                left[name] = round(cap - used, 4) if isinstance(cap, float) else cap - int(used)
        return left

    def check_model_call(
        self,
        state: RunState,
        now: float,
        estimated_input_tokens: int = 0,
        *,
        in_flight: int = 0,
        in_flight_tokens: int = 0,
        estimated_cost: float = 0.0,
        in_flight_cost: float = 0.0,
        in_flight_output: int = 0,
    ) -> None:
        """Raise ``BudgetHit`` if a model call now would go over a cap.

        ``in_flight`` calls (with their estimated input tokens and cost) have been sent but not
        answered yet: they count as spent, so that calls made at the same time cannot overrun a cap
        together. ``estimated_cost`` is what the call's input alone will cost, where the price is
        known: a call whose input alone would go over the cost cap is not made. ``in_flight_output``
        and the output part of ``in_flight_cost`` are what the calls in flight may still produce
        (their ``max_tokens``, or a default): parallel calls cannot overrun a cap by more than one
        call's output.
        """
        self._check(state, now, "model_calls", "output_tokens", "cost", "wall_time", pending={"model_calls": in_flight})
        if self.cost is not None and state.cost + in_flight_cost + estimated_cost > self.cost:
            raise BudgetHit("cost", self.cost, state.cost, needed=in_flight_cost + estimated_cost)
        output = state.usage.output_tokens
        if self.output_tokens is not None and in_flight_output and output + in_flight_output >= self.output_tokens:
            raise BudgetHit("output_tokens", self.output_tokens, output, needed=in_flight_output)
        if self.input_tokens is not None:
            needed = in_flight_tokens + estimated_input_tokens
            if state.usage.input_tokens + needed > self.input_tokens:
                raise BudgetHit("input_tokens", self.input_tokens, state.usage.input_tokens, needed=needed)

    def check_tool_call(self, state: RunState, now: float, *, in_flight: int = 0) -> None:
        """Raise ``BudgetHit`` if one more tool call would go over a cap (``in_flight``: calls committed
        to but not logged yet)."""
        self._check(state, now, "tool_calls", "wall_time", pending={"tool_calls": in_flight})

    def check_step(self, state: RunState, *, in_flight: int = 0) -> None:
        """Raise ``BudgetHit`` if starting one more step would go over the step cap."""
        if self.steps is not None and state.steps_started + in_flight >= self.steps:
            raise BudgetHit("steps", self.steps, state.steps_started, needed=in_flight + 1)

    def _check(self, state: RunState, now: float, *names: BudgetName, pending: dict[str, int]) -> None:
        for name in names:
            cap = getattr(self, name)
            if cap is None:
                continue
            spent = _USED[name](state, now)
            waiting = pending.get(name, 0)
            if spent + waiting >= cap:
                raise BudgetHit(name, cap, spent, needed=waiting + 1 if name in _INTEGERS else 0.0)


_NAMES = tuple(f.name for f in fields(Budget))


def _problem(name: str, value: Any) -> Problem | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return Problem(code="budget", where=name, message=f"must be a number or None (no cap), not {value!r}")
    if name in _INTEGERS and not isinstance(value, int):
        return Problem(code="budget", where=name, message=f"must be a whole number or None (no cap), not {value!r}")
    if not math.isfinite(value):
        return Problem(code="budget", where=name, message=f"must be a finite number, not {value!r}; None means no cap")
    if value < 0:
        return Problem(code="budget", where=name, message="must not be negative")
    return None


_USED: dict[str, Callable[[RunState, float], float]] = {
    "model_calls": lambda state, _now: state.model_calls,
    "input_tokens": lambda state, _now: state.usage.input_tokens,
    "output_tokens": lambda state, _now: state.usage.output_tokens,
    "cost": lambda state, _now: state.cost,
    "wall_time": lambda state, now: state.active_time + max(0.0, now - state.last_at),
    "tool_calls": lambda state, _now: state.tool_calls,
    "steps": lambda state, _now: state.steps_started,
    "replans": lambda state, _now: state.replans,
}
"""How much of each budget a run has used, from its state."""


def used_of(name: BudgetName, state: RunState, now: float) -> float:
    """How much of budget ``name`` the run has actually spent."""
    return _USED[name](state, now)


def caps_from_json(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Caps as JSON gives them (every number may come as a float): a whole number for a counted cap
    becomes an integer; anything else is left for :class:`Budget` to check."""
    caps: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _INTEGERS and isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        caps[name] = value
    return caps
