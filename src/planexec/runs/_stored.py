"""Reading what a store holds: one run's log (with what cannot be read said, not dropped), the
runs, the questions unfinished runs wait for, a log as JSON Lines, and deleting old runs."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from planexec._util.clip import clip
from planexec.errors import LogUnreadable, Problem, UsageError
from planexec.log import Event, RunStarted, RunState, dump_event
from planexec.runs._problems import Problems
from planexec.store import RunStatus, RunStore, RunSummary, StoredEvent
from planexec.views import QuestionView, question_view

__all__ = [
    "MAX_LIST",
    "STATUSES",
    "StoredRun",
    "check_run_id",
    "export_lines",
    "gc",
    "list_runs",
    "load_run",
    "open_questions",
    "parse_age",
    "read_run",
]

STATUSES: tuple[RunStatus, ...] = ("running", "waiting", "finished")
MAX_LIST = 1_000_000
"""The most runs one listing returns."""
QUESTION_SCAN = 10_000
"""At most this many runs of each unfinished status are looked at for open questions."""


@dataclass(frozen=True, kw_only=True)
class StoredRun:
    """A run's log as far as it can be read: ``events`` in order, and a line for each stored event
    that could not be read (``unreadable``)."""

    run_id: str
    events: tuple[Event, ...]
    unreadable: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.events or self.unreadable)


MAX_RUN_ID = 256
"""The longest run id an operation takes."""


def check_run_id(run_id: object) -> None:
    """Raise :class:`~planexec.UsageError` unless ``run_id`` is a run id: text of 1 to
    ``MAX_RUN_ID`` characters, without control characters."""
    if isinstance(run_id, str) and 0 < len(run_id) <= MAX_RUN_ID and run_id.isprintable():
        return
    if not isinstance(run_id, str):
        message = f"must be text, not {type(run_id).__name__}"
    elif not run_id:
        message = "must not be empty"
    elif len(run_id) > MAX_RUN_ID:
        message = f"is {len(run_id):,} characters long; a run id has at most {MAX_RUN_ID}"
    else:
        message = "must not hold control characters"
    raise UsageError(f"not a run id: {clip(repr(run_id), 80)}", [Problem(code="run_id", where="run", message=message)])


async def read_run(store: RunStore, run_id: str) -> StoredRun:
    """Every event of the run that can be read, and a line for each one that cannot."""
    check_run_id(run_id)
    try:
        events = tuple(s.event for s in await store.read(run_id))
        return StoredRun(run_id=run_id, events=events)
    except LogUnreadable as e:
        readable = tuple(s.event if isinstance(s, StoredEvent) else s for s in e.events)
        return StoredRun(run_id=run_id, events=readable, unreadable=tuple(f"run {run_id}: {p}" for p in e.problems))


async def load_run(store: RunStore, run_id: str) -> list[Event]:
    """The run's events, every one of them readable and the first a ``run_started``; raises
    :class:`~planexec.UsageError` (``where="run"``) for an unknown run or a log that cannot be
    read whole."""
    stored = await read_run(store, run_id)
    problems = Problems()
    if stored.unreadable:
        for line in stored.unreadable:
            problems.add("run", line, code="unreadable")
    elif not stored.events:
        problems.add("run", f"no run {run_id!r} in the store", code="unknown_run")
    elif not isinstance(stored.events[0], RunStarted):
        problems.add("run", f"the log of run {run_id!r} does not begin with run_started", code="not_a_run")
    problems.raise_if_any(f"cannot pick up run {run_id!r}")
    return list(stored.events)


async def list_runs(store: RunStore, *, status: str | None = None, limit: int = 50) -> list[RunSummary]:
    """The runs in the store, newest first: at most ``limit``, only ``status`` when given."""
    problems: list[Problem] = []
    if status is not None and status not in STATUSES:
        problems.append(
            Problem(code="status", where="status", message=f"{status!r} is not one of {', '.join(STATUSES)}")
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        problems.append(Problem(code="limit", where="limit", message=f"{limit!r} must be from 1 to {MAX_LIST:,}"))
    if problems:
        raise UsageError("cannot list the runs", problems)
    chosen: Any = status
    return await store.list_runs(status=chosen, limit=limit)


async def open_questions(store: RunStore) -> list[QuestionView]:
    """Every unanswered question of every unfinished run, oldest first, as a human is shown it
    (:class:`~planexec.views.QuestionView`: read back from the store, so redacted as it redacts)."""
    found: list[QuestionView] = []
    for status in ("waiting", "running"):
        for summary in await store.list_runs(status=status, limit=QUESTION_SCAN):
            if summary.pending_approvals:
                stored = await read_run(store, summary.run_id)
                state = RunState.fold(stored.events)
                found += [question_view(state, rec, run_id=summary.run_id) for rec in state.pending_approvals]
    return sorted(found, key=lambda view: view.asked_at)


def export_lines(events: Iterable[Event]) -> Iterator[str]:
    """Each event as one line of JSON Lines (newline included): an envelope ``{"v": …, "event":
    {…}}`` that :func:`~planexec.log.load_event` reads back, older schema versions too."""
    for event in events:
        data = dump_event(event)
        text = json.dumps(data, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: written as a JSON escape, it reads back the same
            text = json.dumps(data)
        yield text + "\n"


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_AGE = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,9})?)\s*([smhd])\s*$")


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30d``, ``12h``, ``90m`` or ``0s``; raises
    :class:`~planexec.UsageError` for anything else."""
    match = _AGE.match(text) if isinstance(text, str) else None
    if match is None:
        raise UsageError(
            "not an age",
            [
                Problem(
                    code="age",
                    where="age",
                    message=f"{text!r} is not an age: a number and a unit s, m, h or d (e.g. 30d)",
                )
            ],
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


async def gc(store: RunStore, *, older_than: float, dry_run: bool = False, now: float | None = None) -> list[str]:
    """Delete the runs (and their logs) whose newest event is older than ``older_than`` seconds —
    finished, waiting or abandoned alike — and return their ids; ``dry_run`` only lists them."""
    if isinstance(older_than, bool) or not isinstance(older_than, int | float) or not older_than >= 0:
        raise UsageError(
            "cannot collect old runs",
            [Problem(code="age", where="older_than", message=f"{older_than!r} must be a number of seconds, 0 or more")],
        )
    cutoff = (time.time() if now is None else now) - older_than
    if dry_run:
        return [s.run_id for s in await store.list_runs(limit=MAX_LIST) if s.updated_at < cutoff]
    return await store.expire(older_than=cutoff)
