"""Typed settings for a run: limits, approvals and the run context (time, ids, randomness)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from planexec._errors import Problem, UsageError
from planexec.plan._plan import Plan
from planexec.plan._step import Step

__all__ = ["ApprovalDecision", "ApprovalRequest", "Approvals", "Approver", "Limits", "RunContext"]


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """Where a run gets time, ids and randomness, so that tests and replays can fix them."""

    clock: Callable[[], float] = time.time
    new_id: Callable[[], str] = _new_id
    seed: int | None = None

    def rng(self) -> random.Random:
        return random.Random(self.seed)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How a run is bounded besides its budget.

    ``max_concurrency``: steps running at once. ``stall_rounds``: planning rounds without a newly
    finished step before the run counts as stalled. ``confidence_threshold``: a sensitive step
    below it is not run without a human's approval.
    """

    max_concurrency: int = 16
    stall_rounds: int = 3
    confidence_threshold: float = 0.6

    def __post_init__(self) -> None:
        problems = []
        if self.max_concurrency < 1:
            problems.append(Problem(code="limits", where="max_concurrency", message="must be at least 1"))
        if self.stall_rounds < 1:
            problems.append(Problem(code="limits", where="stall_rounds", message="must be at least 1"))
        if not 0 <= self.confidence_threshold <= 1:
            problems.append(Problem(code="limits", where="confidence_threshold", message="must be from 0 to 1"))
        if problems:
            raise UsageError("invalid limits", problems)


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """What a human is asked to approve: a plan version, or one step before it runs."""

    approval_id: str
    run_id: str
    subject: Literal["plan", "step"]
    reason: str
    plan: Plan | None = None
    step: Step | None = None


@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    approved: bool
    reason: str = ""
    by: str = "human"


Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision | bool]]


@dataclass(frozen=True, kw_only=True)
class Approvals:
    """Who approves, and what. ``plan``: every plan version; ``steps``: ``sensitive`` (steps whose
    tool is sensitive or whose policy is ``always``), ``all``, or ``none``."""

    approver: Approver | None = None
    plan: bool = False
    steps: Literal["sensitive", "all", "none"] = "sensitive"


NO_APPROVALS = Approvals()
