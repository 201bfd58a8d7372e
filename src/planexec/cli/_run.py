"""``planexec run GOAL``: run a goal with models and tools named on the command line, logged in the
store with what it takes to pick the run up again."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import click

from planexec.cli._agent_options import AgentFlags, agent_options, build, live_options
from planexec.cli._common import View, start_and_follow
from planexec.cli._finish import report_result
from planexec.cli._globals import global_options
from planexec.cli._options import BUDGET_FLAGS, Problems, Refused
from planexec.cli._store_options import StoreChoice, is_memory, store_choice, using_store
from planexec.cli._telemetry import TelemetryFlags, run_observed, telemetry_options
from planexec.cli._terminal_approver import approvals_for
from planexec.cli._text import plain, redactor_of
from planexec.errors import UsageError
from planexec.memory import PlanMemory
from planexec.runs import AgentSpec, dropped_settings
from planexec.runtime import Budget, check_session_id

__all__ = ["run"]


BUDGET_FIELDS = tuple(flag.field for flag in BUDGET_FLAGS)
"""The caps a session budget may set."""


@click.command()
@click.argument("goal")
@agent_options(for_run=True)
@click.option(
    "--constraint", "constraints", multiple=True, metavar="TEXT", help="A constraint on the goal (repeatable)."
)
@click.option(
    "--approve-plan",
    is_flag=True,
    help="Approve each plan version before it runs: asked at the terminal, or saved in the log without one.",
)
@click.option(
    "--session",
    metavar="ID",
    default=None,
    help="Run GOAL as the next turn of session ID (a new one when the store has none): its planner sees "
    "the earlier turns. `planexec sessions` lists them.",
)
@click.option(
    "--session-budget",
    "session_caps",
    metavar="FIELD=N",
    multiple=True,
    help="With --session: a cap on the whole session, summed over its turns (repeatable; fields: "
    + ", ".join(BUDGET_FIELDS)
    + "). Kept with each turn: later turns go on under it unless given again.",
)
@click.option(
    "--memory",
    "use_memory",
    is_flag=True,
    help="Reuse a plan remembered in the store when GOAL is like a goal met before (with no planner call "
    "when it only differs in values the plan holds), and remember this run's plan when it meets its goal. "
    "`planexec memory` lists them.",
)
@live_options
@telemetry_options
@global_options()
@click.pass_context
def run(
    ctx: click.Context,
    /,
    goal: str,
    constraints: tuple[str, ...],
    no_live: bool,
    no_input: bool,
    as_json: bool,
    session: str | None,
    session_caps: tuple[str, ...],
    use_memory: bool,
    **values: Any,
) -> None:
    """Run GOAL with a planner model, tools and budgets.

    MODEL is a model string: scripted:PATH.json (a JSON list of replies), object:pkg.module:attr,
    or provider:name for an installed provider. The run is logged in the store (see --store), with
    the flags given here, so that `planexec resume` and `planexec replay` can rebuild the agent.

    At a terminal, approvals are asked there. Without one (or with --no-input) they are saved in
    the log and the run is suspended: answer with `planexec approve` or `planexec reject`.

    Every run is bounded: with no budget flags it has the default caps listed below (steps,
    model calls, tool calls, time, replans); 'none' as a flag's value lifts that cap.

    Exit status: 0 when the goal is met, 1 when the run stopped otherwise, 2 when the command
    line is wrong, 3 when the run waits for a human's answer.
    """
    observed = TelemetryFlags.take(values)
    spec = dataclasses.replace(AgentFlags.take(values).spec_for_run(constraints), memory=use_memory)
    view = View.make(as_json=as_json, no_live=no_live, no_input=no_input)
    run_observed(ctx, observed, _run(goal, spec, view, store_choice(ctx), session, session_caps, use_memory))


def session_budget(caps: Sequence[str], session: str | None, problems: Problems) -> Budget | None:
    """The caps ``--session-budget`` gives (None: none given); a field it does not name has no cap."""
    if not caps:
        return None
    if session is None:
        problems.add("--session-budget", "caps a session: give --session ID too")
    values: dict[str, float | None] = dict.fromkeys(BUDGET_FIELDS)
    for cap in caps:
        name, sep, text = cap.partition("=")
        name = name.strip()
        if not sep or name not in BUDGET_FIELDS:
            problems.add("--session-budget", f"{cap!r}: FIELD=N, FIELD one of {', '.join(BUDGET_FIELDS)}")
            continue
        try:
            number = float(text)
        except ValueError:
            problems.add("--session-budget", f"{cap!r}: {text.strip()!r} is not a number")
            continue
        values[name] = int(number) if number.is_integer() and name not in ("cost", "wall_time") else number
    try:
        return Budget(**values)  # type: ignore[arg-type]
    except UsageError as e:
        for p in e.problems:
            problems.add("--session-budget", str(p))
    return None


async def _run(
    goal: str,
    spec: AgentSpec,
    view: View,
    choice: StoreChoice,
    session: str | None = None,
    session_caps: Sequence[str] = (),
    use_memory: bool = False,
) -> int:
    problems = Problems()
    if not goal.strip():
        problems.add("GOAL", "the goal is empty")
    if session is not None:
        problems.add_problems(check_session_id(session), {"session_id": "--session"})
    caps = session_budget(session_caps, session, problems)
    async with using_store(choice, problems) as store:
        approvals = approvals_for(
            view.console, view.display, no_input=view.no_input, plan=spec.approve_plan, redactor=redactor_of(store)
        )
        agent = build(spec, store=store, approvals=approvals, problems=problems)
        for line in dropped_settings(agent):
            click.echo(plain(f"note: {line}"), err=True)
        if session is not None and is_memory(store):
            problems.add("--session", "a session's turns are kept in the store: name a lasting one with --store")
        if use_memory and is_memory(store):
            problems.add("--memory", "plans are remembered in a lasting store: name one with --store")
        if problems:
            raise Refused(problems)
        if use_memory:
            agent.memory = PlanMemory(store)
        try:
            result = await start_and_follow(
                agent,
                goal,
                spec.constraints,
                view.display,
                metadata=spec.metadata(),
                session=session,
                session_budget=caps,
            )
        finally:
            if agent.memory is not None:
                await agent.memory.close()
        return report_result(view, result, choice, store)
