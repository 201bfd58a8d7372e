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

Arguments nested deeper than :data:`planexec._util.strict_json.MAX_DEPTH` levels are refused (a ``too_deep``
problem), and a value too deep to render as text is a ``BindingError``: nothing here recurses
without a bound.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec._util.strict_json import MAX_CHARS, MAX_DEPTH, json_chars
from planexec.errors import BindingError, Problem
from planexec.trust import Provenance

__all__ = ["BindingError", "CompiledArgs", "Ref", "compile_args", "render_text"]

_LISTED_FIELDS = 30
"""How many fields of an output a failed lookup lists."""

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

    def resolve(self, outputs: Mapping[str, Any], *, max_chars: int = MAX_CHARS) -> dict[str, Any]:
        """The arguments with every binding filled in; raises ``BindingError`` listing every problem.

        The outputs bound add up to at most about ``max_chars`` characters of JSON: an argument that
        binds a large output many times over is refused (``too_large``) before it is built."""
        if self.problems:
            raise BindingError(list(self.problems))
        if self.root is None:
            return self.args
        problems: list[Problem] = []
        room = _Room(max_chars)
        try:
            out = {k: _resolve(v, outputs, problems, room) for k, v in self.root.items()}
        except _Full as full:
            raise BindingError([full.problem]) from None
        if problems:
            raise BindingError(problems)
        return out

    def provenance(self, written: Provenance, output_of: Callable[[str], Provenance]) -> dict[str, Provenance]:
        """Each argument's label, by name: an argument that is exactly one binding (``"${a}"``,
        ``"${a.x.0}"``) takes the label of the output it binds (``output_of(step_id)``); any other
        takes the union of ``written`` (the label of what the plan itself wrote) and the labels of
        every output it binds (a string interpolating two outputs is as trusted as both)."""
        by_arg: dict[str, list[str]] = {}
        for loc, ref in self.refs:
            by_arg.setdefault(str(loc[0]), []).append(ref.step_id)
        labels: dict[str, Provenance] = {}
        for name in self.args:
            bound = by_arg.get(name, [])
            whole = self.root is not None and isinstance(self.root.get(name), Ref)
            parts = [output_of(sid) for sid in dict.fromkeys(bound)]
            labels[name] = Provenance.union(parts if whole else [written, *parts])
        return labels


def compile_args(args: Mapping[str, Any], *, where: str = "args") -> CompiledArgs:
    """Parse every binding in ``args``; syntax problems are collected, not raised.

    Arguments nested deeper than ``MAX_DEPTH`` levels (``args`` itself is the first) compile to a
    single ``too_deep`` problem, whatever else they hold.
    """
    template, deep = _scan(args)
    if deep is not None:
        at = ".".join(map(str, deep))
        problem = Problem(
            code="too_deep",
            where=f"{where}.{at}" if at else where,
            message=f"the arguments are nested deeper than {MAX_DEPTH} levels",
        )
        return CompiledArgs(root=None, args=dict(args), refs=(), problems=(problem,))
    if not template:
        return CompiledArgs(root=None, args=dict(args), refs=(), problems=())
    refs: list[tuple[tuple[str | int, ...], Ref]] = []
    problems: list[Problem] = []
    root = {k: _compile(v, (k,), refs, problems, where) for k, v in args.items()}
    return CompiledArgs(root=root, args=dict(args), refs=tuple(refs), problems=tuple(problems))


def render_text(value: Any) -> str:
    """How a bound value reads inside a longer string: a string as it is, anything else as compact JSON.

    Raises ``BindingError`` (code ``too_deep`` or ``not_json``) for a value that cannot be written
    as text: nested deeper than the JSON encoder follows, circular, or an integer too long to write.
    """
    if isinstance(value, str):
        return value
    kind = type(value)
    if kind is int:  # the common scalars, written as JSON writes them without its machinery
        return _int_text(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except RecursionError:
        problem = Problem(code="too_deep", where="", message="the value is nested too deeply to render as text")
    except (ValueError, TypeError) as e:  # a circular reference, an integer too long to write
        problem = Problem(code="not_json", where="", message=f"the value cannot be rendered as text: {e}")
    raise BindingError([problem])


def _int_text(value: int) -> str:
    try:
        return int.__repr__(value)
    except ValueError as e:  # an integer too long to write
        problem = Problem(code="not_json", where="", message=f"the value cannot be rendered as text: {e}")
        raise BindingError([problem]) from None


_Trail = tuple["_Trail | None", str | int] | None


def _scan(args: Mapping[str, Any]) -> tuple[bool, tuple[str | int, ...] | None]:
    """Whether any string inside ``args`` holds ``${`` (a binding or an escape), and where a
    container sits deeper than ``MAX_DEPTH`` levels (None when none does). Iterative; strings and
    other scalars are looked at where they sit, only containers are stacked."""
    template = False
    stack: list[tuple[Any, int, _Trail]] = [(args, 0, None)]
    while stack:
        value, depth, trail = stack.pop()
        if depth >= MAX_DEPTH:
            return template, _location(trail)
        members = value.items() if isinstance(value, Mapping) else enumerate(value)
        for key, member in members:
            if isinstance(member, str):
                if not template and "${" in member:
                    template = True
            elif isinstance(member, Mapping | list | tuple):
                stack.append((member, depth + 1, (trail, str(key) if isinstance(value, Mapping) else key)))
    return template, None


def _location(trail: _Trail) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    while trail is not None:
        trail, key = trail
        parts.append(key)
    return tuple(reversed(parts))


def _parse_ref(body: str, loc: tuple[str | int, ...], problems: list[Problem], where: str) -> Ref | None:
    parts = body.split(".")
    step_id, path = parts[0].strip(), tuple(parts[1:])
    if not _ID.match(step_id) or not all(_SEGMENT.match(p) for p in path):
        problems.append(
            Problem(
                code="binding_syntax",
                where=f"{where}.{'.'.join(map(str, loc))}",
                message=f"malformed binding '${{{_cut(body)}}}': use ${{step_id}} or ${{step_id.field.0}}",
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
                message=f"unclosed binding in {_cut(repr(text))}: close it with }} or write $${{ for a literal ${{",
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


def _cut(text: str, limit: int = 120) -> str:
    return clip(text, limit)


def lookup(ref: Ref, outputs: Mapping[str, Any]) -> Any:
    """The value a reference points at; raises ``LookupError`` with a readable message."""
    if ref.step_id not in outputs:
        raise LookupError(f"step {ref.step_id!r} has no output (it has not finished)")
    current = outputs[ref.step_id]
    walked = ref.step_id
    for seg in ref.path:
        if isinstance(current, Mapping):
            if seg not in current:
                names = [str(k) for k in itertools.islice(current, _LISTED_FIELDS + 1)]
                fields = ", ".join(_cut(n) for n in sorted(names[:_LISTED_FIELDS])) or "none"
                if len(current) > _LISTED_FIELDS:
                    fields += f" and {len(current) - _LISTED_FIELDS:,} more"
                raise LookupError(f"{_cut(walked)} has no field {_cut(repr(seg))} (fields: {fields})")
            current = current[seg]
        elif isinstance(current, list | tuple):
            try:
                index = int(seg)
            except ValueError:
                raise LookupError(f"{_cut(walked)} is a list; {_cut(repr(seg))} is not an index") from None
            if not -len(current) <= index < len(current):
                raise LookupError(f"{_cut(walked)} has {counted(len(current), 'item')}; index {index} is out of range")
            current = current[index]
        else:
            raise LookupError(f"{_cut(walked)} is {type(current).__name__}, which has no {_cut(repr(seg))}")
        walked = f"{walked}.{seg}"
    return current


class _Full(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem


class _Room:
    """How much bound output one resolution may still take, in characters of JSON (approximately)."""

    __slots__ = ("left", "limit", "sizes")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit
        self.sizes: dict[int, int] = {}

    def take(self, ref: Ref, value: Any) -> None:
        size = self.sizes.get(id(value))
        if size is None:
            size = self.sizes[id(value)] = json_chars(value, self.limit)
        self.left -= size
        if self.left < 0:
            message = f"the bound outputs add up to more than {self.limit:,} characters (each binding counts)"
            raise _Full(Problem(code="too_large", where=str(ref), message=message))


def _resolve(node: _Node, outputs: Mapping[str, Any], problems: list[Problem], room: _Room) -> Any:
    if isinstance(node, _Const):
        return node.value
    if isinstance(node, Ref):
        try:
            value = lookup(node, outputs)
        except LookupError as e:
            problems.append(Problem(code="binding_unresolved", where=str(node), message=str(e)))
            return None
        room.take(node, value)
        return value
    if isinstance(node, _Text):
        pieces: list[str] = []
        for part in node.parts:
            if isinstance(part, Ref):
                try:
                    value = lookup(part, outputs)
                    room.take(part, value)
                    pieces.append(render_text(value))
                except LookupError as e:
                    problems.append(Problem(code="binding_unresolved", where=str(part), message=str(e)))
                except BindingError as e:
                    problems += [replace(p, where=str(part)) for p in e.problems]
            else:
                pieces.append(part)
        return "".join(pieces)
    if isinstance(node, dict):
        return {k: _resolve(v, outputs, problems, room) for k, v in node.items()}
    return [_resolve(v, outputs, problems, room) for v in node]
