"""JSON Schema validation whose cost is bounded by the sizes of the schema and the value.

Two draft 2020-12 validator classes that differ from jsonschema's own in a few keywords:

* ``uniqueItems`` is linear (jsonschema compares unhashable items pairwise: 100,000 objects would
  take hours); items are compared as JSON Schema compares them (``1`` equals ``1.0``, ``true``
  does not equal ``1``, object keys are unordered).
* :class:`SafeValidator` also runs ``pattern``, ``patternProperties`` and ``additionalProperties``
  with RE2 (:mod:`planexec._util.regex`), so a regex costs time linear in the text it reads whatever
  the pattern. For schemas whose patterns RE2 accepts.
* :class:`LinearValidator` keeps Python's ``re`` for patterns (lookaround, backreferences), for
  schemas a developer wrote with such patterns.
* ``enum`` and ``const`` compare by hashing (an ``enum`` of 1,000 values costs one lookup per
  value judged, not 1,000 comparisons).

:func:`validator_for` picks :class:`SafeValidator` when every pattern of a schema compiles with RE2.
:func:`bounded` runs a validation with a work budget: at most ``MAX_WORK`` keyword applications,
after which ``_TooCostly`` is raised — a schema whose cost grows with the output it judges
(an ``anyOf`` of a thousand branches over a list of ten thousand items) fails instead of holding
the event loop for minutes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec._util.regex import _PatternError, compile_pattern, search

__all__ = ["MAX_WORK", "LinearValidator", "SafeValidator", "bounded", "validator_for"]

MAX_WORK = 500_000
"""Keyword applications one validation may make under :func:`bounded`."""


class _TooCostly(Exception):
    """A validation under :func:`bounded` needed more than its work budget."""


_FUEL: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("planexec_schema_fuel", default=None)


@contextlib.contextmanager
def bounded(work: int = MAX_WORK) -> Iterator[None]:
    """Validations by :class:`SafeValidator` inside the block may apply at most ``work`` keywords."""
    token = _FUEL.set([work])
    try:
        yield
    finally:
        _FUEL.reset(token)


def _counted(keyword: Callable[..., Iterator[ValidationError] | None]) -> Callable[..., Iterator[ValidationError]]:
    def apply(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        fuel = _FUEL.get()
        if fuel is not None:
            fuel[0] -= 1
            if fuel[0] < 0:
                raise _TooCostly(f"judging the output with this schema takes more than {MAX_WORK:,} steps")
        errors = keyword(validator, value, instance, schema)
        if errors is not None:
            yield from errors

    return apply


_PLAIN = frozenset({str, int, float, type(None)})


def _cut(text: str, limit: int) -> str:
    return clip(text, limit)


def _pattern_keyword(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{_cut(repr(instance), 80)} does not match {_cut(repr(pattern), 80)}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        regex = compile_pattern(pattern)
        for key, value in instance.items():
            if search(regex, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    regexes = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in known and not any(search(r, k) for r in regexes)]
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif allowed is False and extras:
        listing = ", ".join(repr(k) for k in extras[:10]) + (
            f" and {len(extras) - 10} more" if len(extras) > 10 else ""
        )
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"additional properties are not allowed ({_cut(listing, 300)} {verb} unexpected)")


_FROZEN_ENUMS: dict[int, tuple[Any, frozenset[Any]]] = {}
"""Hashed forms of the ``enum`` lists seen, by the list's id (the list is kept, so its id stays its own)."""


def _enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not isinstance(enums, list):
        return
    known = _FROZEN_ENUMS.get(id(enums))
    if known is None or known[0] is not enums:
        if len(_FROZEN_ENUMS) > 256:
            _FROZEN_ENUMS.clear()
        known = _FROZEN_ENUMS[id(enums)] = (enums, frozenset(_frozen(e) for e in enums))
    if _frozen(instance) not in known[1]:
        yield ValidationError(f"{_cut(repr(instance), 80)} is not one of the {counted(len(enums), 'value')} allowed")


def _const(validator: Any, const: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if _frozen(instance) != _frozen(const):
        yield ValidationError(f"{_cut(repr(const), 80)} was expected")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    for index, item in enumerate(instance):
        first = seen.setdefault(_frozen(item), index)
        if first != index:
            yield ValidationError(f"the array has non-unique elements: items {first} and {index} are equal")
            return


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a JSON value, equal exactly when JSON Schema calls the values equal.

    Strings, numbers and null stand for themselves; booleans, arrays and objects become tagged
    tuples, which equal no string, number or null and no tuple of another tag."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict or (kind is not bool and isinstance(value, dict)):
        return ("o", frozenset([(k, v if type(v) in _PLAIN else _frozen(v)) for k, v in value.items()]))
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return ("a", tuple([v if type(v) in _PLAIN else _frozen(v) for v in value]))
    if isinstance(value, bool):
        return ("b", bool(value))
    if isinstance(value, str | int | float):  # subclasses of the plain types
        return value
    return ("?", id(value))


LinearValidator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, validators={"uniqueItems": _unique_items}
)
"""Draft 2020-12 with a linear ``uniqueItems``; patterns with Python's ``re``."""

_SAFE_KEYWORDS: dict[str, Callable[..., Any]] = {
    **jsonschema.Draft202012Validator.VALIDATORS,
    "pattern": _pattern_keyword,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
    "enum": _enum,
    "const": _const,
}

SafeValidator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    validators={name: _counted(fn) for name, fn in _SAFE_KEYWORDS.items()},
)
"""Draft 2020-12 with RE2 for every regex, hashed ``enum``/``const``, a linear ``uniqueItems``,
and every keyword counted against the work budget of :func:`bounded`."""


def _patterns(schema: Any) -> Iterator[str]:
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                yield pattern
            properties = node.get("patternProperties")
            if isinstance(properties, dict):
                yield from (p for p in properties if isinstance(p, str))
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)


def validator_for(schema: Any) -> Any:
    """A validator of ``schema``: :class:`SafeValidator` when RE2 compiles all its patterns, else
    :class:`LinearValidator`."""
    try:
        for pattern in _patterns(schema):
            compile_pattern(pattern)
    except _PatternError:
        return LinearValidator(schema)
    return SafeValidator(schema)
