"""Bindings: how a step's arguments use earlier steps' outputs.

One syntax, anywhere inside a string argument (also nested in lists and objects):

* ``"${fetch}"`` — the string is exactly one binding: the value is the whole output of step
  ``fetch``, with its type kept (a list stays a list, a number stays a number).
* ``"${fetch.items.0.name}"`` — a path into the output: object fields by name, list items by
  index (negative indexes count from the end).
* ``"Summary of ${fetch.title}: ${count} rows"`` — bindings inside a longer string are rendered as
  text: strings as they are, everything else as compact JSON (``true``, ``null``, ``[1,2]``).
* ``"$${"`` — a literal ``${`` that is not a binding.

A bound step must be among the step's dependencies (directly or through other steps).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planexec._errors import Problem

__all__ = ["BindingError", "CompiledArgs", "Ref", "compile_args", "render_text"]

_TOKEN = re.compile(r"\$\$\{|\$\{([^{}]*)\}")
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_SEGMENT = re.compile(r"^[^.\s]+$")


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to a step's output, or to a path inside it."""

    step_id: str
    path: tuple[str, ...]

    def __str__(self) -> str:
        return "${" + ".".join((self.step_id, *self.path)) + "}"


class BindingError(Exception):
    """A binding could not be resolved against the outputs at hand."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True, slots=True)
class _Text:
    parts: tuple[str | Ref, ...]


@dataclass(frozen=True, slots=True)
class _Const:
    value: Any


_Node = Ref | _Text | _Const | dict[str, "_Node"] | list["_Node"]


@dataclass(frozen=True, slots=True)
class CompiledArgs:
    """A step's arguments parsed once; ``resolve`` fills in the bound outputs."""

    root: dict[str, _Node] | None
    """None when no argument binds anything: ``resolve`` returns the arguments unchanged."""
    args: dict[str, Any]
    refs: tuple[tuple[tuple[str | int, ...], Ref], ...]
    """Every binding with the location of the argument it sits in."""
    problems: tuple[Problem, ...]
    """Syntax problems found while parsing (empty when all bindings are well formed)."""

    def resolve(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        if self.root is None:
            return self.args
        if self.problems:
            raise BindingError(list(self.problems))
        problems: list[Problem] = []
        out = {k: _resolve(v, outputs, problems) for k, v in self.root.items()}
        if problems:
            raise BindingError(problems)
        return out


def compile_args(args: Mapping[str, Any], *, where: str = "args") -> CompiledArgs:
    """Parse every binding in ``args``; syntax problems are collected, not raised."""
    if not _has_template(args):
        return CompiledArgs(root=None, args=dict(args), refs=(), problems=())
    refs: list[tuple[tuple[str | int, ...], Ref]] = []
    problems: list[Problem] = []
    root = {k: _compile(v, (k,), refs, problems, where) for k, v in args.items()}
    return CompiledArgs(root=root, args=dict(args), refs=tuple(refs), problems=tuple(problems))


def render_text(value: Any) -> str:
    """How a bound value reads inside a longer string."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _has_template(value: Any) -> bool:
    """Whether any string inside ``value`` holds ``${`` (a binding or an escape)."""
    kind = type(value)
    if kind is str:
        return "${" in value
    if kind is int or kind is float or kind is bool or value is None:
        return False
    if isinstance(value, Mapping):
        return any(_has_template(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_template(v) for v in value)
    return False


def _parse_ref(body: str, loc: tuple[str | int, ...], problems: list[Problem], where: str) -> Ref | None:
    parts = body.split(".")
    step_id, path = parts[0].strip(), tuple(parts[1:])
    if not _ID.match(step_id) or not all(_SEGMENT.match(p) for p in path):
        problems.append(
            Problem(
                code="binding_syntax",
                where=f"{where}.{'.'.join(map(str, loc))}",
                message=f"malformed binding '${{{body}}}': use ${{step_id}} or ${{step_id.field.0}}",
            )
        )
        return None
    return Ref(step_id=step_id, path=path)


def _literal(text: str, loc: tuple[str | int, ...], problems: list[Problem], where: str) -> str:
    """Text between bindings; a ``${`` left in it was never closed."""
    if "${" in text:
        problems.append(
            Problem(
                code="binding_syntax",
                where=f"{where}.{'.'.join(map(str, loc))}",
                message=f"unclosed binding in {text!r}: close it with }} or write $${{ for a literal ${{",
            )
        )
    return text


def _compile(
    value: Any,
    loc: tuple[str | int, ...],
    refs: list[tuple[tuple[str | int, ...], Ref]],
    problems: list[Problem],
    where: str,
) -> _Node:
    if isinstance(value, str):
        if "${" not in value:
            return _Const(value)
        parts: list[str | Ref] = []
        pos = 0
        for m in _TOKEN.finditer(value):
            if m.start() > pos:
                parts.append(_literal(value[pos : m.start()], loc, problems, where))
            if m.group(1) is None:
                parts.append("${")
            else:
                ref = _parse_ref(m.group(1), loc, problems, where)
                if ref is not None:
                    refs.append((loc, ref))
                    parts.append(ref)
            pos = m.end()
        if pos < len(value):
            parts.append(_literal(value[pos:], loc, problems, where))
        if len(parts) == 1 and isinstance(parts[0], Ref):
            return parts[0]
        return _Text(tuple(parts))
    if isinstance(value, Mapping):
        return {str(k): _compile(v, (*loc, str(k)), refs, problems, where) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_compile(v, (*loc, i), refs, problems, where) for i, v in enumerate(value)]
    return _Const(value)


def lookup(ref: Ref, outputs: Mapping[str, Any]) -> Any:
    """The value a reference points at; raises ``LookupError`` with a readable message."""
    if ref.step_id not in outputs:
        raise LookupError(f"step {ref.step_id!r} has no output (it has not finished)")
    current = outputs[ref.step_id]
    walked = ref.step_id
    for seg in ref.path:
        if isinstance(current, Mapping):
            if seg not in current:
                fields = ", ".join(sorted(map(str, current))) or "none"
                raise LookupError(f"{walked} has no field {seg!r} (fields: {fields})")
            current = current[seg]
        elif isinstance(current, list | tuple):
            try:
                index = int(seg)
            except ValueError:
                raise LookupError(f"{walked} is a list; {seg!r} is not an index") from None
            if not -len(current) <= index < len(current):
                raise LookupError(f"{walked} has {len(current)} item(s); index {index} is out of range")
            current = current[index]
        else:
            raise LookupError(f"{walked} is {type(current).__name__}, which has no {seg!r}")
        walked = f"{walked}.{seg}"
    return current


def _resolve(node: _Node, outputs: Mapping[str, Any], problems: list[Problem]) -> Any:
    if isinstance(node, _Const):
        return node.value
    if isinstance(node, Ref):
        try:
            return lookup(node, outputs)
        except LookupError as e:
            problems.append(Problem(code="binding_unresolved", where=str(node), message=str(e)))
            return None
    if isinstance(node, _Text):
        pieces: list[str] = []
        for part in node.parts:
            if isinstance(part, Ref):
                try:
                    pieces.append(render_text(lookup(part, outputs)))
                except LookupError as e:
                    problems.append(Problem(code="binding_unresolved", where=str(part), message=str(e)))
            else:
                pieces.append(part)
        return "".join(pieces)
    if isinstance(node, dict):
        return {k: _resolve(v, outputs, problems) for k, v in node.items()}
    return [_resolve(v, outputs, problems) for v in node]
