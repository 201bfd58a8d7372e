"""Reading runs: ``GET /v1/runs`` (a page of them, newest first, with a cursor to the next) and
``GET /v1/runs/{run_id}``."""

from __future__ import annotations

import base64
import binascii
from typing import Literal

from fastapi import Query

from planexec.errors import Problem
from planexec.log import RunState
from planexec.server._bodies import RunList
from planexec.server._contract import CURSOR, CURSOR_PATTERN, LISTED_LINKS, QUESTION_LINKS, refusals
from planexec.server._shared import ApiError, Routes, RunId, ServedHere, checked_id
from planexec.server._views import RunDetail, RunSummary, detail, detail_of_summary, pending_summary, summary

__all__ = ["runs_routes"]

LIST_SCAN = 100_000
"""At most this many runs are looked at for one listing."""

runs_routes = Routes()


@runs_routes.get(
    "/v1/runs",
    tags=["runs"],
    responses={200: {"links": LISTED_LINKS}, **refusals("bad_cursor", "invalid")},
)
async def list_runs(
    served: ServedHere,
    status: Literal["running", "waiting", "finished"] | None = None,
    agent: str | None = Query(default=None, max_length=64),
    since: float | None = Query(
        default=None, allow_inf_nan=False, description="Only runs started at or after (epoch seconds)."
    ),
    until: float | None = Query(
        default=None, allow_inf_nan=False, description="Only runs started at or before (epoch seconds)."
    ),
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = Query(
        default=None,
        description="Where the page before ended: its `next_cursor`, as it came.",
        json_schema_extra={"pattern": CURSOR_PATTERN},
    ),
) -> RunList:
    """The runs, newest first, a page at a time."""
    found: list[RunSummary] = []
    for pending in list(served.workers.pending.values()):
        if status in (None, "running"):
            found.append(pending_summary(pending.run_id, pending.agent, pending.goal, pending.accepted_at))
    seen = {s.run_id for s in found}
    for row in await served.store.list_runs(status=status, started_after=since, limit=LIST_SCAN):
        if row.run_id in seen:
            continue
        state, name = await served.folds.state(row.run_id, row.events)
        found.append(summary(state, name))
    found = [
        s
        for s in found
        if (agent is None or s.agent == agent)
        and (since is None or s.started_at >= since)
        and (until is None or s.started_at <= until)
    ]
    found.sort(key=lambda s: (s.started_at, s.run_id), reverse=True)
    if cursor is not None:
        at, after_id = _read_cursor(cursor)
        found = [s for s in found if (s.started_at, s.run_id) < (at, after_id)]
    page = found[:limit]
    more = len(found) > limit
    return RunList(runs=page, next_cursor=_cursor(page[-1]) if more and page else None)


@runs_routes.get(
    "/v1/runs/{run_id}",
    tags=["runs"],
    responses={200: {"links": QUESTION_LINKS}, **refusals("bad_id", "unknown_run", "invalid")},
)
async def get_run(run_id: RunId, served: ServedHere) -> RunDetail:
    """A run: its state, plan versions, steps, usage, cost and open questions."""
    checked_id(run_id, "run_id")
    early = served.not_stored(run_id)
    if early is not None:
        return detail_of_summary(early)
    log = await served.run_log(run_id)
    return detail(RunState.fold(log), log)


def _cursor(item: RunSummary) -> str:
    """Where a page ends: the last run's start (as ``repr`` writes it, exact) and its id."""
    encoded = base64.urlsafe_b64encode(item.run_id.encode("utf-8", "surrogatepass")).decode().rstrip("=")
    return f"{item.started_at!r}~{encoded}"


def _read_cursor(text: str) -> tuple[float, str]:
    """The position a cursor names; any text of its format is one (a run there or not)."""
    if CURSOR.fullmatch(text):
        at, _, encoded = text.partition("~")
        try:
            raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            return float(at), raw.decode("utf-8", "surrogateescape")
        except (ValueError, binascii.Error):  # the pattern leaves no such text; refused all the same
            pass
    raise ApiError(
        400,
        "bad_cursor",
        "not a cursor",
        [Problem(code="bad_cursor", where="cursor", message="give a listing's next_cursor back as it came")],
    )
