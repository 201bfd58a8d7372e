"""What every embedder checks before it embeds: a list of strings, every problem listed at once."""

from __future__ import annotations

import math
from collections.abc import Sequence

from planexec.errors import Problem, UsageError

__all__ = ["checked_texts", "unit_vector"]

_LISTED = 20
"""Problems listed one by one before the rest are counted in one more."""


def checked_texts(texts: object, embedder: str, *, allow_empty: bool = True) -> list[str]:
    """``texts`` as a list, or :class:`UsageError` naming every item that is not a string (and, when
    ``allow_empty`` is false, every string with nothing but whitespace in it)."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise UsageError(
            f"{embedder} embeds a list of texts",
            [Problem(code="texts", where="texts", message=f"a list of strings, not a {type(texts).__name__}")],
        )
    problems: list[Problem] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            problems.append(
                Problem(code="text", where=f"texts[{i}]", message=f"must be a str, not {type(text).__name__}")
            )
        elif not allow_empty and not text.strip():
            problems.append(Problem(code="text", where=f"texts[{i}]", message="empty: the provider refuses it"))
    if problems:
        if len(problems) > _LISTED:
            more = len(problems) - _LISTED
            problems = [*problems[:_LISTED], Problem(code="text", where="texts", message=f"and {more} more")]
        raise UsageError(f"{embedder} cannot embed these texts", problems)
    return list(texts)


def unit_vector(values: Sequence[float]) -> list[float]:
    """``values`` scaled to length 1 (in double precision); all zeros stay zeros."""
    norm = math.sqrt(math.fsum(v * v for v in values))
    if norm == 0.0:
        return [0.0] * len(values)
    return [v / norm for v in values]
