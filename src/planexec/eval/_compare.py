"""Comparing a report with a baseline: what got worse beyond its tolerance.

Regressions are named one by one: the overall pass rate and each task's (an absolute drop beyond
``tolerances.pass_rate``), and the mean cost and latency per run (a relative rise beyond
``tolerances.cost`` / ``tolerances.latency``; latency differences under ``latency_floor`` seconds
never count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planexec.eval._report import EvalReport
from planexec.eval._suite import Tolerances

__all__ = ["Comparison", "Regression", "compare_reports"]

_EPSILON = 1e-9


@dataclass(frozen=True, kw_only=True)
class Regression:
    metric: Literal["pass_rate", "cost", "latency"]
    task: str | None
    """The task, or None for the whole suite."""
    baseline: float
    current: float
    message: str


@dataclass(frozen=True, kw_only=True)
class Comparison:
    regressions: tuple[Regression, ...]
    notes: tuple[str, ...]
    """What makes the two reports less comparable (another agent, tasks missing …)."""

    @property
    def ok(self) -> bool:
        return not self.regressions


def compare_reports(current: EvalReport, baseline: EvalReport, tolerances: Tolerances) -> Comparison:
    found: list[Regression] = []
    notes: list[str] = []
    if current.suite != baseline.suite:
        notes.append(f"the baseline is of suite {baseline.suite!r}, this report of {current.suite!r}")
    if current.agent != baseline.agent:
        notes.append(f"the baseline ran the {baseline.agent} agent, this report the {current.agent} agent")
    now, before = current.summary, baseline.summary
    if (drop := _pass_rate(now.pass_rate, before.pass_rate, tolerances, None)) is not None:
        found.append(drop)
    for task in baseline.tasks:
        mine = current.task(task.id)
        if mine is None:
            notes.append(f"task {task.id!r} is in the baseline but was not run")
            continue
        if (drop := _pass_rate(mine.summary.pass_rate, task.summary.pass_rate, tolerances, task.id)) is not None:
            found.append(drop)
    if _rose(now.cost_mean, before.cost_mean, tolerances.cost, floor=_EPSILON):
        found.append(
            Regression(
                metric="cost",
                task=None,
                baseline=before.cost_mean,
                current=now.cost_mean,
                message=f"cost per run rose from ${before.cost_mean:.6f} to ${now.cost_mean:.6f} "
                f"({_change(now.cost_mean, before.cost_mean)}; tolerance {tolerances.cost:.0%})",
            )
        )
    if _rose(now.latency_mean, before.latency_mean, tolerances.latency, floor=tolerances.latency_floor):
        found.append(
            Regression(
                metric="latency",
                task=None,
                baseline=before.latency_mean,
                current=now.latency_mean,
                message=f"latency per run rose from {before.latency_mean:.3f}s to {now.latency_mean:.3f}s "
                f"({_change(now.latency_mean, before.latency_mean)}; tolerance {tolerances.latency:.0%})",
            )
        )
    return Comparison(regressions=tuple(found), notes=tuple(notes))


def _pass_rate(now: float, before: float, tolerances: Tolerances, task: str | None) -> Regression | None:
    if now >= before - tolerances.pass_rate - _EPSILON:
        return None
    where = f"task {task!r}: pass rate" if task is not None else "pass rate"
    return Regression(
        metric="pass_rate",
        task=task,
        baseline=before,
        current=now,
        message=f"{where} fell from {before:.2f} to {now:.2f} (tolerance {tolerances.pass_rate:.2f})",
    )


def _rose(now: float, before: float, tolerance: float, *, floor: float) -> bool:
    return now - before > floor and now > before * (1 + tolerance) + _EPSILON


def _change(now: float, before: float) -> str:
    return f"+{(now - before) / before:.0%}" if before > 0 else "from nothing"
