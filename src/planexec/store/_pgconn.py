"""PostgreSQL connections for :class:`~planexec.store.PostgresStore`: a small pool, the two timeouts,
and how a call that ran out of time is stopped without waiting on the server.

Connecting is bounded by cancelling the attempt (psycopg then closes the half-open socket at once).
A call's statements are never bounded that way: on cancellation psycopg asks the server to cancel
the query and waits for it, up to ten seconds, which an unresponsive server never answers. Instead,
when a call's time is up (or its caller cancels it) its connection's socket is shut down: every
wait on it ends at once with an error, no cancel request is sent, and the connection is dropped.
The statement, if the server is still running it, ends there at the server's own
``statement_timeout``, which every connection of the pool sets when it is opened.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from planexec.errors import UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["Pool", "TimedOut", "guarded", "seconds", "statement_timeout_of", "url_seconds"]

T = TypeVar("T")


class TimedOut(Exception):
    """A call ran out of time; the message says which timeout and what was waited for."""


def seconds(name: str, value: object) -> float:
    """``value`` as a timeout in seconds: a positive, finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{name} must be a positive, finite number of seconds, not {value!r}")
    return float(value)


def url_seconds(params: Mapping[str, str], shown_url: str) -> float | None:
    """The URL's ``connect_timeout`` (whole or decimal seconds), if it has one."""
    text = params.get("connect_timeout")
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"connect_timeout={text!r} in the store URL {shown_url!r} must be a positive number of seconds "
            "(the store never waits without a limit)"
        )
    return value


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s|min|h|d)?\s*")


def statement_timeout_of(params: Mapping[str, str], shown_url: str) -> float | None:
    """The ``statement_timeout`` the URL's ``options`` set (``-c statement_timeout=30s``), in seconds."""
    found: str | None = None
    for name, text in _settings(params.get("options") or ""):
        if name.replace("-", "_").lower() == "statement_timeout":
            found = text
    if found is None:
        return None
    match = _DURATION.fullmatch(found)
    value: float = float(match.group(1)) * _UNITS[match.group(2) or "ms"] if match else math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"statement_timeout={found!r} in the options of the store URL {shown_url!r} must be a positive "
            "duration such as 30s or 500ms (the store never waits without a limit)"
        )
    return value


def _settings(options: str) -> list[tuple[str, str]]:
    """The ``name=value`` settings of a libpq ``options`` string (``-c a=b``, ``-ca=b``, ``--a=b``)."""
    words = [w.replace("\\ ", " ") for w in re.split(r"(?<!\\)\s+", options.strip()) if w]
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        setting = None
        if word == "-c" and i + 1 < len(words):
            i += 1
            setting = words[i]
        elif word.startswith(("-c", "--")):
            setting = word[2:]
        if setting is not None and "=" in setting:
            name, _, value = setting.partition("=")
            out.append((name, value))
        i += 1
    return out


class _Cut:
    """Shuts down a connection's socket, once. The descriptor itself stays open (the driver owns it
    and closes it when the connection is closed), so no other socket can take its number meanwhile."""

    __slots__ = ("conn", "done")

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self.conn = conn
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        import psycopg

        try:
            fd = self.conn.pgconn.socket
        except psycopg.Error:
            return  # already closed
        try:
            copy = os.dup(fd)
            try:
                sock = socket.socket(fileno=copy)
            except OSError:
                os.close(copy)
                raise
            with sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            self.conn.pgconn.finish()  # where a socket cannot be shut down this way, close it


def _retrieve(job: asyncio.Future[Any]) -> None:
    if not job.cancelled():
        job.exception()


async def guarded(
    conn: AsyncConnection[Any], deadline: float, work: Callable[[AsyncConnection[Any]], Awaitable[T]], limit: str
) -> T:
    """Run ``work(conn)``, cutting ``conn`` at ``deadline`` (event-loop time) or when the caller is
    cancelled. Raises ``TimedOut`` (saying ``limit``) when the deadline cut it."""
    loop = asyncio.get_running_loop()
    cut = _Cut(conn)
    timer = loop.call_at(deadline, cut)
    job = asyncio.ensure_future(work(conn))
    try:
        result = await asyncio.shield(job)
        if cut.done:  # cut just after the work finished: the connection must not be used again
            await conn.close()
        return result
    except asyncio.CancelledError:
        if not job.done():
            cut()  # the caller gave up: end the work now rather than let the driver wait on the server
            job.add_done_callback(_retrieve)
            await asyncio.wait([job])
        if cut.done:
            await _discard(conn)
        raise
    except Exception:
        if cut.done:
            await _discard(conn)  # the driver may not know yet that its socket is gone: never reuse it
            raise TimedOut(f"the database did not answer within {limit}") from None
        raise
    finally:
        timer.cancel()


async def _discard(conn: AsyncConnection[Any]) -> None:
    """Close a connection that was cut, so that the pool drops it."""
    try:
        await conn.close()
    except Exception:  # closing a cut connection may fail; it is dropped all the same
        conn.pgconn.finish()


class Pool:
    """At most ``size`` connections, opened on demand and reused; broken ones are dropped."""

    def __init__(self, url: str, size: int, connect_timeout: float) -> None:
        self._url = url
        self._connect_timeout = max(2, math.ceil(connect_timeout))
        """psycopg's own limit per connection attempt: libpq wants whole seconds, at least 2 (the
        store's own, shorter or not whole, is enforced around it)."""
        self._slots = asyncio.Semaphore(size)
        self._idle: list[AsyncConnection[Any]] = []
        self._closed = False

    @asynccontextmanager
    async def connection(self, connect_timeout: float, give_up_at: float) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection, waiting for a free one until ``give_up_at`` (event-loop time) and for a new
        one to open for at most ``connect_timeout`` seconds; raises ``TimedOut`` otherwise."""
        waiting = asyncio.timeout_at(give_up_at)
        try:
            async with waiting:
                await self._slots.acquire()
        except TimeoutError:
            if not waiting.expired():
                raise
            raise TimedOut(
                "no pooled connection came free in time (each is busy, and a call may take up to "
                "connect_timeout + statement_timeout)"
            ) from None
        try:
            conn = self._idle.pop() if self._idle else await self._connect(connect_timeout, give_up_at)
            try:
                yield conn
            finally:
                await self._release(conn)
        finally:
            self._slots.release()

    async def _connect(self, connect_timeout: float, give_up_at: float) -> AsyncConnection[Any]:
        import psycopg

        if self._closed:
            raise UsageError("this PostgresStore is closed; open a new one")
        loop = asyncio.get_running_loop()
        waiting = asyncio.timeout_at(min(loop.time() + connect_timeout, give_up_at))
        try:
            async with waiting:
                return await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=self._connect_timeout
                )
        except TimeoutError:
            if not waiting.expired():
                raise
        # Raised here, not in the handler above: the timeout's chain holds the abandoned attempt,
        # whose socket closes as soon as nothing refers to it any more.
        raise TimedOut(
            f"no connection was made within connect_timeout={connect_timeout:g} s "
            "(the server did not accept it, or did not answer while it was being set up)"
        )

    async def _release(self, conn: AsyncConnection[Any]) -> None:
        import psycopg

        reusable = not self._closed and not conn.closed and not conn.broken
        if reusable and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            self._idle.append(conn)
        else:
            await conn.close()

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
