"""Ending tasks that will not end: code that ignores its cancellation must not keep a run (or the
process) from finishing."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["abandon"]

_KEEP = 1000
_kept: list[Any] = []
"""Coroutines that would not close: held so that collecting them later prints no warning."""


def abandon(task: asyncio.Task[Any]) -> None:
    """Give up on a cancelled task that is still running.

    Its coroutine is closed where it waits, which runs its ``finally`` blocks; the task then ends
    on the loop's next turn (with an error nobody needs to read). A coroutine that swallows even
    that keeps running, but the run no longer waits for it.
    """
    if task.done():
        return
    coro = task.get_coro()
    try:
        coro.close()
    except Exception:  # it would not close (it caught even that), or it failed as it closed
        _kept.append(coro)  # keep it out of the garbage collector, which would complain aloud
        del _kept[:-_KEEP]
    task.cancel()
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # read it: an abandoned task's error is not news
