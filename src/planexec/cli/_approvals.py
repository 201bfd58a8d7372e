"""``planexec approvals``, ``approve`` and ``reject``: the questions runs wait for, and answering
them from any process. An answer is appended to the run's log; a suspended run that waits for
nothing else is then resumed here, as ``planexec resume`` would — or, when it was submitted to
workers, given back to their queue."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from planexec.cli._agent_options import AgentFlags, live_options
from planexec.cli._answer_flags import (
    check_answer,
    load_edit,
    parse_choice_flag,
    parse_failed_items,
    parse_output,
    parse_raises,
)
from planexec.cli._common import View, make_console, run_command
from planexec.cli._finish import waiting_lines
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._questions import answer_commands, question_json, question_panel
from planexec.cli._report import json_text
from planexec.cli._resume import load_log, resume_run
from planexec.cli._store_options import StoreChoice, store_choice, store_flag, using_store
from planexec.cli._telemetry import TelemetryFlags, run_observed, telemetry_options
from planexec.cli._text import plain
from planexec.errors import UsageError
from planexec.log import ApprovalRecord, ChecklistResult, RunStarted, RunState
from planexec.runs import answer as record_answer
from planexec.runs import give_back, open_questions, pick_question, question_about, worker_entry
from planexec.runs import tell as tell_run
from planexec.runtime import ApprovalDecision
from planexec.store import RunStore
from planexec.views import question_view

__all__ = ["answer", "approvals", "approve", "reject", "tell"]

MakeAnswer = Callable[[RunStarted, RunState, ApprovalRecord | None, Problems], ApprovalDecision]


def _default_by() -> str:
    try:
        return getpass.getuser() or "cli"
    except Exception:  # no user name in this environment
        return "cli"


# -- listing ----------------------------------------------------------------------------------


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the questions as a JSON list.")
@global_options()
@click.pass_context
def approvals(ctx: click.Context, as_json: bool) -> None:
    """List the questions unfinished runs wait for: plans, steps and uncertain effects to approve."""
    run_command(ctx, _list(store_choice(ctx), as_json))


async def _list(choice: StoreChoice, as_json: bool) -> int:
    async with using_store(choice) as store:
        questions = await open_questions(store)
    if as_json:
        click.echo(json_text([question_json(view, choice=choice) for view in questions]))
        return 0
    console = make_console(as_json=False)
    if not questions:
        console.print("no run waits for an answer", markup=False)
        return 0
    console.print(Text(f"open questions ({len(questions)}), oldest first", style="bold"))
    for view in questions:
        console.print(question_panel(view, commands=answer_commands(choice, view)))
    return 0


# -- answering --------------------------------------------------------------------------------


async def _decide(
    choice: StoreChoice, run_id: str, approval_id: str | None, make: MakeAnswer, *, resume: bool, view: View
) -> int:
    async with using_store(choice) as store:
        log = await load_log(store, run_id, choice)
        first = log[0]
        assert isinstance(first, RunStarted)  # load_log checked it
        state = RunState.fold(log)
        problems = Problems()
        rec = None
        try:
            rec = pick_question(state, approval_id)
        except UsageError as e:
            problems.add_problems(e.problems)
        answer = make(first, state, rec, problems)
        if problems or rec is None:
            raise Refused(problems)
        try:
            state = await record_answer(store, run_id, answer, approval_id=rec.approval_id, log=log)
        except UsageError as e:
            problems.add_problems(e.problems)
            raise Refused(problems) from None
        answered = state.approvals[rec.approval_id]
        verdict = "approved" if answer.approved else "rejected"
        extra = f" ({answer.choice})" if answer.choice else " with an edited plan" if answer.edited_plan else ""
        click.echo(
            plain(f"approval {rec.approval_id} ({question_about(rec)}) {verdict}{extra} by {answer.by}"),
            err=view.as_json,
        )
        others = state.pending_approvals
        requeued = False
        if resume and not others and state.status == "waiting":
            requeued = await _given_back(store, run_id, view)
            if not requeued:
                try:
                    return await resume_run(store, choice, log, AgentFlags(), view)
                except Refused as e:
                    first_line = f"run {run_id}: the answer is recorded, but the run cannot be resumed here"
                    raise Refused(Problems([first_line, *e.problems])) from None
    if view.as_json:
        answered_json = question_json(question_view(state, answered, run_id=run_id))
        click.echo(json_text({"answered": answered_json, "resumed": False, "requeued": requeued}))
    if requeued:
        return 0
    if others:
        for line in waiting_lines(choice, run_id, [question_view(state, rec, run_id=run_id) for rec in others]):
            click.echo(plain(line), err=view.as_json)
    elif resume and state.status == "running":
        click.echo(
            f"run {run_id} is not suspended: a process running it reads the answer from the store; "
            f"if none does, go on with `planexec {store_flag(choice)}resume {run_id}`",
            err=True,
        )
    elif not resume:
        click.echo(f"go on with: planexec {store_flag(choice)}resume {run_id}", err=view.as_json)
    return 0


async def _given_back(store: RunStore, run_id: str, view: View) -> bool:
    """Give a run the workers left waiting back to them (it goes on on a worker, not here)."""
    if not await give_back(store, run_id):
        return False
    click.echo(plain(f"run {run_id}: given back to the workers (queued)"), err=view.as_json)
    return True


def _resume_option() -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(
        "--resume/--no-resume",
        default=True,
        show_default=True,
        help="Go on with the run when it is suspended and waits for nothing else: here, or on the workers "
        "when it was submitted to them (--no-resume: only record).",
    )


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("approval_id", metavar="[ID]", required=False)
@click.option(
    "--edit",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PLAN.json",
    help="Approve this plan instead (a Plan as JSON, see `planexec schema`); checked before it is recorded.",
)
@click.option(
    "--choice",
    metavar="[retry|skip|done|guidance|replan]",
    help="For an uncertain effect: call again, skip, or mark done; for an escalation: give guidance (with --text) "
    "or let the planner try again.",
)
@click.option("--text", default=None, help="With --choice guidance: the guidance the planner is given.")
@click.option("--output", "output_json", metavar="JSON", help="With --choice done: the step's output, as JSON.")
@click.option(
    "--raise",
    "raises",
    multiple=True,
    metavar="NAME=CAP",
    help="For a budget question: a cap to raise (cost=2.5, tool_calls=200; none: no cap). Repeatable; the cap "
    "the run reached must be among them.",
)
@click.option("--reason", default="", help="Why (recorded with the answer).")
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: the user name).")
@_resume_option()
@live_options
@telemetry_options
@global_options()
@click.pass_context
def approve(
    ctx: click.Context,
    /,
    run_id: str,
    approval_id: str | None,
    edit: Path | None,
    choice: str | None,
    text: str | None,
    output_json: str | None,
    raises: tuple[str, ...],
    reason: str,
    by: str | None,
    resume: bool,
    no_live: bool,
    no_input: bool,
    as_json: bool,
    **observed: Any,
) -> None:
    """Approve question ID of RUN (with no ID: its only open question).

    An escalation (the planner could not go on) needs --choice guidance --text '...' or --choice
    replan; a step's result under review is accepted; a final answer under review is approved with
    every item of its checklist ticked.

    A budget question (the run reached a cap) is approved with the caps raised (--raise NAME=CAP,
    repeatable): the run goes on where it stopped; rejecting it ends the run budget_exhausted.

    A plan may be approved as edited (--edit): the edit is checked with the plan's static checks
    against the tools the run recorded, and becomes a plan version authored by a human. An
    uncertain effect (a side-effecting call under way when a process stopped) needs --choice.
    The answer is appended to the run's log; then, when the run is suspended and waits for
    nothing else, it is resumed here (exit status as `planexec run`), or given back to the
    workers when it was submitted to them.
    """

    def make(first: RunStarted, state: RunState, rec: ApprovalRecord | None, problems: Problems) -> ApprovalDecision:
        chosen = parse_choice_flag(choice, problems)
        output = parse_output(output_json, problems)
        edited = load_edit(edit, first, state, problems) if edit is not None else None
        ticked = tuple(ChecklistResult(item=i, passed=True) for i in rec.checklist) if rec is not None else ()
        answer = ApprovalDecision(
            approved=True,
            reason=reason,
            by=by or _default_by(),
            choice=chosen,
            output=output,
            edited_plan=edited,
            text=text,
            checklist=ticked,
            budget=parse_raises(raises, problems),
        )
        check_answer(rec, answer, output_given=output_json is not None, edit_given=edit is not None, problems=problems)
        return answer

    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_observed(
        ctx,
        TelemetryFlags.take(observed),
        _decide(store_choice(ctx), run_id, approval_id, make, resume=resume, view=view),
    )


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("approval_id", metavar="ID")
@click.option("--reason", required=True, help="Why (recorded with the answer).")
@click.option(
    "--fail",
    "failed",
    multiple=True,
    metavar="N=NOTE",
    help="For a final answer: item N of its checklist (from 1) failed, and why. Repeatable.",
)
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: the user name).")
@_resume_option()
@live_options
@telemetry_options
@global_options()
@click.pass_context
def reject(
    ctx: click.Context,
    /,
    run_id: str,
    approval_id: str,
    reason: str,
    failed: tuple[str, ...],
    by: str | None,
    resume: bool,
    no_live: bool,
    no_input: bool,
    as_json: bool,
    **observed: Any,
) -> None:
    """Reject question ID of RUN: the plan or step is not run, an escalation stops the run, a
    step's result under review fails (the planner patches), a final answer goes back to the
    planner with the reason and the failed checklist items (--fail N=NOTE).

    The answer is appended to the run's log; then, when the run is suspended and waits for
    nothing else, it is resumed here (or given back to the workers, when it was submitted to
    them) and goes on from the rejection (a rejected plan or step stops the run as rejected).
    """

    def make(first: RunStarted, state: RunState, rec: ApprovalRecord | None, problems: Problems) -> ApprovalDecision:
        if not reason.strip():
            problems.add("--reason", "say why the answer is no")
        checklist = parse_failed_items(failed, rec, problems)
        answer = ApprovalDecision(approved=False, reason=reason, by=by or _default_by(), checklist=checklist)
        check_answer(rec, answer, output_given=False, edit_given=False, problems=problems)
        return answer

    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_observed(
        ctx,
        TelemetryFlags.take(observed),
        _decide(store_choice(ctx), run_id, approval_id, make, resume=resume, view=view),
    )


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("approval_id", metavar="ID")
@click.argument("text", metavar="TEXT")
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: the user name).")
@_resume_option()
@live_options
@telemetry_options
@global_options()
@click.pass_context
def answer(
    ctx: click.Context,
    /,
    run_id: str,
    approval_id: str,
    text: str,
    by: str | None,
    resume: bool,
    no_live: bool,
    no_input: bool,
    as_json: bool,
    **observed: Any,
) -> None:
    """Answer the planner's question ID of RUN with TEXT (for an escalation: TEXT is guidance).

    The answer is appended to the run's log and becomes part of what the planner is told; then,
    when the run is suspended and waits for nothing else, it is resumed here (or given back to
    the workers, when it was submitted to them).
    """

    def make(first: RunStarted, state: RunState, rec: ApprovalRecord | None, problems: Problems) -> ApprovalDecision:
        if not text.strip():
            problems.add("TEXT", "the answer is empty")
        if rec is not None and rec.subject not in ("question", "escalation"):
            problems.add(
                "ID", f"approval {rec.approval_id} is about {question_about(rec)}: answer it with approve or reject"
            )
        choice = "guidance" if rec is not None and rec.subject == "escalation" else None
        return ApprovalDecision(approved=True, by=by or _default_by(), text=text, choice=choice)  # type: ignore[arg-type]

    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_observed(
        ctx,
        TelemetryFlags.take(observed),
        _decide(store_choice(ctx), run_id, approval_id, make, resume=resume, view=view),
    )


@click.command()
@click.argument("run_id", metavar="RUN")
@click.argument("text", metavar="TEXT")
@click.option("--constraint", is_flag=True, help="TEXT is a constraint the plan must meet from now on.")
@click.option("--by", default=None, metavar="NAME", help="Who tells (default: the user name).")
@_resume_option()
@live_options
@telemetry_options
@global_options()
@click.pass_context
def tell(
    ctx: click.Context,
    /,
    run_id: str,
    text: str,
    constraint: bool,
    by: str | None,
    resume: bool,
    no_live: bool,
    no_input: bool,
    as_json: bool,
    **observed: Any,
) -> None:
    """Tell RUN something new, or change a constraint (--constraint): the planner replans with it
    at the next safe point, keeping the work already done.

    It is appended to the run's log: a process running the run reads it when it next writes; a
    suspended run is resumed here, or given back to the workers when it was submitted to them
    (--no-resume: only record it).
    """
    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_observed(
        ctx,
        TelemetryFlags.take(observed),
        _tell(store_choice(ctx), run_id, text, constraint, by or _default_by(), resume=resume, view=view),
    )


async def _tell(
    choice: StoreChoice, run_id: str, text: str, constraint: bool, by: str, *, resume: bool, view: View
) -> int:
    if not text.strip():
        raise Refused(Problems.of("TEXT", "is empty"))
    async with using_store(choice) as store:
        if await store.last_seq(run_id) == 0 and await worker_entry(store, run_id) is not None:
            return await _tell_queued(store, choice, run_id, text, constraint, by, view)
        log = await load_log(store, run_id, choice)
        try:
            state = await tell_run(store, run_id, text, constraint=constraint, by=by, log=log)
        except UsageError as e:
            problems = Problems()
            problems.add_problems(e.problems)
            raise Refused(problems) from None
        what = "constraint" if constraint else "information"
        click.echo(plain(f"run {run_id}: {what} recorded"), err=view.as_json)
        requeued = False
        if resume and state.status == "waiting":
            if await worker_entry(store, run_id) is not None:  # the workers' run: never resumed here
                requeued = await _given_back(store, run_id, view)  # not while a question waits
            else:
                return await resume_run(store, choice, log, AgentFlags(), view)
    if requeued:
        if view.as_json:
            click.echo(json_text({"told": run_id, "resumed": False, "requeued": True}))
        return 0
    if state.status == "running":
        click.echo(
            f"run {run_id} is not suspended: a process running it reads this when it next writes its log; "
            f"if none does, go on with `planexec {store_flag(choice)}resume {run_id}`",
            err=True,
        )
    elif not resume:
        click.echo(f"go on with: planexec {store_flag(choice)}resume {run_id}", err=view.as_json)
    if view.as_json:
        click.echo(json_text({"told": run_id, "resumed": False, "requeued": False}))
    return 0


async def _tell_queued(
    store: RunStore, choice: StoreChoice, run_id: str, text: str, constraint: bool, by: str, view: View
) -> int:
    """Tell a run submitted to the workers that has no log yet: kept with it in their queue and
    heard first when a worker begins it (or, when one has just begun it, added to its log)."""
    try:
        await tell_run(store, run_id, text, constraint=constraint, by=by)
    except UsageError as e:
        problems = Problems()
        problems.add_problems(e.problems)
        raise Refused(problems) from None
    what = "constraint" if constraint else "information"
    click.echo(
        plain(f"run {run_id}: {what} recorded; queued for the workers, it hears it when one begins it"),
        err=view.as_json,
    )
    if view.as_json:
        click.echo(json_text({"told": run_id, "resumed": False, "requeued": False, "queued": True}))
    return 0
