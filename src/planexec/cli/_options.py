"""Turning command-line values into planexec objects, collecting every problem instead of the first.

Each loader returns what it could build and appends what is wrong to a shared list, so that a bad
invocation is answered with the whole list at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from planexec.errors import Problem, UsageError

__all__ = ["BUDGET_FLAGS", "FLAGS", "Problems", "Refused", "flag_of", "parse_choice"]


class Problems(list[str]):
    """Everything wrong with one invocation."""

    @classmethod
    def of(cls, flag: str, message: str) -> Problems:
        problems = cls()
        problems.add(flag, message)
        return problems

    def add(self, flag: str, message: str) -> None:
        self.append(f"{flag}: {message}" if flag else message)

    def add_problems(self, found: Iterable[Problem], flags: Mapping[str, str] | None = None) -> None:
        """Each problem a library call found in this command line's values, under the flag (or
        argument) that gave the value it names."""
        for p in found:
            self.add(flag_of(p.where, flags), p.message)

    def add_usage_error(self, flag: str, error: UsageError) -> None:
        if error.problems:
            for p in error.problems:
                self.add(flag, f"{error.summary}: {p}")
        else:
            self.add(flag, error.summary)


class _Refused(Exception):
    """A command cannot go on because of what it was given; it exits with status 2 listing every
    problem. Internal to the command line: ``run_command`` catches it, so it never leaves a command."""

    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


Refused = _Refused
"""The name the commands raise and catch it by."""


@dataclass(frozen=True, slots=True)
class _BudgetFlag:
    flag: str
    field: str


BUDGET_FLAGS: tuple[_BudgetFlag, ...] = (
    _BudgetFlag("--max-model-calls", "model_calls"),
    _BudgetFlag("--max-input-tokens", "input_tokens"),
    _BudgetFlag("--max-output-tokens", "output_tokens"),
    _BudgetFlag("--max-cost", "cost"),
    _BudgetFlag("--max-time", "wall_time"),
    _BudgetFlag("--max-tool-calls", "tool_calls"),
    _BudgetFlag("--max-steps", "steps"),
    _BudgetFlag("--max-replans", "replans"),
)
"""The budget options of ``planexec run`` and the :class:`Budget` field each one sets."""


FLAGS: Mapping[str, str] = {
    "planner": "--planner",
    "executor": "--executor",
    "tools": "--tools",
    "executors": "--executors",
    "mcp": "--mcp or --mcp-url",
    "mcp_headers": "--mcp-header",
    "policy": "--policy",
    "replan": "--replan",
    "planner_settings": "--planner-setting",
    "executor_settings": "--executor-setting",
    "step_timeout": "--step-timeout",
    "turn_format": "--turn-format",
    "sealed": "--sealed",
    "extractor": "--extractor",
    "confidence_floor": "--confidence-floor",
    "on_low_confidence": "--on-low-confidence",
    "on_fail": "--on-fail",
    "fail_retries": "--fail-retries",
    "review_checks": "--review-check",
    "review_rubric": "--review-rubric",
    "review_items": "--review-item",
    "review_rounds": "--review-rounds",
    "judge": "--judge",
    "escalate_to": "--escalate-to",
    "escalate_on": "--escalate-on",
    "confidence_below": "--confidence-below",
    "on_budget": "--on-budget",
    "over_forecast": "--over-forecast",
    "approval_id": "ID",
    "run": "RUN",
    "text": "TEXT",
    "status": "--status",
    "limit": "--limit",
    "age": "--older-than",
    **{f"budget.{flag.field}": flag.flag for flag in BUDGET_FLAGS},
}
"""The flag or argument that gives each value the library names in a problem's ``where``."""


def flag_of(where: str, flags: Mapping[str, str] | None = None) -> str:
    """The flag for a problem's ``where`` (``tools 'pkg:X'`` becomes ``--tools 'pkg:X'``);
    ``where`` itself when no flag gives it."""
    table = {**FLAGS, **(flags or {})}
    if where in table:
        return table[where]
    head, space, rest = where.partition(" ")
    return f"{table[head]}{space}{rest}" if space and head in table else where


def parse_choice(flag: str, raw: str, choices: tuple[str, ...], problems: Problems) -> str | None:
    if raw in choices:
        return raw
    problems.add(flag, f"{raw!r} is not one of {', '.join(choices)}")
    return None
