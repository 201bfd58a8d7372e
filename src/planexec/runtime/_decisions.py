"""Answers to a run's questions: whether an answer fits its question (``check_decision``, the one
test whoever answers — the approver callback, ``Run.decide``, another process), the event that
records it (``decided_event``), and an answer as the log records it (``recorded_decision``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from planexec._util.strict_json import json_problem
from planexec.errors import Problem, UsageError
from planexec.log import ApprovalDecided, ApprovalRecord, ChecklistResult
from planexec.runtime._budget import Budget
from planexec.runtime._settings import ApprovalDecision

__all__ = ["check_decision", "decided_event", "recorded_decision", "refusal"]


DEFAULT_BUDGET = Budget()

_CHOICES_OF: dict[str, tuple[str, ...]] = {"effect": ("retry", "skip", "done"), "escalation": ("guidance", "replan")}

_Add = Callable[[str, str], None]
"""Note a problem: its code and its message."""


def check_decision(record: ApprovalRecord, decision: ApprovalDecision) -> list[Problem]:
    """What is wrong with ``decision`` as an answer to ``record`` (empty when nothing)."""
    where = f"approval {record.approval_id}"
    problems: list[Problem] = []

    def add(code: str, message: str) -> None:
        problems.append(Problem(code=code, where=where, message=message))

    if record.approved is not None:
        add("decided", "it has been answered already")
    _check_choice(record.subject, decision, add)
    text = decision.text
    if text is not None and not isinstance(text, str):
        add("text", "text must be text")
        text = None
    _check_text(record.subject, decision, text, add)
    if decision.checklist:
        _check_checklist(record, decision, add)
    if decision.edited_plan is not None and record.subject != "plan":
        add("edit", "only a plan can be edited")
    caps = decision.budget
    if caps is not None and record.subject != "budget":
        add("budget", "caps are raised only in answer to a budget question")
    elif record.subject == "budget":
        if decision.approved:
            problems += _raise_problems(record, caps, where)
        elif caps:
            add("budget", "a refusal raises no cap")
    _check_sizes(decision, text, add)
    return problems


def _check_choice(subject: str, decision: ApprovalDecision, add: _Add) -> None:
    """A choice answers only the questions that offer one, and those that do need one."""
    choices = _CHOICES_OF.get(subject, ())
    if decision.choice is not None and decision.choice not in choices:
        if choices:
            add("choice", f"a {subject} is answered with one of: {', '.join(choices)}")
        else:
            add("choice", "a choice answers only an uncertain effect or an escalation")
    if subject == "effect" and decision.approved and decision.choice is None:
        add("choice", "an uncertain effect needs a choice: retry, skip or done")
    if subject == "escalation" and decision.approved and decision.choice is None:
        add("choice", "an escalation needs a choice: guidance (with text) or replan; refuse it to stop the run")


def _check_text(subject: str, decision: ApprovalDecision, text: str | None, add: _Add) -> None:
    """Text answers a question, or gives guidance on an escalation; nothing else."""
    if subject == "question":
        if not decision.approved:
            add("text", "a question is answered, not refused: give the answer as text")
        elif text is None or not text.strip():
            add("text", "a question needs an answer (text)")
    elif subject == "escalation":
        if decision.choice == "guidance" and (text is None or not text.strip()):
            add("text", "guidance needs text")
        if decision.choice == "replan" and text is not None:
            add("text", "replan takes no text; give guidance instead")
    elif text is not None:
        add("text", "text answers only a question or gives guidance on an escalation")


def _check_checklist(record: ApprovalRecord, decision: ApprovalDecision, add: _Add) -> None:
    """A checklist answers the review of a final answer: each of its items once, each well formed."""
    if record.subject != "answer":
        add("checklist", "a checklist answers only the review of a final answer")
        return
    items = set(record.checklist)
    seen: set[str] = set()
    for result in decision.checklist:
        item = getattr(result, "item", None)
        if not isinstance(result, ChecklistResult):
            add("checklist", f"{type(result).__name__} is not a ChecklistResult(item=..., passed=...)")
            continue
        if type(result.passed) is not bool:
            add("checklist", f"{item!r}: passed must be True or False")
        if not isinstance(result.note, str):
            add("checklist", f"{item!r}: the note must be text")
        elif (note := json_problem(result.note, where="note")) is not None:
            add("checklist", f"{item!r}: the note is too long ({note.message})")
        if item not in items:
            add("checklist", f"{item!r} is not an item of the checklist")
        elif item in seen:
            add("checklist", f"{item!r} is answered twice")
        else:
            seen.add(item)
        if decision.approved and getattr(result, "passed", True) is not True:
            add("checklist", f"{item!r} failed, so the answer cannot be approved: refuse it")


def _check_sizes(decision: ApprovalDecision, text: str | None, add: _Add) -> None:
    """The answer's output, text, reason and name are JSON data the log can hold."""
    output = json_problem(decision.output, where="output")
    if output is not None:
        add("output", f"{output.where}: {output.message}")
    if text is not None:
        text_problem = json_problem(text, where="text")
        if text_problem is not None:
            add("text", text_problem.message)
    for name in ("reason", "by"):
        value = getattr(decision, name)
        if not isinstance(value, str):
            add(name, f"{name} must be text")
        elif (too_long := json_problem(value, where=name)) is not None:
            add(name, f"{name} is too long ({too_long.message})")


def _raise_problems(record: ApprovalRecord, caps: object, where: str) -> list[Problem]:
    """What is wrong with ``caps`` as the caps raised in answer to budget question ``record``."""
    problems: list[Problem] = []

    def add(message: str) -> None:
        problems.append(Problem(code="budget", where=where, message=message))

    if not isinstance(caps, Mapping) or not caps:
        add("a yes to a budget question gives the caps to raise: {name: new cap (None: no cap)}")
        return problems
    names = set(DEFAULT_BUDGET.as_dict())
    values: dict[str, Any] = {}
    for name, value in caps.items():
        if not isinstance(name, str) or name not in names:
            add(f"{name!r} is not a budget; one of: {', '.join(sorted(names))}")
            continue
        values[name] = value
    try:
        Budget(**values)
    except UsageError as e:
        for p in e.problems:
            add(f"{p.where}: {p.message}")
    hit = record.budget_hit
    name = record.budget
    if name is not None and not problems:
        if name not in values:
            add(f"the run reached its {name} cap: give a higher one (or None for no cap)")
        elif values[name] is not None and hit is not None and values[name] <= hit.used:
            add(f"{name}: {values[name]:g} is not above what the run has used ({hit.used:g})")
    return problems


def decided_event(approval_id: str, decision: ApprovalDecision, *, at: float) -> ApprovalDecided:
    """The ``approval_decided`` event that records ``decision``: the one way an answer is written,
    from this process or any other."""
    return ApprovalDecided(
        at=at,
        approval_id=approval_id,
        approved=decision.approved,
        by=decision.by,
        reason=decision.reason,
        choice=decision.choice,
        output=decision.output,
        edited_plan=decision.edited_plan,
        text=decision.text,
        checklist=tuple(decision.checklist),
        budget=dict(decision.budget) if decision.budget is not None else None,
    )


def refusal(reason: str) -> ApprovalDecision:
    """The approver's refusal, for ``reason`` (a broken approver never approves)."""
    return ApprovalDecision(approved=False, reason=reason, by="approver")


def recorded_decision(record: ApprovalRecord) -> ApprovalDecision:
    """The answer ``record`` holds, as the log records it."""
    return ApprovalDecision(
        approved=bool(record.approved),
        reason=record.decision_reason,
        by=record.by or "human",
        choice=record.choice,
        output=record.output,
        edited_plan=record.edited_plan,
        text=record.text,
        checklist=record.checklist_results,
        budget=record.raised,
    )
