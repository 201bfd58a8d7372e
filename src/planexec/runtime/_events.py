"""Events: the one source of truth of a run. Every state change is appended here first.

Events are frozen, keyword-only values tagged by ``kind`` and serialized by one shared adapter,
so that the store, the API, the CLI and replay all read the same thing.

Event schema changelog (bump ``EVENT_SCHEMA_VERSION`` and add a line on every change; keep a
fixture log of every version loadable in the tests):
    1: first version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, TypeAdapter

from planexec._errors import Problem
from planexec.executor._outcome import StepError, Verdict
from planexec.models._base import ModelResponse, Usage
from planexec.plan._plan import Plan
from planexec.runtime._stop import BudgetName, StopReason

__all__ = [
    "EVENT_SCHEMA_VERSION",
    "ApprovalDecided",
    "ApprovalRequested",
    "BudgetExhaustedEvent",
    "Event",
    "ModelCalled",
    "PlanProposed",
    "PlannerOutputRejected",
    "PlanningStarted",
    "RunFinished",
    "RunStarted",
    "StallDetected",
    "StepAttemptFailed",
    "StepCancelled",
    "StepFailed",
    "StepStarted",
    "StepSucceeded",
    "ToolCalled",
    "dump_event",
    "load_event",
]

EVENT_SCHEMA_VERSION = 1

PlanTrigger = Literal["initial", "failure", "after_step", "turn", "human"]


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


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCalled:
    """A model answered (or failed to). The whole response is kept, so a run can be replayed."""

    kind: Literal["model_called"] = "model_called"
    at: float
    role: str
    """``planner``, ``executor`` or ``judge``."""
    purpose: str
    model: str
    step_id: str | None = None
    request_chars: int = 0
    response: ModelResponse | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    duration: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanningStarted:
    """The planner was asked for a plan, a patch, a turn or the final answer, and why."""

    kind: Literal["planning_started"] = "planning_started"
    at: float
    trigger: Literal["initial", "failure", "after_step", "turn", "finish"]
    why: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannerOutputRejected:
    """The planner's output was invalid; the problems were sent back for repair."""

    kind: Literal["planner_output_rejected"] = "planner_output_rejected"
    at: float
    attempt: int
    problems: tuple[Problem, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanProposed:
    """A new plan version passed its static checks (and approval, where asked) and is in force."""

    kind: Literal["plan_proposed"] = "plan_proposed"
    at: float
    plan: Plan
    trigger: PlanTrigger = "initial"
    cancelled: tuple[str, ...] = ()
    """In-flight steps this version made obsolete."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequested:
    kind: Literal["approval_requested"] = "approval_requested"
    at: float
    approval_id: str
    subject: Literal["plan", "step"]
    step_id: str | None = None
    plan_version: int | None = None
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalDecided:
    kind: Literal["approval_decided"] = "approval_decided"
    at: float
    approval_id: str
    approved: bool
    by: str = "human"
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStarted:
    kind: Literal["step_started"] = "step_started"
    at: float
    step_id: str
    executor: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    """The arguments after binding resolution."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepAttemptFailed:
    """One attempt failed; ``retry_in`` is the backoff before the next (None: no retry)."""

    kind: Literal["step_attempt_failed"] = "step_attempt_failed"
    at: float
    step_id: str
    attempt: int
    error: StepError
    retry_in: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCalled:
    """A tool call made by a model-driven executor inside a step."""

    kind: Literal["tool_called"] = "tool_called"
    at: float
    step_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    output: Any = None
    error: StepError | None = None
    attempts: int = 1
    duration: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class StepSucceeded:
    kind: Literal["step_succeeded"] = "step_succeeded"
    at: float
    step_id: str
    output: Any
    verdict: Verdict
    attempts: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class StepFailed:
    kind: Literal["step_failed"] = "step_failed"
    at: float
    step_id: str
    error: StepError
    verdict: Verdict | None = None
    output: Any = None
    attempts: int = 1
    started: bool = True
    """False when the step was refused before it ran (a gate, a binding)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCancelled:
    kind: Literal["step_cancelled"] = "step_cancelled"
    at: float
    step_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetExhaustedEvent:
    kind: Literal["budget_exhausted"] = "budget_exhausted"
    at: float
    budget: BudgetName
    limit: float
    used: float


@dataclass(frozen=True, kw_only=True, slots=True)
class StallDetected:
    kind: Literal["stall_detected"] = "stall_detected"
    at: float
    rule: Literal["repeated_failure", "identical_patch", "no_progress"]
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFinished:
    kind: Literal["run_finished"] = "run_finished"
    at: float
    stop: StopReason
    answer: str | None = None


Event: TypeAlias = Annotated[
    RunStarted
    | ModelCalled
    | PlanningStarted
    | PlannerOutputRejected
    | PlanProposed
    | ApprovalRequested
    | ApprovalDecided
    | StepStarted
    | StepAttemptFailed
    | ToolCalled
    | StepSucceeded
    | StepFailed
    | StepCancelled
    | BudgetExhaustedEvent
    | StallDetected
    | RunFinished,
    Field(discriminator="kind"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENTS_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def dump_event(event: Event) -> dict[str, Any]:
    """An event as JSON data, in an envelope that names the schema version."""
    return {"v": EVENT_SCHEMA_VERSION, "event": EVENT_ADAPTER.dump_python(event, mode="json")}


def load_event(data: dict[str, Any]) -> Event:
    """Load an event dumped by any schema version so far."""
    version = data.get("v")
    if version != EVENT_SCHEMA_VERSION:
        raise ValueError(f"unknown event schema version {version!r} (this planexec reads 1)")
    return EVENT_ADAPTER.validate_python(data["event"])
