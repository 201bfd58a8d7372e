"""Seeded draws: a stable hash of the seed, the fault kind and a key becomes a number in [0, 1).

Nothing here reads the clock, Python's salted ``hash()`` or a shared random generator, so a
decision depends only on what it is about, never on when or in which order it is asked for.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["draw", "hits"]

_SCALE = float(1 << 64)


def draw(seed: int, kind: str, *key: str | int) -> float:
    """A number in [0, 1), the same for the same ``seed``, ``kind`` and ``key`` on every machine."""
    material = json.dumps([seed, kind, *key], ensure_ascii=True, separators=(",", ":"))
    digest = hashlib.sha256(material.encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def hits(rate: float, seed: int, kind: str, *key: str | int) -> bool:
    """Whether a fault of ``kind`` happens at ``key``: a rate of 0 never, 1 always."""
    return rate > 0 and draw(seed, kind, *key) < rate
