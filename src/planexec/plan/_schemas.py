"""JSON Schemas a planner writes (a step's ``output_schema``, a ``schema`` check), made safe to apply.

A planner's schema is hostile input, so before it judges anything it must be:

* JSON data, at most :data:`MAX_SCHEMA_CHARS` characters and :data:`MAX_SCHEMA_DEPTH` levels;
* a valid draft 2020-12 schema;
* self-contained: every ``$ref`` is a local JSON pointer (``#`` or ``#/$defs/name``) — a remote or
  file reference is refused and never fetched — and no ``$ref`` leads back to itself;
* small once expanded: with every ``$ref`` replaced by what it points at, at most
  :data:`MAX_SCHEMA_NODES` JSON values and :data:`MAX_SCHEMA_DEPTH` levels (each ``$ref`` followed
  counts as one level);
* without ``$dynamicRef``, ``$recursiveRef``, ``unevaluatedProperties``, ``unevaluatedItems`` or an
  embedded ``$id`` (their cost or their meaning cannot be bounded by this expansion);
* written with RE2 regexes in ``pattern`` and ``patternProperties`` (see :mod:`planexec._util.regex`).

Outputs are then validated against the expanded schema (no ``$ref`` left to resolve) by a draft
2020-12 validator whose ``pattern``, ``patternProperties`` and ``additionalProperties`` use RE2 and
whose ``uniqueItems`` is linear. Each schema node meets each output value a bounded number of
times, so judging one output costs about (expanded schema size × output size). Any exception while
validating becomes a failed check with its reason.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote

import jsonschema
from jsonschema.exceptions import ValidationError, best_match
from pydantic_core import to_json

from planexec._util.clip import clip
from planexec._util.json_schema import SafeValidator, TooCostly, bounded
from planexec._util.regex import PatternError, compile_pattern
from planexec._util.strict_json import json_problem
from planexec.errors import Problem
from planexec.tools import run_in_thread

__all__ = [
    "MAX_SCHEMA_CHARS",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "judge",
    "schema_errors",
    "schema_problems",
]

MAX_SCHEMA_CHARS = 100_000
"""The largest schema a planner may write, in characters of JSON text (approximately)."""

MAX_SCHEMA_DEPTH = 50
"""How deep a planner's schema may nest, in JSON levels, before and after its ``$ref``s are expanded."""

MAX_SCHEMA_NODES = 10_000
"""How many JSON values a planner's schema may hold once every ``$ref`` is expanded."""

MAX_ERRORS = 5
"""How many validation errors a failed schema check lists."""

_MESSAGE_CHARS = 300

_ONE = frozenset(
    {
        "additionalProperties",
        "propertyNames",
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
        "additionalItems",
    }
)
"""Keywords whose value is one subschema."""

_MANY = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
"""Keywords whose value is a list of subschemas."""

_NAMED = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"})
"""Keywords whose value maps names to subschemas."""

_DROPPED = frozenset(
    {"$ref", "$defs", "definitions", "$id", "$schema", "$anchor", "$dynamicAnchor", "$comment", "$vocabulary"}
)
"""Keywords left out of the expanded schema: they name or hold schemas, and judge nothing once
every ``$ref`` is replaced."""

_UNSUPPORTED = {
    "$dynamicRef": "use a local $ref",
    "$recursiveRef": "use a local $ref",
    "unevaluatedProperties": "use additionalProperties",
    "unevaluatedItems": "use items",
}


# -- the static check ----------------------------------------------------------------------------


def schema_problems(schema: Any, *, where: str, label: str) -> list[Problem]:
    """Every reason ``schema`` cannot be used to judge outputs (see the module docstring).

    ``where`` goes into each problem's ``where``; ``label`` names the schema in its message
    (``output_schema``, ``checks[2]``). Codes: ``invalid_schema``, ``invalid_pattern``,
    ``not_json``, ``too_deep``, ``too_large``.
    """
    prepared = _prepare(schema)
    return [Problem(code=code, where=where, message=f"{label}: {message}") for code, message in prepared.problems]


# -- judging an output ---------------------------------------------------------------------------


def schema_errors(schema: Any, instance: Any, *, limit: int = MAX_ERRORS) -> list[str]:
    """Why ``instance`` does not fit ``schema`` (at most ``limit`` reasons, then ``"..."``); empty
    when it fits. Never raises: a schema that cannot be used and an exception while validating
    (an output nested too deeply to compare, a number too large to divide) are reasons.

    The output is taken as it is: it is the runtime's to make sure outputs are JSON data."""
    prepared = _prepare(schema)
    if prepared.problems:
        return [f"the schema cannot be used: {message}" for _, message in prepared.problems[:limit]]
    assert prepared.validator is not None
    try:
        with bounded():
            errors = list(itertools.islice(prepared.validator.iter_errors(instance), limit + 1))
    except TooCostly as e:
        return [f"the schema could not be applied to the output: {e}"]
    except Exception as e:  # anything the schema makes the validator do is the schema's failure
        return [f"the schema could not be applied to the output: {type(e).__name__}: {_cut(str(e))}"]
    messages = [_describe(e) for e in errors[:limit]]
    if len(errors) > limit:
        messages.append("...")
    return messages


_INLINE_CHARS = 4_096
"""Outputs up to about this size are judged on the event loop; larger ones in a worker thread."""


async def judge(schema: Any, instance: Any, *, limit: int = MAX_ERRORS) -> list[str]:
    """:func:`schema_errors`, judged where it does not hold the event loop: a large output is judged
    in a worker thread (the work budget still bounds it), a small one at once."""
    try:
        small = len(to_json(instance, serialize_unknown=True)) <= _INLINE_CHARS
    except Exception:  # no JSON form: schema_errors says why, quickly
        small = True
    if small:
        return schema_errors(schema, instance, limit=limit)
    return cast(list[str], await run_in_thread(lambda: schema_errors(schema, instance, limit=limit)))


def _describe(error: ValidationError) -> str:
    where = "".join(f"/{_escape(str(p))}" for p in error.absolute_path)
    return f"at {where}: {_cut(error.message)}" if where else _cut(error.message)


# -- preparing a schema: checked, expanded and compiled once ---------------------------------------


@dataclass(frozen=True)
class _Prepared:
    problems: tuple[tuple[str, str], ...]
    """(code, message) pairs; empty when the schema can be used."""
    validator: Any = None


def _prepare(schema: Any) -> _Prepared:
    problem = json_problem(schema, max_depth=MAX_SCHEMA_DEPTH, max_chars=MAX_SCHEMA_CHARS)
    if problem is not None:
        at = f" at {problem.where}" if problem.where else ""
        return _Prepared(problems=((problem.code, f"the schema{at}: {problem.message}"),))
    if not isinstance(schema, dict | bool):
        return _Prepared(problems=(("invalid_schema", "a JSON Schema is an object or a boolean"),))
    return _prepare_text(json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


@functools.lru_cache(maxsize=64)
def _prepare_text(text: str) -> _Prepared:
    """A schema, given as canonical JSON text so that equal schemas share one preparation."""
    schema = json.loads(text)
    problems: list[tuple[str, str]] = []
    try:
        error = best_match(_META.iter_errors(schema))
        if error is not None:
            problems.append(("invalid_schema", f"invalid JSON Schema: {_cut(error.message)}"))
    except RecursionError:
        problems.append(("too_deep", "nested too deeply to check"))
    except Exception as e:  # the meta-schema check must not fail any other way either
        problems.append(("invalid_schema", f"invalid JSON Schema: {type(e).__name__}: {_cut(str(e))}"))
    problems += _inspect(schema)
    if problems:
        return _Prepared(problems=tuple(problems))
    try:
        expanded = _Expander(schema).expand(schema, 0)[0]
    except _Refused as e:
        return _Prepared(problems=((e.code, e.message),))
    try:
        validator = SafeValidator(expanded)
    except Exception as e:
        return _Prepared(problems=(("invalid_schema", f"the schema cannot be used: {type(e).__name__}: {e}"),))
    return _Prepared(problems=(), validator=validator)


def _subschemas(node: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(JSON pointer suffix, subschema) for every place ``node`` holds a subschema."""
    for key, value in node.items():
        if key in _ONE:
            if key == "items" and isinstance(value, list):  # the draft 4–2019 form
                yield from ((f"/items/{i}", v) for i, v in enumerate(value))
            else:
                yield f"/{_escape(key)}", value
        elif key in _MANY and isinstance(value, list):
            yield from ((f"/{key}/{i}", v) for i, v in enumerate(value))
        elif (key in _NAMED or key == "dependencies") and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict | bool):
                    yield f"/{_escape(key)}/{_escape(name)}", sub


def _inspect(schema: Any) -> list[tuple[str, str]]:
    """Refs, keywords and regexes a planner's schema may not use, wherever they are."""
    problems: list[tuple[str, str]] = []
    todo: list[tuple[str, Any]] = [("", schema)]
    while todo:
        at, node = todo.pop()
        if not isinstance(node, dict):
            continue
        place = f" at {at}" if at else ""
        for keyword, advice in _UNSUPPORTED.items():
            if keyword in node:
                problems.append(
                    ("invalid_schema", f"{keyword}{place} is not supported in a planner's schema: {advice}")
                )
        if at and "$id" in node:
            problems.append(("invalid_schema", f"$id{place}: only the top of a planner's schema may have an $id"))
        ref = node.get("$ref")
        if ref is not None and (not isinstance(ref, str) or not _local(ref)):
            problems.append(
                (
                    "invalid_schema",
                    f"$ref {_cut(repr(ref), 120)}{place} is not allowed: only local refs such as '#/$defs/name' "
                    "(nothing is fetched)",
                )
            )
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            problems += _pattern(pattern, f"{at}/pattern")
        named = node.get("patternProperties")
        if isinstance(named, dict):
            for key in named:
                problems += _pattern(key, f"{at}/patternProperties")
        todo.extend((at + suffix, sub) for suffix, sub in _subschemas(node))
    return problems[:20]


def _pattern(pattern: str, at: str) -> list[tuple[str, str]]:
    try:
        compile_pattern(pattern)
    except PatternError as e:
        return [("invalid_pattern", f"invalid pattern {_cut(repr(pattern), 120)} at {at}: {e}")]
    return []


def _local(ref: str) -> bool:
    return ref == "#" or ref.startswith("#/")


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message


class _Expander:
    """Replaces every ``$ref`` by what it points at, within the node and depth caps.

    ``expand`` returns (expanded node, JSON values in it, levels below it). A ref's expansion is
    made once and shared wherever the ref appears (it still counts towards the caps each time).
    """

    def __init__(self, root: Any) -> None:
        self._root = root
        self._done: dict[str, tuple[Any, int, int]] = {}
        self._active: set[str] = set()

    def expand(self, node: Any, level: int) -> tuple[Any, int, int]:
        if level > MAX_SCHEMA_DEPTH:
            raise _Refused(
                "invalid_schema", f"nested deeper than {MAX_SCHEMA_DEPTH} levels once its $refs are expanded"
            )
        if not isinstance(node, dict):
            return node, _count(node), 0
        out: dict[str, Any] = {}
        size, height = 1, 0
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key in _ONE and not (key == "items" and isinstance(value, list)):
                sub, n, h = self.expand(value, level + 1)
                out[key], size, height = sub, size + n, max(height, h + 1)
            elif (key in _MANY or key == "items") and isinstance(value, list):
                items = []
                for v in value:
                    sub, n, h = self.expand(v, level + 2)
                    items.append(sub)
                    size, height = self._add(size + n, height, h + 2)
                out[key], size = items, size + 1
            elif (key in _NAMED or key == "dependencies") and isinstance(value, dict):
                named: dict[str, Any] = {}
                for name, v in value.items():
                    if isinstance(v, dict | bool):
                        sub, n, h = self.expand(v, level + 2)
                    else:  # the draft 7 form of dependencies: a list of names
                        sub, n, h = v, _count(v), 1
                    named[name] = sub
                    size, height = self._add(size + n, height, h + 2)
                out[key], size = named, size + 1
            else:
                out[key] = value
                size += _count(value)
            self._check(size)
        ref = node.get("$ref")
        if isinstance(ref, str):
            target, n, h = self._follow(ref, level + 1)
            if not out:
                return target, n, h + 1
            size, height = self._add(size + n + 2, height, h + 2)
            return {"allOf": [out, target]}, size, height
        return out, size, height

    def _add(self, size: int, height: int, sub_height: int) -> tuple[int, int]:
        self._check(size)
        return size, max(height, sub_height)

    def _check(self, size: int) -> None:
        if size > MAX_SCHEMA_NODES:
            raise _Refused(
                "invalid_schema", f"larger than {MAX_SCHEMA_NODES:,} JSON values once its $refs are expanded"
            )

    def _follow(self, ref: str, level: int) -> tuple[Any, int, int]:
        done = self._done.get(ref)
        if done is not None:
            if level + done[2] > MAX_SCHEMA_DEPTH:
                raise _Refused(
                    "invalid_schema", f"nested deeper than {MAX_SCHEMA_DEPTH} levels once its $refs are expanded"
                )
            return done
        if ref in self._active:
            raise _Refused("invalid_schema", f"$ref {_cut(repr(ref), 120)} leads back to itself (a $ref cycle)")
        target = _resolve(self._root, ref)
        self._active.add(ref)
        done = self.expand(target, level)
        self._active.discard(ref)
        self._done[ref] = done
        return done


def _resolve(root: Any, ref: str) -> Any:
    node = root
    if ref == "#":
        return node
    for raw in ref[2:].split("/"):
        token = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isascii() and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise _Refused("invalid_schema", f"$ref {_cut(repr(ref), 120)} points at nothing in the schema")
    return node


def _count(value: Any) -> int:
    """How many JSON values ``value`` holds (itself included)."""
    if not isinstance(value, dict | list):
        return 1
    total = 0
    todo = [value]
    while todo:
        item = todo.pop()
        total += 1
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return total


_META = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
"""The meta-schema, without format checks (a planner's regexes are RE2's to judge, not Python's)."""


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _cut(text: str, limit: int = _MESSAGE_CHARS) -> str:
    return clip(text, limit)
