"""What plan memory keeps of a run, and what it offers back for a new goal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.errors import UsageError
from planexec.plan import Step

__all__ = ["ENTRY_VERSION", "MemoryEntry", "Recall", "ReuseMode"]

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
        """An entry from its stored record; :class:`UsageError` for a record this version cannot read."""
        if not isinstance(data, dict):
            raise UsageError("a plan memory entry must be a JSON object")
        version = data.get("version")
        if version != ENTRY_VERSION:
            raise UsageError(f"plan memory entry version {version!r} is not one this planexec reads ({ENTRY_VERSION})")
        try:
            vector = data.get("vector")
            return cls(
                id=str(data["id"]),
                goal=str(data["goal"]),
                constraints=tuple(str(c) for c in data.get("constraints") or ()),
                steps=tuple(Step.model_validate(s) for s in data["steps"]),
                answer=data.get("answer"),
                tools=tuple(str(t) for t in data.get("tools") or ()),
                run_id=data.get("run_id"),
                outcome=str(data.get("outcome", "goal_met")),
                cost=float(data.get("cost", 0.0)),
                planner_calls=int(data.get("planner_calls", 0)),
                plan_versions=int(data.get("plan_versions", 1)),
                created_at=float(data.get("created_at", 0.0)),
                updated_at=float(data.get("updated_at", 0.0)),
                uses=int(data.get("uses", 0)),
                failures=int(data.get("failures", 0)),
                last_failure=data.get("last_failure"),
                direct=bool(data.get("direct", True)),
                embedder=str(data.get("embedder", "")),
                vector=None if vector is None else tuple(float(v) for v in vector),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"unreadable plan memory entry: {e}") from None


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
