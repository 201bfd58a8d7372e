"""``planexec replay RUN``: re-run a stored run from its log with no model and no tool called, and
say whether it reproduces the log; or fork it (``--fork-at``, ``--fail``) and go on live as a new
run with the agent rebuilt as for ``resume``. ``planexec replay --session ID``: replay every turn
of a session the same way, and check that the turns hold together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast, get_args

import click

from planexec._util.plural import counted
from planexec.cli._agent_options import AgentFlags, agent_options, build
from planexec.cli._board import describe_event
from planexec.cli._common import EXIT_OK, EXIT_STOPPED, View, problem_exit, run_command, say
from planexec.cli._finish import report_result
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._report import json_text
from planexec.cli._resume import load_log
from planexec.cli._session_replay import refuse_with_session, replay_whole_session
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.cli._terminal_approver import approvals_for
from planexec.cli._text import plain, redacted_events, redactor_of
from planexec.errors import UsageError
from planexec.eval import fault_problems, read_faults_option, seeded_profile
from planexec.executor import ErrorKind
from planexec.faults import FaultProfile
from planexec.log import Event, RunStarted, RunState, StepStarted
from planexec.runs import recorded_spec
from planexec.runtime import Fault, ReplayReport, replay_log
from planexec.store import ChainReport, Redactor, verify_chain

__all__ = ["replay"]

KINDS: tuple[str, ...] = get_args(ErrorKind)


@dataclass(frozen=True, kw_only=True)
class Fork:
    """Where a replay leaves the log: after ``fork_at`` events, or at the first run of a failed step."""

    fork_at: int | None = None
    fault: Fault | None = None

    def live_from(self, log: Sequence[Event]) -> int:
        """How many events of the log come before the live part (what the rebuilt models already said)."""
        ends = [len(log)] if self.fork_at is None else [self.fork_at]
        if self.fault is not None:
            ends.append(next(i for i, e in enumerate(log) if _starts(e, self.fault.step_id)) + 1)
        return min(ends)


def _starts(event: Event, step_id: str) -> bool:
    return isinstance(event, StepStarted) and event.step_id == step_id


def _parse_fork(fork_at: str | None, fail: str | None, log: Sequence[Event], problems: Problems) -> Fork:
    at = None
    if fork_at is not None:
        try:
            at = int(fork_at)
            if not 1 <= at <= len(log):
                problems.add("--fork-at", f"{fork_at!r} must be from 1 to {len(log)} (the events to keep)")
                at = None
        except ValueError:
            problems.add("--fork-at", f"{fork_at!r} is not a whole number")
    fault = None
    if fail is not None:
        step_id, sep, kind = fail.partition(":")
        kind = kind if sep else "tool_error"
        if kind not in KINDS:
            problems.add("--fail", f"{kind!r} is not a step error kind: {', '.join(KINDS)}")
        if not any(_starts(e, step_id) for e in log):
            ran = sorted({e.step_id for e in log if isinstance(e, StepStarted)})
            listing = ", ".join(ran) or "none"
            problems.add("--fail", f"step {step_id!r} never ran in this run (steps that ran: {listing})")
        elif kind in KINDS:
            fault = Fault(step_id=step_id, kind=cast(ErrorKind, kind), message=f"fault injected by replay ({kind})")
    return Fork(fork_at=at, fault=fault)


@click.command()
@click.argument("run_id", metavar="[RUN]", required=False)
@click.option(
    "--session",
    "session_id",
    metavar="ID",
    help="Replay every turn of session ID instead of one run, offline, and check that the turns hold together "
    "(numbered 1 to n, each planner shown the record the earlier turns give, caps within the session's).",
)
@click.option("--fork-at", metavar="N", help="Keep the first N events of the log, then go on live as a new run.")
@click.option(
    "--fail",
    metavar="STEP[:KIND]",
    help=f"Replay until STEP first runs and fail it with KIND instead (default tool_error; one of {', '.join(KINDS)}), "
    "then go on live as a new run.",
)
@click.option(
    "--faults",
    metavar="PROFILE",
    help="Replay until the first call this fault profile spoils, then go on live with its faults injected, as a "
    "new run. A profile's name (flaky-tools, slow-tools, garbage-output, bad-planner, unknown-tools, "
    "rate-limit-storm, chaos) or a YAML/JSON file of its fields.",
)
@click.option("--seed", type=click.IntRange(min=0), default=None, help="The fault profile's seed (default: its own).")
@agent_options(for_run=False)
@click.option(
    "--approve-plan/--no-approve-plan",
    default=None,
    help="For a fork: approve each new plan version before it runs. Default: as the run recorded it.",
)
@click.option("--no-input", is_flag=True, help="For a fork: never ask at the terminal; save questions and suspend.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON on stdout.")
@global_options()
@click.pass_context
def replay(
    ctx: click.Context,
    /,
    run_id: str | None,
    session_id: str | None,
    fork_at: str | None,
    fail: str | None,
    faults: str | None,
    seed: int | None,
    no_input: bool,
    as_json: bool,
    **values: Any,
) -> None:
    """Replay RUN from its log.

    Without --fork-at or --fail, the run is re-executed offline: every model answer, tool outcome,
    human answer, time and id comes from the log, nothing is called, and every decision is
    compared with the log. Exit status 0 when the replay matched the log, 1 when it diverged (the
    first difference is shown) or when the log's hash chain is broken (it was changed after it was
    written: said before the replay, with the first event where it breaks).

    With --fork-at or --fail, the replay leaves the log at that point and goes on live as a new
    run (with --faults: at the first call the profile spoils, with the profile's faults injected
    from there on), with the agent rebuilt as for `planexec resume` (model and tool flags override what the
    run recorded). A scripted model the run recorded skips the replies it gave before the fork
    point; a scripted model named here starts from its first reply. Exit status as `planexec run`.

    With --session ID instead of RUN, every turn of the session is replayed offline, first to last,
    and the session is checked as a whole: its turns are numbered 1 to n, each one claimed by one
    run; the record of the earlier turns each turn's planner was shown is the one their logs give;
    each turn's caps are the ones it recorded and within the session's. A last turn that has not
    ended is replayed up to where its log ends. One line per turn, then the verdict; exit status 0
    when the whole session replayed as recorded, 1 when anything differed. A session is not forked:
    the fork and agent options are refused with it.
    """
    problems = Problems()
    if session_id is not None:
        refuse_with_session(ctx, run_id, problems)
        if problems:
            problem_exit(ctx, problems)
        run_command(ctx, replay_whole_session(store_choice(ctx), session_id, as_json=as_json))
    if run_id is None:
        problem_exit(ctx, ["RUN: give the run to replay (or --session ID for a whole session)"])
    flags = AgentFlags.take(values)
    view = View.make(as_json=as_json, no_live=True, no_input=no_input)
    profile = _fault_profile(faults, seed, problems) if faults is not None else None
    if problems:
        problem_exit(ctx, problems)
    run_command(ctx, _replay(store_choice(ctx), run_id, fork_at, fail, flags, view, profile))


def _fault_profile(value: str, seed: int | None, problems: Problems) -> FaultProfile | None:
    """A fault profile by name, or from a YAML/JSON file of its fields (as ``planexec eval`` reads it)."""
    try:
        spec = read_faults_option(value)
    except ValueError as e:
        problems.add("--faults", str(e))
        return None
    found = fault_problems(spec, "--faults")
    for p in found:
        problems.add(p.where, p.message)
    if found:
        return None
    own = 0 if isinstance(spec, str) else int(spec.get("seed", 0))
    return seeded_profile(spec, own if seed is None else seed)


async def _replay(
    choice: StoreChoice,
    run_id: str,
    fork_at: str | None,
    fail: str | None,
    flags: AgentFlags,
    view: View,
    faults: FaultProfile | None = None,
) -> int:
    async with using_store(choice) as store:
        log = await load_log(store, run_id, choice)
        chain = await verify_chain(store, run_id)
        if chain.broken is not None:  # said before the replay: what it compares against was changed
            click.echo(plain(f"warning: {chain.describe()}"), err=True)
        if fork_at is None and fail is None and faults is None:
            try:
                report = await replay_log(log)
            except UsageError as e:
                raise Refused(_usage(e)) from None
            return _offline(view, run_id, report, len(log), chain)
        problems = Problems()
        fork = _parse_fork(fork_at, fail, log, problems)
        first = log[0]
        assert isinstance(first, RunStarted)  # load_log checked it
        recorded = await recorded_spec(store, first)
        spec = flags.applied_to(recorded.spec)
        if problems:
            problems.add_problems(recorded.problems)
            raise Refused(problems)
        agent = build(
            spec,
            store=store,
            approvals=approvals_for(
                view.console,
                view.display,
                no_input=view.no_input,
                plan=spec.approve_plan,
                redactor=redactor_of(store),
            ),
            recorded=recorded,
            used=log if faults is not None else log[: fork.live_from(log)],
            needs_tools=first.tools,
            problems=problems,
        )
        try:
            report = await agent.replay(run_id, fork_at=fork.fork_at, fault=fork.fault, faults=faults)
        except UsageError as e:
            raise Refused(_usage(e)) from None
        if not report.matched or report.result is None:
            why = report.divergence or "the fork neither finished nor was suspended"
            click.echo(plain(f"the replay of run {run_id} left the log before the fork point: {why}"), err=True)
            return EXIT_STOPPED
        if not view.as_json:
            _print_live_part(view, run_id, report, redactor_of(store))
        return report_result(
            view,
            report.result,
            choice,
            store,
            extra=[("forked from", f"{run_id} after event {report.compared}")],
            json_extra={"forked_from": run_id, "replayed_events": report.compared},
        )


def _usage(error: UsageError) -> Problems:
    problems = Problems()
    problems.add_usage_error("RUN", error)
    return problems


def _offline(view: View, run_id: str, report: ReplayReport, total: int, chain: ChainReport) -> int:
    if view.as_json:
        data = {
            "run_id": run_id,
            "matched": report.matched,
            "compared": report.compared,
            "events": total,
            "divergence": report.divergence,
            "chain": chain.json(),
        }
        click.echo(json_text(data))
    elif report.matched:
        say(
            view.console,
            f"run {run_id} replayed exactly: {report.compared} of {counted(total, 'event')} compared and matched",
        )
        say(view.console, "no model and no tool was called")
    else:
        say(view.console, f"run {run_id} did not replay as recorded: {report.divergence}")
        say(view.console, f"{report.compared} of {counted(total, 'event')} matched before the difference")
    if chain.broken is not None and not view.as_json:
        say(view.console, f"but the log was changed after it was written: chain broken at event {chain.broken.seq}")
    return EXIT_OK if report.matched and chain.intact else EXIT_STOPPED


def _print_live_part(view: View, run_id: str, report: ReplayReport, redactor: Redactor) -> None:
    say(
        view.console,
        f"run {report.run_id}: a fork of run {run_id}, replayed for {counted(report.compared, 'event')}, then live",
    )
    state = RunState()
    for index, event in enumerate(redacted_events(report.events, redactor)):
        state.apply(event)
        if index >= report.compared:
            say(view.console, f"  {describe_event(event, state)}")
