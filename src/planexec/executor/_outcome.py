"""What executing a step yields: a verdict on its output, or an error of a known kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planexec.errors import Problem

__all__ = ["CheckResult", "ErrorKind", "StepError", "Verdict"]

ErrorKind = Literal[
    "invalid_arguments",  # arguments did not fit the tool: the planner repairs the step
    "binding",  # a binding could not be resolved: the planner repairs the step
    "transient",  # a transient tool error, retries used up
    "timeout",  # the tool timed out, retries used up
    "tool_error",  # the tool failed
    "invalid_output",  # the tool's output did not fit its output schema
    "unknown_tool",  # a model executor asked for a tool that does not exist, or a step named one
    "acceptance",  # the output failed its acceptance checks: replan
    "executor",  # a model executor could not finish the step within its turns
    "low_confidence",  # a sensitive step's confidence was under the threshold and no human approved it
    "rejected",  # a human rejected the step
    "untrusted",  # a call broke a trust rule and was refused (see planexec.trust)
    "budget",  # a budget ran out while the step ran: the run stops
]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepError:
    """Why a step (or one attempt at it) failed."""

    kind: ErrorKind
    message: str
    problems: tuple[Problem, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    name: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The acceptance verdict on a step's output: every check run and whether all passed."""

    passed: bool
    checks: tuple[CheckResult, ...] = ()

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.passed)


PASSED = Verdict(passed=True)
