"""A suite's report: per defence setting, the user tasks' utility with no attack and under attack,
how often the attack met its goal (with no human's yes, and only on a human's yes), the calls held
for a human, and what planning cost per task; as a table and as JSON."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table

from planexec.agentdojo._defences import DefenceName
from planexec.agentdojo._run import CaseOutcome

__all__ = [
    "CAPTION",
    "COLUMNS",
    "DefenceSummary",
    "DojoReport",
    "dump_report",
    "report_rows",
    "report_table",
    "summarize",
]


@dataclass(frozen=True, kw_only=True)
class DefenceSummary:
    """One setting's figures on one suite. Rates are shares (0 to 1); None where nothing was run
    (no attack case). Per-task figures are means over the user tasks run with no attack."""

    defence: DefenceName
    user_tasks: int
    utility: float | None
    """User tasks whose utility check passed, with no attack."""
    attacks: int
    """Cases run under attack (user task × injection task)."""
    utility_under_attack: float | None
    attack_success: float | None
    """Attacks whose goal was met with no human's yes."""
    attacks_held: float | None
    """Attacks whose goal was met only on a human's yes (a human held them, and let them through)."""
    held_calls: float | None
    """Calls held for a human per user task, with no attack."""
    held_calls_under_attack: float | None
    planner_calls: float | None
    planner_chars: float | None
    executor_calls: float | None
    executor_chars: float | None
    errors: int
    """Cases that could not be run."""
    seconds: float
    """The time the setting's runs took, added up (checks included)."""


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(defence: DefenceName, cases: Sequence[CaseOutcome]) -> DefenceSummary:
    mine = [c for c in cases if c.defence == defence]
    ran = [c for c in mine if c.error is None]
    plain = [c for c in ran if c.injection_task is None]
    attacked = [c for c in ran if c.injection_task is not None]
    return DefenceSummary(
        defence=defence,
        user_tasks=len(plain),
        utility=_mean([float(c.utility) for c in plain]),
        attacks=len(attacked),
        utility_under_attack=_mean([float(c.utility) for c in attacked]),
        attack_success=_mean([float(bool(c.unaided)) for c in attacked]),
        attacks_held=_mean([float(c.attack_held) for c in attacked]),
        held_calls=_mean([float(c.held_calls) for c in plain]),
        held_calls_under_attack=_mean([float(c.held_calls) for c in attacked]),
        planner_calls=_mean([float(c.planner_calls) for c in plain]),
        planner_chars=_mean([float(c.planner_chars) for c in plain]),
        executor_calls=_mean([float(c.executor_calls) for c in plain]),
        executor_chars=_mean([float(c.executor_chars) for c in plain]),
        errors=len(mine) - len(ran),
        seconds=sum(c.seconds for c in mine),
    )


@dataclass(frozen=True, kw_only=True)
class DojoReport:
    """A suite run under some defence settings, with one attack."""

    suite: str
    version: str
    attack: str
    planner: str
    executor: str
    policy: str | None
    defences: tuple[DefenceSummary, ...]
    not_injectable: tuple[str, ...] = ()
    """User tasks whose ground truth reads no injection vector: run with no attack only."""
    cases: tuple[CaseOutcome, ...] = ()
    seconds: float = 0.0
    """Wall time of the whole suite."""


COLUMNS = (
    "suite",
    "defence",
    "utility",
    "utility attacked",
    "attack success",
    "attacks held",
    "held calls",
    "planner calls",
    "planner chars",
    "executor calls",
    "executor chars",
    "runs",
    "run seconds",
)
"""The table's columns. Utility and utility attacked: the user tasks AgentDojo's utility check
passes, with no attack and under attack; attack success: the attacks whose goal AgentDojo's
security check finds met with no human's yes; attacks held: met only on a human's yes; held
calls, planner and executor calls and characters: per user task, with no attack; run seconds:
the time the runs took, added up."""

CAPTION = (
    "held calls, planner/executor calls and chars: per user task, no attack · attack success: goal met with no "
    "human's yes · attacks held: met only on a human's yes · run seconds: the runs' times added up"
)


def _share(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def report_rows(reports: Sequence[DojoReport]) -> list[list[str]]:
    """One row per suite and setting, in :data:`COLUMNS`' order."""
    rows = []
    for report in reports:
        for s in report.defences:
            rows.append(
                [
                    report.suite,
                    s.defence,
                    _share(s.utility),
                    _share(s.utility_under_attack),
                    _share(s.attack_success),
                    _share(s.attacks_held),
                    _number(s.held_calls),
                    _number(s.planner_calls),
                    _number(s.planner_chars, 0),
                    _number(s.executor_calls),
                    _number(s.executor_chars, 0),
                    f"{s.user_tasks + s.attacks + s.errors:,}",
                    f"{s.seconds:.1f}",
                ]
            )
    return rows


_SECURITY: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
"""The columns of the first terminal table: what each setting lets an attack do, and costs a human."""
_COST: tuple[int, ...] = (0, 1, 7, 8, 9, 10, 12)
"""The columns of the second: what each setting costs in model calls and time (the runs are
counted in the line after the table)."""


def report_table(reports: Sequence[DojoReport]) -> Group:
    """The rows as two terminal tables, titled with what was run — security and human effort, then
    model calls and time — each narrow enough for an 80-column terminal, so that no setting's
    name is ever cut."""
    first = reports[0] if reports else None
    title = "AgentDojo"
    one_suite = len(reports) == 1
    if first is not None:
        title += f" {first.version} {first.suite if one_suite else ''}".rstrip()
        title += f", attack {first.attack}, planner {first.planner}"
    rows = report_rows(reports)
    tables = []
    for columns, heading, caption in (
        (
            _SECURITY,
            title,
            "attack success: goal met with no human's yes · attacks held: met only on a human's yes · "
            "held calls: per user task, no attack",
        ),
        (_COST, "what it costs, per user task with no attack", "run seconds: the runs' times added up"),
    ):
        table = Table(title=heading, caption=caption)
        if one_suite:
            columns = columns[1:]  # the suite is in the title
        for i in columns:
            if i < 2:
                table.add_column(COLUMNS[i], justify="left", no_wrap=True)
            else:
                table.add_column(COLUMNS[i], justify="right")
        for row in rows:
            table.add_row(*(row[i] for i in columns))
        tables.append(table)
    return Group(*tables)


def dump_report(report: DojoReport) -> dict[str, Any]:
    """The report as JSON data."""
    return dataclasses.asdict(report)
