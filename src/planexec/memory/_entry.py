"""What plan memory keeps of a run, and what it offers back for a new goal."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.errors import UsageError
from planexec.plan import Step

__all__ = ["ENTRY_VERSION", "MemoryEntry", "Recall", "ReuseMode", "tools_of"]

ENTRY_VERSION = 1
"""Entry record changelog (bump and add a line on every change):
    1: first version — goal, steps, answer template, tools, outcome, cost, uses and failures."""

ReuseMode = Literal["direct", "guided"]
"""``direct``: the remembered plan, re-bound to the new goal, runs with no planner call.
``guided``: the planner plans, shown the remembered plan as a worked example."""


@dataclass(frozen=True, kw_only=True)
class MemoryEntry:
    """One remembered plan: the goal it met, the steps that met it, and how reusing it has gone.

    ``steps`` are the steps that succeeded, in the order of the run's last plan version;
    ``answer`` the final answer as a template (``{{step_id}}`` stands for a step's output), or
    None when the answer was worked out from the outputs rather than quoting them; ``direct``
    whether the plan may run again without a planner (False when redaction changed it).
    """

    id: str
    goal: str
    constraints: tuple[str, ...] = ()
    steps: tuple[Step, ...]
    answer: str | None = None
    tools: tuple[str, ...] = ()
    run_id: str | None = None
    outcome: str = "goal_met"
    cost: float = 0.0
    planner_calls: int = 0
    plan_versions: int = 1
    created_at: float = 0.0
    updated_at: float = 0.0
    uses: int = 0
    failures: int = 0
    last_failure: str | None = None
    direct: bool = True
    embedder: str = ""
    vector: tuple[float, ...] | None = field(default=None, repr=False)
    """A dense embedder's vector of the goal (a sparse one is made again from the goal)."""

    def to_record(self) -> dict[str, Any]:
        """The entry as JSON-ready data (what is stored and exported)."""
        return {
            "version": ENTRY_VERSION,
            "id": self.id,
            "goal": self.goal,
            "constraints": list(self.constraints),
            "steps": [s.model_dump(mode="json") for s in self.steps],
            "answer": self.answer,
            "tools": list(self.tools),
            "run_id": self.run_id,
            "outcome": self.outcome,
            "cost": self.cost,
            "planner_calls": self.planner_calls,
            "plan_versions": self.plan_versions,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "uses": self.uses,
            "failures": self.failures,
            "last_failure": self.last_failure,
            "direct": self.direct,
            "embedder": self.embedder,
            "vector": None if self.vector is None else list(self.vector),
        }

    @classmethod
    def from_record(cls, data: Any) -> MemoryEntry:
        """An entry from its stored record; :class:`UsageError` for a record this version cannot read.

        A record is read as a stranger's: texts must be texts, numbers finite, steps valid steps;
        ``tools`` are those the steps name, whatever the record says."""
        if not isinstance(data, dict):
            raise UsageError("a plan memory entry must be a JSON object")
        version = data.get("version")
        if version != ENTRY_VERSION:
            raise UsageError(f"plan memory entry version {version!r} is not one this planexec reads ({ENTRY_VERSION})")
        try:
            vector = data.get("vector")
            steps = tuple(Step.model_validate(s) for s in data["steps"])
            return cls(
                id=_text(data["id"]),
                goal=_text(data["goal"]),
                constraints=tuple(_text(c) for c in data.get("constraints") or ()),
                steps=steps,
                answer=_text(data.get("answer"), missing=True),
                tools=tools_of(steps),
                run_id=_text(data.get("run_id"), missing=True),
                outcome=_text(data.get("outcome", "goal_met")),
                cost=_finite(data.get("cost", 0.0)),
                planner_calls=int(_finite(data.get("planner_calls", 0))),
                plan_versions=int(_finite(data.get("plan_versions", 1))),
                created_at=_time(data.get("created_at", 0.0)),
                updated_at=_time(data.get("updated_at", 0.0)),
                uses=int(_finite(data.get("uses", 0))),
                failures=int(_finite(data.get("failures", 0))),
                last_failure=_text(data.get("last_failure"), missing=True),
                direct=data.get("direct", True) is True,
                embedder=_text(data.get("embedder", "")),
                vector=None if vector is None else tuple(_finite(v) for v in vector),
            )
        except (KeyError, TypeError, ValueError, RecursionError) as e:
            raise UsageError(f"unreadable plan memory entry: {type(e).__name__}: {e}"[:500]) from None


def tools_of(steps: Iterable[Step]) -> tuple[str, ...]:
    """The tools ``steps`` call (or let a model call), sorted."""
    return tuple(sorted({t for s in steps for t in ((s.tool,) if s.tool else ()) + s.allowed_tools}))


def _text(value: Any, *, missing: bool = False) -> Any:
    if isinstance(value, str) or (missing and value is None):
        return value
    raise TypeError(f"{type(value).__name__} where a text was expected")


def _time(value: Any) -> float:
    """An epoch time from 1970 to 9999 (what a date can show); ValueError for anything else."""
    at = _finite(value)
    if not 0 <= at < _YEAR_10000:
        raise ValueError(f"{value!r} is no time")
    return at


_YEAR_10000 = 253_402_300_800.0


def _finite(value: Any) -> float:
    """A number as a float; ValueError for anything else, infinities and NaN included."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{value!r} is no finite number")
    return float(value)


@dataclass(frozen=True, kw_only=True)
class Recall:
    """What the memory offers for a goal: an entry, how alike the goals are, and how to reuse it.

    For ``direct`` reuse, ``steps`` and ``answer`` are the entry's re-bound to the new goal
    (``bindings`` lists each replaced value); for ``guided``, the entry's as remembered, and
    ``why_not_direct`` says why they could not run as they are.
    """

    entry: MemoryEntry
    similarity: float
    mode: ReuseMode
    steps: tuple[Step, ...]
    answer: str | None
    bindings: tuple[tuple[str, str], ...] = ()
    why_not_direct: str | None = None
