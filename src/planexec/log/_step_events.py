"""A step's events: it started, its attempts and tool calls, its progress, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from planexec.executor import StepError, Verdict
from planexec.trust import Provenance, Violation

__all__ = [
    "StepAttemptFailed",
    "StepCancelled",
    "StepFailed",
    "StepHeld",
    "StepRequeued",
    "StepStarted",
    "StepSucceeded",
    "ToolCalled",
    "ToolProgress",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStarted:
    kind: Literal["step_started"] = "step_started"
    at: float
    step_id: str
    executor: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    """The arguments after binding resolution."""
    idempotency_key: str | None = None
    """For a tool call: the key passed to the tool, the same on every retry and after a restart."""
    provenance: dict[str, Provenance] | None = None
    """Each argument's label, as the arguments were sent (a human's yes confirms them)."""


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
class ToolProgress:
    """A tool said how far its call has come: ``progress`` of ``total`` (when it knows the total),
    with a ``message``. ``call_id``: the call of a model-driven step it belongs to (None: the
    step's own tool call). A run logs a call's progress at most every ``PROGRESS_INTERVAL`` seconds
    and a step's at most ``MAX_PROGRESS_EVENTS`` times (see :mod:`planexec.runtime`)."""

    kind: Literal["tool_progress"] = "tool_progress"
    at: float
    step_id: str
    progress: float
    total: float | None = None
    message: str | None = None
    call_id: str | None = None


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
    provenance: dict[str, Provenance] | None = None
    """Each argument's label: what the step's model had read when it asked for the call."""
    output_provenance: Provenance | None = None
    """The label of the call's output (or its error's text)."""
    violations: tuple[Violation, ...] = ()
    """For a call refused by a trust rule (error kind ``untrusted``): the rules it broke."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRequeued:
    """A step goes back to waiting to run: interrupted by a stop and safe to run again, or a human
    chose to retry an uncertain effect."""

    kind: Literal["step_requeued"] = "step_requeued"
    at: float
    step_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StepHeld:
    """A side-effecting call was under way when the process stopped and is not safe to repeat:
    the step waits for a human to retry it, skip it or mark it done."""

    kind: Literal["step_held"] = "step_held"
    at: float
    step_id: str
    approval_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StepSucceeded:
    kind: Literal["step_succeeded"] = "step_succeeded"
    at: float
    step_id: str
    output: Any
    verdict: Verdict
    attempts: int = 1
    confidence: float | None = None
    """The confidence a model-driven executor reported with its result, 0 to 1."""
    provenance: Provenance | None = None
    """The output's label (None in logs older than schema 13)."""


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
    provenance: Provenance | None = None
    """The label of the failure's text and of the output it failed with."""
    violations: tuple[Violation, ...] = ()
    """For a call refused by a trust rule (error kind ``untrusted``): the rules it broke."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCancelled:
    kind: Literal["step_cancelled"] = "step_cancelled"
    at: float
    step_id: str
    reason: str
