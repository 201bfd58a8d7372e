"""A model's events: each call it answered (or failed), and each failed attempt before a retry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planexec.models import ModelResponse, Usage
from planexec.trust import Source

__all__ = ["ModelAttemptFailed", "ModelCalled"]


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
    answered_by: str | None = None
    """For a fallback list: the model of the list that answered."""
    read: tuple[Source, ...] = ()
    """For a planner's request: the untrusted sources whose text it carried (see
    :mod:`planexec.trust`). What the planner writes from then on in the round is untrusted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelAttemptFailed:
    """One attempt of a model call failed: ``retry_in`` seconds later the call is tried again
    (None: it is not; the call fails with this error). ``retry_after`` is the wait the provider
    asked for, when it asked."""

    kind: Literal["model_attempt_failed"] = "model_attempt_failed"
    at: float
    role: str
    purpose: str
    model: str
    step_id: str | None = None
    attempt: int
    status: int | None = None
    error: str
    retry_in: float | None = None
    retry_after: float | None = None
