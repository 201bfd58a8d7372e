"""Budgets: caps on what a run may spend, checked before every call, not only after."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from planexec._errors import Problem, UsageError
from planexec.runtime._stop import BudgetName

if TYPE_CHECKING:
    from planexec.runtime._state import RunState

__all__ = ["Budget", "BudgetHit"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """Caps on one run. ``None`` means no cap. ``cost`` is in US dollars, ``wall_time`` in seconds."""

    model_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    wall_time: float | None = None
    tool_calls: int | None = None
    steps: int | None = None
    replans: int = 3

    def __post_init__(self) -> None:
        problems = [
            Problem(code="budget", where=f.name, message="must not be negative")
            for f in fields(self)
            if (v := getattr(self, f.name)) is not None and v < 0
        ]
        if problems:
            raise UsageError("invalid budget", problems)

    def as_dict(self) -> dict[str, float | int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def left(self, state: RunState, now: float) -> dict[str, float | int]:
        """What is left of each capped budget, for the planner's prompt."""
        used = _used(state, now)
        return {
            name: round(cap - used[name], 4) if isinstance(cap, float) else cap - int(used[name])
            for name, cap in self.as_dict().items()
            if cap is not None
        }

    def check_model_call(
        self,
        state: RunState,
        now: float,
        estimated_input_tokens: int = 0,
        *,
        in_flight: int = 0,
        in_flight_tokens: int = 0,
        estimated_cost: float = 0.0,
    ) -> None:
        """Raise ``BudgetHit`` if a model call now would go over a cap.

        ``in_flight`` calls (and their estimated input tokens) have been sent but not answered yet:
        they count as spent, so that calls made at the same time cannot overrun a cap together.
        ``estimated_cost`` is what the call's input alone will cost, where the price is known.
        """
        self._check(state, now, "model_calls", "output_tokens", "cost", "wall_time", pending={"model_calls": in_flight})
        if self.cost is not None and estimated_cost > 0 and state.cost + estimated_cost > self.cost:
            raise BudgetHit("cost", self.cost, state.cost + estimated_cost)
        if self.input_tokens is not None:
            used = state.usage.input_tokens + in_flight_tokens + estimated_input_tokens
            if used > self.input_tokens:
                raise BudgetHit("input_tokens", self.input_tokens, used)

    def check_tool_call(self, state: RunState, now: float, *, in_flight: int = 0) -> None:
        """Raise ``BudgetHit`` if one more tool call would go over a cap (``in_flight``: calls committed
        to but not logged yet)."""
        self._check(state, now, "tool_calls", "wall_time", pending={"tool_calls": in_flight})

    def check_step(self, state: RunState, *, in_flight: int = 0) -> None:
        """Raise ``BudgetHit`` if starting one more step would go over the step cap."""
        started = state.steps_started + in_flight
        if self.steps is not None and started >= self.steps:
            raise BudgetHit("steps", self.steps, started)

    def _check(self, state: RunState, now: float, *names: BudgetName, pending: dict[str, int]) -> None:
        for name in names:
            cap = getattr(self, name)
            if cap is None:
                continue
            spent = _USED[name](state, now) + pending.get(name, 0)
            if spent >= cap:
                raise BudgetHit(name, cap, spent)


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


def _used(state: RunState, now: float) -> dict[str, float]:
    return {name: used(state, now) for name, used in _USED.items()}


class BudgetHit(Exception):
    """Internal signal: a budget would be exceeded. The run stops with ``budget_exhausted``."""

    def __init__(self, budget: BudgetName, limit: float, used: float) -> None:
        self.budget: BudgetName = budget
        self.limit = limit
        self.used = used
        super().__init__(f"{budget} budget exhausted: used {used:g} of {limit:g}")
