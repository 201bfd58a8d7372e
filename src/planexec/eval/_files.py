"""Reading the files an evaluation is given — a suite, a fault profile, a baseline report, a scripted
model's replies — within the bounds of :mod:`planexec.eval._limits`.

A file is refused before it is parsed when it is larger than its maximum (and never read past it).
YAML is composed by a composer that counts aliases, measures what the document expands to without
expanding it, bounds nesting and notes duplicate keys; JSON nesting is measured on the text before
it is parsed, and NaN, infinities and endless numbers are refused. Everything wrong is raised as a
:class:`UsageError` whose problems say where it is (``line 3, column 7``).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from planexec.errors import Problem, UsageError
from planexec.eval._limits import MAX_ALIASES, MAX_DEPTH, MAX_VALUES, shown

__all__ = ["read_json", "read_text", "read_yaml"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_DIGITS = 40
"""The longest whole number JSON text may write (a report's largest, a seed, has 19 digits)."""


def read_text(path: Path, *, limit: int, what: str) -> str:
    """The UTF-8 text of ``path``, refused without reading it whole when it is over ``limit`` bytes."""
    try:
        with path.open("rb") as file:
            info = os.fstat(file.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise _too_large(what, limit)
            data = file.read(limit + 1)
    except OSError as e:
        raise UsageError(f"cannot read {what}", [Problem(code="file", where="", message=str(e))]) from None
    if len(data) > limit:
        raise _too_large(what, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        problem = Problem(code="file", where=f"byte {e.start}", message="is not UTF-8 text")
        raise UsageError(f"cannot read {what}", [problem]) from None


def _too_large(what: str, limit: int) -> UsageError:
    message = f"is larger than {limit:,} bytes ({_size(limit)}), the most planexec reads"
    return UsageError(f"{what} is too large", [Problem(code="size", where="", message=message)])


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MiB" if count % (1024 * 1024) == 0 else f"{count // 1024} KiB"


# -- YAML ---------------------------------------------------------------------------------------


class _Beyond(yaml.MarkedYAMLError):
    """The document goes beyond a limit (aliases, values, nesting)."""


def _beyond(message: str, mark: Any) -> _Beyond:
    return _Beyond(problem=message, problem_mark=mark)


class _BoundedComposer(Composer):
    """Composes nodes as PyYAML does, but counts aliases, bounds nesting, measures how many values
    and how deep each node is once aliases are followed — from its children's measures, so nothing
    is expanded — and notes keys given twice in one mapping."""

    peek_event: Callable[[], Any]  # the parser's, mixed in with this composer

    def __init__(self) -> None:
        Composer.__init__(self)
        self.duplicates: list[Problem] = []
        self._aliases = 0
        self._depth = 0
        self._measures: dict[Node, tuple[int, int]] = {}
        """For each node composed: the values it expands to, and its depth of lists and mappings."""

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _beyond(f"uses more than {MAX_ALIASES} aliases", event.start_mark)
            alias = super().compose_node(parent, index)
            if alias is None or alias not in self._measures:
                raise _beyond("has an alias that refers to a value that contains it", event.start_mark)
            return alias
        collection = isinstance(event, SequenceStartEvent | MappingStartEvent)
        if collection:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _beyond(f"is nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            if collection:
                self._depth -= 1
        if node is None:  # PyYAML's composer always returns a node; its annotation allows None
            raise _beyond("holds a value that cannot be read", event.start_mark)
        self._measure(node)
        return node

    def _measure(self, node: Node) -> None:
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
            self._note_duplicates(node)
        values = 1 + sum(self._measures[child][0] for child in children)
        depth = 0 if isinstance(node, ScalarNode) else 1 + max((self._measures[c][1] for c in children), default=0)
        if values > MAX_VALUES:
            message = f"expands to more than {MAX_VALUES:,} values once its aliases are followed"
            raise _beyond(message, node.start_mark)
        if depth > MAX_DEPTH:
            raise _beyond(f"is nested more than {MAX_DEPTH} levels deep once its aliases are followed", node.start_mark)
        self._measures[node] = (values, depth)

    def _note_duplicates(self, node: MappingNode) -> None:
        seen: set[tuple[str, str]] = set()
        for key, _value in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE_TAG:
                continue
            if (key.tag, key.value) in seen:
                self.duplicates.append(
                    Problem(
                        code="yaml",
                        where=_place(key.start_mark),
                        message=f"duplicate key {shown(key.value)}: only its last value is read",
                    )
                )
            seen.add((key.tag, key.value))


class _BoundedConstructor(SafeConstructor):
    """PyYAML's safe constructor, with whole numbers too long to convert refused where they are."""

    def construct_bounded_int(self, node: ScalarNode) -> int:
        try:
            return self.construct_yaml_int(node)
        except ValueError:
            raise ConstructorError(None, None, "is too large a number", node.start_mark) from None


cast(Any, _BoundedConstructor).add_constructor("tag:yaml.org,2002:int", _BoundedConstructor.construct_bounded_int)


class _PyLoader(_BoundedComposer, Reader, Scanner, Parser, _BoundedConstructor, Resolver):
    """The pure-Python reader, scanner and parser."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        _BoundedConstructor.__init__(self)
        Resolver.__init__(self)


_Loader: Any = _PyLoader
if yaml.__with_libyaml__:  # libyaml scans and parses (fast, iterative); composing stays bounded here
    from yaml._yaml import CParser

    class _CLoader(_BoundedComposer, CParser, _BoundedConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            Resolver.__init__(self)

    _Loader = _CLoader


def read_yaml(path: Path, *, limit: int, what: str) -> tuple[Any, list[Problem]]:
    """The data of the YAML file at ``path`` and the problems that do not stop reading it (keys
    given twice); raises :class:`UsageError` for a file that cannot be read within the limits."""
    text = read_text(path, limit=limit, what=what)
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except _Beyond as e:
        raise UsageError(f"{what} is refused", [_yaml_problem(e, "limit")]) from None
    except yaml.YAMLError as e:
        if isinstance(e, yaml.MarkedYAMLError) and "nesting depth" in (e.problem or ""):
            # newer PyYAML scanners stop deep flow collections themselves, before they are composed
            deep = _beyond(f"is nested more than {MAX_DEPTH} levels deep", e.problem_mark)
            raise UsageError(f"{what} is refused", [_yaml_problem(deep, "limit")]) from None
        raise UsageError(f"{what} is not valid YAML", [_yaml_problem(e, "yaml")]) from None
    except (ValueError, TypeError, RecursionError) as e:  # a backstop: none is known to get here
        raise UsageError(f"{what} is not valid YAML", [Problem(code="yaml", where="", message=str(e))]) from None
    finally:
        loader.dispose()
    duplicates: list[Problem] = loader.duplicates
    return data, duplicates


def _yaml_problem(error: yaml.YAMLError, code: str) -> Problem:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        message = error.problem or "cannot be read"
        if error.context:
            message = f"{message} ({error.context})"
        return Problem(code=code, where=_place(error.problem_mark), message=message)
    return Problem(code=code, where="", message=str(error))


def _place(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


# -- JSON ---------------------------------------------------------------------------------------

_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""A JSON string (skipped whole, brackets in it included), or a bracket."""


def read_json(path: Path, *, limit: int, what: str, finite: bool = True) -> Any:
    """The data of the JSON file at ``path``, refused when over ``limit`` bytes, nested deeper than
    ``MAX_DEPTH``, or holding numbers too long to read — and, with ``finite``, NaN or infinities."""
    text = read_text(path, limit=limit, what=what)
    deep = _json_depth(text)
    if deep is not None:
        raise UsageError(f"{what} is refused", [deep])
    try:
        if not finite:
            return json.loads(text, parse_int=_short_int)
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_short_int)
    except json.JSONDecodeError as e:
        problem = Problem(code="json", where=f"line {e.lineno}, column {e.colno}", message=e.msg)
        raise UsageError(f"{what} is not valid JSON", [problem]) from None
    except (ValueError, RecursionError) as e:
        raise UsageError(f"{what} is not valid JSON", [Problem(code="json", where="", message=str(e))]) from None


def _json_depth(text: str) -> Problem | None:
    """Where ``text`` nests arrays and objects more than ``MAX_DEPTH`` deep, found without parsing it."""
    depth = 0
    for token in _JSON_TOKENS.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                start = token.start()
                line = text.count("\n", 0, start) + 1
                column = start - (text.rfind("\n", 0, start) + 1) + 1
                message = f"is nested more than {MAX_DEPTH} levels deep"
                return Problem(code="limit", where=f"line {line}, column {column}", message=message)
        elif mark in ("]", "}"):
            depth -= 1
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows: every number must be finite")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{shown(text)} is too large a number: every number must be finite")
    return value


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"a whole number of {len(text):,} digits is too large (at most {_MAX_DIGITS})")
    return int(text)
