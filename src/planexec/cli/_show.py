"""One stored run in detail, for ``planexec show``: its goal and outcome, every plan version with
who made it, why and what it changed, every step record, usage and cost, and the questions asked
with their answers — as rich tables, or as one JSON document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from planexec._util.plural import counted
from planexec.cli._board import runs_on
from planexec.cli._format import cut, money, seconds, when
from planexec.cli._questions import question_json, question_panel
from planexec.cli._report import label_json, step_json, usage_by_role, violations_json
from planexec.cli._text import shown
from planexec.log import ApprovalRecord, Event, PlanProposed, RunState, StepRecord
from planexec.plan import render_text
from planexec.trust import Provenance
from planexec.views import diff_plans, forecast_view, provenance_text, provenance_view, question_view

__all__ = ["print_run", "run_json"]


def _triggers(log: Sequence[Event]) -> dict[int, str]:
    return {e.plan.version: e.trigger for e in log if isinstance(e, PlanProposed)}


def _tainted(log: Sequence[Event]) -> dict[int, tuple[str, ...]]:
    """For each plan version: the steps a planner wrote after reading untrusted text."""
    return {e.plan.version: e.tainted for e in log if isinstance(e, PlanProposed)}


def _label(label: Provenance) -> str:
    return provenance_text(provenance_view(label, None))


def _records(state: RunState) -> list[tuple[StepRecord, bool]]:
    """Every step record, superseded ones included (flagged), started ones first in start order."""
    records = [(r, True) for r in state.superseded] + [(r, False) for r in state.steps.values()]
    return sorted(records, key=lambda item: (item[0].started_at is None, item[0].started_at or 0.0))


def _status_line(state: RunState) -> str:
    if state.stop is not None:
        return f"finished: {state.stop}"
    if state.status == "waiting":
        return f"waiting for {counted(len(state.pending_approvals), 'answer')}"
    return "running (or stopped without finishing: `planexec resume` goes on with it)"


def _elapsed(state: RunState) -> float:
    end = state.finished_at if state.finished_at is not None else state.last_at
    return end - state.started_at


# -- for people -------------------------------------------------------------------------------


def fold_readable(log: Sequence[Event]) -> tuple[RunState, list[str]]:
    """The state of a log that may have gaps (events that could not be read): events that cannot be
    applied where they stand are left out, with a line saying so."""
    state = RunState()
    skipped: list[str] = []
    for index, event in enumerate(log, start=1):
        try:
            state.apply(event)
        except Exception as e:  # an event that refers to one that is missing
            skipped.append(f"event {index} ({event.kind}) cannot be applied: {type(e).__name__}: {e}")
    return state, skipped


def print_run(console: Console, log: Sequence[Event], state: RunState | None = None) -> None:
    state = state if state is not None else RunState.fold(log)
    console.print(_head(state))
    console.print(_plans(state, log))
    console.print(_steps(state))
    if any(rec.provenance is not None or rec.output_provenance is not None for rec, _ in _records(state)):
        console.print(_labels(state))
    console.print(_usage(state, log))
    if state.approvals:
        console.print(_approvals(state))
    for rec in state.pending_approvals:
        console.print(question_panel(question_view(state, rec)))
    if state.rejections:
        console.print(_rejections(state))
    if state.information or state.reviews or state.tool_changes:
        console.print(_heard(state))


def _rejections(state: RunState) -> Table:
    """Every planner answer that failed its checks, with each of its problems."""
    table = Table(title="planner answers refused", title_justify="left", title_style="bold", expand=True)
    for name in ("at", "attempt", "problems"):
        table.add_column(name, overflow="fold")
    for e in state.rejections:
        table.add_row(when(e.at), str(e.attempt), shown("\n".join(str(p) for p in e.problems)))
    return table


def _heard(state: RunState) -> Table:
    """What people told the run, how its final answers were reviewed, and how its tools changed."""
    table = Table(title="told, reviewed, changed", title_justify="left", title_style="bold", expand=True)
    for name in ("at", "what", "text"):
        table.add_column(name, overflow="fold")
    rows = [(i.at, "constraint" if i.constraint else "information", f"{i.by}: {i.text}") for i in state.information]
    for r in state.reviews:
        verdict = "passed" if r.passed else "refused: " + "; ".join(r.problems)
        rows.append((r.at, f"{r.reviewer} review", f"{cut(r.answer, 200)} — {verdict}"))
    for c in state.tool_changes:
        rows.append((c.at, "tools changed", _tool_change(c.tools, c.removed)))
    for at, what, text in sorted(rows, key=lambda row: row[0]):
        table.add_row(when(at), what, shown(text))
    return table


def _tool_change(tools: Sequence[Mapping[str, Any]], removed: Sequence[str]) -> str:
    """``+name`` for each new or redefined tool, ``-name`` for each tool gone."""
    return " ".join([*(f"+{spec.get('name')}" for spec in tools), *(f"-{name}" for name in removed)])


def _head(state: RunState) -> RenderableType:
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="dim")
    rows.add_column()
    rows.add_row("goal", shown(state.goal))
    for c in state.constraints:
        rows.add_row("constraint", shown(c))
    rows.add_row("status", shown(_status_line(state)))
    rows.add_row("started", when(state.started_at))
    rows.add_row("time", f"{seconds(_elapsed(state))} ({seconds(state.active_time)} running)")
    rows.add_row("events", str(state.events))
    if state.answer_provenance is not None:
        rows.add_row("answer from", shown(_label(state.answer_provenance)))
    if state.withheld:
        left_out = "all of it" if "*" in state.withheld else "the output of " + ", ".join(state.withheld)
        rows.add_row("withheld", shown(f"{left_out} (untrusted; kept in the log)"))
    for v in state.stop.violations if state.stop is not None else ():
        rows.add_row("refused", shown(str(v)))
    answer: RenderableType = shown(state.answer) if state.answer else Text("(no answer)", style="dim")
    ok = state.stop is not None and state.stop.ok
    style = "green" if ok else "yellow" if state.stop is None else "red"
    title = shown(f"run {state.run_id}")
    return Panel(Group(rows, Text(""), answer), title=title, title_align="left", border_style=style)


def _author(state: RunState, version: int, author: str) -> str:
    """Who made a plan version: for the planner, the model whose answer it is, when the log says."""
    model = state.plan_models.get(version)
    return f"{author} ({shown(model)})" if model else author


def _plans(state: RunState, log: Sequence[Event]) -> Table:
    triggers = _triggers(log)
    tainted_by_version = _tainted(log)
    table = Table(title="plan versions", title_justify="left", title_style="bold", expand=True)
    table.add_column("v", justify="right", no_wrap=True)
    table.add_column("author", no_wrap=True)
    table.add_column("trigger", no_wrap=True)
    table.add_column("reason", ratio=1)
    table.add_column("changes from the version before · forecast", ratio=2)
    previous = None
    for plan in state.plans:
        diff = diff_plans(previous, plan)
        changes = "\n".join(diff.lines()) or "(no change)"
        forecast = forecast_view(state.forecasts.get(plan.version), state.over_forecast.get(plan.version, ()))
        if forecast is not None:
            changes += f"\nforecast: {forecast.summary}"
        read = state.plan_reads.get(plan.version)
        if read:
            changes += f"\nplanned after reading untrusted text: {', '.join(str(s) for s in read)}"
        tainted = tainted_by_version.get(plan.version, ())
        if tainted:
            changes += f"\nuntrusted steps: {', '.join(tainted)}"
        table.add_row(
            str(plan.version),
            _author(state, plan.version, plan.author),
            triggers.get(plan.version, ""),
            shown(plan.reason),
            shown(changes),
        )
        previous = plan
    return table


def _outcome(rec: StepRecord) -> str:
    if rec.error is not None:
        return str(rec.error)
    if rec.status == "succeeded":
        return render_text(rec.output)
    if rec.cancel_reason:
        return rec.cancel_reason
    return rec.step.description


def _steps(state: RunState) -> Table:
    table = Table(title="steps", title_justify="left", title_style="bold", expand=True)
    table.add_column("step", no_wrap=True)
    table.add_column("plan", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tool / executor", no_wrap=True)
    table.add_column("tries", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("output or error", ratio=1)
    for rec, superseded in _records(state):
        status = rec.status + (" (replaced)" if superseded and rec.status != "dropped" else "")
        table.add_row(
            shown(rec.step.id),
            f"v{rec.plan_version}",
            status,
            shown(runs_on(rec)),
            str(rec.attempts) if rec.attempts else "",
            seconds(rec.duration),
            shown(cut(_outcome(rec), 200)),
        )
    return table


def _labels(state: RunState) -> Table:
    """Where each step's arguments and output came from, and whether the run trusted them."""
    table = Table(title="trust labels", title_justify="left", title_style="bold", expand=True)
    table.add_column("step", no_wrap=True)
    table.add_column("arguments", ratio=1, overflow="fold")
    table.add_column("output", ratio=1, overflow="fold")
    for rec, _superseded in _records(state):
        if rec.provenance is None and rec.output_provenance is None:
            continue
        args = "\n".join(f"{name}: {_label(label)}" for name, label in (rec.provenance or {}).items())
        if rec.tainted:
            args = "(the planner wrote this step after reading untrusted text)" + (f"\n{args}" if args else "")
        out = _label(rec.output_provenance) if rec.output_provenance is not None else ""
        for v in rec.violations:
            out += f"\nrefused: {v}"
        for call in rec.tool_calls:
            if call.output_provenance is not None:
                out += f"\ncall {call.tool}: {_label(call.output_provenance)}"
            for v in call.violations:
                out += f"\ncall {call.tool} refused: {v}"
        table.add_row(shown(rec.step.id), shown(args or "(none)"), shown(out.strip()))
    return table


def _usage(state: RunState, log: Sequence[Event]) -> Table:
    table = Table(title="usage", title_justify="left", title_style="bold")
    table.add_column("model role")
    for name in ("calls", "input tokens", "output tokens", "cost", "time"):
        table.add_column(name, justify="right")
    for role, row in usage_by_role(log).items():
        table.add_row(
            shown(role),
            str(row.calls),
            f"{row.input_tokens:,}",
            f"{row.output_tokens:,}",
            money(row.cost),
            seconds(row.seconds),
        )
    usage = state.usage
    table.add_row(
        Text("total", style="bold"),
        str(state.model_calls),
        f"{usage.input_tokens:,}",
        f"{usage.output_tokens:,}",
        money(state.cost),
        "",
    )
    table.caption = f"tool calls {state.tool_calls} · steps started {state.steps_started} · replans {state.replans}"
    return table


def _answer_text(rec: ApprovalRecord) -> str:
    if rec.approved is None:
        return "waiting for an answer"
    text = ("approved" if rec.approved else "rejected") + f" by {rec.by}"
    if rec.choice:
        text += f" ({rec.choice})"
    if rec.text:
        text += f": {rec.text}"
    failed = [f"{r.item}: {r.note or 'failed'}" for r in rec.checklist_results if not r.passed]
    if failed:
        text += " — failed " + "; ".join(failed)
    if rec.edited_plan is not None:
        text += " with an edited plan"
    if rec.raised:
        caps = ", ".join(f"{k} to {'no cap' if v is None else f'{v:g}'}" for k, v in rec.raised.items())
        text += f", raising {caps}"
    if rec.decision_reason:
        text += f": {rec.decision_reason}"
    return text


def _approvals(state: RunState) -> Table:
    table = Table(title="questions", title_justify="left", title_style="bold", expand=True)
    for name in ("id", "about", "why", "asked at", "answer"):
        table.add_column(name, overflow="fold")
    for rec in state.approvals.values():
        view = question_view(state, rec)
        table.add_row(
            shown(rec.approval_id),
            shown(view.about),
            shown(f"{view.why} [{view.rule}]"),
            when(rec.requested_at),
            shown(_answer_text(rec)),
        )
    return table


# -- for programs -----------------------------------------------------------------------------


def _forecast_json(state: RunState, version: int) -> dict[str, Any] | None:
    forecast = forecast_view(state.forecasts.get(version), state.over_forecast.get(version, ()))
    return None if forecast is None else forecast.model_dump(mode="json")


def run_json(log: Sequence[Event], state: RunState | None = None) -> dict[str, Any]:
    """The run as JSON data."""
    state = state if state is not None else RunState.fold(log)
    triggers = _triggers(log)
    tainted_by_version = _tainted(log)
    plans = []
    previous = None
    for plan in state.plans:
        plans.append(
            {
                "version": plan.version,
                "author": plan.author,
                "model": state.plan_models.get(plan.version),
                "trigger": triggers.get(plan.version),
                "reason": plan.reason,
                "steps": [s.model_dump(mode="json", exclude_defaults=True) for s in plan.steps],
                **({"answer": plan.answer} if plan.answer is not None else {}),
                "diff": diff_plans(previous, plan).json(),
                "forecast": _forecast_json(state, plan.version),
                "tainted": list(tainted_by_version.get(plan.version, ())),
                "read": [str(s) for s in state.plan_reads.get(plan.version, ())],
            }
        )
        previous = plan
    stop = state.stop
    return {
        "run_id": state.run_id,
        "goal": state.goal,
        "constraints": list(state.constraints),
        "status": state.status,
        "stop": None
        if stop is None
        else {
            "kind": stop.kind,
            "detail": stop.detail,
            "budget": stop.budget,
            "code": stop.code,
            "violations": violations_json(stop.violations),
        },
        "answer": state.answer,
        "answer_provenance": label_json(state.answer_provenance),
        "withheld": list(state.withheld),
        "started_at": state.started_at,
        "finished_at": state.finished_at,
        "active_time": state.active_time,
        "events": state.events,
        "plans": plans,
        "steps": [{**step_json(rec), "superseded": superseded} for rec, superseded in _records(state)],
        "usage": {
            "model_calls": state.model_calls,
            "input_tokens": state.usage.input_tokens,
            "output_tokens": state.usage.output_tokens,
            "cost": state.cost,
            "tool_calls": state.tool_calls,
            "steps_started": state.steps_started,
            "replans": state.replans,
            "by_role": {role: asdict(row) for role, row in usage_by_role(log).items()},
        },
        "approvals": [question_json(question_view(state, rec)) for rec in state.approvals.values()],
        "rejected_planner_answers": [
            {"at": e.at, "attempt": e.attempt, "problems": [asdict(p) for p in e.problems]} for e in state.rejections
        ],
        "information": [
            {"at": i.at, "text": i.text, "by": i.by, "constraint": i.constraint} for i in state.information
        ],
        "tool_changes": [
            {"at": c.at, "tools": [spec.get("name") for spec in c.tools], "removed": list(c.removed)}
            for c in state.tool_changes
        ],
        "answer_reviews": [
            {"at": r.at, "answer": r.answer, "passed": r.passed, "reviewer": r.reviewer, "problems": list(r.problems)}
            for r in state.reviews
        ],
    }
