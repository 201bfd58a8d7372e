"""Provider limits: at most so many calls at once, and so many a minute, per provider.

A :class:`ProviderLimits` is a value; the state that enforces it (who holds a slot, when the last
requests started) lives in one limiter per (provider, limits) pair, shared by every caller in the
process that counts against that pair. A limiter is not tied to an event loop: its concurrency
slots are a semaphore per running loop (made when a loop first asks), so one program may call
``asyncio.run`` as often as it likes, and its request starts are shared by every loop.

Which limits a call counts against is said by the :class:`~planexec.models.Providers` value in
effect (``use_providers``); outside any, the defaults — no limits.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from planexec.errors import Problem, UsageError

__all__ = ["DEFAULT_LIMITS", "LimitsSource", "ProviderLimits", "acquire", "limits_from", "limits_in_effect"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderLimits:
    """At most ``max_concurrency`` calls at once and ``requests_per_minute`` calls in any minute
    (None: no such limit)."""

    max_concurrency: int | None = None
    requests_per_minute: float | None = None

    def __post_init__(self) -> None:
        problems = []
        most = self.max_concurrency
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
            problems.append(
                Problem(
                    code="limits", where="max_concurrency", message=f"must be a whole number >= 1 or None, not {most!r}"
                )
            )
        rate = self.requests_per_minute
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0
        ):
            problems.append(
                Problem(
                    code="limits",
                    where="requests_per_minute",
                    message=f"must be a positive finite number or None, not {rate!r}",
                )
            )
        if problems:
            raise UsageError("invalid provider limits", problems)

    @property
    def limits_anything(self) -> bool:
        return self.max_concurrency is not None or self.requests_per_minute is not None


DEFAULT_LIMITS = ProviderLimits()
"""What a provider with no limits of its own gets: none."""


class LimitsSource(Protocol):
    """Where the limits of a provider come from (a :class:`~planexec.models.Providers` value)."""

    def limits_for(self, provider: str) -> ProviderLimits: ...


_in_effect: ContextVar[LimitsSource | None] = ContextVar("planexec_providers", default=None)


@contextmanager
def limits_from(source: LimitsSource) -> Iterator[None]:
    """Calls made in this block (in this task, and in the tasks it starts) count against the limits
    ``source`` gives."""
    token = _in_effect.set(source)
    try:
        yield
    finally:
        _in_effect.reset(token)


def limits_in_effect(provider: str) -> ProviderLimits:
    """The limits a call to ``provider`` counts against here and now."""
    source = _in_effect.get()
    return source.limits_for(provider) if source is not None else DEFAULT_LIMITS


class _Limiter:
    """What enforces one provider's limits: request starts shared by every loop, and a semaphore
    for the concurrency limit in each loop that has asked for one."""

    def __init__(self, limits: ProviderLimits) -> None:
        self.limits = limits
        self._guard = threading.Lock()
        self._starts: deque[float] = deque()
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    async def acquire(self) -> asyncio.Semaphore | None:
        """Wait until a call may start; the semaphore it holds a slot of (release it after), if any."""
        rate = self.limits.requests_per_minute
        if rate is not None:
            while True:
                with self._guard:
                    now = time.monotonic()
                    while self._starts and now - self._starts[0] >= 60.0:
                        self._starts.popleft()
                    if len(self._starts) < rate:
                        self._starts.append(now)
                        break
                    wait = 60.0 - (now - self._starts[0])
                await asyncio.sleep(wait)
        most = self.limits.max_concurrency
        if most is None:
            return None
        loop = asyncio.get_running_loop()
        with self._guard:
            slots = self._slots.get(loop)
            if slots is None:
                slots = self._slots[loop] = asyncio.Semaphore(most)
        await slots.acquire()
        return slots


_limiters: dict[tuple[str, ProviderLimits], _Limiter] = {}
_limiters_guard = threading.Lock()


async def acquire(provider: str) -> asyncio.Semaphore | None:
    """Wait until a call to ``provider`` may start, within the limits in effect; the semaphore whose
    slot the call holds (release it when the call ends), or None."""
    limits = limits_in_effect(provider)
    if not limits.limits_anything:
        return None
    key = (provider, limits)
    limiter = _limiters.get(key)
    if limiter is None:
        with _limiters_guard:
            limiter = _limiters.setdefault(key, _Limiter(limits))
    return await limiter.acquire()
