"""A human's answer as the command line gives it: the flags read and checked against the question
(an edited plan goes through the plan's static checks against the tools the run recorded), each
problem under the flag that gave it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pydantic

from planexec._util.strict_json import MAX_CHARS, MAX_DEPTH, JSONRefused
from planexec._util.strict_json import loads as strict_loads
from planexec.cli._options import Problems
from planexec.log import ApprovalRecord, ChecklistResult, RunStarted, RunState
from planexec.plan import Plan
from planexec.runs import check_edited_plan
from planexec.runtime import ApprovalDecision
from planexec.views import about

__all__ = ["check_answer", "load_edit", "parse_choice_flag", "parse_failed_items", "parse_output", "parse_raises"]

EffectChoice = Literal["retry", "skip", "done", "guidance", "replan"]
CHOICES: tuple[EffectChoice, ...] = ("retry", "skip", "done", "guidance", "replan")
CHOICES_OF: dict[str, tuple[str, ...]] = {"effect": ("retry", "skip", "done"), "escalation": ("guidance", "replan")}


def parse_choice_flag(raw: str | None, problems: Problems) -> EffectChoice | None:
    if raw is None:
        return None
    if raw in CHOICES:
        return raw
    problems.add("--choice", f"{raw!r} is not one of {', '.join(CHOICES)}")
    return None


def parse_output(raw: str | None, problems: Problems) -> Any:
    """The ``--output`` JSON text as data."""
    if raw is None:
        return None
    try:
        return strict_loads(raw, max_chars=MAX_CHARS)
    except JSONRefused as e:
        problems.add("--output", f"not JSON: {e.problem.message}")
        return None


_CAP = re.compile(r"\s*([a-z_]{1,32})\s*=\s*(\S{1,40})\s*")


def parse_raises(raw: tuple[str, ...], problems: Problems) -> dict[str, float | int | None] | None:
    """``--raise NAME=CAP`` flags (CAP a number, or ``none`` for no cap) as the caps to raise."""
    if not raw:
        return None
    caps: dict[str, float | int | None] = {}
    for flag in raw:
        match = _CAP.fullmatch(flag)
        if match is None:
            problems.add("--raise", f"{flag!r}: give NAME=CAP, e.g. cost=2.5 or tool_calls=200 (none: no cap)")
            continue
        name, value = match.groups()
        if name in caps:
            problems.add("--raise", f"{name} is raised twice")
        if value.lower() == "none":
            caps[name] = None
            continue
        try:
            number = float(value)
        except ValueError:
            problems.add("--raise", f"{flag!r}: {value!r} is not a number (or none)")
            continue
        caps[name] = int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number
    return caps


def check_answer(
    rec: ApprovalRecord | None, answer: ApprovalDecision, *, output_given: bool, edit_given: bool, problems: Problems
) -> None:
    """What does not fit the question: a choice it does not take, an edit for anything but a plan,
    an effect or escalation approved without a choice, an output without ``--choice done``, text
    for anything but a question or guidance."""
    if output_given and answer.choice != "done":
        problems.add("--output", "gives the output of a step marked done: use it with --choice done")
    if rec is None:
        return
    subject = rec.subject
    choices = CHOICES_OF.get(subject, ())
    if subject in CHOICES_OF and answer.approved and answer.choice is None:
        problems.add("--choice", f"approval {rec.approval_id} is about {about(rec)}: choose {_either(choices)}")
    if answer.choice is not None and answer.choice not in choices:
        what = f"choose {_either(choices)}" if choices else "it takes no choice"
        problems.add("--choice", f"approval {rec.approval_id} is about {about(rec)}: {what}")
    if subject == "escalation" and answer.choice == "guidance" and not (answer.text or "").strip():
        problems.add("--text", "guidance needs text: --text '...'")
    if answer.text is not None and subject not in ("question", "escalation"):
        problems.add(
            "--text", f"answers only a question or gives guidance; approval {rec.approval_id} is about {about(rec)}"
        )
    if subject == "question" and not (answer.text or "").strip():
        problems.add("TEXT", f"approval {rec.approval_id} is a question: answer it with `planexec answer`")
    if answer.checklist and subject != "answer":
        problems.add("--fail", f"only a final answer has a checklist; approval {rec.approval_id} is about {about(rec)}")
    if subject != "plan" and edit_given:
        problems.add("--edit", f"only a plan can be edited; approval {rec.approval_id} is about {about(rec)}")
    if subject == "budget" and answer.approved and not answer.budget:
        problems.add("--raise", f"approval {rec.approval_id} is about {about(rec)}: give the caps, --raise NAME=CAP")
    elif subject != "budget" and answer.budget is not None:
        problems.add(
            "--raise", f"raises caps only for a budget question; approval {rec.approval_id} is about {about(rec)}"
        )


def _either(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else "".join(choices)


_NUMBER = re.compile(r"\s*[0-9]{1,9}\s*")
"""An item's number in ``--fail N=NOTE``: ASCII digits only (``str.isdigit`` also takes ``²``,
which ``int`` refuses)."""


def parse_failed_items(
    raw: tuple[str, ...], rec: ApprovalRecord | None, problems: Problems
) -> tuple[ChecklistResult, ...]:
    """``--fail N=NOTE`` flags (N counts the checklist's items from 1) as checklist results: the
    items named fail, every other item passes."""
    if rec is None or rec.subject != "answer":
        if raw:
            problems.add("--fail", "fails items of a final answer's checklist only")
        return ()
    items = rec.checklist
    failed: dict[str, str] = {}
    for flag in raw:
        number, _, note = flag.partition("=")
        if not _NUMBER.fullmatch(number) or not 1 <= int(number) <= len(items):
            problems.add("--fail", f"{flag!r}: give N=NOTE with N from 1 to {len(items)}")
            continue
        item = items[int(number) - 1]
        if item in failed:
            problems.add("--fail", f"item {number} is failed twice")
        failed[item] = note.strip()
    return tuple(ChecklistResult(item=i, passed=i not in failed, note=failed.get(i, "")) for i in items)


# -- an edited plan ---------------------------------------------------------------------------


MAX_PLAN_BYTES = 8 * 1024 * 1024
"""The largest edited plan read."""


def _read_plan(path: Path, problems: Problems) -> Plan | None:
    flag = f"--edit {str(path)!r}"
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_PLAN_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        problems.add(flag, f"cannot read it: {getattr(e, 'strerror', None) or e}")
        return None
    if len(raw) > MAX_PLAN_BYTES:
        problems.add(flag, f"is larger than {MAX_PLAN_BYTES:,} bytes, the most a plan may be")
        return None
    try:
        data = strict_loads(text, max_depth=MAX_DEPTH + 5)
    except JSONRefused as e:
        problems.add(flag, f"not JSON: {e.problem.message}")
        return None
    try:
        return Plan.model_validate(data)
    except pydantic.ValidationError as e:
        for error in e.errors():
            where = ".".join(str(p) for p in error["loc"]) or "plan"
            problems.add(flag, f"{where}: {error['msg']}")
        return None


def load_edit(path: Path, first: RunStarted, state: RunState, problems: Problems) -> Plan | None:
    """The plan in ``path``, checked as the run will check it (see
    :func:`planexec.runs.check_edited_plan`). Every problem is added to ``problems``."""
    plan = _read_plan(path, problems)
    if plan is None:
        return None
    found = check_edited_plan(plan, first, state)
    for p in found:
        problems.add(f"--edit {str(path)!r}", p.message)
    return None if found else plan
