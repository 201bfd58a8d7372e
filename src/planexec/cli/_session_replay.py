"""``planexec replay --session ID``: every turn of a session replayed offline, one line per turn and
a verdict (or JSON); the options that fork one run are refused with it, all at once."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from planexec._util.plural import counted
from planexec.cli._common import EXIT_OK, EXIT_STOPPED, make_console, say
from planexec.cli._options import Problems, Refused
from planexec.cli._report import json_text
from planexec.cli._store_options import StoreChoice, using_store
from planexec.cli._text import redactor_of
from planexec.errors import Problem, UsageError
from planexec.runs import SessionReplay, TurnReplay, replay_session
from planexec.store import Redactor

__all__ = ["refuse_with_session", "replay_whole_session"]

_WITH_SESSION = frozenset({"session_id", "as_json", "_global_store", "_global_pii"})
"""The parameters of ``planexec replay`` that go with ``--session``."""


def refuse_with_session(ctx: click.Context, run_id: str | None, problems: Problems) -> None:
    """Add a problem for RUN and for each option given that makes sense for one run only."""
    if run_id is not None:
        problems.add("RUN", "give a run or --session, not both")
    for param in ctx.command.params:
        if param.name is None or param.name in _WITH_SESSION or not isinstance(param, click.Option):
            continue
        if ctx.get_parameter_source(param.name) in (None, ParameterSource.DEFAULT):
            continue
        problems.add(_flag(param), "only for one run: a session is replayed whole, offline, with nothing forked")


def _flag(option: click.Option) -> str:
    names = [max(option.opts, key=len), *option.secondary_opts]
    return "/".join(names)


async def replay_whole_session(choice: StoreChoice, session_id: str, *, as_json: bool) -> int:
    problems = Problems()
    async with using_store(choice, problems) as store:
        try:
            report = await replay_session(store, session_id)
        except UsageError as e:
            for p in e.problems or [Problem(code="", where="", message=e.summary)]:
                if p.code == "unknown_session":
                    problems.add(
                        "--session",
                        f"no session {session_id!r} in {choice.describe()} (`planexec sessions` lists them)",
                    )
                else:
                    problems.add("--session", p.message)
            raise Refused(problems) from None
        redactor = redactor_of(store)
    if as_json:
        click.echo(json_text(_as_data(report, redactor)))
    else:
        _print(report, redactor)
    return EXIT_OK if report.reproduced else EXIT_STOPPED


def _problem(p: Problem, redactor: Redactor) -> dict[str, str]:
    return {"code": p.code, "where": p.where, "message": redactor.redact_text(p.message)}


def _as_data(report: SessionReplay, redactor: Redactor) -> dict[str, Any]:
    return {
        "session_id": report.session_id,
        "reproduced": report.reproduced,
        "unfinished": report.unfinished,
        "turns": [
            {
                "turn": t.turn,
                "run_id": t.run_id,
                "status": t.status,
                "events": t.events,
                "matched": t.replay is not None and t.replay.matched,
                "compared": 0 if t.replay is None else t.replay.compared,
                "divergence": None
                if t.replay is None or t.replay.divergence is None
                else redactor.redact_text(t.replay.divergence),
                "record": t.record,
                "budget": t.budget,
                "problems": [_problem(p, redactor) for p in t.problems],
            }
            for t in report.turns
        ],
        "problems": [_problem(p, redactor) for p in report.problems],
    }


def _outcome(turn: TurnReplay) -> str:
    events = counted(turn.events, "event")
    if turn.replay is None:
        return f"not replayed ({events})"
    if not turn.replay.matched:
        return f"did not replay as recorded ({turn.replay.compared} of {events} matched)"
    if turn.status == "unfinished":
        return f"replayed up to where its log ends ({events}): the turn has not ended"
    if turn.status == "waiting":
        return f"replayed exactly ({events}): the turn waits for a human"
    return f"replayed exactly ({events})"


def _print(report: SessionReplay, redactor: Redactor) -> None:
    console = make_console(as_json=False)
    sid = report.session_id
    say(console, f"session {sid}: {counted(len(report.turns), 'run')} replayed, first turn to last")
    for turn in report.turns:
        say(console, f"  turn {turn.turn}  run {turn.run_id}  {turn.status}  {_outcome(turn)}")
        for p in turn.problems:
            say(console, f"    - {p.code}: {redactor.redact_text(p.message)}")
    for p in report.problems:
        say(console, f"  {p.where}: {redactor.redact_text(p.message)}")
    events = counted(sum(t.events for t in report.turns), "event")
    if report.reproduced:
        tail = "; its last turn has not ended" if report.unfinished else ""
        say(console, f"session {sid} replayed exactly: {counted(len(report.turns), 'turn')}, {events}{tail}")
    else:
        first = report.first_problem()
        said = f"{first.where}: {redactor.redact_text(first.message)}" if first is not None else ""
        found = counted(len(report.all_problems()), "problem")
        say(console, f"session {sid} did not replay as recorded ({found}); the first at {said}")
    say(console, "no model and no tool was called")
