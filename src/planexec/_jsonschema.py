"""JSON Schema validation whose cost is bounded by the sizes of the schema and the value.

Two draft 2020-12 validator classes that differ from jsonschema's own in a few keywords:

* ``uniqueItems`` is linear (jsonschema compares unhashable items pairwise: 100,000 objects would
  take hours); items are compared as JSON Schema compares them (``1`` equals ``1.0``, ``true``
  does not equal ``1``, object keys are unordered).
* :class:`SafeValidator` also runs ``pattern``, ``patternProperties`` and ``additionalProperties``
  with RE2 (:mod:`planexec._regex`), so a regex costs time linear in the text it reads whatever
  the pattern. For schemas whose patterns RE2 accepts.
* :class:`LinearValidator` keeps Python's ``re`` for patterns (lookaround, backreferences), for
  schemas a developer wrote with such patterns.

:func:`validator_for` picks :class:`SafeValidator` when every pattern of a schema compiles with RE2.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from planexec._regex import PatternError, compile_pattern, search

__all__ = ["LinearValidator", "SafeValidator", "validator_for"]

_PLAIN = frozenset({str, int, float, type(None)})


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


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

SafeValidator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    validators={
        "pattern": _pattern_keyword,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
    },
)
"""Draft 2020-12 with RE2 for every regex and a linear ``uniqueItems``."""


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
    except PatternError:
        return LinearValidator(schema)
    return SafeValidator(schema)
