"""A tool's arguments as the planner reads them: a compact signature, not the JSON Schema.

``lookup(i: integer, mode?: "fast"|"full" = "fast")`` says what ``{"type": "object",
"properties": ...}`` says in a fifth of the characters. Nothing the schema says is dropped but
``title`` (which names what is already named): descriptions follow the signature, one line per
argument; constraints (``minimum``, ``pattern``, ``format`` …) follow the type as compact JSON;
``?`` marks an optional argument, ``= v`` its default, ``...`` an object open to more members.
A schema the signature form cannot say faithfully (``$ref``, ``not``, ``if``, an argument whose
members are themselves a schema …) is sent as compact JSON, as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["returns", "signature"]

_MAX_DEPTH = 4
"""How deep nested objects are written as signatures before the JSON form is used."""

_SHAPE = frozenset({"type", "properties", "required", "items", "enum", "const", "anyOf", "oneOf"})
_IGNORED = frozenset({"title", "$schema"})
_SIMPLE = frozenset({"string", "integer", "number", "boolean", "null", "object", "array"})


class _NoSignature(Exception):
    """Internal: the schema needs its JSON form."""


def signature(name: str, schema: Mapping[str, Any]) -> tuple[str, list[str]]:
    """``name(args…)`` and notes (one per described argument), or ``name`` and the schema as JSON.

    Local references to the schema's own ``$defs`` (as pydantic writes nested models) are written
    in place, when they do not refer back to themselves."""
    try:
        if not isinstance(schema, Mapping):
            raise _NoSignature
        defs = schema.get("$defs", {})
        if not isinstance(defs, Mapping):
            raise _NoSignature
        _DEFS.append(defs)
        _LEFT.append(_SIZE_FACTOR * len(_json(schema)) + _SIZE_SLACK)
        try:
            params, notes = _params({k: v for k, v in schema.items() if k != "$defs"}, "", 0)
        finally:
            _DEFS.pop()
            _LEFT.pop()
    except _NoSignature:
        return name, ["args schema: " + _json(schema)]
    return f"{name}({params})", notes


def returns(schema: Mapping[str, Any]) -> tuple[str, list[str]]:
    """What a tool returns, in signature form (``{iban: string, amount: number}``), and notes (one
    per described field, as ``returns.iban: ...``); a schema the form cannot say is written as JSON."""
    try:
        if not isinstance(schema, Mapping):
            raise _NoSignature
        defs = schema.get("$defs", {})
        if not isinstance(defs, Mapping):
            raise _NoSignature
        _DEFS.append(defs)
        _LEFT.append(_SIZE_FACTOR * len(_json(schema)) + _SIZE_SLACK)
        try:
            shown = {k: v for k, v in schema.items() if k != "$defs" and (k, v) != ("additionalProperties", True)}
            return _type(shown, "returns.", 0)
        finally:
            _DEFS.pop()
            _LEFT.pop()
    except _NoSignature:
        return _json(schema), []


_DEFS: list[Mapping[str, Any]] = []
"""The ``$defs`` of the schema being written (a stack: signatures are written one at a time)."""

_LEFT: list[int] = []
"""How many more characters the signature being written may take (a stack, as ``_DEFS``)."""

_SIZE_FACTOR = 2
_SIZE_SLACK = 200
"""A signature may take at most twice the characters of the schema's JSON (and a little): a
definition referred to from many places is written in each, and references that fan out would
otherwise write a small schema out as millions of characters, in every planner request."""


def _spend(text: str) -> None:
    """Count ``text`` against the signature's allowance; past it, the JSON form is used."""
    _LEFT[-1] -= len(text)
    if _LEFT[-1] < 0:
        raise _NoSignature


def _resolved(schema: Any, depth: int) -> Any:
    """A ``{"$ref": "#/$defs/Name"}`` schema replaced by its definition (annotations beside the
    reference kept); anything else as it is."""
    if not isinstance(schema, Mapping) or "$ref" not in schema:
        return schema
    ref = schema["$ref"]
    defs = _DEFS[-1] if _DEFS else {}
    if not isinstance(ref, str) or not ref.startswith("#/$defs/") or depth > _MAX_DEPTH:
        raise _NoSignature
    target = defs.get(ref[len("#/$defs/") :])
    if not isinstance(target, Mapping) or "$ref" in target:
        raise _NoSignature
    beside = {k: v for k, v in schema.items() if k != "$ref"}
    return {**target, **beside}


def _params(schema: Mapping[str, Any], prefix: str, depth: int) -> tuple[str, list[str]]:
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        raise _NoSignature
    if schema.get("type", "object") != "object" or not set(schema) <= _SHAPE | _IGNORED | {
        "additionalProperties",
        "description",
    }:
        raise _NoSignature
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(required, list) or not isinstance(extra, bool):
        raise _NoSignature
    if not all(isinstance(r, str) for r in required) or any(r not in properties for r in required):
        raise _NoSignature
    parts: list[str] = []
    notes: list[str] = []
    for key, sub in properties.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise _NoSignature
        sub = _resolved(sub, depth)
        kind, sub_notes = _type(sub, f"{prefix}{key}.", depth + 1)
        part = f"{key}{'' if key in required else '?'}: {kind}"
        if isinstance(sub, Mapping) and "default" in sub:
            part += f" = {_json(sub['default'])}"
        _spend(part)
        parts.append(part)
        description = sub.get("description") if isinstance(sub, Mapping) else None
        if description is not None:
            if not isinstance(description, str):
                raise _NoSignature
            notes.append(f"{prefix}{key}: {' '.join(description.split())}")
            _spend(notes[-1])
        notes += sub_notes
    if extra and (properties or depth == 0):
        parts.append("...")
    description = schema.get("description")
    if depth == 0 and description is not None:
        if not isinstance(description, str):
            raise _NoSignature
        notes.insert(0, "args: " + " ".join(description.split()))
    return ", ".join(parts), notes


def _type(schema: Any, prefix: str, depth: int) -> tuple[str, list[str]]:
    """A value's type in signature form, and the notes of what it holds."""
    schema = _resolved(schema, depth)
    if schema is True or schema == {}:
        return "any", []
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        raise _NoSignature
    rest = {k: v for k, v in schema.items() if k not in _SHAPE and k not in _IGNORED}
    rest.pop("description", None)
    rest.pop("default", None)
    if "additionalProperties" in rest and rest["additionalProperties"] is not False:
        raise _NoSignature
    if any(isinstance(v, Mapping | list) and k != "examples" for k, v in rest.items() if k != "additionalProperties"):
        raise _NoSignature  # a keyword holding schemas ($ref, not, if, patternProperties …)
    notes: list[str] = []
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise _NoSignature
        kind = "|".join(_json(v) for v in values)
    elif "const" in schema:
        kind = f"={_json(schema['const'])}"
    elif "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf", schema.get("oneOf"))
        if not isinstance(options, list) or not options or "type" in schema:
            raise _NoSignature
        kinds = []
        for option in options:
            k, n = _type(option, prefix, depth + 1)
            kinds.append(k)
            notes += n
        kind = "|".join(kinds) if "anyOf" in schema else " xor ".join(kinds)
    else:
        kind, notes = _typed(schema, prefix, depth)
    shown = {k: v for k, v in rest.items() if k != "additionalProperties"}
    if shown:
        kind += " " + _json(shown)
    _spend(kind)
    return kind, notes


def _typed(schema: Mapping[str, Any], prefix: str, depth: int) -> tuple[str, list[str]]:
    kinds = schema.get("type")
    if kinds is None:
        if "properties" in schema or "items" in schema:
            raise _NoSignature
        return "any", []
    names = kinds if isinstance(kinds, list) else [kinds]
    if not names or not all(isinstance(k, str) and k in _SIMPLE for k in names):
        raise _NoSignature
    out: list[str] = []
    notes: list[str] = []
    for k in names:
        if k == "object" and ("properties" in schema or schema.get("additionalProperties") is False):
            params, sub = _params(
                {key: v for key, v in schema.items() if key in ("properties", "required", "additionalProperties")},
                prefix,
                depth,
            )
            out.append("{" + params + "}")
            notes += sub
        elif k == "array" and "items" in schema:
            item, sub = _type(schema["items"], prefix, depth + 1)
            out.append(f"({item})[]" if "|" in item or " " in item else f"{item}[]")
            notes += sub
        else:
            out.append(k)
    return "|".join(out), notes


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
