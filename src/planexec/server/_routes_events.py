"""A run's events: ``GET /v1/runs/{run_id}/events`` (a page of its log) and
``GET /v1/runs/{run_id}/events/stream`` (Server-Sent Events, live until the run finishes)."""

from __future__ import annotations

from typing import Any

from fastapi import Header, Query
from fastapi.responses import Response

from planexec.errors import Problem
from planexec.log import dump_event
from planexec.server._bodies import EventItem, EventPage
from planexec.server._contract import EVENT_ID, EVENT_ID_PATTERN, MAX_WHOLE, refusals
from planexec.server._shared import ApiError, Routes, RunId, ServedHere, checked_id
from planexec.server._stream import EventStream, event_frames

__all__ = ["events_routes"]

MAX_SEQ = MAX_WHOLE
"""The largest event position a request may name."""

events_routes = Routes()


@events_routes.get("/v1/runs/{run_id}/events", tags=["events"], responses=refusals("bad_id", "unknown_run", "invalid"))
async def get_events(
    run_id: RunId,
    served: ServedHere,
    after: int = Query(default=0, ge=0, le=MAX_SEQ),
    limit: int = Query(default=500, ge=1, le=5_000),
) -> EventPage:
    """The run's events after event ``after`` (seq: the 1-based position in its log)."""
    checked_id(run_id, "run_id")
    if served.not_stored(run_id) is None:
        await served.run_log(run_id)
    stored = (await served.store.read(run_id, after=after))[:limit]
    items = [EventItem(seq=s.seq, event=dump_event(s.event)["event"]) for s in stored]
    return EventPage(events=items, next=items[-1].seq if items else after)


@events_routes.get(
    "/v1/runs/{run_id}/events/stream",
    tags=["events"],
    response_class=Response,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "The run's events as they happen"},
        **refusals("bad_id", "bad_event_id", "unknown_run", "invalid"),
    },
)
async def stream_events(
    run_id: RunId,
    served: ServedHere,
    after: int | None = Query(default=None, ge=0, le=MAX_SEQ),
    last_event_id: str | None = Header(
        default=None,
        description="Go on after this event (what a reconnecting `EventSource` sends).",
        json_schema_extra={"pattern": EVENT_ID_PATTERN},
    ),
) -> Any:
    """The run's events as Server-Sent Events, from ``Last-Event-ID`` (or ``after``) on, live
    until the run finishes."""
    checked_id(run_id, "run_id")
    start = after or 0
    if last_event_id is not None:
        if not EVENT_ID.fullmatch(last_event_id.strip()):
            raise ApiError(
                400,
                "bad_event_id",
                "Last-Event-ID is not an event's sequence number",
                [Problem(code="bad_event_id", where="Last-Event-ID", message="must be a whole number")],
            )
        start = int(last_event_id)
    if served.not_stored(run_id) is None:
        await served.run_log(run_id)
    return EventStream(event_frames(served.store, run_id, start))
