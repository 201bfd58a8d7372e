"""A question view as plain lines of text, for terminals and for hosts that read only text. It
renders the view and nothing else: every fact comes from :class:`QuestionView`."""

from __future__ import annotations

import json

from planexec._util.plural import counted
from planexec.views._models import ArgumentView, PlanView, ProvenanceView, QuestionView, StepView

__all__ = ["REASON_SHOWN", "argument_text", "provenance_text", "question_lines", "step_lines"]

REASON_SHOWN = frozenset({"question", "escalation", "effect"})
"""Kinds of question whose own words (``reason``) say more than why they were asked."""


def argument_text(arg: ArgumentView, *, width: int = 100) -> str:
    """``name = value`` (``← ${binding}`` when it comes from an earlier step's output; an argument
    whose step has not run yet is shown as written, binding and all), with the size of a cut value."""
    text = arg.text if len(arg.text) <= width else arg.text[: width - 1] + "…"
    if arg.binding is not None and not arg.resolved:
        return f"{arg.name} = {text}"  # the binding as written: its step has not run yet
    line = f"{arg.name} = {text}"
    if arg.binding is not None:
        line += f"  ← {arg.binding}"
    if arg.cut:
        line += f"  [{arg.size:,} characters]"
    if arg.provenance is not None:
        line += f"  ({provenance_text(arg.provenance)})"
    return line


def provenance_text(label: ProvenanceView) -> str:
    """A value's label in a few words: ``trusted: planner``, ``UNTRUSTED: tool:fetch (fetch_page)``
    (in capitals, so that it stands out), ``confirmed by ana (from tool:fetch)``."""
    if label.trusted:
        return label.text
    return "UNTRUSTED" + label.text.removeprefix("untrusted")


def step_lines(step: StepView, *, indent: str = "  ") -> list[str]:
    """A step: what it does, where it runs, its effect and its arguments as they will be sent."""
    head = f"{step.id} — {step.description}"
    if step.change in ("added", "changed"):
        head += f"   [{step.change}" + (f": {', '.join(step.changed_fields)}" if step.changed_fields else "") + "]"
    lines = [head, f"{indent}runs on: {step.runs_on}", f"{indent}effect: {step.effect.label}"]
    if step.depends_on:
        lines.append(f"{indent}after: {', '.join(step.depends_on)}")
    if step.arguments:
        lines.append(f"{indent}arguments:")
        lines += [f"{indent}  {argument_text(a)}" for a in step.arguments]
    else:
        lines.append(f"{indent}arguments: (none)")
    if step.idempotency_key:
        lines.append(f"{indent}idempotency key: {step.idempotency_key}")
    if step.tainted:
        lines.append(f"{indent}written by the planner after it read untrusted text")
    return lines


def _plan_lines(plan: PlanView) -> list[str]:
    lines = [f"plan v{plan.version} by {plan.author}" + (f": {plan.reason}" if plan.reason else "")]
    lines.append(f"changes: {plan.changes.summary}")
    if plan.forecast is not None:
        lines.append(f"forecast: {plan.forecast.summary}")
    for n, step in enumerate(plan.steps, 1):
        first, *rest = step_lines(step, indent="     ")
        lines.append(f"  {n}. {first}")
        lines += rest
    for gone in plan.changes.removed:
        lines.append(f"  removed: {gone.id} — {gone.description} ({gone.runs_on})")
    for change in plan.changes.changed:
        lines.append(f"  changed: {change.step_id}.{change.field}: {_short(change.before)} → {_short(change.after)}")
    return lines


def _short(value: object, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def question_lines(view: QuestionView) -> list[str]:
    """Everything a human needs to answer ``view``, line by line."""
    lines = [f"{view.title}   ({view.question_id}, run {view.run_id})", f"goal: {view.goal}"]
    lines += [f"constraint: {c}" for c in view.constraints]
    lines.append(f"why: {view.why} [{view.rule}]")
    if view.reason and view.kind in REASON_SHOWN and view.reason not in view.why:
        lines.append(f"asked: {view.reason}")
    if view.step is not None:
        lines += ["step: " + line if n == 0 else line for n, line in enumerate(step_lines(view.step))]
    for v in view.violations:
        where = "the call" if v.argument == "*" else v.argument
        if v.rule == "argument_rule":
            lines.append(f"breaks a rule: {where}: {v.requires} — {v.reason}")
        else:
            lines.append(f"untrusted: {where}: {v.reason}")
    if view.plan is not None:
        lines += _plan_lines(view.plan)
    if view.under_review is not None:
        label = "answer" if view.kind == "answer" else "result"
        text = view.under_review if isinstance(view.under_review, str) else repr(view.under_review)
        lines.append(f"{label}: {text}")
    lines += [f"failed check {c.name}: {c.detail}" for c in view.failed_checks]
    lines += [f"checklist {n}: {item}" for n, item in enumerate(view.checklist, 1)]
    if view.budget is not None:
        b = view.budget
        lines.append(
            f"cap reached: {b.name} {b.used:g} of {b.limit:g}" + (f" (needed {b.needed:g} more)" if b.needed else "")
        )
        s = b.spent
        lines.append(
            f"spent: ${s.cost:.4f}, {counted(s.model_calls, 'model call')}, {counted(s.tool_calls, 'tool call')}, "
            f"{counted(s.steps, 'step')}, {s.input_tokens:,} tokens in, {s.output_tokens:,} out"
        )
        if s.by_role:
            lines.append("  by role: " + ", ".join(f"{k} ${v:.4f}" for k, v in s.by_role.items()))
        if s.by_tool:
            lines.append("  by tool: " + ", ".join(f"{k} ×{v}" for k, v in s.by_tool.items()))
        if b.rest is not None:
            lines.append(f"the rest is expected to cost: {b.rest.summary}")
    lines.append("answers:")
    for option in view.answers:
        what = option.decision + (f" --choice {option.choice}" if option.choice else "")
        needs = f" (with {', '.join(option.needs)})" if option.needs else ""
        lines.append(f"  {option.label} [{what}]{needs}: {option.does}")
    if view.answered is not None:
        a = view.answered
        verdict = "approved" if a.approved else "rejected"
        lines.append(f"answered: {verdict} by {a.by}" + (f" ({a.choice})" if a.choice else ""))
    return lines
