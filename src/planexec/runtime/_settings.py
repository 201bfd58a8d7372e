"""Typed settings for a run: limits, approvals and the run context (time, ids, randomness)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

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
    """What a human is asked: to approve a plan version or a step before it runs, or what to do
    about a side-effecting call that may or may not have happened (``subject="effect"``)."""

    approval_id: str
    run_id: str
    subject: Literal["plan", "step", "effect"]
    reason: str
    plan: Plan | None = None
    step: Step | None = None


@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    """A human's answer. For a plan, ``edited_plan`` approves a changed plan instead; for an
    uncertain effect, ``choice`` says what to do (``output`` is the step's result when ``done``)."""

    approved: bool
    reason: str = ""
    by: str = "human"
    choice: Literal["retry", "skip", "done"] | None = None
    output: Any = None
    edited_plan: Plan | None = None


Approver = Callable[[ApprovalRequest], Awaitable[ApprovalDecision | bool]]


@dataclass(frozen=True, kw_only=True)
class Approvals:
    """Who approves, and what. ``approver``: a callback asked in this process; ``deferred``: no
    callback, questions wait in the run's log. ``plan``: every plan version; ``steps``:
    ``sensitive`` (steps whose tool is sensitive or whose policy is ``always``), ``all``, or
    ``none``. Uncertain effects after a restart are always asked, whatever these say."""

    approver: Approver | None = None
    deferred: bool = False
    """With no approver: save each question in the run's log, to be answered later from anywhere
    (``Run.decide``, ``planexec approve``). Needs a store. Off: with no approver, steps that need
    a human are refused."""
    plan: bool = False
    steps: Literal["sensitive", "all", "none"] = "sensitive"
    when_waiting: Literal["suspend", "wait"] = "suspend"
    """When only questions in the log hold the run up: ``suspend`` saves it and ends this
    process's part (resume it after answering); ``wait`` keeps waiting, reading the store for
    answers other processes write."""
    poll_interval: float = 0.5
    """With ``wait``: how often the store is read for answers given by other processes."""


NO_APPROVALS = Approvals()
