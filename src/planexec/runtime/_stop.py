"""Why a run ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BudgetName", "StopKind", "StopReason"]

StopKind = Literal[
    "goal_met", "budget_exhausted", "max_replans", "stalled", "rejected", "error", "cancelled", "waiting"
]
"""``waiting`` is not an end: the run is saved, waiting for a human's answer; resume it after."""

BudgetName = Literal[
    "model_calls", "input_tokens", "output_tokens", "cost", "wall_time", "tool_calls", "steps", "replans"
]


@dataclass(frozen=True, kw_only=True, slots=True)
class StopReason:
    """Why a run ended: its kind, a readable detail, and which budget when one ran out."""

    kind: StopKind
    detail: str = ""
    budget: BudgetName | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "goal_met"

    def __str__(self) -> str:
        which = f" ({self.budget})" if self.budget else ""
        return f"{self.kind}{which}: {self.detail}" if self.detail else f"{self.kind}{which}"
