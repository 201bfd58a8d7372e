"""Finding the remembered goals most like a new one, in memory, without a database round trip.

Sparse vectors (the lexical embedder's) go into an inverted index: a goal's candidates are the
entries that share a feature with it, found through its rarest features first; a feature held by
more than ``common`` entries only adds to candidates already found. Exact goals are found through
a hash of their words. Dense vectors are compared one by one.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from planexec.memory._embed import goal_words

__all__ = ["GoalIndex", "goal_key", "normalised", "template_key"]

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")


def goal_key(goal: str) -> str:
    """The goal's words, case-folded, one space apart: equal for goals that differ only in case,
    spacing and punctuation."""
    return " ".join(goal_words(goal))


def template_key(goal: str) -> str:
    """The goal's words with its values — quoted text, numbers, names with a dot (``notes.txt``)
    — each replaced by ``#``: equal for goals that differ only in such values."""
    words = goal_words(_QUOTED.sub(" # ", goal))
    return " ".join("#" if any(c.isdigit() for c in w) or "." in w else w for w in words)


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

    def __init__(self, *, common: int = 256, rerank: int = 16, features: int = 48) -> None:
        self.common = common
        self.rerank = rerank
        self.features = features
        self._sparse: dict[str, dict[str, float]] = {}
        self._dense: dict[str, tuple[float, ...]] = {}
        self._matrix: tuple[list[str], Any] | None = None
        """The dense vectors as one numpy matrix (when numpy is installed), made on first search."""
        self._postings: dict[str, dict[str, float]] = {}
        self._exact: dict[str, set[str]] = {}
        self._templates: dict[str, set[str]] = {}
        self._keys: dict[str, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, entry_id: str, goal: str, vector: Mapping[str, float] | Sequence[float]) -> None:
        self.remove(entry_id)
        key, template = goal_key(goal), template_key(goal)
        self._keys[entry_id] = (key, template)
        self._exact.setdefault(key, set()).add(entry_id)
        self._templates.setdefault(template, set()).add(entry_id)
        v = normalised(vector)
        if isinstance(v, dict):
            self._sparse[entry_id] = v
            for feature, weight in v.items():
                self._postings.setdefault(feature, {})[entry_id] = weight
        else:
            self._dense[entry_id] = v
            self._matrix = None

    def remove(self, entry_id: str) -> None:
        keys = self._keys.pop(entry_id, None)
        if keys is None:
            return
        for table, key in ((self._exact, keys[0]), (self._templates, keys[1])):
            same = table.get(key)
            if same is not None:
                same.discard(entry_id)
                if not same:
                    del table[key]
        sparse = self._sparse.pop(entry_id, None)
        if sparse is not None:
            for feature in sparse:
                posting = self._postings.get(feature)
                if posting is not None:
                    posting.pop(entry_id, None)
                    if not posting:
                        del self._postings[feature]
        if self._dense.pop(entry_id, None) is not None:
            self._matrix = None

    def exact(self, goal: str) -> set[str]:
        """The entries whose goal has the same words as ``goal``."""
        return set(self._exact.get(goal_key(goal), ()))

    def same_template(self, goal: str) -> set[str]:
        """The entries whose goal differs from ``goal`` only in its values (``template_key``)."""
        return set(self._templates.get(template_key(goal), ()))

    def similarity(self, entry_id: str, vector: Mapping[str, float] | Sequence[float]) -> float:
        """How alike an entry's goal and ``vector`` are (0 when the entry is not indexed)."""
        q = normalised(vector)
        if isinstance(q, dict):
            return _dot(q, self._sparse.get(entry_id, {}))
        v = self._dense.get(entry_id)
        return sum(a * b for a, b in zip(v, q, strict=True)) if v is not None and len(v) == len(q) else 0.0

    def _dense_scores(self, q: tuple[float, ...]) -> dict[str, float]:
        """Every dense entry's similarity to ``q``: one matrix product with numpy (installed with
        the sentence embedder), else one by one."""
        np = _numpy()
        if np is None or not self._dense:
            return {
                entry_id: sum(a * b for a, b in zip(v, q, strict=True))
                for entry_id, v in self._dense.items()
                if len(v) == len(q)
            }
        if self._matrix is None:
            ids = [i for i, v in self._dense.items() if len(v) == len(q)]
            self._matrix = (ids, np.array([self._dense[i] for i in ids], dtype=np.float64).reshape(len(ids), len(q)))
        ids, matrix = self._matrix
        if not ids or matrix.shape[1] != len(q):
            self._matrix = None
            return {}
        products = matrix @ np.asarray(q, dtype=np.float64)
        return {entry_id: float(s) for entry_id, s in zip(ids, products.tolist(), strict=True)}

    def nearest(
        self, vector: Mapping[str, float] | Sequence[float], *, k: int = 8, allowed: Iterable[str] | None = None
    ) -> list[tuple[float, str]]:
        """Up to ``k`` (similarity, entry id), most similar first; only ids in ``allowed`` when given."""
        keep = None if allowed is None else allowed if isinstance(allowed, set | frozenset) else set(allowed)
        if keep is not None and len(keep) >= len(self._keys):
            keep = None  # every entry is allowed (the usual case): no filtering
        q = normalised(vector)
        scores: dict[str, float] = {}
        if isinstance(q, dict):
            postings = self._postings
            features = sorted(((len(p), w, p) for f, w in q.items() if (p := postings.get(f))), key=itemgetter(0))
            # Candidates come from the goal's rarest features (at most ``features`` of them): a
            # common feature, or one past that many, counts only in the exact rerank below.
            for size, weight, posting in features[: self.features]:
                if size > self.common and scores:
                    break
                get = scores.get
                for entry_id, w in posting.items():
                    scores[entry_id] = get(entry_id, 0.0) + weight * w
            if keep is not None:
                scores = {i: s for i, s in scores.items() if i in keep}
                keep = None
            if len(scores) > self.rerank:
                scores = dict(heapq.nlargest(self.rerank, scores.items(), key=itemgetter(1)))
            sparse = self._sparse
            scores = {i: _dot(q, sparse[i]) for i in scores}
        else:
            scores = self._dense_scores(q)
        items: Iterable[tuple[str, float]] = scores.items()
        if keep is not None:
            items = ((i, s) for i, s in items if i in keep)
        return [(s, i) for i, s in heapq.nlargest(k, items, key=lambda p: (p[1], p[0]))]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _dot(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    if len(b) < len(a):
        a, b = b, a
    return sum(w * b.get(f, 0.0) for f, w in a.items())
