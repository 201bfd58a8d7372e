"""What the planner is told: instructions, the goal, the tools, the budget and the record.

The record shows each step once, with outputs cut to a fixed size, so the planner's input grows
linearly with the steps of the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from planexec._util.plural import counted
from planexec.plan import BindingError, render_text
from planexec.tools import Tool, Toolset

if TYPE_CHECKING:
    from planexec.log import RunState

_STEP_RULES = """A step with no tool is done by a model: list in its allowed_tools the tools that model may \
call (it may call none when the list is empty); a step that names a tool has no allowed_tools.
Mark steps that change anything outside the run with effect "write"; set approval "always" on a step \
a human must confirm before it runs (you can add a human check, never remove one).
Regexes (matches checks, pattern in schemas) use RE2 syntax: no lookaround, no backreferences. A \
schema's $ref must point inside the same schema (#/$defs/name)."""

UPFRONT = (
    """You are the planner of a planner–executor agent. You never call tools yourself: you write a \
plan that executors carry out, then you write the final answer from their results.
A plan is a list of steps. Each step names a tool (with args that fit its schema) or an executor (for \
work a model must reason through). A step starts as soon as every step in its depends_on has finished, \
so independent steps run in parallel: list only real dependencies.
To use an earlier step's output in args, write "${step_id}" for the whole output (its type is kept) \
or "${step_id.field.0}" for a part of it, and list that step in depends_on.
"""
    + _STEP_RULES
    + """
Give a confidence (0 to 1) for steps you are unsure of, and for the plan as a whole. If the goal is \
unclear, ask the user instead (question, no steps); if it cannot be met, say why (give_up, no steps). \
Reply with JSON only."""
)

STEP_BY_STEP = (
    """You are the planner of a planner–executor agent. You never call tools yourself: each \
turn you choose the one next step that executors carry out, and you see its result before the next turn.
A step names a tool (with args that fit its schema) or an executor. To use an earlier step's output in \
args, write "${step_id}" or "${step_id.field.0}" and list that step in depends_on.
"""
    + _STEP_RULES
    + """
Each turn give your thought and your confidence (0 to 1). When the goal is met, set stop to true and \
give the final answer. If the goal is unclear, ask the user (question); if it cannot be met, say why \
(give_up). Reply with JSON only."""
)

STEP_BY_STEP_FLAT = """You are the planner of a planner–executor agent. You never call tools yourself: each \
turn you choose the one next step that executors carry out, and you see its result before the next turn.
Reply with one JSON object: {"thought": ..., "next_step": ..., "tool": ..., "arguments": {...}, \
"stop": false, "confidence": 0 to 1}. next_step says what to do in a sentence; tool names the tool \
(null for work a model must reason through) and arguments fit its schema. Steps are named s1, s2, ... \
in order: to use an earlier output in arguments, write "${s1}" or "${s1.field.0}".
When the goal is met, set stop to true and put the final answer in next_step. If the goal is \
unclear, ask the user (question); if it cannot be met, say why (give_up). Reply with JSON only."""

PATCH = """Part of the plan failed or needs changing. Finished steps stay as they are and their outputs \
stay available: bind them instead of repeating them. Return every step still to do: your list replaces \
all unfinished steps. New steps need new ids; keep an id only to run that step again unchanged, or to \
keep a running step running."""

FINISH = """Every step has finished. Write the final answer to the goal from the results above."""


def describe_tools(tools: Toolset, executors: Mapping[str, str]) -> str:
    lines = ["Tools:", *(_describe_tool(t) for t in tools)]
    if executors:
        lines.append("Executors (for steps with no tool):")
        lines += [f"- {name}: {desc}" for name, desc in executors.items()]
    return "\n".join(lines)


def _describe_tool(tool: Tool) -> str:
    """One tool as the planner reads it (a tool is an immutable value: this is made once per tool)."""
    text: str | None = getattr(tool, "_planner_text", None)
    if text is None:
        flags = [f for f, on in (("writes", tool.side_effect), ("sensitive", tool.sensitive)) if on]
        suffix = f" [{', '.join(flags)}]" if flags else ""
        schema = json.dumps(tool.parameters, separators=(",", ":"), ensure_ascii=False)
        text = f"- {tool.name}{suffix}: {tool.description}\n  args schema: {schema}"
        object.__setattr__(tool, "_planner_text", text)
    return text


def describe_goal(goal: str, constraints: tuple[str, ...]) -> str:
    text = f"Goal: {goal}"
    if constraints:
        text += "\nConstraints:\n" + "\n".join(f"- {c}" for c in constraints)
    return text


def describe_heard(state: RunState) -> str | None:
    """What people told the run: new information and constraints, answers to the planner's
    questions, guidance given on escalations, and final answers a review refused."""
    lines: list[str] = []
    for info in state.information:
        label = "New constraint" if info.constraint else "New information"
        lines.append(f"- {label} from {info.by}: {info.text}")
    for rec in state.approvals.values():
        if rec.subject == "question" and rec.text is not None:
            lines.append(f"- You asked the user: {rec.reason}\n  The user answered: {rec.text}")
        elif rec.subject == "escalation" and rec.approved and rec.text:
            lines.append(f"- Guidance from {rec.by or 'a human'} ({rec.code or 'escalation'}): {rec.text}")
    for review in state.reviews:
        if not review.passed:
            why = "; ".join(review.problems) or "no reason given"
            lines.append(f"- A final answer was refused by the {review.reviewer} review: {why}")
    if not lines:
        return None
    return "What people told this run (it overrides earlier assumptions):\n" + "\n".join(lines)


def describe_budget(left: Mapping[str, Any]) -> str:
    if not left:
        return "Budget left: no caps."
    return "Budget left: " + ", ".join(f"{k} {v}" for k, v in left.items())


def _cut(value: Any, limit: int) -> str:
    try:
        text = render_text(value)
    except BindingError as e:
        return f"(cannot be shown as text: {e})"
    return text if len(text) <= limit else text[:limit] + f"… ({counted(len(text) - limit, 'more character')})"


def describe_record(state: RunState, limit: int) -> str:
    """Each step once: status, what it ran, and its output or error (cut to ``limit`` characters)."""
    plan = state.plan
    lines = [f"Execution record (plan v{plan.version if plan else 0}):"]
    for rec in state.steps.values():
        s = rec.step
        what = f"tool {s.tool}" if s.tool else f"executor {s.executor or 'default'}"
        head = f"- [{rec.status}] {s.id} ({what}): {s.description}"
        if rec.status == "succeeded":
            head += f"\n  output: {_cut(rec.output, limit)}"
        elif rec.status == "failed" and rec.error is not None:
            head += f"\n  error: {_cut(str(rec.error), limit)}"
            if rec.args is not None:
                head += f"\n  args: {_cut(rec.args, limit)}"
            if rec.verdict is not None and rec.verdict.failures:
                head += "\n  failed checks: " + "; ".join(f"{c.name}: {c.detail}" for c in rec.verdict.failures)
        elif rec.status == "pending" and s.depends_on:
            head += f" (after {', '.join(s.depends_on)})"
        lines.append(head)
    if len(lines) == 1:
        lines.append("- nothing has run yet")
    return "\n".join(lines)
