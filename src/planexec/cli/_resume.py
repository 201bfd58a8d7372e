"""``planexec resume RUN``: pick a run up from its log and go on with it, the agent rebuilt from
what ``planexec run`` recorded (flags override it for this resume)."""

from __future__ import annotations

from typing import Any

import click

from planexec.cli._agent_options import AgentFlags, agent_options, build, live_options
from planexec.cli._common import EXIT_WAITING, View, follow_to_end, say
from planexec.cli._finish import report_result, waiting_lines
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._store_options import StoreChoice, is_memory, store_choice, using_store
from planexec.cli._telemetry import TelemetryFlags, run_observed, telemetry_options
from planexec.cli._terminal_approver import approvals_for, is_interactive
from planexec.cli._text import plain, redactor_of
from planexec.errors import UsageError
from planexec.log import Event, RunResult, RunStarted, RunState
from planexec.memory import PlanMemory
from planexec.runs import Supervisor, load_run, recorded_spec, still_waiting, take_from_workers, worker_entry
from planexec.store import RunStore
from planexec.views import question_view

__all__ = ["load_log", "resume", "resume_run"]


async def load_log(store: RunStore, run_id: str, choice: StoreChoice, problems: Problems | None = None) -> list[Event]:
    """The run's events, every one of them readable; an unknown run, a log that does not begin a run
    or a log with events that cannot be read is a problem (exit status 2)."""
    problems = problems if problems is not None else Problems()
    try:
        log = await load_run(store, run_id)
    except UsageError as e:
        queued = await worker_entry(store, run_id) if any(p.code == "unknown_run" for p in e.problems) else None
        for p in e.problems:
            if p.code == "unknown_run" and queued is not None:
                problems.add(
                    "RUN",
                    f"run {run_id} is submitted to the workers and has not begun ({queued.state}): it has no log yet "
                    "and asks nothing (`planexec tell` reaches it; `planexec show` says where it is)",
                )
            elif p.code == "unknown_run":
                problems.add("RUN", f"no run {run_id!r} in {choice.describe()} (`planexec runs` lists them)")
            else:
                problems.add("RUN" if p.code == "not_a_run" else "", plain(p.message))
        if any(p.code == "unreadable" for p in e.problems):
            problems.add("RUN", f"`planexec show {run_id}` shows the events that can be read")
        raise Refused(problems) from None
    if problems:
        raise Refused(problems)
    return log


async def resume_run(store: RunStore, choice: StoreChoice, log: list[Event], flags: AgentFlags, view: View) -> int:
    """Rebuild the agent and go on with the run whose events are ``log``; return the exit status."""
    first = log[0]
    assert isinstance(first, RunStarted)  # load_log checked it
    run_id = first.run_id
    state = RunState.fold(log)
    if state.finished:
        click.echo(plain(f"run {run_id} has finished already: {state.stop}"), err=True)
        return report_result(view, RunResult.from_state(state, log), choice, store)
    if still_waiting(state) and (view.no_input or not is_interactive(view.console)):
        for line in waiting_lines(choice, run_id, [question_view(state, rec) for rec in state.pending_approvals]):
            click.echo(plain(line), err=view.as_json)
        return EXIT_WAITING
    recorded = await recorded_spec(store, first)
    spec = flags.applied_to(recorded.spec)
    approvals = approvals_for(
        view.console, view.display, no_input=view.no_input, plan=spec.approve_plan, redactor=redactor_of(store)
    )
    agent = build(spec, store=store, approvals=approvals, recorded=recorded, used=log, needs_tools=first.tools)
    if "memory" in first.config and not is_memory(store):
        agent.memory = PlanMemory.from_record(store, first.config["memory"])  # told how the run ends
    try:
        try:
            run = await Supervisor(store).pick_up(run_id, agent=agent)
        except UsageError as e:
            problems = Problems()
            problems.add_usage_error("RUN", e)
            raise Refused(problems) from None
        since = run.state.events
        if not view.as_json:
            say(view.console, f"resuming run {run_id} after event {since}")
        result = await follow_to_end(run, view.display, since=since, store=store, redactor=redactor_of(store))
    finally:
        await agent.aclose()  # its MCP servers
        if agent.memory is not None:
            await agent.memory.close()
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
@telemetry_options
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
    observed = TelemetryFlags.take(values)
    flags = AgentFlags.take(values)
    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_observed(ctx, observed, _resume(run_id, flags, view, store_choice(ctx)))


async def _resume(run_id: str, flags: AgentFlags, view: View, choice: StoreChoice) -> int:
    async with using_store(choice) as store:
        log = await load_log(store, run_id, choice)
        if not RunState.fold(log).finished:
            why = await take_from_workers(store, run_id)
            if why is not None:
                problems = Problems()
                problems.add("RUN", plain(why))
                raise Refused(problems)
        return await resume_run(store, choice, log, flags, view)
