"""Small text helpers shared by the listings: times, durations, money and cut text."""

from __future__ import annotations

import datetime

__all__ = ["cut", "money", "seconds", "when"]


def cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def when(at: float | None) -> str:
    """An epoch time as local date and time."""
    if at is None:
        return ""
    return datetime.datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float | None) -> str:
    return "" if value is None else f"{max(0.0, value):.2f}s"


def money(value: float) -> str:
    return f"${value:.4f}"
