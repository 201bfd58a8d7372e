"""Followers woken when a run's log grows, instead of reading it again and again.

A store calls :meth:`AppendSignals.appended` once a batch of a run is durable; whoever waits in
:meth:`AppendSignals.wait` for that run is woken and reads the store again. Within one process that
is all it takes (the memory and SQLite stores). A store other processes write too is read again
now and then as well (``poll``): the SQLite file another process appends to, or a PostgreSQL
server whose notifications did not arrive. A waiter always looks at the store after it has
registered, so a batch stored just before it began to wait is never missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["AppendSignals"]


class AppendSignals:
    """Who waits, in this process, for the next stored batch of which run."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    def appended(self, run_id: str) -> None:
        """A batch of ``run_id`` is durable: wake its waiters (call it on their event loop)."""
        for waiter in self._waiting.pop(run_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def appended_anywhere(self) -> None:
        """Some run's log grew, which one is not known: wake every waiter."""
        for run_id in list(self._waiting):
            self.appended(run_id)

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
