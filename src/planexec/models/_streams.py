"""What every provider adapter does with a response stream.

A stream is opened under the model's retry policy and read up to its first output before it
counts as open: a stream that fails before anything was passed on to the caller is retried like
any other call, one that fails later is not (the caller has seen part of the reply). The open
stream holds its provider's concurrency slot from its request to its last event; whichever way
it ends — read to its end, failed, or given up by the caller — it is closed and the slot given
back.

An adapter supplies a :class:`StreamReader`: ``next`` reads the stream on to the next piece and
returns the text deltas to pass on (often none), or None once the stream has ended whole; an end
that comes too soon raises. :func:`open_stream` opens it; :func:`relay` passes its deltas on.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol, TypeVar

from planexec.models._base import StreamDelta
from planexec.models._resilience import Held, ModelRetryPolicy, open_with_retries

__all__ = ["OpenedStream", "StreamReader", "open_stream", "relay"]


class StreamReader(Protocol):
    async def next(self) -> list[StreamDelta] | None:
        """The deltas of the next piece of the stream; None once it has ended whole."""
        ...

    async def aclose(self) -> None:
        """Close the stream (and its connection), read to its end or not."""
        ...


R = TypeVar("R", bound=StreamReader)
OpenedStream = Held[tuple[R, list[StreamDelta]]]
"""An open stream, the deltas it has given so far, and the concurrency slot it holds."""


async def open_stream(limits_key: str, policy: ModelRetryPolicy, open_: Callable[[], Awaitable[R]]) -> OpenedStream[R]:
    """Open a stream with ``open_`` and read it up to its first output, retrying per ``policy``
    under the limits of ``limits_key`` while nothing has been passed on."""

    async def start() -> tuple[R, list[StreamDelta]]:
        reader = await open_()
        try:
            first = await _first_output(reader)
        except BaseException:
            await reader.aclose()
            raise
        return reader, first

    return await open_with_retries(limits_key, start, policy)


async def _first_output(reader: StreamReader) -> list[StreamDelta]:
    while (deltas := await reader.next()) is not None:
        if deltas:
            return deltas
    return []


async def relay(opened: OpenedStream[R]) -> AsyncGenerator[StreamDelta, None]:
    """The stream's deltas, the first ones included, to its end; then it is closed and its slot
    given back (also when it fails or the caller stops early: close this iterator then)."""
    reader, first = opened.value
    try:
        for delta in first:
            yield delta
        while (deltas := await reader.next()) is not None:
            for delta in deltas:
                yield delta
    finally:
        try:
            await reader.aclose()
        finally:
            opened.release()
