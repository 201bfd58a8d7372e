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
after which ``TooCostly`` is raised — a schema whose cost grows with the output it judges
(an ``anyOf`` of a thousand branches over a list of ten thousand items) fails instead of holding
the event loop for minutes.

:func:`quick_check` compiles a schema of the common keywords into a plain Python check that says
when a value certainly fits (most arguments do), so that only the others are given to the
validator, for its list of problems.
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec._util.regex import PatternError, compile_pattern, search

__all__ = ["MAX_WORK", "LinearValidator", "SafeValidator", "TooCostly", "bounded", "quick_check", "validator_for"]

MAX_WORK = 500_000
"""Keyword applications one validation may make under :func:`bounded`."""


class TooCostly(Exception):
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
                raise TooCostly(f"judging the output with this schema takes more than {MAX_WORK:,} steps")
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
    except PatternError:
        return LinearValidator(schema)
    return SafeValidator(schema)


# -- the quick check -------------------------------------------------------------------------

Quick = Callable[[Any], bool]
"""True: the value fits the schema (the validator would find no problem); False: not known."""

_KEYWORDS = frozenset(jsonschema.Draft202012Validator.VALIDATORS)
"""The keywords a draft 2020-12 validator applies; it ignores every other member of a schema."""

_NO_FORMAT = SafeValidator({}).format_checker is None
"""``format`` asserts nothing when the validator has no format checker (its default)."""


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Number)


_TYPES: dict[str, Callable[[Any], bool]] = {
    # Exactly the validator's types, but narrower where that is simpler (an integer-valued float
    # is an "integer" to the validator: it is left to it).
    "null": lambda v: v is None,
    "boolean": lambda v: v is True or v is False,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _always(_value: Any) -> bool:
    return True


class _Unsupported(Exception):
    """Internal: a schema the quick check does not cover."""


def quick_check(schema: Any) -> Quick | None:
    """A check of ``schema`` that returns True only for values :class:`SafeValidator` finds no
    problem with (outside :func:`bounded`); False sends a value to the validator. None: the
    schema uses keywords the quick check does not cover (``$ref``, ``oneOf``, ``pattern`` …).

    Covered: ``type``, ``properties``, ``required``, ``additionalProperties``, ``items``,
    ``enum``, ``const``, ``anyOf``, ``allOf``, the numeric bounds and the length bounds; the
    members a validator ignores (``description``, ``default``, ``title`` …) are ignored."""
    try:
        node = _quick(schema)
    except (_Unsupported, RecursionError):
        return None

    def check(value: Any) -> bool:
        return _FUEL.get() is None and node(value)

    return check


def _quick(schema: Any) -> Quick:
    if schema is True:
        return _always
    if type(schema) is not dict:
        raise _Unsupported
    checks: list[Quick] = []
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        checks.append(_quick_object(schema))
    for key, value in schema.items():
        if key not in _KEYWORDS or key in ("properties", "required", "additionalProperties"):
            continue
        if key == "format" and _NO_FORMAT:
            continue
        make = _QUICK_KEYWORDS.get(key)
        if make is None:
            raise _Unsupported
        checks.append(make(value))
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    every = tuple(checks)

    def all_of(value: Any) -> bool:
        return all(c(value) for c in every)

    return all_of


def _quick_object(schema: dict[str, Any]) -> Quick:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if type(properties) is not dict or type(required) is not list or not all(type(r) is str for r in required):
        raise _Unsupported
    subs = {key: _quick(sub) for key, sub in properties.items()}
    needed = tuple(required)
    if extra is True:
        other: Quick | None = _always
    elif extra is False:
        other = None
    else:
        other = _quick(extra)

    def fits(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for key in needed:
            if key not in value:
                return False
        for key, member in value.items():
            sub = subs.get(key, other)
            if sub is None or not sub(member):
                return False
        return True

    return fits


def _quick_type(kinds: Any) -> Quick:
    names = [kinds] if type(kinds) is str else kinds
    if type(names) is not list or not names or not all(type(k) is str and k in _TYPES for k in names):
        raise _Unsupported
    tests = tuple(_TYPES[k] for k in names)
    if len(tests) == 1:
        return tests[0]

    def any_type(value: Any) -> bool:
        return any(t(value) for t in tests)

    return any_type


def _quick_items(items: Any) -> Quick:
    if items is False:
        return lambda v: not isinstance(v, list) or not v
    sub = _quick(items)
    if sub is _always:
        return _always

    def each(value: Any) -> bool:
        return not isinstance(value, list) or all(map(sub, value))

    return each


def _quick_enum(values: Any) -> Quick:
    if type(values) is not list:
        raise _Unsupported
    allowed = frozenset(_frozen(v) for v in values)
    return lambda v: _frozen(v) in allowed


def _quick_const(const: Any) -> Quick:
    wanted = _frozen(const)
    return lambda v: _frozen(v) == wanted


def _quick_any_of(options: Any) -> Quick:
    if type(options) is not list or not options:
        raise _Unsupported
    tests = tuple(_quick(o) for o in options)
    return lambda v: any(t(v) for t in tests)


def _quick_all_of(options: Any) -> Quick:
    if type(options) is not list or not options:
        raise _Unsupported
    tests = tuple(_quick(o) for o in options)
    return lambda v: all(t(v) for t in tests)


def _bound(fails: Callable[[Any, Any], bool]) -> Callable[[Any], Quick]:
    """A numeric bound: it holds for anything that is not a number; a number of a kind other
    than int and float is left to the validator."""

    def make(limit: Any) -> Quick:
        if type(limit) not in (int, float):
            raise _Unsupported

        def holds(value: Any) -> bool:
            kind = type(value)
            if kind is int or kind is float:
                return not fails(value, limit)
            return not _is_number(value)

        return holds

    return make


def _length(kind: type[str] | type[list[Any]], fails: Callable[[int, int], bool]) -> Callable[[Any], Quick]:
    def make(limit: Any) -> Quick:
        if type(limit) is not int:
            raise _Unsupported
        return lambda v: not isinstance(v, kind) or not fails(len(v), limit)

    return make


_QUICK_KEYWORDS: dict[str, Callable[[Any], Quick]] = {
    "type": _quick_type,
    "items": _quick_items,
    "enum": _quick_enum,
    "const": _quick_const,
    "anyOf": _quick_any_of,
    "allOf": _quick_all_of,
    "minimum": _bound(lambda v, m: v < m),
    "maximum": _bound(lambda v, m: v > m),
    "exclusiveMinimum": _bound(lambda v, m: v <= m),
    "exclusiveMaximum": _bound(lambda v, m: v >= m),
    "minLength": _length(str, lambda n, m: n < m),
    "maxLength": _length(str, lambda n, m: n > m),
    "minItems": _length(list, lambda n, m: n < m),
    "maxItems": _length(list, lambda n, m: n > m),
}
