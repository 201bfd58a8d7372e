"""Threads for sync tools: a call that never returns must neither starve other calls of threads
nor keep the process from exiting.

A sync tool's function runs in a worker thread while the event loop goes on. The workers are
daemon threads, so a stuck call is left behind when the process exits instead of being waited
for (the standard library's thread pools join their threads at exit). A caller that stops
waiting (its timeout, its cancellation) does not free the thread, which stays with the stuck
call; a new worker is started for the next call whenever none is idle, up to ``MAX_THREADS``
threads in all. Idle workers exit after ``IDLE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["IDLE_SECONDS", "MAX_THREADS", "run_in_thread"]

MAX_THREADS = 256
"""At most this many threads run sync tools at once, stuck ones included; more calls wait for one."""

IDLE_SECONDS = 30.0

_Item = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class _Workers:
    def __init__(self) -> None:
        self._work: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = 0
        self._idle = 0
        self._started = 0

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            spawn = self._idle == 0 and self._live < MAX_THREADS
            if spawn:
                self._live += 1
                self._started += 1
                number = self._started
            else:
                self._idle -= 1  # this item is taken by an idle worker (or waits for one)
        self._work.put((fn, loop, future))
        if spawn:
            threading.Thread(target=self._serve, name=f"planexec-tool-{number}", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                fn, loop, future = self._work.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0 and self._work.empty():
                        self._idle -= 1
                        self._live -= 1
                        return
                continue
            try:
                value: Any = fn()
                error: BaseException | None = None
            except StopIteration as e:  # a future cannot carry it: report it as a plain error
                value, error = None, RuntimeError(f"the tool raised StopIteration{f': {e}' if str(e) else ''}")
            except BaseException as e:  # a crash of the tool is reported to its caller, never raised here
                value, error = None, e
            _deliver(loop, future, value, error)
            with self._lock:
                self._idle += 1


def _deliver(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any, error: BaseException | None
) -> None:
    def settle() -> None:
        if future.done():
            return  # its caller stopped waiting
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody is waiting any more
        loop.call_soon_threadsafe(settle)


_workers = _Workers()


def run_in_thread(fn: Callable[[], Any]) -> asyncio.Future[Any]:
    """Run ``fn`` in a daemon worker thread, in a copy of the caller's context (its context
    variables: the current span, among others); await the returned future for its result."""
    return _workers.submit(functools.partial(contextvars.copy_context().run, fn))
