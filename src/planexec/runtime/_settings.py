"""Typed settings for a run: limits, approvals and the run context (time, ids, randomness)."""

from __future__ import annotations

import math
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
    finished step before the run counts as stalled. ``repeat_rounds``: planning rounds in which the
    same call may succeed with the same output before the run counts as stalled.
    ``confidence_threshold``: a sensitive step below it is not run without a human's approval.
    ``max_output_chars``: the largest output (or arguments) a step, a tool call or a human may
    hand the run, measured as JSON text; a larger one fails its step. ``max_reply_chars``: the
    largest model reply accepted; a larger one fails the call. ``cancel_grace``: seconds a
    cancelled step is given to finish before it is abandoned.
    """

    max_concurrency: int = 16
    stall_rounds: int = 3
    repeat_rounds: int = 3
    confidence_threshold: float = 0.6
    max_output_chars: int = 1_000_000
    max_reply_chars: int = 1_000_000
    cancel_grace: float = 1.0

    def __post_init__(self) -> None:
        problems = []
        for name, least in (
            ("max_concurrency", 1),
            ("stall_rounds", 1),
            ("repeat_rounds", 2),
            ("max_output_chars", 1),
            ("max_reply_chars", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                problems.append(
                    Problem(code="limits", where=name, message=f"must be a whole number of at least {least}")
                )
        grace = self.cancel_grace
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace < math.inf:
            problems.append(
                Problem(code="limits", where="cancel_grace", message="must be a finite number of seconds >= 0")
            )
        threshold = self.confidence_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
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
