"""The report as rich renderables: two tables (outcomes; cost and time) with a row per task and a
total row, each narrow enough for an 80-column terminal, and the reasons each failed run failed."""

from __future__ import annotations

from collections.abc import Callable

from rich import box
from rich.table import Table
from rich.text import Text

from planexec.eval._report import EvalReport, Summary

__all__ = ["failure_lines", "report_tables"]


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _number(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _outcomes(s: Summary) -> list[str]:
    return [
        f"{s.passed}/{s.runs}",
        _number(s.steps_mean),
        f"{s.tool_calls_ok}/{s.tool_calls}",
        str(s.replans),
        str(s.stalls),
        str(s.escalations),
        _rate(s.disagreement_rate),
    ]


def _spending(s: Summary) -> list[str]:
    return [
        str(s.model_calls),
        str(s.input_tokens),
        str(s.output_tokens),
        f"${s.cost:.4f}",
        f"{s.latency_mean:.2f}s",
        _number(s.parallelism_mean, 2),
    ]


def _table(report: EvalReport, title: str, columns: tuple[str, ...], cells: Callable[[Summary], list[str]]) -> Table:
    table = Table(title=Text(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("task")
    for name in columns:
        table.add_column(name, justify="right", no_wrap=True)
    for task in report.tasks:
        style = "green" if task.summary.passed == task.summary.runs else "red"
        table.add_row(Text(task.id, style=style), *cells(task.summary))
    table.add_section()
    table.add_row(Text("all", style="bold"), *cells(report.summary), style="bold")
    return table


def report_tables(report: EvalReport) -> list[Table]:
    """Outcomes (runs passed, mean steps, tool calls that succeeded, replans, stalls, escalations,
    judge disagreement), then cost and time (model calls, tokens, cost, mean latency, mean
    parallelism), per task and overall."""
    faults = f", faults {report.faults}" if report.faults else ""
    head = f"{report.suite} — {report.agent} agent, seed {report.seed}{faults}"
    outcome_columns = ("passed", "steps", "tools ok", "replans", "stalls", "escalated", "disagree")
    spending_columns = ("model calls", "tokens in", "tokens out", "cost", "latency", "parallel")
    return [
        _table(report, f"{head}: outcomes", outcome_columns, _outcomes),
        _table(report, f"{head}: cost and time", spending_columns, _spending),
    ]


def failure_lines(report: EvalReport) -> list[str]:
    """``FAIL task#index: reason`` for every failed check of every failed run."""
    lines = []
    for run in report.failed_runs:
        for reason in run.reasons or ("failed",):
            lines.append(f"FAIL {run.task}#{run.index}: {reason}")
    return lines
