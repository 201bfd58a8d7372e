"""A run's events as Server-Sent Events: each stored event as ``id: SEQ``, ``event: KIND`` and one
line of JSON, in log order from any point, live until the run finishes; then ``event: end`` and the
stream closes. A run waiting for a human says ``event: waiting`` and the stream stays open.

The store is the source of truth: what is sent is what it stored (so a reconnecting client that gives
``Last-Event-ID`` gets exactly the events after that one). The store hands the stream each batch of
the run as soon as it is durable (:meth:`~planexec.store.RunStore.feed`), with the JSON it wrote, so
an event is encoded once; a batch another process wrote is read from the store as soon as the store
hears of it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

from planexec.errors import LogUnreadable
from planexec.log import RunState, dump_event
from planexec.store import Fresh, RunStore, StoredEvent

__all__ = ["PING_SECONDS", "STALL_SECONDS", "EventStream", "event_frames"]

PING_SECONDS = 15.0
"""A comment line is sent after this long without an event, so that proxies keep the stream open."""
STALL_SECONDS = 30.0
"""A client that has not taken a frame for this long (its buffers full) has its stream closed; it
reconnects with ``Last-Event-ID`` and loses nothing."""


def _frame(seq: int | None, kind: str, data: Any) -> bytes:
    return _framed(seq, kind, json.dumps(data, separators=(",", ":")))


def _framed(seq: int | None, kind: str, text: str) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {kind}\ndata: {text}\n\n".encode()


def _inner(envelope: str) -> str | None:
    """The event's JSON inside a stored envelope (``{"v":N,"event":{…}}``), as it was written."""
    start = envelope.find(',"event":')
    if not envelope.startswith('{"v":') or start < 0 or not envelope.endswith("}"):
        return None
    return envelope[start + 9 : -1]


async def event_frames(store: RunStore, run_id: str, after: int) -> AsyncIterator[bytes]:
    """The frames of run ``run_id``'s events after event ``after``, live: what is stored is read
    once, then each batch comes from the store's feed as it was written (encoded once, by the
    store); a batch written by another process, or one the feed missed, is read from the store."""
    follower = _Follower(after)
    yield b"retry: 1000\n\n"
    with store.feed(run_id) as feed:
        batch: list[Fresh] = []
        while True:
            if not batch or batch[0].seq > follower.seq + 1:  # nothing in hand, or a gap: read the store
                try:
                    stored = await store.read(run_id, after=follower.seq)
                except LogUnreadable as e:
                    yield _frame(None, "error", {"code": "unreadable", "message": str(e)})
                    return
                frames = follower.read(stored)
            else:
                frames = follower.fed(batch)
            for frame in frames:
                yield frame
            for frame in follower.status():
                yield frame
            if follower.state.finished:
                return
            got = await feed.next(max(PING_SECONDS - (time.monotonic() - follower.last_sent), 0.0))
            if got is None:
                yield b": ping\n\n"
                follower.last_sent = time.monotonic()
            batch = got or []


class _Follower:
    """What one stream has sent: the run's state so far, the last seq, when it last sent."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.state = RunState()
        self.seq = 0
        self.last_sent = time.monotonic()
        self._waiting_told = -1

    def read(self, stored: list[StoredEvent]) -> list[bytes]:
        frames = []
        for item in stored:
            self.state.apply(item.event)
            self.seq = item.seq
            if item.seq > self.after:
                frames.append(_frame(item.seq, item.event.kind, dump_event(item.event)["event"]))
        return self._sent(frames)

    def fed(self, batch: list[Fresh]) -> list[bytes]:
        frames = []
        for fresh in batch:
            if fresh.seq <= self.seq:
                continue  # read from the store already
            self.state.apply(fresh.event)
            self.seq = fresh.seq
            if fresh.seq > self.after:
                text = _inner(fresh.data)
                if text is None:
                    text = json.dumps(json.loads(fresh.data)["event"], separators=(",", ":"))
                frames.append(_framed(fresh.seq, fresh.event.kind, text))
        return self._sent(frames)

    def status(self) -> list[bytes]:
        state = self.state
        if state.finished:
            return [_frame(None, "end", {"status": "finished", "stop": state.stop.kind if state.stop else None})]
        if state.status == "waiting" and self._waiting_told != self.seq and self.seq >= self.after:
            self._waiting_told = self.seq
            pending = [r.approval_id for r in state.pending_approvals]
            return self._sent([_frame(None, "waiting", {"status": "waiting", "questions": pending})])
        return []

    def _sent(self, frames: list[bytes]) -> list[bytes]:
        if frames:
            self.last_sent = time.monotonic()
        return frames


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
