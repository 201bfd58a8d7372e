"""Answering a run's question from the command line: choose the question, check the answer (an
edited plan goes through the plan's static checks against the tools the run recorded), and append
it to the run's log after its last event."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic

from planexec._util.plural import counted
from planexec._util.strict_json import MAX_CHARS, MAX_DEPTH, _JSONRefused
from planexec._util.strict_json import loads as strict_loads
from planexec.cli._options import Problems, Refused
from planexec.cli._questions import about
from planexec.errors import UsageError
from planexec.log import ApprovalDecided, ApprovalRecord, ChecklistResult, Event, RunStarted, RunState
from planexec.plan import CheckContext, Plan, check_steps
from planexec.store import AppendConflict, RunStore
from planexec.tools import Tool, ToolContext, Toolset

__all__ = [
    "Answer",
    "check_answer",
    "load_edit",
    "parse_choice_flag",
    "parse_failed_items",
    "parse_output",
    "pick_question",
    "record_answer",
]

EffectChoice = Literal["retry", "skip", "done", "guidance", "replan"]
CHOICES: tuple[EffectChoice, ...] = ("retry", "skip", "done", "guidance", "replan")
CHOICES_OF: dict[str, tuple[str, ...]] = {"effect": ("retry", "skip", "done"), "escalation": ("guidance", "replan")}
ATTEMPTS = 5
"""Appends tried when other writers keep getting in first."""


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A human's answer, as the command line gives it."""

    approved: bool
    reason: str = ""
    by: str = "human"
    choice: EffectChoice | None = None
    output: Any = None
    edited_plan: Plan | None = None
    text: str | None = None
    checklist: tuple[ChecklistResult, ...] = ()


def pick_question(state: RunState, approval_id: str | None, problems: Problems) -> ApprovalRecord | None:
    """The question ``approval_id`` names, or the run's only open one when it names none."""
    pending = state.pending_approvals
    listing = "; ".join(f"{r.approval_id} ({about(r)})" for r in pending) or "none"
    if state.finished:
        problems.add(f"run {state.run_id}", f"it has finished ({state.stop}): its questions can no longer be answered")
        return None
    if approval_id is None:
        if len(pending) == 1:
            return pending[0]
        if not pending:
            problems.add("ID", f"run {state.run_id} waits for no answer")
        else:
            problems.add("ID", f"run {state.run_id} waits for {counted(len(pending), 'answer')}; name one: {listing}")
        return None
    rec = state.approvals.get(approval_id)
    if rec is None:
        problems.add("ID", f"run {state.run_id} has no approval {approval_id!r} (open: {listing})")
        return None
    if rec.approved is not None:
        verdict = "approved" if rec.approved else "rejected"
        problems.add("ID", f"approval {approval_id} was answered already: {verdict} by {rec.by}")
        return None
    return rec


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
    except _JSONRefused as e:
        problems.add("--output", f"not JSON: {e.problem.message}")
        return None


def check_answer(
    rec: ApprovalRecord | None, answer: Answer, *, output_given: bool, edit_given: bool, problems: Problems
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
    except _JSONRefused as e:
        problems.add(flag, f"not JSON: {e.problem.message}")
        return None
    try:
        return Plan.model_validate(data)
    except pydantic.ValidationError as e:
        for error in e.errors():
            where = ".".join(str(p) for p in error["loc"]) or "plan"
            problems.add(flag, f"{where}: {error['msg']}")
        return None


async def _never(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise UsageError("a tool rebuilt from a log only checks plans")


def _recorded_tools(specs: Sequence[Mapping[str, Any]], problems: Problems) -> Toolset:
    tools = []
    for spec in specs:
        try:
            tools.append(
                Tool(
                    name=spec["name"],
                    description=spec.get("description") or spec["name"],
                    parameters=spec.get("parameters") or {"type": "object"},
                    invoke=_never,
                    output_schema=spec.get("output_schema"),
                    side_effect=bool(spec.get("side_effect", False)),
                    sensitive=bool(spec.get("sensitive", False)),
                    idempotent=bool(spec.get("idempotent", False)),
                )
            )
        except (KeyError, TypeError, UsageError) as e:
            problems.add("--edit", f"the run's log records a tool that cannot be read back: {e}")
    return Toolset(*tools)


def load_edit(path: Path, first: RunStarted, state: RunState, problems: Problems) -> Plan | None:
    """The plan in ``path``, checked as the run will check it: its unfinished steps against the
    tools, executors and predicates the run recorded, with the steps that finished and the step
    budget left. Every problem is added to ``problems``."""
    plan = _read_plan(path, problems)
    if plan is None:
        return None
    config = first.config
    specs = config.get("tools")
    if not isinstance(specs, list):
        problems.add("--edit", "the run's log does not record its tools, so an edit cannot be checked")
        return None
    finished = [sid for sid, rec in state.steps.items() if rec.status == "succeeded"]
    steps_budget = state.budget.get("steps")
    executors = config.get("executors", {"tools": "tools"})
    predicates = config.get("predicates")
    ctx = CheckContext(
        tools=_recorded_tools(specs, problems),
        executors=executors if isinstance(executors, dict) else {},
        default_executor=config.get("default_executor"),
        finished=finished,
        max_steps=None if steps_budget is None else int(steps_budget) - state.steps_started,
        predicates=predicates if isinstance(predicates, list) else None,
    )
    todo = [s for s in plan.steps if s.id not in finished]
    found = check_steps(todo, ctx)
    for p in found:
        problems.add(f"--edit {str(path)!r}", str(p))
    return None if found else plan


# -- writing the answer -----------------------------------------------------------------------


async def record_answer(store: RunStore, run_id: str, approval_id: str, answer: Answer, log: list[Event]) -> RunState:
    """Append the answer after the log's last event (reading what other writers added first, and
    trying again when one gets in between); return the run's state with it."""
    for _ in range(ATTEMPTS):
        last = await store.last_seq(run_id)
        if last > len(log):
            log += [s.event for s in await store.read(run_id, after=len(log))]
        state = RunState.fold(log)
        rec = state.approvals[approval_id]
        if rec.approved is not None or state.finished:
            what = f"answered meanwhile by {rec.by}" if rec.approved is not None else f"ended meanwhile ({state.stop})"
            raise Refused(Problems.of("ID", f"approval {approval_id}: the run {what}"))
        event = ApprovalDecided(
            at=time.time(),
            approval_id=approval_id,
            approved=answer.approved,
            by=answer.by,
            reason=answer.reason,
            choice=answer.choice,
            output=answer.output,
            edited_plan=answer.edited_plan,
            text=answer.text,
            checklist=answer.checklist,
        )
        try:
            await store.append(run_id, [event], expected_seq=last)
        except AppendConflict:
            continue
        log.append(event)
        state.apply(event)
        return state
    raise Refused(Problems.of(f"run {run_id}", f"its log kept changing while the answer was written ({ATTEMPTS}x)"))
