"""Followers woken when a run's log grows, instead of reading it again and again.

A store calls :meth:`AppendSignals.appended` once a batch of a run is durable; whoever waits in
:meth:`AppendSignals.wait` for that run is woken and reads the store again. Within one process that
is all it takes (the memory and SQLite stores). A store other processes write too is read again
now and then as well (``poll``): the SQLite file another process appends to, or a PostgreSQL
server whose notifications did not arrive. A waiter always looks at the store after it has
registered, so a batch stored just before it began to wait is never missed.

A follower that wants the events themselves opens a :class:`Feed`: each batch this process stores
reaches it as the store wrote it (:class:`Fresh`: the event and its redacted JSON), so that it
neither reads the store again nor encodes the event a second time. A batch another process stored
reaches it as an empty list: read the store for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planexec.log import Event

__all__ = ["AppendSignals", "Feed", "Fresh"]


@dataclass(frozen=True, slots=True)
class Fresh:
    """An event this process has just made durable, as its store wrote it."""

    seq: int
    event: Event
    """The event as it was appended (before redaction: for deciding, never for showing)."""
    data: str
    """Its envelope (``{"v": …, "event": …}``) as stored: redacted, compact JSON."""


class Feed:
    """The batches of one run stored from the moment the feed was opened (see the module)."""

    def __init__(self, queue: asyncio.Queue[list[Fresh]], poll: float | None) -> None:
        self._queue = queue
        self._poll = poll

    async def next(self, within: float) -> list[Fresh] | None:
        """The next batch; an empty list when the store must be read (another process wrote, or
        the store's poll interval passed); None when ``within`` seconds pass with neither."""
        wait = within if self._poll is None else min(within, self._poll)
        try:
            async with asyncio.timeout(max(wait, 0.0)):
                return await self._queue.get()
        except TimeoutError:
            return [] if self._poll is not None and self._poll < within else None


class AppendSignals:
    """Who waits, in this process, for the next stored batch of which run."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}
        self._feeds: dict[str, set[asyncio.Queue[list[Fresh]]]] = {}

    def appended(self, run_id: str, batch: Sequence[Fresh] = ()) -> None:
        """A batch of ``run_id`` is durable: wake its waiters and hand ``batch`` (empty when it is
        not known here) to its feeds. Call it on their event loop."""
        for waiter in self._waiting.pop(run_id, ()):
            if not waiter.done():
                waiter.set_result(None)
        for queue in self._feeds.get(run_id, ()):
            queue.put_nowait(list(batch))

    def appended_anywhere(self) -> None:
        """Some run's log grew, which one is not known: wake every waiter and feed."""
        for run_id in {*self._waiting, *self._feeds}:
            self.appended(run_id)

    @contextlib.contextmanager
    def feed(self, run_id: str, *, poll: float | None = None) -> Iterator[Feed]:
        """A feed of ``run_id``'s batches from now on, for as long as the block lasts."""
        queue: asyncio.Queue[list[Fresh]] = asyncio.Queue()
        self._feeds.setdefault(run_id, set()).add(queue)
        try:
            yield Feed(queue, poll)
        finally:
            queues = self._feeds.get(run_id)
            if queues is not None:
                queues.discard(queue)
                if not queues:
                    del self._feeds[run_id]

    async def wait(
        self,
        run_id: str,
        *,
        after: int,
        within: float,
        last_seq: Callable[[str], Awaitable[int]],
        poll: float | None = None,
    ) -> bool:
        """Wait until ``run_id``'s log holds an event after seq ``after`` (True), or ``within``
        seconds pass (False). ``last_seq`` reads the store; ``poll``: read it at least this often
        (for writers this process does not hear)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(within, 0.0)
        waiter = self._register(run_id, loop)
        try:
            while True:
                if await last_seq(run_id) > after:
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                try:
                    async with asyncio.timeout(left if poll is None else min(left, poll)):
                        await asyncio.shield(waiter)
                except TimeoutError:
                    pass
                if waiter.done():
                    waiter = self._register(run_id, loop)
        finally:
            self._forget(run_id, waiter)

    def _register(self, run_id: str, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiting.setdefault(run_id, set()).add(waiter)
        return waiter

    def _forget(self, run_id: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._waiting.get(run_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiting[run_id]
        if not waiter.done():
            waiter.cancel()
