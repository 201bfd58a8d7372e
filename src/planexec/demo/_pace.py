"""Simulated latency for the demo, so that a live board has something to show.

Delays are drawn from a seeded generator and scaled by ``scale`` (0: no delay at all). Nothing in the
scenario depends on them: they only change how fast it runs, never what it does.
"""

from __future__ import annotations

import asyncio
import random

__all__ = ["Pace"]


class Pace:
    """Delays between ``low`` and ``high`` seconds, times ``scale``."""

    def __init__(self, scale: float = 1.0, *, seed: int = 7) -> None:
        if scale < 0:
            raise ValueError("the pace must not be negative")
        self.scale = scale
        self._rng = random.Random(seed)

    def delay(self, low: float = 0.05, high: float = 0.3) -> float:
        if self.scale == 0:
            return 0.0
        return self.scale * self._rng.uniform(low, high)

    async def wait(self, low: float = 0.05, high: float = 0.3) -> None:
        await asyncio.sleep(self.delay(low, high))
