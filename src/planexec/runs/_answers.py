"""Answering a run from any process: a human's answer to one of its questions, or something new
told to its planner. Each is checked against the run's log as it is now and appended after its
last event, reading what other writers added first and trying again when one gets in between."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from planexec._util.plural import counted
from planexec.errors import Problem, UsageError
from planexec.log import ApprovalRecord, Event, InformationAdded, RunStarted, RunState
from planexec.plan import CheckContext, Plan, check_steps, template_problems
from planexec.runs._problems import Problems
from planexec.runs._stored import check_run_id, load_run
from planexec.runtime import ApprovalDecision, Limits, check_decision, decided_event
from planexec.store import AppendConflict, RunStore, Told
from planexec.tools import Tool, ToolContext, Toolset
from planexec.views import about

__all__ = ["ATTEMPTS", "answer", "check_edited_plan", "pick_question", "question_about", "tell"]

ATTEMPTS = 5
"""Appends tried when other writers keep getting in first."""
MAX_TOLD_CHARS = Limits().max_output_chars
"""The longest text a run is told from outside (as from inside, by default)."""


question_about = about
"""What a question is about, in a few words."""


def pick_question(state: RunState, approval_id: str | None = None) -> ApprovalRecord:
    """The open question ``approval_id`` names, or the run's only open one when it names none;
    raises :class:`~planexec.UsageError` saying what stands in the way."""
    problems = Problems()
    rec = _pick(state, approval_id, problems)
    problems.raise_if_any(f"cannot answer run {state.run_id!r}")
    assert rec is not None
    return rec


def _pick(state: RunState, approval_id: str | None, problems: Problems) -> ApprovalRecord | None:
    pending = state.pending_approvals
    listing = "; ".join(f"{r.approval_id} ({question_about(r)})" for r in pending) or "none"
    if state.finished:
        problems.add(
            f"run {state.run_id}",
            f"it has finished ({state.stop}): its questions can no longer be answered",
            code="finished",
        )
        return None
    if approval_id is None:
        if len(pending) == 1:
            return pending[0]
        if not pending:
            problems.add("approval_id", f"run {state.run_id} waits for no answer", code="no_question")
        else:
            problems.add(
                "approval_id",
                f"run {state.run_id} waits for {counted(len(pending), 'answer')}; name one: {listing}",
                code="which_question",
            )
        return None
    rec = state.approvals.get(approval_id)
    if rec is None:
        problems.add(
            "approval_id", f"run {state.run_id} has no approval {approval_id!r} (open: {listing})", code="unknown"
        )
        return None
    if rec.approved is not None:
        verdict = "approved" if rec.approved else "rejected"
        problems.add(
            "approval_id", f"approval {approval_id} was answered already: {verdict} by {rec.by}", code="decided"
        )
        return None
    return rec


async def _never(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise UsageError("a tool rebuilt from a log only checks plans")


def _recorded_tools(specs: Sequence[Mapping[str, Any]], problems: list[Problem]) -> Toolset:
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
        except (KeyError, TypeError, AttributeError, UsageError) as e:
            problems.append(
                Problem(
                    code="log",
                    where="edited_plan",
                    message=f"the run's log records a tool that cannot be read back: {e}",
                )
            )
    return Toolset(*tools)


def check_edited_plan(plan: Plan, first: RunStarted, state: RunState) -> list[Problem]:
    """What is wrong with ``plan`` as an edit of the run's plan, checked as the run will check it:
    its unfinished steps against the tools, executors and predicates the run recorded, with the
    steps that finished and the step budget left (empty when nothing)."""
    problems: list[Problem] = []
    config = first.config
    specs = config.get("tools")
    if not isinstance(specs, list):
        message = "the run's log does not record its tools, so an edit cannot be checked"
        return [Problem(code="log", where="edited_plan", message=message)]
    finished = [sid for sid, rec in state.steps.items() if rec.status == "succeeded"]
    steps_budget = state.budget.get("steps")
    executors = config.get("executors", {"tools": "tools"})
    predicates = config.get("predicates")
    planner = config.get("planner")
    sealed = isinstance(planner, dict) and planner.get("sealed") is True
    extractor = planner.get("extractor") if sealed and isinstance(planner, dict) else None
    ctx = CheckContext(
        tools=_recorded_tools(specs, problems),
        executors=executors if isinstance(executors, dict) else {},
        default_executor=config.get("default_executor"),
        finished=finished,
        max_steps=None if steps_budget is None else int(steps_budget) - state.steps_started,
        predicates=predicates if isinstance(predicates, list) else None,
        sealed=sealed,
        extractors=(extractor,) if isinstance(extractor, str) else (),
    )
    todo = [s for s in plan.steps if s.id not in finished]
    found = check_steps(todo, ctx)
    if plan.answer is not None and not sealed:
        message = "only a sealed planner's plan carries an answer template (the planner writes this run's answer)"
        found.append(Problem(code="answer_template", where="answer", message=message))
    elif plan.answer is not None:
        found += template_problems(plan.answer, {*(s.id for s in todo), *finished})
    problems += [Problem(code=p.code, where="edited_plan", message=str(p)) for p in found]
    return problems


def _checks(
    state: RunState, first: RunStarted, approval_id: str | None, decision: object
) -> tuple[ApprovalRecord | None, Problems]:
    problems = Problems()
    rec = _pick(state, approval_id, problems)
    if not isinstance(decision, ApprovalDecision) or type(decision.approved) is not bool:
        problems.add(
            "decision", f"{decision!r} is not an ApprovalDecision(approved=True or False, ...)", code="decision"
        )
        return rec, problems
    if rec is not None:
        problems += check_decision(rec, decision)
        if decision.edited_plan is not None and rec.subject == "plan":
            if isinstance(decision.edited_plan, Plan):
                problems += check_edited_plan(decision.edited_plan, first, state)
            else:
                problems.add("edited_plan", f"is a {type(decision.edited_plan).__name__}, not a Plan")
    return rec, problems


async def _append(store: RunStore, run_id: str, log: list[Event], make: Any) -> RunState:
    """Append the event ``make(state)`` builds from the run's latest state (None: nothing to add)."""
    for _ in range(ATTEMPTS):
        last = await store.last_seq(run_id)
        if last > len(log):
            log += [s.event for s in await store.read(run_id, after=len(log))]
        state = RunState.fold(log)
        event = make(state)
        try:
            await store.append(run_id, [event], expected_seq=last)
        except AppendConflict:
            continue
        log.append(event)
        state.apply(event)
        return state
    raise UsageError(
        f"cannot write to run {run_id!r}",
        [
            Problem(
                code="busy", where=f"run {run_id}", message=f"its log kept changing while it was written ({ATTEMPTS}x)"
            )
        ],
    )


async def answer(
    store: RunStore,
    run_id: str,
    decision: ApprovalDecision,
    *,
    approval_id: str | None = None,
    log: list[Event] | None = None,
) -> RunState:
    """Answer a question ``run_id`` waits for (``approval_id``; None: its only open question) and
    return the run's state with the answer.

    The answer is checked as an answer in the running process would be (an edited plan with the
    plan's static checks against the tools the run recorded) and appended to the run's log: a
    process running the run picks it up; a suspended run goes on when resumed. Raises
    :class:`~planexec.UsageError` listing every problem. ``log``: the run's events already read
    (extended in place with what is read and written).
    """
    events = log if log is not None else await load_run(store, run_id)
    if not events or not isinstance(events[0], RunStarted):
        events[:] = await load_run(store, run_id)
    first = events[0]
    assert isinstance(first, RunStarted)
    rec, problems = _checks(RunState.fold(events), first, approval_id, decision)
    problems.raise_if_any(f"cannot answer run {run_id!r}")
    assert rec is not None

    def make(state: RunState) -> Event:
        now = state.approvals[rec.approval_id]
        if now.approved is not None or state.finished:
            what = f"answered meanwhile by {now.by}" if now.approved is not None else f"ended meanwhile ({state.stop})"
            raise UsageError(
                f"cannot answer run {run_id!r}",
                [Problem(code="conflict", where="approval_id", message=f"approval {rec.approval_id}: the run {what}")],
            )
        return decided_event(rec.approval_id, decision, at=time.time())

    return await _append(store, run_id, events, make)


async def _tell_queued(store: RunStore, run_id: str, text: str, *, constraint: bool, by: str) -> RunState | None:
    """A run submitted to workers that none has begun keeps what it is told in its queue row: the
    worker that begins it has it heard first. Its state then (running, nothing logged yet), or None
    when the run has a log, or is not such a run."""
    queue = store.queue()
    if queue is None or await store.last_seq(run_id) > 0:
        return None
    if not await queue.tell(run_id, Told(text=text, constraint=constraint, by=by)):
        return None
    return RunState(run_id=run_id)


BEGIN_WAIT = 10.0
"""Seconds ``tell`` waits for the first events of a submitted run a worker has just claimed."""


async def _log_once_begun(store: RunStore, run_id: str) -> list[Event]:
    """The run's log; for a run a worker has claimed but not begun logging yet, once it has (within
    ``BEGIN_WAIT`` seconds)."""
    try:
        return await load_run(store, run_id)
    except UsageError as e:
        queue = store.queue()
        if queue is None or not any(p.code == "unknown_run" for p in e.problems):
            raise
        entry = await queue.entry(run_id)
        if entry is None or entry.state != "leased":
            raise
        await store.wait_for_events(run_id, after=0, within=BEGIN_WAIT)  # another process writes it
        return await load_run(store, run_id)


async def tell(
    store: RunStore,
    run_id: str,
    text: str,
    *,
    constraint: bool = False,
    by: str = "user",
    log: list[Event] | None = None,
) -> RunState:
    """Tell run ``run_id`` something new, or a new constraint: its planner replans with it at the
    next safe point, keeping the work done. Appended to the run's log (a process running the run
    reads it when it next writes); returns the run's state with it."""
    check_run_id(run_id)
    problems = Problems()
    if not isinstance(text, str) or not text.strip():
        problems.add("text", "must be non-empty text", code="tell")
    elif len(text) > MAX_TOLD_CHARS:
        problems.add("text", f"is longer than {MAX_TOLD_CHARS:,} characters", code="tell")
    if not isinstance(by, str) or not by.strip():
        problems.add("by", "must be non-empty text", code="tell")
    if type(constraint) is not bool:
        problems.add("constraint", "must be True or False", code="tell")
    problems.raise_if_any(f"cannot tell run {run_id!r}")
    if log is None:
        queued = await _tell_queued(store, run_id, text, constraint=constraint, by=by)
        if queued is not None:
            return queued
    events = log if log is not None else await _log_once_begun(store, run_id)

    def make(state: RunState) -> Event:
        if state.finished:
            raise UsageError(
                f"cannot tell run {run_id!r}",
                [
                    Problem(
                        code="finished",
                        where=f"run {run_id}",
                        message=f"it has finished ({state.stop}): it can no longer be told",
                    )
                ],
            )
        return InformationAdded(at=time.time(), text=text, by=by, constraint=constraint)

    return await _append(store, run_id, events, make)
