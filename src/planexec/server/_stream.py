"""A run's events as Server-Sent Events: each stored event as ``id: SEQ``, ``event: KIND`` and one
line of JSON, in log order from any point, live until the run finishes; then ``event: end`` and the
stream closes. A run waiting for a human says ``event: waiting`` and the stream stays open.

The store is the source of truth: what is sent is read from it (so a reconnecting client that gives
``Last-Event-ID`` gets exactly the events after that one), and the store wakes the stream as soon as
a batch of the run is durable (:meth:`~planexec.store.RunStore.wait_for_events`) — whichever
process wrote it, where the store can hear it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from planexec.errors import LogUnreadable
from planexec.log import RunState, dump_event
from planexec.store import RunStore

__all__ = ["PING_SECONDS", "STALL_SECONDS", "EventStream", "event_frames"]

PING_SECONDS = 15.0
"""A comment line is sent after this long without an event, so that proxies keep the stream open."""
STALL_SECONDS = 30.0
"""A client that has not taken a frame for this long (its buffers full) has its stream closed; it
reconnects with ``Last-Event-ID`` and loses nothing."""


def _frame(seq: int | None, kind: str, data: Any) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def event_frames(store: RunStore, run_id: str, after: int) -> AsyncIterator[bytes]:
    """The frames of run ``run_id``'s events after event ``after``, live."""
    state = RunState()
    seq = 0
    waiting_told = -1
    last_sent = time.monotonic()
    yield b"retry: 1000\n\n"
    while True:
        try:
            stored = await store.read(run_id, after=seq)
        except LogUnreadable as e:
            yield _frame(None, "error", {"code": "unreadable", "message": str(e)})
            return
        for item in stored:
            state.apply(item.event)
            seq = item.seq
            if seq > after:
                yield _frame(seq, item.event.kind, dump_event(item.event)["event"])
                last_sent = time.monotonic()
        if state.finished:
            yield _frame(None, "end", {"status": "finished", "stop": state.stop.kind if state.stop else None})
            return
        if state.status == "waiting" and waiting_told != seq and seq >= after:
            waiting_told = seq
            pending = [r.approval_id for r in state.pending_approvals]
            yield _frame(None, "waiting", {"status": "waiting", "questions": pending})
        quiet = PING_SECONDS - (time.monotonic() - last_sent)
        if quiet <= 0 or not await store.wait_for_events(run_id, after=seq, within=quiet):
            yield b": ping\n\n"
            last_sent = time.monotonic()


class EventStream(Response):
    """A response sending ``frames`` as ``text/event-stream`` until they end, the client goes
    away, or the client stops reading for :data:`STALL_SECONDS` (then the stream is closed, so a
    reader that never reads holds neither memory nor a task)."""

    media_type = "text/event-stream"

    def __init__(self, frames: AsyncIterator[bytes], *, stall: float = STALL_SECONDS) -> None:
        super().__init__(status_code=200, media_type=self.media_type)
        self._frames = frames
        self._stall = stall

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        gone = asyncio.Event()

        async def listen() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    return

        listener = asyncio.create_task(listen())
        frames = self._frames
        try:
            while not gone.is_set():
                following = asyncio.ensure_future(anext(frames))
                left = asyncio.ensure_future(gone.wait())
                await asyncio.wait({following, left}, return_when=asyncio.FIRST_COMPLETED)
                left.cancel()
                if not following.done():
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)
                    return
                try:
                    frame = following.result()
                except StopAsyncIteration:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                try:
                    await asyncio.wait_for(
                        send({"type": "http.response.body", "body": frame, "more_body": True}), self._stall
                    )
                except TimeoutError:
                    return  # the response is left incomplete: the server closes the connection
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
            aclose = getattr(frames, "aclose", None)
            if aclose is not None:
                await aclose()
