"""Embedders: text in, a vector out, for finding remembered plans whose goal is like a new one.

An embedder is a plain value with a ``name`` (kept with every memory entry, so that entries made
by another embedder are never compared with this one's vectors), a ``kind`` and one async
``embed`` method:

    sparse   a mapping of feature to weight (the lexical default): searched through an inverted
             index, fast at any size
    dense    a list of floats of one length (sentence and provider embeddings): compared one by one

Vectors are normalised to length 1 by the memory, so similarity is their dot product.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, runtime_checkable

__all__ = ["DenseVector", "Embedder", "LexicalEmbedder", "SparseVector", "Vector", "goal_words"]

SparseVector = Mapping[str, float]
DenseVector = Sequence[float]
Vector = SparseVector | DenseVector

_WORD = re.compile(r"[^\W_]+(?:[.'][^\W_]+)*", re.UNICODE)

STOP_WORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "then",
        "this",
        "to",
        "was",
        "were",
        "will",
        "with",
    )
)


@runtime_checkable
class Embedder(Protocol):
    """What turns goals into vectors. ``name`` says which embedder (and which model) made a vector."""

    @property
    def name(self) -> str:
        """Which embedder, and which model: vectors of different names are never compared."""
        ...

    @property
    def kind(self) -> Literal["sparse", "dense"]: ...

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text, in order."""
        ...


def goal_words(text: str) -> list[str]:
    """The words of ``text`` as the lexical embedder sees them: case-folded, accents kept, file
    names and decimals whole (``report.txt``, ``3.5``)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _WORD.findall(folded)


class LexicalEmbedder:
    """The default: words and word pairs of the goal, weighted by ``1 + log(count)``, no model.

    Numbers count as the word ``#num`` as well as themselves, so goals that differ only in their
    numbers stay close. Common words (``the``, ``to`` …) count a quarter. Needs nothing installed
    and gives the same vector for the same text on every machine.
    """

    kind: Literal["sparse"] = "sparse"

    def __init__(self, *, pairs: float = 0.5) -> None:
        if isinstance(pairs, bool) or not isinstance(pairs, int | float) or not 0 <= pairs <= 1:
            from planexec.errors import Problem, UsageError

            raise UsageError(
                "invalid lexical embedder", [Problem(code="embedder", where="pairs", message="must be from 0 to 1")]
            )
        self.pairs = float(pairs)
        self.name = "lexical-1" if self.pairs == 0.5 else f"lexical-1:pairs={self.pairs:g}"

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return [self.vector(t) for t in texts]

    def vector(self, text: str) -> dict[str, float]:
        """The (unnormalised) vector of one text, at once."""
        counts: dict[str, float] = {}
        words = goal_words(text)
        for w in words:
            weight = 0.25 if w in STOP_WORDS else 1.0
            counts[w] = counts.get(w, 0.0) + weight
            if _is_number(w):
                counts["#num"] = counts.get("#num", 0.0) + 0.5
        if self.pairs:
            for a, b in itertools.pairwise(words):
                key = f"{a} {b}"
                counts[key] = counts.get(key, 0.0) + self.pairs
        return {k: 1.0 + math.log(v) if v >= 1 else v for k, v in counts.items()}


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
