"""Every error planexec raises, in one tree under one root.

    PlanexecError
    ├── UsageError              you used the library wrongly; lists every problem at once
    │   ├── PlanInvalid         a plan failed its static checks
    │   ├── ToolDefinitionError a function cannot become a tool
    │   ├── UnknownToolError    a call named a tool the toolset does not have
    │   ├── ModelNotFound       a model string names no known provider or object
    │   ├── UnexpectedModelCall a test double was asked something its script does not cover
    │   ├── NotSupported        a model lacks an optional capability (streaming, token counting,
    │   │                       tool calling); defined in planexec.models
    │   └── SuiteInvalid        an evaluation suite failed its checks; defined in planexec.eval
    ├── RunFailed               the run failed; ``.result`` carries the partial run
    │   ├── BudgetExhausted
    │   ├── MaxReplans
    │   ├── Stalled
    │   ├── Rejected
    │   ├── Refused             a call broke a trust rule and was not made
    │   ├── Escalated           the planner could not go on and no human let it
    │   ├── RunCancelled
    │   ├── UnrecoverableError
    │   └── WaitingForHuman     not an end: the run is saved until a human answers
    ├── BudgetHit               a budget check refused the next call or step (``Budget.check_*``);
    │                           inside a run it stops the run with ``budget_exhausted``
    ├── PlannerGaveUp           the planner's output still failed its checks after every repair
    │                           allowed (``problems``); inside a run it stops it with an error
    ├── PlannerEscalated        the planner cannot go on by itself and nobody let it (``code``,
    │                           ``detail``); inside a run it stops it ``escalated``
    ├── StepFailure             raised by an executor to fail its step with a ``StepError``
    ├── BindingError            a step's bindings cannot be filled from the outputs at hand
    ├── ToolError               raised by a tool's own code to say how its call failed
    │   └── TransientToolError  worth retrying (rate limits, flaky services)
    ├── ToolCrashed             a tool raised what is not an ``Exception`` (``KeyboardInterrupt``,
    │                           ``SystemExit``, …); the run stops with an error
    ├── EffectUncertain         a call may or may not have had its effect (the machine running it
    │                           died mid-call); inside a run its step is held for a human
    ├── OutputNotJSON           a tool's output cannot be made into JSON data (also a ``ValueError``)
    ├── StoreError              a run store failed: unreachable, timed out, damaged or full
    │   ├── LogUnreadable       a stored log holds events this planexec cannot read;
    │   │                       ``events`` keeps every event that could be read
    │   └── WorkerFailed        a worker stopped because its store kept failing; defined in
    │                           planexec.workers
    ├── AppendConflict          another writer appended to a run's log first: read, then try
    │                           again; defined in planexec.store
    ├── ModelCallError          a provider call failed (``retryable`` says whether to try again);
    │                           defined in planexec.models
    └── ModelCrashed            a model raised what is not an ``Exception``; the run stops with an
                                error

Errors never log when they are built, and every message names what to change.

The classes below the root that are not ``UsageError`` or ``RunFailed`` are what the parts of a
run raise to each other; an :class:`~planexec.Agent` turns each into a stop reason or a failed
step, so they reach your code only when you drive the parts yourself (a ``Budget``, a
``Planner``, a tool, a model) or raise them from your own executors and tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planexec.executor import StepError
    from planexec.log import BudgetName, RunResult

__all__ = [
    "BindingError",
    "BudgetExhausted",
    "BudgetHit",
    "EffectUncertain",
    "Escalated",
    "LogUnreadable",
    "MaxReplans",
    "ModelCrashed",
    "ModelNotFound",
    "OutputNotJSON",
    "PlanInvalid",
    "PlanexecError",
    "PlannerEscalated",
    "PlannerGaveUp",
    "Problem",
    "Refused",
    "Rejected",
    "RunCancelled",
    "RunFailed",
    "Stalled",
    "StepFailure",
    "StoreError",
    "ToolCrashed",
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


class Refused(RunFailed):
    """A call broke a trust rule and was not made (``result.stop.violations`` says which tool,
    argument, rule and label)."""


class Escalated(RunFailed):
    """The planner could not go on by itself (``result.stop.code`` says why) and nobody could be
    asked, or a human chose to stop the run."""


class RunCancelled(RunFailed):
    """The run was cancelled."""


class UnrecoverableError(RunFailed):
    """The run hit an error it could not route around."""


class WaitingForHuman(RunFailed):
    """The run is saved and waits for a human's answer; answer, then resume it."""


class BudgetHit(PlanexecError):
    """A budget check refused the next call or step: it would take the run over a cap. Inside a run
    it stops the run with ``budget_exhausted`` (``StopReason.budget`` names which).

    ``used`` is what the run has actually spent of it; ``needed`` what the refused call or step
    (and any committed to but not yet logged) would have added.
    """

    def __init__(self, budget: BudgetName, limit: float, used: float, *, needed: float = 0.0) -> None:
        self.budget: BudgetName = budget
        self.limit = limit
        self.used = used
        self.needed = needed
        super().__init__(_budget_text(budget, limit, used, needed))


def _budget_text(budget: str, limit: float, used: float, needed: float) -> str:
    text = f"{budget} budget exhausted: used {used:g} of {limit:g}"
    if needed and budget in ("cost", "input_tokens"):
        text += f"; the next call needs about {needed:g} more"
    return text


class PlannerGaveUp(PlanexecError):
    """The planner's output was still invalid after every repair allowed; ``problems`` says why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(map(str, problems)))


class PlannerEscalated(PlanexecError):
    """The planner cannot go on by itself and nobody lets it: the run stops ``escalated``.
    ``code`` says why (``planner_gave_up``, ``low_confidence``, ``unknown_tool``, …)."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(detail)


class StepFailure(PlanexecError):
    """Raised by an executor to fail the step with an error of a known kind (``error``, a
    :class:`~planexec.executor.StepError`)."""

    def __init__(self, error: StepError) -> None:
        self.error = error
        super().__init__(str(error))


class BindingError(PlanexecError):
    """A binding could not be resolved against the outputs at hand; ``problems`` lists each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class ToolError(PlanexecError):
    """Raise from a tool to fail its call with a message the planner will read."""


class TransientToolError(ToolError):
    """Raise from a tool when trying the same call again may succeed."""


class ToolCrashed(PlanexecError):
    """A tool raised something that is not an ordinary error: ``KeyboardInterrupt``, ``SystemExit``,
    ``GeneratorExit``, a bare ``BaseException``, or a ``CancelledError`` of its own (nobody had
    cancelled it). The run stops with an error that names the tool."""

    def __init__(self, tool: str, error: BaseException) -> None:
        self.tool = tool
        self.error = error
        detail = f": {error}" if str(error) else ""
        super().__init__(f"tool {tool} raised {type(error).__name__}{detail}")


class EffectUncertain(PlanexecError):
    """A call was under way where it can no longer be followed (the node or worker process running
    it died), so whether it had its effect is unknown. Raised by an executor backend only when the
    call is not safe to send again (a side-effecting tool that is not idempotent); a run then holds
    the step for a human — retry, skip, or mark done — and never repeats it by itself."""

    def __init__(self, tool: str, detail: str) -> None:
        self.tool = tool
        self.detail = detail
        super().__init__(f"the effect of {tool} is uncertain: {detail}")

    def __reduce__(self) -> tuple[type[EffectUncertain], tuple[str, str]]:
        return (type(self), (self.tool, self.detail))


class OutputNotJSON(PlanexecError, ValueError):
    """A tool's output is not JSON data and cannot be made into it without changing it. Also a
    ``ValueError``, as it has always been."""


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


class ModelCrashed(PlanexecError):
    """A model raised something that is not an ordinary error (``KeyboardInterrupt``,
    ``SystemExit``, ``GeneratorExit``, a bare ``BaseException``, a ``CancelledError`` of its own).
    The run stops with an error (code ``model_crashed``) that names the model."""

    def __init__(self, model: str, error: BaseException | None, *, message: str | None = None) -> None:
        self.model = model
        self.error = error
        if message is None:
            detail = f": {error}" if str(error) else ""
            message = f"model {model} raised {type(error).__name__}{detail}"
        super().__init__(message)
