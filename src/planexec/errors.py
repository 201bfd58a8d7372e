"""Every error planexec raises, in two families under one root.

    PlanexecError
    ├── UsageError              you used the library wrongly; lists every problem at once
    │   ├── PlanInvalid         a plan failed its static checks
    │   ├── ToolDefinitionError a function cannot become a tool
    │   ├── UnknownToolError    a call named a tool the toolset does not have
    │   ├── ModelNotFound       a model string names no known provider or object
    │   └── UnexpectedModelCall a test double was asked something its script does not cover
    ├── RunFailed               the run failed; ``.result`` carries the partial run
    │   ├── BudgetExhausted
    │   ├── MaxReplans
    │   ├── Stalled
    │   ├── Rejected
    │   ├── Escalated           the planner could not go on and no human let it
    │   ├── RunCancelled
    │   ├── UnrecoverableError
    │   └── WaitingForHuman     not an end: the run is saved until a human answers
    ├── ToolError               raised by a tool's own code to say how its call failed
    │   └── TransientToolError  worth retrying (rate limits, flaky services)
    ├── StoreError              a run store failed: unreachable, timed out, damaged or full
    │   └── LogUnreadable       a stored log holds events this planexec cannot read;
    │                           ``events`` keeps every event that could be read
    └── ModelCallError          a provider call failed (``retryable`` says whether to try again);
                                defined in planexec.models

Errors never log when they are built, and every message names what to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planexec.log import RunResult

__all__ = [
    "BudgetExhausted",
    "Escalated",
    "LogUnreadable",
    "MaxReplans",
    "ModelNotFound",
    "PlanInvalid",
    "PlanexecError",
    "Problem",
    "Rejected",
    "RunCancelled",
    "RunFailed",
    "Stalled",
    "StoreError",
    "ToolDefinitionError",
    "ToolError",
    "TransientToolError",
    "UnexpectedModelCall",
    "UnknownToolError",
    "UnrecoverableError",
    "UsageError",
    "WaitingForHuman",
]


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun if count == 1 else noun + 's'}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One thing wrong with an input: a stable code, where it is, and what is wrong."""

    code: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message} [{self.code}]" if self.where else self.message


class PlanexecError(Exception):
    """The root of every planexec error."""


class UsageError(PlanexecError):
    """You used planexec wrongly. ``problems`` lists everything found, not just the first."""

    def __init__(self, summary: str, problems: Iterable[Problem] = ()) -> None:
        self.summary = summary
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.problems:
            return self.summary
        lines = [f"{self.summary} ({_counted(len(self.problems), 'problem')}):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class PlanInvalid(UsageError):
    """A plan failed its static checks; every failing check is in ``problems``."""


class ToolDefinitionError(UsageError):
    """A function or value cannot be made into a tool."""


class UnknownToolError(UsageError):
    """A call named a tool that is not in the toolset."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(known)
        listing = ", ".join(sorted(self.known)) or "(no tools)"
        super().__init__(
            f"unknown tool {name!r}",
            [Problem(code="unknown_tool", where=f"tool {name!r}", message=f"known tools: {listing}")],
        )


class ModelNotFound(UsageError):
    """A model string or object reference could not be resolved."""


class UnexpectedModelCall(UsageError):
    """A scripted test model was called beyond, or outside, its script."""


class RunFailed(PlanexecError):
    """The run did not meet its goal. ``result`` carries everything the run did."""

    def __init__(self, result: RunResult) -> None:
        self.result = result
        stop = result.stop
        super().__init__(f"run {result.run_id} stopped: {stop.kind}: {stop.detail}")


class BudgetExhausted(RunFailed):
    """A budget cap was reached; ``result.stop.budget`` names which."""


class MaxReplans(RunFailed):
    """The plan needed patching more times than the replan budget allows."""


class Stalled(RunFailed):
    """The run stopped making progress (a repeated failure, an identical patch, no new results)."""


class Rejected(RunFailed):
    """A human rejected the plan or a step."""


class Escalated(RunFailed):
    """The planner could not go on by itself (``result.stop.code`` says why) and nobody could be
    asked, or a human chose to stop the run."""


class RunCancelled(RunFailed):
    """The run was cancelled."""


class UnrecoverableError(RunFailed):
    """The run hit an error it could not route around."""


class WaitingForHuman(RunFailed):
    """The run is saved and waits for a human's answer; answer, then resume it."""


class ToolError(PlanexecError):
    """Raise from a tool to fail its call with a message the planner will read."""


class TransientToolError(ToolError):
    """Raise from a tool when trying the same call again may succeed."""


class StoreError(PlanexecError):
    """A run store failed: it could not be reached, did not answer in time, is damaged, or refused
    the write. The message names the store (without credentials) and what went wrong."""


class LogUnreadable(StoreError):
    """A run's stored log holds events this planexec cannot read (damaged data, an unknown event
    kind, a newer schema version).

    ``events`` holds every event that could be read, in log order; ``problems`` says, for each
    event that could not, its sequence number and why.
    """

    def __init__(self, run_id: str, problems: Sequence[Problem], events: Sequence[Any] = ()) -> None:
        self.run_id = run_id
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.events: tuple[Any, ...] = tuple(events)
        listing = "; ".join(str(p) for p in self.problems[:5])
        more = f" (and {len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(
            f"run {run_id}: {_counted(len(self.problems), 'event')} of its log cannot be read: {listing}{more}; "
            f"{_counted(len(self.events), 'event')} could be read"
        )
