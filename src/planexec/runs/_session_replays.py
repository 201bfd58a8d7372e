"""Replaying a session: each of its turns re-run from its log with no model and no tool called, and
the session checked as a whole.

A session replays as recorded when every turn does (as :func:`~planexec.runtime.replay_log` replays
one run) and when, besides:

- its turns are numbered 1 to n, each claimed by one run, and the store lists each run as the
  turn its own log says it is;
- the record of the earlier turns each turn's planner was shown (kept in its ``run_started``) is
  the one :func:`~planexec.runtime.describe_turns` builds from the earlier turns' logs, as they
  stood when the turn began (or as they are now);
- each turn ran with the caps its session record gives it, and — when the record keeps the
  session's caps — no more than the session still allowed after the earlier turns
  (:func:`~planexec.runtime.turn_budget`);
- every field its session record keeps can be read (a cap or a bound that cannot would be dropped
  by a resume or a fork of the turn).

A last turn that has not ended (it waits for a human, or its process stopped) is replayed up to
where its log ends and reported as such. Whatever the store holds, each thing found wrong is a
:class:`~planexec.Problem` of the turn it concerns (or of the session, for the numbering); nothing
read from the logs makes the replay raise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec._util.clip import clip
from planexec.errors import Problem, UsageError
from planexec.log import Event, RunResult, RunStarted, RunState
from planexec.runs._sessions import session_turns
from planexec.runs._stored import read_run
from planexec.runtime import (
    RECORD_CHARS,
    Budget,
    ReplayReport,
    SessionRecord,
    describe_turns,
    replay_log,
    session_record,
    turn_budget,
)
from planexec.store import RunStore, RunSummary

__all__ = ["Check", "SessionReplay", "TurnReplay", "TurnStatus", "replay_session"]

TurnStatus = Literal["finished", "waiting", "unfinished"]
"""How a turn's log ends: the run finished, it waits for a human, or it stopped without either
(its process stopped, or it still runs)."""

Check = Literal["matched", "differs", "not_checked"]
"""The outcome of one session check of a turn (``not_checked``: its log does not keep what the
check needs, or the turns before it cannot be told apart; the reason is a problem elsewhere)."""


@dataclass(frozen=True, kw_only=True)
class TurnReplay:
    """One turn of a replayed session."""

    turn: int
    """Its number in the session, as its log says (as the store lists it when the log does not)."""
    run_id: str
    status: TurnStatus
    events: int
    """How many events its log holds (as far as it can be read)."""
    replay: ReplayReport | None
    """The replay of its log (None: the log could not be replayed; see ``problems``)."""
    record: Check
    """Whether the record of the earlier turns its planner was shown can be rebuilt from them."""
    budget: Check
    """Whether its caps are the ones its session record gives it and within the session's."""
    problems: tuple[Problem, ...] = ()
    """Everything found wrong with this turn, in the order checked."""

    @property
    def reproduced(self) -> bool:
        """Its log replayed exactly and every session check of it passed (or had nothing to check)."""
        return not self.problems


@dataclass(frozen=True, kw_only=True)
class SessionReplay:
    """What replaying a session found: each turn's replay, first to last, and the session's own
    problems (turns missing, or claimed by more than one run)."""

    session_id: str
    turns: tuple[TurnReplay, ...]
    problems: tuple[Problem, ...] = ()

    @property
    def reproduced(self) -> bool:
        """Every turn replayed exactly, and the session holds together."""
        return not self.problems and all(t.reproduced for t in self.turns)

    @property
    def diverged(self) -> TurnReplay | None:
        """The first turn that did not replay as recorded, if any."""
        return next((t for t in self.turns if not t.reproduced), None)

    @property
    def unfinished(self) -> bool:
        """The last turn has not ended (it waits for a human, or it stopped without finishing)."""
        return bool(self.turns) and self.turns[-1].status != "finished"

    def all_problems(self) -> list[Problem]:
        """Everything found wrong, first turn to last (a turn missing or claimed twice at its number,
        before the problems of the runs that claim it)."""
        found = [(_number(p.where), 0, p) for p in self.problems]
        found += [(t.turn, 1, p) for t in self.turns for p in t.problems]
        return [p for _, _, p in sorted(found, key=lambda item: item[:2])]

    def first_problem(self) -> Problem | None:
        """Where the session first differs from its record (None: it does not)."""
        found = self.all_problems()
        return found[0] if found else None


@dataclass(kw_only=True)
class _Turn:
    """A turn as read from the store, before it is checked."""

    run_id: str
    number: int
    started_at: float
    log: list[Event] = field(default_factory=list)
    first: RunStarted | None = None
    """Its ``run_started`` (None: its log cannot be read whole, or does not begin a run)."""
    record: SessionRecord | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"turn {self.number} (run {self.run_id})"

    def add(self, code: str, message: str) -> None:
        self.problems.append(Problem(code=code, where=self.where, message=message))


def _number(where: str) -> int:
    """The turn a session problem's ``where`` (``turn N``) names."""
    _, _, number = where.partition(" ")
    return int(number) if number.isdigit() else 0


async def replay_session(store: RunStore, session_id: str) -> SessionReplay:
    """Replay every turn of ``session_id`` from ``store``, first to last, with no model and no tool
    called, and check that the turns hold together as one session (see
    :mod:`planexec.runs._session_replays`). Raises :class:`~planexec.UsageError` for a malformed
    session id or a session the store does not hold."""
    rows = await session_turns(store, session_id)
    if not rows:
        raise UsageError(
            "cannot replay the session",
            [Problem(code="unknown_session", where="session_id", message=f"no session {session_id!r} in the store")],
        )
    turns = [await _read(store, session_id, row) for row in rows]
    turns.sort(key=lambda t: (t.number, t.started_at, t.run_id))
    problems, single = _numbering(turns)
    reports = []
    for turn in turns:
        replay = await _replay(turn)
        record = _check_record(turn, single)
        budget = _check_budget(turn, single)
        reports.append(
            TurnReplay(
                turn=turn.number,
                run_id=turn.run_id,
                status=_status(turn.log),
                events=len(turn.log),
                replay=replay,
                record=record,
                budget=budget,
                problems=tuple(turn.problems),
            )
        )
    return SessionReplay(session_id=session_id, turns=tuple(reports), problems=tuple(problems))


async def _read(store: RunStore, session_id: str, row: RunSummary) -> _Turn:
    stored = await read_run(store, row.run_id)
    turn = _Turn(run_id=row.run_id, number=row.turn or 0, started_at=row.started_at, log=list(stored.events))
    if stored.unreadable:
        turn.add("unreadable", f"its log cannot be read whole: {'; '.join(stored.unreadable)}")
        return turn
    first = turn.log[0] if turn.log else None
    if not isinstance(first, RunStarted):
        turn.add("not_a_run", "its log does not begin with run_started")
        return turn
    turn.first = first
    record = session_record(first.config)
    if record is not None and record.id == session_id:
        turn.record = record
        turn.number = record.turn
    if record is None:
        turn.add("listing", "the store lists it as a turn of this session, but its log keeps no session record")
    elif record.id != session_id or record.turn != row.turn:
        turn.add(
            "listing",
            f"the store lists it as turn {row.turn} of session {session_id!r}, but its log says it is "
            f"turn {record.turn} of session {clip(record.id, 200)!r}",
        )
    if first.run_id != row.run_id:
        turn.add("listing", f"its log's run_started names another run, {clip(first.run_id, 200)!r}")
    if record is not None:
        _unreadable_fields(turn, first.config["session"], record)
    return turn


def _unreadable_fields(turn: _Turn, written: Mapping[str, Any], record: SessionRecord) -> None:
    """A problem for each field of the session record that is there but cannot be read (a resumed
    or forked turn would go on without it: with the agent's caps, or the default bound)."""
    for name, code in (("budget", "budget"), ("session_budget", "budget"), ("record_chars", "record")):
        if written.get(name) is not None and getattr(record, name) is None:
            turn.add(code, f"its session record's {name} cannot be read: {clip(repr(written[name]), 100)}")


def _numbering(turns: Sequence[_Turn]) -> tuple[list[Problem], dict[int, _Turn]]:
    """The session's problems with its turns' numbers, and the turns that can stand for their number
    in the checks of later turns (claimed by one run, whose log begins a run)."""
    claims: dict[int, list[_Turn]] = {}
    for turn in turns:
        claims.setdefault(turn.number, []).append(turn)
    problems = []
    last = max(claims)
    expected = 1
    for number in sorted(n for n in claims if n >= 1):  # by the claims: a number may be huge
        if number > expected:
            problems.append(_missing(expected, number - 1, last))
        claimed = claims[number]
        if len(claimed) > 1:
            message = f"{len(claimed)} runs claim it: {', '.join(t.run_id for t in claimed)}"
            problems.append(Problem(code="duplicate_turn", where=f"turn {number}", message=message))
        expected = number + 1
    for turn in claims.get(0, []):
        turn.add("missing_turn", "the store lists it in this session without a turn number")
    single = {n: ts[0] for n, ts in claims.items() if len(ts) == 1 and ts[0].first is not None}
    return problems, single


def _missing(first: int, last: int, claimed: int) -> Problem:
    which = f"no run of the session is turn {first}" if first == last else f"no runs are turns {first} to {last}"
    return Problem(
        code="missing_turn", where=f"turn {first}", message=f"{which} (its turns are numbered 1 to {claimed})"
    )


async def _replay(turn: _Turn) -> ReplayReport | None:
    if turn.first is None:
        return None
    try:
        report = await replay_log(turn.log)
    except UsageError as e:
        turn.add("not_replayable", f"its log cannot be replayed: {e.summary}")
        return None
    except Exception as e:  # a damaged log may trip the engine anywhere: this turn's problem, said plainly
        turn.add("not_replayable", f"its log cannot be replayed: {type(e).__name__}: {clip(str(e), 300)}")
        return None
    if not report.matched:
        turn.add("diverged", f"it did not replay as recorded: {report.divergence}")
    return report


def _status(log: Sequence[Event]) -> TurnStatus:
    try:
        state = RunState.fold(list(log))
    except Exception:  # a log that does not fold has not ended as far as anyone can tell
        return "unfinished"
    if state.finished:
        return "finished"
    return "waiting" if state.suspended is not None else "unfinished"


def _earlier(turn: _Turn, single: dict[int, _Turn]) -> list[_Turn] | None:
    """The turns before ``turn``, first to last, when each can be told apart (else None)."""
    if turn.number - 1 > len(single):  # some of them are missing (and the number may be huge)
        return None
    found = [single.get(n) for n in range(1, turn.number)]
    return [t for t in found if t is not None] if all(found) else None


def _as_of(log: Sequence[Event], at: float | None) -> list[Event]:
    """``log`` as it stood at time ``at`` (None: as it is now)."""
    return list(log) if at is None else [e for e in log if e.at <= at]


def _versions(began: RunStarted, earlier: Sequence[_Turn]) -> list[list[list[Event]]]:
    """The earlier turns' logs as they stood when the turn that ``began`` began, then as they are
    now (when that differs): a turn that waited for a human may have been resumed after later
    turns began."""
    then = [_as_of(t.log, began.at) for t in earlier]
    now = [list(t.log) for t in earlier]
    return [then] if then == now else [then, now]


def _results(logs: Sequence[list[Event]]) -> list[RunResult] | None:
    """The results the logs give, or None when one of them had not ended (nor waited for a human)."""
    results = []
    for log in logs:
        try:
            results.append(RunResult.from_state(RunState.fold(log), log))
        except Exception:
            return None
    return results


def _check_record(turn: _Turn, single: dict[int, _Turn]) -> Check:
    record = turn.record
    earlier = _earlier(turn, single)
    if record is None or turn.first is None or earlier is None:
        return "not_checked"
    limit = RECORD_CHARS if record.record_chars is None else record.record_chars
    rebuilt: list[str | None] = []
    for logs in _versions(turn.first, earlier):
        results = _results(logs)
        if results is None:
            continue
        text = describe_turns(results, limit, sealed=record.sealed) if limit else None
        if text == record.earlier:
            return "differs" if any(p.code == "record" for p in turn.problems) else "matched"
        rebuilt.append(text)
    if not rebuilt:
        turn.add("record", "turns before it had not ended when it began, yet its planner was shown a record of them")
    else:
        bound = "" if record.record_chars is not None else f" (rebuilt within {limit:,} characters, the default)"
        turn.add("record", _record_difference(record.earlier, rebuilt[0]) + bound)
    return "differs"


def _record_difference(recorded: str | None, rebuilt: str | None) -> str:
    if recorded is None:
        return "its log keeps no record of the earlier turns, but their logs give one"
    if rebuilt is None:
        return "its log keeps a record of earlier turns, but there were none for its planner to be shown"
    old, new = recorded.splitlines(), rebuilt.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    said = clip(old[line], 120) if line < len(old) else "(nothing)"
    given = clip(new[line], 120) if line < len(new) else "(nothing)"
    return (
        "the record of the earlier turns its planner was shown is not what their logs say, "
        f"from line {line + 1}: recorded {said!r}, the logs give {given!r}"
    )


def _check_budget(turn: _Turn, single: dict[int, _Turn]) -> Check:
    record = turn.record
    if record is None or turn.first is None:
        return "not_checked"
    try:
        caps = Budget(**turn.first.budget)  # type: ignore[arg-type]
    except Exception:
        turn.add("budget", "the caps its run_started gives it are not caps")
        return "differs"
    found = any(p.code == "budget" for p in turn.problems)  # a cap of its session record cannot be read
    checked = found
    if record.budget is not None:
        checked = True
        differ = _differences(caps, record.budget)
        if differ:
            found = True
            turn.add("budget", f"it ran with other caps than its session record gives it: {differ}")
    earlier = _earlier(turn, single)
    if record.session_budget is not None and earlier is not None:
        checked = True
        over = None
        for logs in _versions(turn.first, earlier):
            try:
                states = [RunState.fold(log) for log in logs]
            except Exception:
                continue
            over = _differences(caps, turn_budget(caps, None, record.session_budget, states))
            if not over:
                break
        if over:
            found = True
            turns = "the turn before" if turn.number == 2 else f"turns 1 to {turn.number - 1}"
            after = "" if turn.number == 1 else f" after {turns}"
            turn.add("budget", f"its caps are not within what the session's caps allowed{after}: {over}")
    if not checked:
        return "not_checked"
    return "differs" if found else "matched"


def _differences(caps: Budget, allowed: Budget) -> str:
    """The caps of ``caps`` that differ from ``allowed``'s, as ``name a (expected b)``; empty when none."""
    said = []
    for name, cap in caps.as_dict().items():
        other = getattr(allowed, name)
        same = cap == other or (
            cap is not None and other is not None and math.isclose(cap, other, rel_tol=1e-9, abs_tol=1e-9)
        )
        if not same:
            said.append(f"{name} {_cap(cap)} (expected {_cap(other)})")
    return ", ".join(said)


def _cap(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"
