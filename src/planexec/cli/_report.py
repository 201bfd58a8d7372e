"""What the CLI shows when a run ends: the answer, the plan versions, usage, tool calls and timings —
as rich tables for people, or as one JSON document for programs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from planexec.cli._text import shown
from planexec.log import Event, ModelCalled, PlanProposed, RunResult, StepRecord
from planexec.trust import Provenance, Violation
from planexec.views import provenance_view, violation_view

__all__ = ["RoleUsage", "json_text", "print_summary", "result_json", "step_json", "usage_by_role"]


@dataclass(kw_only=True, slots=True)
class RoleUsage:
    """Model calls, tokens, cost and time of one model role (planner, executor, judge)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0


def _model_calls(result: RunResult) -> list[ModelCalled]:
    return [e for e in result.events if isinstance(e, ModelCalled)]


def usage_by_role(events: Iterable[Event]) -> dict[str, RoleUsage]:
    """Model usage per role, from a run's ``model_called`` events."""
    roles: dict[str, RoleUsage] = {}
    for e in events:
        if not isinstance(e, ModelCalled):
            continue
        row = roles.setdefault(e.role, RoleUsage())
        row.calls += 1
        row.input_tokens += e.usage.input_tokens
        row.output_tokens += e.usage.output_tokens
        row.cost += e.cost
        row.seconds += e.duration
    return roles


def _triggers(result: RunResult) -> dict[int, str]:
    return {e.plan.version: e.trigger for e in result.events if isinstance(e, PlanProposed)}


def _records(result: RunResult) -> list[StepRecord]:
    """Every step record that started, superseded ones included, in start order."""
    records = [r for r in (*result.superseded, *result.steps.values()) if r.started_at is not None]
    return sorted(records, key=lambda r: r.started_at or 0.0)


def _duration(rec: StepRecord) -> float | None:
    if rec.started_at is None or rec.finished_at is None:
        return None
    return max(0.0, rec.finished_at - rec.started_at)


def _secs(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}s"


# -- for people -----------------------------------------------------------------------------


def print_summary(console: Console, result: RunResult, *, extra: Iterable[tuple[str, str]] = ()) -> None:
    """Print the end-of-run report."""
    console.print(_answer(result))
    console.print(_plans(result))
    console.print(_usage(result))
    console.print(_tools(result))
    console.print(_timings(result, extra))


def _answer(result: RunResult) -> RenderableType:
    stop = result.stop
    if stop.ok:
        title, style = Text("answer · goal met", style="bold green"), "green"
    elif stop.kind == "waiting":
        title, style = Text("waiting for a human's answer (the run is saved)", style="bold yellow"), "yellow"
    else:
        title, style = shown(f"stopped: {stop}", style="bold red"), "red"
    body: RenderableType = shown(result.answer) if result.answer else Text("(no answer)", style="dim")
    return Panel(body, title=title, title_align="left", border_style=style)


def _plans(result: RunResult) -> Table:
    triggers = _triggers(result)
    table = Table(title="plan versions", title_justify="left", title_style="bold")
    table.add_column("v", justify="right")
    table.add_column("author")
    table.add_column("trigger")
    table.add_column("steps")
    table.add_column("reason")
    for plan in result.plans:
        table.add_row(
            str(plan.version),
            plan.author,
            triggers.get(plan.version, ""),
            shown(", ".join(plan.ids)),
            shown(plan.reason or ""),
        )
    return table


def _usage(result: RunResult) -> Table:
    table = Table(title="usage", title_justify="left", title_style="bold")
    table.add_column("model role")
    for name in ("calls", "input tokens", "output tokens", "cost", "time"):
        table.add_column(name, justify="right")
    for role, row in usage_by_role(result.events).items():
        table.add_row(
            shown(role),
            str(row.calls),
            f"{row.input_tokens:,}",
            f"{row.output_tokens:,}",
            f"${row.cost:.4f}",
            _secs(row.seconds),
        )
    table.add_row(
        Text("total", style="bold"),
        str(result.model_calls),
        f"{result.usage.input_tokens:,}",
        f"{result.usage.output_tokens:,}",
        f"${result.cost:.4f}",
        "",
    )
    return table


def _tools(result: RunResult) -> Table:
    table = Table(title=f"tool calls ({result.tool_calls})", title_justify="left", title_style="bold", expand=True)
    table.add_column("step", no_wrap=True, overflow="ellipsis", min_width=12)
    table.add_column("tool", no_wrap=True, overflow="ellipsis", min_width=12)
    table.add_column("tries", justify="right", no_wrap=True, min_width=5)
    table.add_column("time", justify="right", no_wrap=True, min_width=6)
    table.add_column("outcome", no_wrap=True, overflow="ellipsis", ratio=1)
    for rec in _records(result):
        if rec.step.tool is not None:
            outcome = rec.status if rec.error is None else str(rec.error)
            table.add_row(
                shown(rec.step.id), shown(rec.step.tool), str(rec.attempts), _secs(_duration(rec)), shown(outcome)
            )
        for call in rec.tool_calls:
            outcome = "succeeded" if call.error is None else str(call.error)
            by = rec.executor or rec.step.executor or "model"
            table.add_row(
                shown(rec.step.id),
                shown(f"{call.tool} (via {by})"),
                str(call.attempts),
                _secs(call.duration),
                shown(outcome),
            )
    return table


def _timings(result: RunResult, extra: Iterable[tuple[str, str]]) -> Table:
    calls = _model_calls(result)
    step_time = sum(d for r in _records(result) if (d := _duration(r)) is not None)
    table = Table(show_header=False, title="timings", title_justify="left", title_style="bold", box=None)
    table.add_column(style="dim")
    table.add_column()
    table.add_row("run", f"{result.duration:.2f}s wall time")
    table.add_row("planning", _secs(sum(e.duration for e in calls if e.role == "planner")))
    table.add_row("steps", f"{step_time:.2f}s in total, run in parallel where the plan allowed")
    table.add_row("replans", str(result.replans))
    for key, value in extra:
        table.add_row(shown(key), shown(value))
    return table


# -- for programs ---------------------------------------------------------------------------


def label_json(label: Provenance | None) -> dict[str, Any] | None:
    """A trust label as JSON data (as the question views carry it)."""
    return None if label is None else provenance_view(label, None).model_dump(mode="json")


def violations_json(violations: Iterable[Violation]) -> list[dict[str, Any]]:
    """Broken trust rules as JSON data."""
    return [violation_view(v, None).model_dump(mode="json") for v in violations]


def step_json(rec: StepRecord) -> dict[str, Any]:
    """One step record as JSON data, with its trust labels: each argument's (``provenance``), the
    output's, whether a planner wrote it after reading untrusted text, the rules a refused call broke."""
    return {
        "id": rec.step.id,
        "status": rec.status,
        "tool": rec.step.tool,
        "executor": rec.executor or rec.step.executor,
        "plan_version": rec.plan_version,
        "attempts": rec.attempts,
        "args": rec.args,
        "output": rec.output,
        "error": None if rec.error is None else {"kind": rec.error.kind, "message": rec.error.message},
        "duration": _duration(rec),
        "tool_calls": [
            {
                "tool": c.tool,
                "args": c.args,
                "ok": c.error is None,
                "error": None if c.error is None else str(c.error),
                "duration": c.duration,
                "provenance": None
                if c.provenance is None
                else {name: label_json(label) for name, label in c.provenance.items()},
                "output_provenance": label_json(c.output_provenance),
                "violations": violations_json(c.violations),
            }
            for c in rec.tool_calls
        ],
        "provenance": None
        if rec.provenance is None
        else {name: label_json(label) for name, label in rec.provenance.items()},
        "output_provenance": label_json(rec.output_provenance),
        "tainted": rec.tainted,
        "violations": violations_json(rec.violations),
    }


def result_json(result: RunResult, **extra: Any) -> dict[str, Any]:
    """The run's result as JSON-ready data."""
    triggers = _triggers(result)
    usage = result.usage
    return {
        "run_id": result.run_id,
        "goal": result.goal,
        "ok": result.ok,
        "stop": {
            "kind": result.stop.kind,
            "detail": result.stop.detail,
            "budget": result.stop.budget,
            "code": result.stop.code,
            "violations": violations_json(result.stop.violations),
        },
        "answer": result.answer,
        "answer_provenance": label_json(result.answer_provenance),
        "withheld": list(result.withheld),
        "plans": [
            {
                "version": p.version,
                "author": p.author,
                "trigger": triggers.get(p.version),
                "reason": p.reason,
                "steps": [s.model_dump(mode="json", exclude_defaults=True) for s in p.steps],
                **({"answer": p.answer} if p.answer is not None else {}),
            }
            for p in result.plans
        ],
        "steps": [step_json(r) for r in result.steps.values()],
        "superseded": [step_json(r) for r in result.superseded],
        "usage": {
            "model_calls": result.model_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost": result.cost,
            "by_role": {role: asdict(row) for role, row in usage_by_role(result.events).items()},
        },
        "tool_calls": result.tool_calls,
        "replans": result.replans,
        "duration": result.duration,
        "events": len(result.events),
        **extra,
    }


def json_text(data: Any) -> str:
    """Pretty JSON; anything that is not JSON data is written as text. Text that cannot be written
    as UTF-8 (a lone surrogate) is written as JSON escapes instead."""
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, indent=2, default=str)
    return text
