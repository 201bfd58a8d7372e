"""Finding the remembered goals most like a new one, in memory, without a database round trip.

Sparse vectors (the lexical embedder's) go into an inverted index: a goal's candidates are the
entries that share a feature with it, found through its rarest features first; a feature held by
more than ``common`` entries only adds to candidates already found. Exact goals are found through
a hash of their words. Dense vectors are compared one by one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

from planexec.memory._embed import goal_words

__all__ = ["GoalIndex", "goal_key", "normalised"]


def goal_key(goal: str) -> str:
    """The goal's words, case-folded, one space apart: equal for goals that differ only in case,
    spacing and punctuation."""
    return " ".join(goal_words(goal))


def normalised(vector: Mapping[str, float] | Sequence[float]) -> dict[str, float] | tuple[float, ...]:
    """``vector`` scaled to length 1 (a zero vector stays zero)."""
    if isinstance(vector, Mapping):
        norm = math.sqrt(sum(v * v for v in vector.values()))
        return {k: v / norm for k, v in vector.items()} if norm else {}
    values = tuple(float(v) for v in vector)
    norm = math.sqrt(sum(v * v for v in values))
    return tuple(v / norm for v in values) if norm else values


class GoalIndex:
    """The entries' goal vectors, searchable by similarity."""

    def __init__(self, *, common: int = 512) -> None:
        self.common = common
        self._sparse: dict[str, dict[str, float]] = {}
        self._dense: dict[str, tuple[float, ...]] = {}
        self._postings: dict[str, dict[str, float]] = {}
        self._exact: dict[str, set[str]] = {}
        self._keys: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, entry_id: str, goal: str, vector: Mapping[str, float] | Sequence[float]) -> None:
        self.remove(entry_id)
        key = goal_key(goal)
        self._keys[entry_id] = key
        self._exact.setdefault(key, set()).add(entry_id)
        v = normalised(vector)
        if isinstance(v, dict):
            self._sparse[entry_id] = v
            for feature, weight in v.items():
                self._postings.setdefault(feature, {})[entry_id] = weight
        else:
            self._dense[entry_id] = v

    def remove(self, entry_id: str) -> None:
        key = self._keys.pop(entry_id, None)
        if key is None:
            return
        same = self._exact.get(key)
        if same is not None:
            same.discard(entry_id)
            if not same:
                del self._exact[key]
        sparse = self._sparse.pop(entry_id, None)
        if sparse is not None:
            for feature in sparse:
                posting = self._postings.get(feature)
                if posting is not None:
                    posting.pop(entry_id, None)
                    if not posting:
                        del self._postings[feature]
        self._dense.pop(entry_id, None)

    def exact(self, goal: str) -> set[str]:
        """The entries whose goal has the same words as ``goal``."""
        return set(self._exact.get(goal_key(goal), ()))

    def nearest(
        self, vector: Mapping[str, float] | Sequence[float], *, k: int = 8, allowed: Iterable[str] | None = None
    ) -> list[tuple[float, str]]:
        """Up to ``k`` (similarity, entry id), most similar first; only ids in ``allowed`` when given."""
        keep = None if allowed is None else set(allowed)
        q = normalised(vector)
        scores: dict[str, float] = {}
        if isinstance(q, dict):
            features = sorted(
                ((f, w, self._postings.get(f)) for f, w in q.items()), key=lambda x: len(x[2]) if x[2] else 0
            )
            for _feature, weight, posting in features:
                if not posting:
                    continue
                if len(posting) > self.common and scores:
                    for entry_id in scores:
                        w = posting.get(entry_id)
                        if w is not None:
                            scores[entry_id] += weight * w
                    continue
                for entry_id, w in posting.items():
                    scores[entry_id] = scores.get(entry_id, 0.0) + weight * w
        else:
            for entry_id, v in self._dense.items():
                if len(v) == len(q):
                    scores[entry_id] = sum(a * b for a, b in zip(v, q, strict=True))
        items: Iterable[tuple[str, float]] = scores.items()
        if keep is not None:
            items = ((i, s) for i, s in items if i in keep)
        return [(s, i) for i, s in heapq.nlargest(k, items, key=lambda p: (p[1], p[0]))]
