"""Questions to humans as the CLI shows them: each rendered from its one view
(:class:`~planexec.views.QuestionView`) — the goal, what is asked about with its arguments, effect,
plan, changes and forecast, why, and what each answer does — with the exact commands that answer it.
Nothing here works a fact out: it only lays the view out for a terminal, or as JSON."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from planexec._util.plural import counted
from planexec.cli._format import when
from planexec.cli._store_options import StoreChoice, store_flag
from planexec.cli._text import plain, shown
from planexec.views import (
    REASON_SHOWN,
    PlanView,
    QuestionView,
    StepView,
    argument_text,
    provenance_text,
    question_lines,
)

__all__ = ["answer_commands", "question_json", "question_panel", "question_text_lines"]


def answer_commands(choice: StoreChoice, view: QuestionView) -> list[str]:
    """Command lines that answer ``view``: one for each way to answer it."""
    head = f"planexec {store_flag(choice)}"
    target = f"{shlex.quote(view.run_id)} {shlex.quote(view.question_id)}"
    kind = view.kind
    if kind == "question":
        return [f"{head}answer {target} TEXT"]
    if kind == "escalation":
        return [
            f"{head}approve {target} --choice guidance --text TEXT",
            f"{head}approve {target} --choice replan",
            f"{head}reject {target} --reason TEXT  (stops the run)",
        ]
    if kind == "answer" and view.rule == "untrusted_answer":
        return [f"{head}approve {target}", f"{head}reject {target} [--reason TEXT]  (withholds its untrusted parts)"]
    if kind == "answer":
        return [f"{head}approve {target}", f"{head}reject {target} --reason TEXT [--fail N=NOTE ...]"]
    if kind == "effect":
        approve = f"{head}approve {target} --choice retry|skip|done [--output JSON]"
    elif kind == "plan":
        approve = f"{head}approve {target} [--edit plan.json]"
    elif kind == "budget":
        approve = f"{head}approve {target} --raise NAME=CAP [--raise ...]"
    else:
        approve = f"{head}approve {target}"
    return [approve, f"{head}reject {target} --reason TEXT"]


def question_json(view: QuestionView, *, choice: StoreChoice | None = None) -> dict[str, Any]:
    """One question as JSON data (the view, and for an open question the commands that answer it)."""
    data: dict[str, Any] = view.model_dump(mode="json")
    if choice is not None and view.answered is None:
        data["commands"] = answer_commands(choice, view)
    return data


def question_text_lines(view: QuestionView) -> list[str]:
    """The view as plain lines, made safe for a terminal."""
    return [plain(line) for line in question_lines(view)]


def _grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    return grid


def _arguments(step: StepView) -> RenderableType:
    if not step.arguments:
        return Text("(none)", style="dim")
    table = Table(show_edge=False, header_style="bold", pad_edge=False, expand=False)
    table.add_column("argument", overflow="fold")
    table.add_column("value as sent", overflow="fold", ratio=3)
    table.add_column("from", overflow="fold")
    labelled = any(arg.provenance is not None for arg in step.arguments)
    if labelled:
        table.add_column("trust", overflow="fold")
    for arg in step.arguments:
        value = arg.text + (f"  [{arg.size:,} characters]" if arg.cut else "")
        source = ""
        if arg.binding is not None:
            source = arg.binding if arg.resolved else f"{arg.binding} (not run yet)"
        cells = [shown(arg.name), shown(value), shown(source)]
        if labelled:
            label = arg.provenance
            text = provenance_text(label) if label is not None else ""
            cells.append(shown(text, "" if label is None or label.trusted else "bold red"))
        table.add_row(*cells)
    return table


def _step(grid: Table, step: StepView) -> None:
    head = f"{step.id} — {step.description}"
    if step.change in ("added", "changed"):
        head += f"  [{step.change} by this plan version" + (
            f": {', '.join(step.changed_fields)}]" if step.changed_fields else "]"
        )
    grid.add_row("step", shown(head))
    grid.add_row("runs on", shown(step.runs_on))
    style = "bold red" if step.effect.changes_world else ""
    grid.add_row("effect", shown(step.effect.label, style))
    if step.depends_on:
        grid.add_row("after", shown(", ".join(step.depends_on)))
    if step.idempotency_key:
        grid.add_row("key", shown(step.idempotency_key))
    if step.tainted:
        grid.add_row("written", shown("by the planner after it read untrusted text", "bold red"))
    grid.add_row("arguments", _arguments(step))


def _plan_table(plan: PlanView) -> Table:
    table = Table(show_edge=False, header_style="bold", expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("step", overflow="fold")
    table.add_column("runs on", overflow="fold")
    table.add_column("after", overflow="fold")
    table.add_column("effect", overflow="fold")
    table.add_column("arguments", overflow="fold", ratio=2)
    table.add_column("change", overflow="fold")
    for n, step in enumerate(plan.steps, 1):
        args = "\n".join(argument_text(a, width=60) for a in step.arguments)
        change: str = step.change or ""
        if step.changed_fields:
            change += f" ({', '.join(step.changed_fields)})"
        table.add_row(
            str(n),
            shown(f"{step.id} — {step.description}"),
            shown(step.runs_on),
            shown(", ".join(step.depends_on)),
            shown(step.effect.label, "bold red" if step.effect.changes_world else ""),
            shown(args),
            shown(change, "bold" if step.change in ("added", "changed") else "dim"),
        )
    return table


def question_panel(view: QuestionView, *, commands: Sequence[str] = ()) -> RenderableType:
    """One question as a panel: everything a human needs to answer it."""
    grid = _grid()
    grid.add_row("goal", shown(view.goal))
    for c in view.constraints:
        grid.add_row("constraint", shown(c))
    grid.add_row("why", Text.assemble(shown(view.why), Text(f"  [{view.rule}]", style="dim")))
    if view.reason and view.kind in REASON_SHOWN and view.reason not in view.why:
        grid.add_row("asked", shown(view.reason))
    grid.add_row("asked at", when(view.asked_at))
    parts: list[RenderableType] = [grid]
    if view.step is not None:
        _step(grid, view.step)
    for v in view.violations:
        where = "the call" if v.argument == "*" else v.argument
        if v.rule == "argument_rule":
            grid.add_row("breaks a rule", shown(f"{where}: {v.requires} — {v.reason}", "bold red"))
        else:
            grid.add_row("untrusted", shown(f"{where}: {v.reason}", "bold red"))
    if view.plan is not None:
        plan = view.plan
        grid.add_row("plan", shown(f"v{plan.version} by {plan.author}" + (f": {plan.reason}" if plan.reason else "")))
        grid.add_row("changes", shown(plan.changes.summary))
        if plan.forecast is not None:
            grid.add_row("forecast", shown(plan.forecast.summary))
        parts.append(_plan_table(plan))
        for gone in plan.changes.removed:
            parts.append(shown(f"removed: {gone.id} — {gone.description} ({gone.runs_on})", "dim"))
        for change in plan.changes.changed:
            before, after = _short(change.before), _short(change.after)
            parts.append(shown(f"changed {change.step_id}.{change.field}: {before} → {after}"))
    if view.under_review is not None:
        text = view.under_review if isinstance(view.under_review, str) else str(view.under_review)
        grid.add_row("answer" if view.kind == "answer" else "result", shown(text))
    for check in view.failed_checks:
        grid.add_row("failed check", shown(f"{check.name}: {check.detail}"))
    for n, item in enumerate(view.checklist, 1):
        grid.add_row(f"checklist {n}", shown(item))
    if view.budget is not None:
        b = view.budget
        grid.add_row("cap reached", shown(f"{b.name}: {b.used:g} used of {b.limit:g}"))
        s = b.spent
        spent = (
            f"${s.cost:.4f} · {counted(s.model_calls, 'model call')} · {counted(s.tool_calls, 'tool call')} · "
            f"{counted(s.steps, 'step')} · {s.input_tokens:,} tokens in, {s.output_tokens:,} out"
        )
        grid.add_row("spent", shown(spent))
        if s.by_role:
            grid.add_row("by role", shown(", ".join(f"{k} ${v:.4f}" for k, v in s.by_role.items())))
        if s.by_tool:
            grid.add_row("by tool", shown(", ".join(f"{k} ×{v}" for k, v in s.by_tool.items())))
        if b.rest is not None:
            grid.add_row("rest", shown(b.rest.summary))
    answers = Table(show_edge=False, header_style="bold", expand=True, title="answers", title_justify="left")
    answers.add_column("answer", overflow="fold")
    answers.add_column("what it does", overflow="fold", ratio=3)
    for option in view.answers:
        answers.add_row(shown(option.label), shown(option.does))
    parts.append(answers)
    if commands:
        parts.append(Text("answer with:", style="dim"))
        parts += [shown(f"  {command}") for command in commands]
    title = shown(f"{view.title} · {view.question_id} · run {view.run_id}", "bold")
    return Panel(Group(*parts), title=title, title_align="left", border_style="yellow")


def _short(value: object, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
