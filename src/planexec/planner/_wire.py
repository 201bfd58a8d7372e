"""The planner's answer on the wire: compact JSON Schemas a provider can enforce strictly, and
their reading back into plans, turns and answers.

A step's ``args`` (and a flat turn's ``arguments``) travel as JSON *text* — the encoded-arguments
form, as function calling sends arguments — and so do its ``output_schema`` and a ``schema``
check's schema, which are free-form objects a strict schema cannot describe. A check is one text,
``kind:value`` (``contains:Paris``, ``schema:{...}``, ``non_empty``). Every other member is typed,
so each schema here is made strict (every object closed, every member given) by the adapters that
enforce schemas. The schemas hold types only: the rules are in the planner's instructions, and
every check is made on planexec's side.

One schema serves every call of a policy within a run (the upfront policy's plans, patches and
final answer; the step-by-step policy's turns), so that what a provider caches as the start of one
planner request is the start of the next.

Answers are read in either form: JSON text where this schema puts it, or the objects of
:class:`~planexec.plan.Step` (as plans are written by hand, by scripted models and by older
planners). The text is hostile input: it is parsed as strict JSON, bounded in depth, and must hold
an object; every problem is listed at once, with where it is.
"""

from __future__ import annotations

from typing import Any, Final

from planexec._util.strict_json import MAX_DEPTH, JSONRefused, loads
from planexec.errors import Problem

__all__ = ["FLAT_TURN_SCHEMA", "PLAN_SCHEMA", "TURN_SCHEMA", "unwire_handoff", "unwire_step", "unwire_turn"]

_TEXT: Final = {"type": "string"}
_MAYBE_TEXT: Final = {"type": ["string", "null"]}
_MAYBE_NUMBER: Final = {"type": ["number", "null"]}
_TEXTS: Final = {"type": "array", "items": _TEXT}

_STEP: Final = {
    "properties": {
        "id": _TEXT,
        "description": _TEXT,
        "tool": _MAYBE_TEXT,
        "args": _TEXT,
        "depends_on": _TEXTS,
        "executor": _MAYBE_TEXT,
        "allowed_tools": _TEXTS,
        "expected": _MAYBE_TEXT,
        "checks": _TEXTS,
        "output_schema": _MAYBE_TEXT,
        "effect": {"enum": ["read", "write"]},
        "approval": {"enum": ["auto", "always"]},
        "on_fail": {"enum": ["patch", "retry", "review", None]},
        "confidence": _MAYBE_NUMBER,
    },
}
"""A step on the wire. Only types: what the planner is told, and every check of a plan, are on
planexec's side; an adapter that enforces schemas strictly closes every object and requires every
member (so a strict answer gives every member, null where a step has none)."""

PLAN_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "reason": _TEXT,
        "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
        "confidence": _MAYBE_NUMBER,
        "question": _MAYBE_TEXT,
        "give_up": _MAYBE_TEXT,
        "answer": _MAYBE_TEXT,
        "handoff": {"anyOf": [{"$ref": "#/$defs/handoff"}, {"type": "null"}]},
    },
    "$defs": {"step": _STEP, "handoff": {"properties": {"workflow": _TEXT, "args": _TEXT}}},
}
"""What the upfront policy's planner answers: a plan or a patch (``steps``), a question, giving up,
or — when asked for it — the final answer. ``handoff`` (``workflow``, and ``args`` as JSON text)
hands the rest of the work to a workflow after the steps."""

TURN_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "thought": _TEXT,
        "confidence": _MAYBE_NUMBER,
        "stop": {"type": "boolean"},
        "step": {"anyOf": [{"$ref": "#/$defs/step"}, {"type": "null"}]},
        "answer": _MAYBE_TEXT,
        "question": _MAYBE_TEXT,
        "give_up": _MAYBE_TEXT,
    },
    "$defs": {"step": _STEP},
}
"""What the step-by-step policy's planner answers each turn (the nested form)."""

FLAT_TURN_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "thought": _TEXT,
        "next_step": _MAYBE_TEXT,
        "tool": _MAYBE_TEXT,
        "arguments": _TEXT,
        "stop": {"type": "boolean"},
        "confidence": _MAYBE_NUMBER,
        "answer": _MAYBE_TEXT,
        "question": _MAYBE_TEXT,
        "give_up": _MAYBE_TEXT,
    },
}
"""The flat turn: ``thought, next_step, tool, arguments, stop, confidence``."""

_CHECK_FIELD = {"contains": "text", "matches": "pattern", "schema": "json_schema", "predicate": "name"}

_DEFAULTS_GIVEN = {
    "tool": None,
    "executor": None,
    "expected": None,
    "output_schema": None,
    "on_fail": None,
    "confidence": None,
}
"""Members a strict answer gives as null: the same as leaving them out."""


def unwire_step(raw: Any, where: str, problems: list[Problem]) -> Any:
    """``raw`` (a step as answered) in :class:`~planexec.plan.Step`'s form: JSON text decoded,
    checks given as ``{"kind", "value"}`` expanded, nulls a strict answer gives dropped. Problems
    go to ``problems``; what is not an object is returned as it is (validation says why)."""
    if not isinstance(raw, dict):
        return raw
    step = {k: v for k, v in raw.items() if not (k in _DEFAULTS_GIVEN and v is None)}
    if "args" in step:
        step["args"] = _object_text(step["args"], f"{where}.args", problems, empty_ok=True)
    if "output_schema" in step:
        step["output_schema"] = _object_text(step["output_schema"], f"{where}.output_schema", problems)
    checks = step.get("checks")
    if isinstance(checks, list):
        step["checks"] = [_unwire_check(c, f"{where}.checks.{i}", problems) for i, c in enumerate(checks)]
    return step


def unwire_handoff(raw: Any, problems: list[Problem]) -> Any:
    """A plan's ``handoff`` as answered, its ``args`` JSON text decoded; anything else as it is."""
    if not isinstance(raw, dict):
        return raw
    handoff = dict(raw)
    if "args" in handoff:
        handoff["args"] = _object_text(handoff["args"], "handoff.args", problems, empty_ok=True)
    return handoff


def unwire_turn(data: Any, problems: list[Problem]) -> Any:
    """A turn (nested or flat) in its model's form: its step unwired, a flat turn's ``arguments`` decoded."""
    if not isinstance(data, dict):
        return data
    turn = dict(data)
    if "step" in turn:
        turn["step"] = unwire_step(turn["step"], "step", problems)
    if "arguments" in turn:
        turn["arguments"] = _object_text(turn["arguments"], "arguments", problems, empty_ok=True)
    return turn


def _unwire_check(raw: Any, where: str, problems: list[Problem]) -> Any:
    """``kind:value`` text → the check's object; an object is taken as it is."""
    if not isinstance(raw, str):
        return raw
    kind, colon, value = raw.partition(":")
    kind = kind.strip()
    if kind == "non_empty" and not value.strip():
        return {"kind": kind}
    field = _CHECK_FIELD.get(kind)
    if field is None or not colon:
        kinds = ", ".join(["non_empty", *(f"{k}:..." for k in _CHECK_FIELD)])
        problems.append(Problem(code="invalid_output", where=where, message=f"a check is one of {kinds}"))
        return {"kind": "non_empty"}
    if field == "json_schema":
        return {"kind": kind, field: _object_text(value, where, problems)}
    return {"kind": kind, field: value}


def _object_text(value: Any, where: str, problems: list[Problem], *, empty_ok: bool = False) -> Any:
    """A JSON object given as text, decoded; any other value as it is (validation judges it)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not text and empty_ok:
        return {}
    try:
        decoded = loads(text, max_depth=MAX_DEPTH)
    except JSONRefused as e:
        at = f" at {e.problem.where}" if e.problem.where else ""
        problems.append(Problem(code="invalid_output", where=where, message=f"not JSON text{at}: {e.problem.message}"))
        return {}
    if not isinstance(decoded, dict):
        problems.append(Problem(code="invalid_output", where=where, message="the JSON text must hold an object"))
        return {}
    return decoded
