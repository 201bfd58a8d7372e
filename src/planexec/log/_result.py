"""The result of a run: the answer if any, why it stopped, and the complete record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planexec.errors import (
    BudgetExhausted,
    Escalated,
    MaxReplans,
    Refused,
    Rejected,
    RunCancelled,
    RunFailed,
    Stalled,
    UnrecoverableError,
    WaitingForHuman,
)
from planexec.log._events import Event
from planexec.log._state import RunState, StepRecord
from planexec.log._stop import StopReason
from planexec.models import Usage
from planexec.plan import Plan
from planexec.trust import Provenance

__all__ = ["RunResult"]

_FAILURES: dict[str, type[RunFailed]] = {
    "budget_exhausted": BudgetExhausted,
    "max_replans": MaxReplans,
    "stalled": Stalled,
    "rejected": Rejected,
    "refused": Refused,
    "escalated": Escalated,
    "cancelled": RunCancelled,
    "error": UnrecoverableError,
    "waiting": WaitingForHuman,
}


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Everything a run did. ``steps`` holds the latest record of each step id; ``superseded``
    the records a patch replaced or dropped; ``events`` the complete log."""

    run_id: str
    goal: str
    answer: str | None
    stop: StopReason
    plans: tuple[Plan, ...]
    steps: Mapping[str, StepRecord]
    superseded: tuple[StepRecord, ...]
    usage: Usage
    cost: float
    model_calls: int
    tool_calls: int
    replans: int
    started_at: float
    finished_at: float
    events: tuple[Event, ...]
    answer_provenance: Provenance | None = None
    """The answer's label (see :mod:`planexec.trust`): who stands behind it."""
    withheld: tuple[str, ...] = ()
    """The steps whose untrusted output was withheld from the answer (``*``: all of it)."""

    @classmethod
    def from_state(cls, state: RunState, events: list[Event]) -> RunResult:
        stop = state.stop
        if stop is None:
            if state.suspended is None:
                raise ValueError("the run has neither finished nor been suspended")
            waiting = ", ".join(state.suspended.approvals)
            stop = StopReason(kind="waiting", detail=f"{state.suspended.reason} (approvals: {waiting})")
        return cls(
            run_id=state.run_id,
            goal=state.goal,
            answer=state.answer,
            stop=stop,
            plans=tuple(state.plans),
            steps=dict(state.steps),
            superseded=tuple(state.superseded),
            usage=state.usage,
            cost=state.cost,
            model_calls=state.model_calls,
            tool_calls=state.tool_calls,
            replans=state.replans,
            started_at=state.started_at,
            finished_at=state.finished_at if state.finished_at is not None else state.started_at,
            events=tuple(events),
            answer_provenance=state.answer_provenance,
            withheld=state.withheld,
        )

    @property
    def ok(self) -> bool:
        return self.stop.ok

    @property
    def duration(self) -> float:
        return self.finished_at - self.started_at

    @property
    def outputs(self) -> dict[str, Any]:
        return {sid: rec.output for sid, rec in self.steps.items() if rec.status == "succeeded"}

    def raise_for_stop(self) -> RunResult:
        """Return self when the goal was met; otherwise raise the matching ``RunFailed``."""
        if self.stop.ok:
            return self
        raise _FAILURES[self.stop.kind](self)
