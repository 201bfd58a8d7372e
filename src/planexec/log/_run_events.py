"""A run's own events: how it started, paused, went on, was told something, hit a limit and ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.log._stop import BudgetName, StopReason
from planexec.trust import Provenance

__all__ = [
    "BudgetExhaustedEvent",
    "InformationAdded",
    "RunFinished",
    "RunResumed",
    "RunStarted",
    "RunSuspended",
    "StallDetected",
    "StallRule",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    kind: Literal["run_started"] = "run_started"
    at: float
    run_id: str
    goal: str
    constraints: tuple[str, ...] = ()
    policy: str = "upfront"
    replan: str = "on_failure"
    budget: dict[str, float | int | None]
    tools: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    """How the run was set up, as far as data can say: tool specs, executors, limits, and for runs
    started from the command line the model strings and tool references to rebuild the agent."""
    trace: dict[str, str] = field(default_factory=dict)
    """The run's trace context (``traceparent``, ``tracestate``) when it was traced."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSuspended:
    """Nothing can go on until a human answers: the run is saved and its process may exit."""

    kind: Literal["run_suspended"] = "run_suspended"
    at: float
    reason: str
    approvals: tuple[str, ...] = ()
    """The approvals it waits for."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResumed:
    """A run was picked up again from its log, in this or another process."""

    kind: Literal["run_resumed"] = "run_resumed"
    at: float
    events: int
    """How many events the log held when it was resumed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InformationAdded:
    """Someone told the run something new, or changed a constraint: the planner replans with it at
    the next safe point (finished work is kept)."""

    kind: Literal["information_added"] = "information_added"
    at: float
    text: str
    by: str = "user"
    constraint: bool = False
    """True when it is a constraint the plan must meet from now on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetExhaustedEvent:
    kind: Literal["budget_exhausted"] = "budget_exhausted"
    at: float
    budget: BudgetName
    limit: float
    used: float
    """What the run had actually spent of this budget when it stopped."""
    needed: float = 0.0
    """What the refused call or step (with others committed to at the same time) would have added."""


StallRule = Literal["repeated_failure", "repeated_success", "ping_pong", "identical_patch", "no_progress"]
"""``repeated_failure``: the same call failed again; ``repeated_success``: the same call succeeded
with the same output in several planning rounds; ``ping_pong``: the planner alternates between two
calls that keep giving the same outputs; ``identical_patch``: the same patch again;
``no_progress``: no step finished for several planning rounds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StallDetected:
    kind: Literal["stall_detected"] = "stall_detected"
    at: float
    rule: StallRule
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    kind: Literal["run_finished"] = "run_finished"
    at: float
    stop: StopReason
    answer: str | None = None
    answer_provenance: Provenance | None = None
    """The answer's label: a planner's answer is as trusted as the round that wrote it; a
    workflow's, as its output."""
    withheld: tuple[str, ...] = ()
    """The steps whose untrusted output was withheld from the answer (``TrustPolicy(answer=
    "withhold")``, or a human's no to it); ``*``: the whole answer was."""
