"""Ending tasks that will not end: code that ignores its cancellation must not keep a run (or the
process) from finishing."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["abandon"]


def abandon(task: asyncio.Task[Any]) -> None:
    """Give up on a cancelled task that is still running.

    Its coroutine is closed where it waits, which runs its ``finally`` blocks; the task then ends
    on the loop's next turn (with an error nobody needs to read). A coroutine that swallows even
    that keeps running, but the run no longer waits for it.
    """
    if task.done():
        return
    with contextlib.suppress(RuntimeError, ValueError):
        task.get_coro().close()
    task.cancel()
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # read it: an abandoned task's error is not news
