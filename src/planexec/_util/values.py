"""``replaced``: ``dataclasses.replace`` for the values made on every call (a model's answer, a
planning round's check context), at a fraction of its cost."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["replaced"]

T = TypeVar("T")

_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str], Callable[[Any], Any]]] = {}
"""Each dataclass's fields set by its ``__init__``, in order, found once (``fields`` is not free)."""


def replaced(value: T, **changes: Any) -> T:
    """A copy of the dataclass ``value`` with ``changes``, as ``dataclasses.replace`` makes it
    (through ``__init__``, so ``__post_init__`` checks it); for dataclasses with no ``InitVar``."""
    kind = type(value)
    known = _FIELDS.get(kind)
    if known is None:
        names = tuple(f.name for f in dataclasses.fields(kind) if f.init)  # type: ignore[arg-type]
        if len(names) < 2:
            return dataclasses.replace(value, **changes)  # type: ignore[type-var]
        known = _FIELDS[kind] = (names, frozenset(names), operator.attrgetter(*names))
    names, allowed, read = known
    if not allowed.issuperset(changes):
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]  # it says what is wrong
    kwargs = dict(zip(names, read(value), strict=True))
    kwargs.update(changes)
    return kind(**kwargs)
