"""Sessions as the store holds them: each is the runs that are its turns (``RunSummary.session``)."""

from __future__ import annotations

from dataclasses import dataclass

from planexec.errors import Problem, UsageError
from planexec.runtime import check_session_id
from planexec.store import RunStatus, RunStore, RunSummary

__all__ = ["SESSION_SCAN", "SessionSummary", "list_sessions", "session_turns"]

SESSION_SCAN = 100_000
"""At most this many of the newest runs are looked at to list the sessions."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionSummary:
    """One session: how many turns, the last one's run and status, what they cost together."""

    session_id: str
    turns: int
    last_run: str
    last_goal: str
    status: RunStatus
    """The last turn's status (``waiting`` or ``running``: the session has a turn to go on with)."""
    cost: float
    started_at: float
    updated_at: float


async def session_turns(store: RunStore, session_id: str) -> list[RunSummary]:
    """The turns of ``session_id``, first to last (none for an unknown session)."""
    problems = check_session_id(session_id)
    if problems:
        raise UsageError("cannot read the session", problems)
    rows = await store.list_runs(session=session_id, limit=SESSION_SCAN)
    return sorted(rows, key=lambda r: (r.turn or 0, r.started_at))


async def list_sessions(store: RunStore, *, limit: int = 50) -> list[SessionSummary]:
    """The sessions in the store, the most recently active first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(
            "cannot list the sessions", [Problem(code="limit", where="limit", message=f"{limit!r} must be at least 1")]
        )
    grouped: dict[str, list[RunSummary]] = {}
    for row in await store.list_runs(limit=SESSION_SCAN):
        if row.session is not None:
            grouped.setdefault(row.session, []).append(row)
    found = []
    for session_id, rows in grouped.items():
        rows.sort(key=lambda r: (r.turn or 0, r.started_at))
        last = rows[-1]
        found.append(
            SessionSummary(
                session_id=session_id,
                turns=len(rows),
                last_run=last.run_id,
                last_goal=last.goal,
                status=last.status,
                cost=sum(r.cost for r in rows),
                started_at=rows[0].started_at,
                updated_at=max(r.updated_at for r in rows),
            )
        )
    found.sort(key=lambda s: (s.updated_at, s.session_id), reverse=True)
    return found[:limit]
