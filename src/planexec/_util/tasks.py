"""Ending tasks that will not end: code that ignores its cancellation must not keep a run (or the
process) from finishing."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import sys
import weakref
from collections.abc import Collection
from typing import Any

__all__ = ["abandon", "cancel_within"]

_stubborn: weakref.WeakSet[Any] = weakref.WeakSet()
"""Coroutines that would not close (they caught even the close of their frame)."""
_previous_hook: Any = None


def abandon(task: asyncio.Task[Any]) -> None:
    """Give up on a cancelled task that is still running.

    Its coroutine is closed where it waits, which runs its ``finally`` blocks; the task then ends
    on the loop's next turn (with an error nobody needs to read). A coroutine that swallows even
    that keeps running, but the run no longer waits for it, and Python's complaint when it is
    finally collected ("coroutine ignored GeneratorExit") is not printed: it was expected.
    """
    if task.done():
        return
    coro = task.get_coro()
    _hush(_awaited(coro))  # before closing: Python reports a refusal to close while it closes
    with contextlib.suppress(Exception):  # it would not close (it caught even that), or failed as it closed
        coro.close()
    task.cancel()
    task.add_done_callback(_forget)


def cancel_within(task: asyncio.Future[Any], grace: float, *, spawned: Collection[asyncio.Task[Any]] = ()) -> None:
    """Cancel ``task``; if it has not ended ``grace`` seconds later, abandon it, and every task of
    ``spawned`` (tasks it started, e.g. in a task group) still running then. Its outcome is read
    whenever it ends: nobody waits for it any more."""
    if task.done():
        _forget(task)
        return
    task.cancel()
    task.add_done_callback(_forget)
    if not isinstance(task, asyncio.Task):
        return

    def give_up() -> None:
        for child in list(spawned):  # first the tasks it waits for, then itself
            abandon(child)
        abandon(task)

    handle = asyncio.get_running_loop().call_later(grace, give_up)
    task.add_done_callback(lambda _t: handle.cancel())


def _forget(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # read it: an abandoned task's error is not news


def _awaited(coro: Any) -> list[Any]:
    """``coro`` and every coroutine it awaits, outermost first."""
    chain = []
    while coro is not None and hasattr(coro, "cr_await"):
        chain.append(coro)
        coro = coro.cr_await
    return chain


def _hush(chain: list[Any]) -> None:
    """Remember coroutines that would not close, so that their refusal is not reported again when
    they are collected."""
    global _previous_hook
    for coro in chain:
        _stubborn.add(coro)
    if _previous_hook is None:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable
        atexit.register(gc.collect)  # collected while the hook is still in place, not during teardown


def _unraisable(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, RuntimeError) and unraisable.object in _stubborn:
        return
    _previous_hook(unraisable)
