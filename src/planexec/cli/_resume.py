"""``planexec resume RUN``: pick a run up from its log and go on with it, the agent rebuilt from
what ``planexec run`` recorded (flags override it for this resume)."""

from __future__ import annotations

from typing import Any

import click

from planexec._util.plural import counted
from planexec.cli import _approve
from planexec.cli._agent_options import AgentFlags, agent_options, live_options
from planexec.cli._common import EXIT_WAITING, View, follow_to_end, run_command, say
from planexec.cli._finish import report_result, waiting_lines
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._rebuild import build_agent, recorded_spec
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.cli._text import plain, redactor_of
from planexec.errors import LogUnreadable, UsageError
from planexec.log import Event, RunResult, RunStarted, RunState
from planexec.store import RunStore, StoredEvent

__all__ = ["load_log", "read_log", "resume", "resume_run"]


async def load_log(store: RunStore, run_id: str, choice: StoreChoice, problems: Problems | None = None) -> list[Event]:
    """The run's events, every one of them readable; an unknown run, a log that does not begin a run
    or a log with events that cannot be read is a problem (exit status 2)."""
    problems = problems if problems is not None else Problems()
    log, unreadable = await read_log(store, run_id)
    if unreadable:
        problems += unreadable
        problems.add("RUN", f"`planexec show {run_id}` shows the {counted(len(log), 'event')} that can be read")
    elif not log:
        problems.add("RUN", f"no run {run_id!r} in {choice.describe()} (`planexec runs` lists them)")
    elif not isinstance(log[0], RunStarted):
        problems.add("RUN", f"the log of run {run_id!r} does not begin with run_started")
    if problems:
        raise Refused(problems)
    return log


async def read_log(store: RunStore, run_id: str) -> tuple[list[Event], list[str]]:
    """Every event of the run that can be read, and a line for each one that cannot."""
    try:
        return [s.event for s in await store.read(run_id)], []
    except LogUnreadable as e:
        readable = [s.event if isinstance(s, StoredEvent) else s for s in e.events]
        return readable, [plain(f"run {run_id}: {p}") for p in e.problems]


def _still_waiting(state: RunState) -> bool:
    """Suspended, and not one of the questions it stopped for has been answered since."""
    suspended = state.suspended
    if suspended is None or not suspended.approvals:
        return False
    return all((rec := state.approvals.get(a)) is not None and rec.approved is None for a in suspended.approvals)


async def resume_run(store: RunStore, choice: StoreChoice, log: list[Event], flags: AgentFlags, view: View) -> int:
    """Rebuild the agent and go on with the run whose events are ``log``; return the exit status."""
    first = log[0]
    assert isinstance(first, RunStarted)  # load_log checked it
    run_id = first.run_id
    state = RunState.fold(log)
    if state.finished:
        click.echo(plain(f"run {run_id} has finished already: {state.stop}"), err=True)
        return report_result(view, RunResult.from_state(state, log), choice, store)
    if _still_waiting(state) and (view.no_input or not _approve.is_interactive(view.console)):
        for line in waiting_lines(choice, run_id, state.pending_approvals):
            click.echo(plain(line), err=view.as_json)
        return EXIT_WAITING
    problems = Problems()
    recorded, has_record = await recorded_spec(store, first, problems)
    spec = recorded.with_flags(flags)
    approvals = _approve.approvals_for(
        view.console, view.display, no_input=view.no_input, plan=spec.approve_plan, redactor=redactor_of(store)
    )
    agent = build_agent(
        spec,
        store=store,
        approvals=approvals,
        recorded=recorded if has_record else None,
        used=log,
        needs_tools=first.tools,
        picked_up=True,
        problems=problems,
    )
    try:
        run = await agent.resume(run_id)
    except UsageError as e:
        problems.add_usage_error("RUN", e)
        raise Refused(problems) from None
    since = run.state.events
    if not view.as_json:
        say(view.console, f"resuming run {run_id} after event {since}")
    result = await follow_to_end(run, view.display, since=since, store=store, redactor=redactor_of(store))
    return report_result(view, result, choice, store)


@click.command()
@click.argument("run_id", metavar="RUN")
@agent_options(for_run=False)
@click.option(
    "--approve-plan/--no-approve-plan",
    default=None,
    help="Approve each new plan version before it runs. Default: as the run recorded it.",
)
@live_options
@global_options()
@click.pass_context
def resume(ctx: click.Context, /, run_id: str, no_live: bool, no_input: bool, as_json: bool, **values: Any) -> None:
    """Go on with RUN from its log: after a crash, or once its questions are answered.

    The agent is rebuilt from what `planexec run` recorded with the run; flags given here replace
    what was recorded, for this resume only. Finished steps never run again. A scripted planner
    or executor the run recorded skips the replies the run already used; a different script
    named here starts from its first reply.

    Exit status as `planexec run`: 0 goal met, 1 stopped otherwise, 2 wrong command line, 3 the run
    waits for a human's answer.
    """
    flags = AgentFlags.take(values)
    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_command(ctx, _resume(run_id, flags, view, store_choice(ctx)))


async def _resume(run_id: str, flags: AgentFlags, view: View, choice: StoreChoice) -> int:
    async with using_store(choice) as store:
        log = await load_log(store, run_id, choice)
        return await resume_run(store, choice, log, flags, view)
