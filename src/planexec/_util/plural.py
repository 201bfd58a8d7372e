"""Counts in words: "1 step", "2 steps", never "1 steps" nor a plural in brackets."""

from __future__ import annotations

__all__ = ["counted"]


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless ``count`` is 1 (``plural`` for irregular ones:
    ``counted(2, "reply", "replies")``). Counts are written with thousands separators."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
