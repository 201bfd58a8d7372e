"""HTTP clients of an SDK, one per event loop.

A client's connections belong to the event loop that opened them, so each loop (each
``asyncio.run``, e.g. each ``run_sync``) gets a client of its own. When a loop shuts down it
finalizes the async generators still open in it (``asyncio.run`` does); each client is watched by
one, which then closes the client inside that loop, before the loop is gone — no connection is
left behind, and nothing is closed from a loop it does not belong to.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["LoopClients"]


class _Closable(Protocol):
    def close(self) -> Awaitable[Any]: ...


C = TypeVar("C", bound=_Closable)


@dataclass(slots=True)
class _Own(Generic[C]):
    client: C
    closer: AsyncGenerator[None, None]


async def _close_when_the_loop_ends(client: _Closable) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await client.close()


class LoopClients(Generic[C]):
    """The clients ``make`` builds, one for each running event loop that asks."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Own[C]] = weakref.WeakKeyDictionary()

    async def get(self) -> C:
        """The running loop's client (built on first use)."""
        loop = asyncio.get_running_loop()
        own = self._clients.get(loop)
        if own is None:
            client = self._make()
            own = self._clients[loop] = _Own(client=client, closer=_close_when_the_loop_ends(client))
            await anext(own.closer)
        return own.client

    async def aclose(self) -> None:
        """Close the running loop's client now (clients of other loops close when those loops end)."""
        own = self._clients.pop(asyncio.get_running_loop(), None)
        if own is not None:
            await own.closer.aclose()
