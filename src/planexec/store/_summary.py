"""The run summary: one pure fold from a run's events to the row that ``list_runs`` shows.

Every backend keeps a summary row per run and updates it in the same transaction as each append,
by folding the appended events into the previous summary with :func:`summarize`. The rules match
``RunState``: ``finished`` after run_finished, ``waiting`` after run_suspended until run_resumed,
else ``running``; cost and model calls add up over model_called events; pending approvals are
the requested ones not yet decided.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, get_args

from planexec.log import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelCalled,
    RunFinished,
    RunResumed,
    RunStarted,
    RunSuspended,
)
from planexec.store._base import RunStatus, RunSummary
from planexec.store._failures import Damaged

__all__ = [
    "MAX_SESSION_ID",
    "SUMMARY_COLUMNS",
    "SummaryRow",
    "SummaryState",
    "session_of",
    "state_from_row",
    "summarize",
    "summary_row",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryState:
    """A run's summary and the ids of its pending approvals (kept so that decisions match requests)."""

    summary: RunSummary
    pending: tuple[str, ...] = ()
    suspended: bool = False


def _same(text: str) -> str:
    return text


def summarize(
    run_id: str,
    events: Sequence[Event],
    *,
    previous: SummaryState | None = None,
    first_seq: int = 1,
    clean: Callable[[str], str] = _same,
) -> SummaryState:
    """Fold ``events`` (the log's events from ``first_seq`` on) into ``previous``.

    ``clean`` is applied to the free text the summary copies from events (the goal and the stop
    detail), so a store can redact it as it redacts the events themselves; then NUL and lone
    surrogates, which a text column cannot hold, become U+FFFD (the events keep the exact text).
    """
    if not events:
        if previous is None:
            raise ValueError("summarize needs at least one event for a new run")
        return previous
    if previous is None:
        first = events[0]
        previous = SummaryState(
            summary=RunSummary(
                run_id=run_id,
                goal="",
                status="running",
                stop_kind=None,
                stop_detail=None,
                cost=0.0,
                model_calls=0,
                started_at=first.at,
                updated_at=first.at,
                finished_at=None,
                events=0,
                pending_approvals=0,
            )
        )
    s = previous.summary
    goal, stop_kind, stop_detail, finished_at = s.goal, s.stop_kind, s.stop_detail, s.finished_at
    started_at, cost, model_calls = s.started_at, s.cost, s.model_calls
    session, turn = s.session, s.turn
    pending = list(previous.pending)
    suspended = previous.suspended
    for event in events:
        if isinstance(event, RunStarted):
            goal, started_at = column_text(clean(event.goal)), event.at
            session, turn = session_of(event)
        elif isinstance(event, ModelCalled):
            cost += event.cost
            model_calls += 1
        elif isinstance(event, ApprovalRequested):
            if event.approval_id not in pending:
                pending.append(event.approval_id)
        elif isinstance(event, ApprovalDecided):
            if event.approval_id in pending:
                pending.remove(event.approval_id)
        elif isinstance(event, RunSuspended):
            suspended = True
        elif isinstance(event, RunResumed):
            suspended = False
        elif isinstance(event, RunFinished):
            stop_kind, stop_detail, finished_at = event.stop.kind, column_text(clean(event.stop.detail)), event.at
    status: RunStatus = "finished" if stop_kind is not None else "waiting" if suspended else "running"
    summary = replace(
        s,
        goal=goal,
        status=status,
        stop_kind=stop_kind,
        stop_detail=stop_detail,
        cost=cost,
        model_calls=model_calls,
        started_at=started_at,
        updated_at=events[-1].at,
        finished_at=finished_at,
        events=first_seq + len(events) - 1,
        pending_approvals=len(pending),
        session=session,
        turn=turn,
    )
    return SummaryState(summary=summary, pending=tuple(pending), suspended=suspended)


MAX_SESSION_ID = 200


def session_of(event: RunStarted) -> tuple[str | None, int | None]:
    """The session a run is a turn of, and its turn, as its ``run_started`` records them
    (``config["session"] = {"id": ..., "turn": ...}``); (None, None) for a run of no session or
    a record that is not one."""
    record = event.config.get("session") if isinstance(event.config, dict) else None
    if not isinstance(record, dict):
        return None, None
    sid, turn = record.get("id"), record.get("turn")
    if not isinstance(sid, str) or not sid or len(sid) > MAX_SESSION_ID:
        return None, None
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        return None, None
    return column_text(sid), turn


SUMMARY_COLUMNS = (
    "goal",
    "status",
    "stop_kind",
    "stop_detail",
    "cost",
    "model_calls",
    "started_at",
    "updated_at",
    "finished_at",
    "last_seq",
    "pending_approvals",
    "pending",
    "suspended",
    "session_id",
    "turn",
)
"""The summary columns every SQL backend keeps in its runs table, in this order (after ``run_id``)."""

SummaryRow = tuple[
    str,
    str,
    str | None,
    str | None,
    float,
    int,
    float,
    float,
    float | None,
    int,
    int,
    str,
    bool,
    str | None,
    int | None,
]


_NOT_STORABLE = re.compile("[\x00\ud800-\udfff]")


def column_text(text: str) -> str:
    """``text`` as a database text column can hold it: NUL and lone surrogates become U+FFFD."""
    return _NOT_STORABLE.sub("\ufffd", text)


def summary_row(state: SummaryState) -> SummaryRow:
    """``state`` as values for :data:`SUMMARY_COLUMNS`."""
    s = state.summary
    return (
        s.goal,
        s.status,
        s.stop_kind,
        s.stop_detail,
        s.cost,
        s.model_calls,
        s.started_at,
        s.updated_at,
        s.finished_at,
        s.events,
        s.pending_approvals,
        json.dumps(list(state.pending)),
        state.suspended,
        s.session,
        s.turn,
    )


def state_from_row(run_id: str, row: Sequence[Any]) -> SummaryState:
    """The inverse of :func:`summary_row`. Raises ``Damaged`` for a row that makes no sense."""
    try:
        return _state_from_row(run_id, row)
    except (TypeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        raise Damaged(f"the summary row of run {run_id!r} is damaged: {' '.join(str(e).split())}") from None


def _state_from_row(run_id: str, row: Sequence[Any]) -> SummaryState:
    (goal, status, stop_kind, stop_detail, cost, model_calls, started_at, updated_at, finished_at, last_seq) = row[:10]
    pending_count, pending, suspended = row[10:13]
    session, turn = (row[13], row[14]) if len(row) > 14 else (None, None)
    if status not in _STATUSES:
        raise ValueError(f"unknown status {status!r}")
    pending_ids = json.loads(pending)
    if not isinstance(pending_ids, list) or not all(isinstance(p, str) for p in pending_ids):
        raise ValueError(f"pending approvals are not a list of ids: {pending!r}")
    summary = RunSummary(
        run_id=run_id,
        goal=goal,
        status=status,
        stop_kind=stop_kind,
        stop_detail=stop_detail,
        cost=float(cost),
        model_calls=int(model_calls),
        started_at=float(started_at),
        updated_at=float(updated_at),
        finished_at=None if finished_at is None else float(finished_at),
        events=int(last_seq),
        pending_approvals=int(pending_count),
        session=None if session is None else str(session),
        turn=None if turn is None else int(turn),
    )
    return SummaryState(summary=summary, pending=tuple(pending_ids), suspended=bool(suspended))


_STATUSES: frozenset[str] = frozenset(get_args(RunStatus))
