"""Strict JSON for untrusted values: what a model writes and what a tool returns.

Two functions, both bounded in time and memory whatever they are given:

* :func:`json_problem` — whether a Python value is JSON data (a ``dict`` with ``str`` keys, a
  ``list`` or ``tuple``, a ``str``, an ``int``, a finite ``float``, a ``bool`` or ``None``), nested
  at most ``max_depth`` levels and at most about ``max_chars`` characters once written as JSON.
  It returns ``None``, or the first :class:`~planexec.Problem` found, which says where (a path such
  as ``.items[3].name``) and what (``NaN is not JSON``, ``nested deeper than 100 levels``, ...).
* :func:`loads` — parse JSON text strictly: ``NaN``, ``Infinity`` and ``-Infinity`` are refused,
  and so is text nested deeper than ``max_depth``. It raises ``JSONRefused`` (a
  ``ValueError``) carrying the problem.

Problem codes: ``not_json`` (a value JSON cannot hold), ``invalid_json`` (text that is not strict
JSON), ``too_deep`` and ``too_large``.

Depth counts containers: a scalar is 0 levels deep, ``[]`` is 1, ``{"a": [1]}`` is 2.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from planexec._util.clip import clip
from planexec.errors import Problem

__all__ = ["MAX_CHARS", "MAX_DEPTH", "JSONRefused", "json_chars", "json_problem", "loads"]

MAX_DEPTH = 100
"""How deep JSON values may nest, unless a caller says otherwise."""

MAX_CHARS = 1_000_000
"""How large a value may be, in characters of its JSON text (approximately), unless a caller says otherwise."""

MAX_INT_BITS = 13_000
"""The largest integer accepted, in bits (about 3,900 decimal digits): Python writes no longer
integer as text by default, and JSON readers elsewhere stop far earlier."""

_FLOAT_CHARS = 12
"""What a float is counted as (its exact text is not worth computing)."""

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

_Trail = tuple["_Trail | None", str | int] | None
"""The way to a value: (the way to its container, its key or index), None at the top."""


class JSONRefused(ValueError):
    """Text or a value refused as JSON; ``problem`` says where and why."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


def json_problem(
    value: Any, *, max_depth: int = MAX_DEPTH, max_chars: int | None = MAX_CHARS, where: str = ""
) -> Problem | None:
    """The first reason ``value`` is not acceptable JSON data, or None when it is.

    ``where`` is put before every path (``where="args"`` gives ``args.items[3].name``). The size is
    the length of the value's JSON text, counted roughly (escapes and float digits are estimated)
    and only until it passes ``max_chars``. ``max_chars=None`` counts nothing: use it only for
    values that share no containers (such as parsed JSON), since a shared container is walked
    once per place it appears.

    The walk is iterative (a value nested 100,000 levels deep is refused, not a ``RecursionError``)
    and stops at the first problem; a scalar or a short string costs O(1).
    """
    kind = type(value)
    if kind is str:
        if max_chars is None or len(value) + 2 <= max_chars:
            return None
        return _too_large(len(value) + 2, max_chars, where)
    if kind is bool or value is None:
        return None
    if kind is int:
        bits = value.bit_length()
        if bits > MAX_INT_BITS:
            return _not_scalar(value, where)
        if max_chars is None or bits < max_chars:
            return None
        return _too_large(_int_chars(value), max_chars, where)
    if kind is float:
        return None if math.isfinite(value) else _not_json(f"{_float_name(value)} is not JSON", where)
    if (kind is dict or kind is list) and not value and max_depth > 0:
        return None
    return _walk(value, max_depth, max_chars, where)[1]


def json_chars(value: Any, cap: int) -> int:
    """About how many characters ``value`` takes as JSON text, counted only until it passes ``cap``
    (a larger value gives ``cap + 1``). A value that is not JSON data counts as ``cap + 1`` too."""
    size = _scalar_chars(value)
    if size >= 0:
        return size if size <= cap else cap + 1
    total, problem = _walk(value, sys.maxsize, cap, "")
    return cap + 1 if problem is not None else total


def loads(text: str, *, max_depth: int = MAX_DEPTH, max_chars: int | None = None) -> Any:
    """Parse strict JSON text; raise ``JSONRefused`` for anything else.

    Refused: text that is not JSON (code ``invalid_json``), ``NaN``/``Infinity``/``-Infinity``
    (``invalid_json``), values nested deeper than ``max_depth`` (``too_deep``), and text longer than
    ``max_chars`` characters (``too_large``).
    """
    if max_chars is not None and len(text) > max_chars:
        raise JSONRefused(_too_large(len(text), max_chars, ""))
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except _Constant as e:
        raise JSONRefused(
            Problem(code="invalid_json", where="", message=f"{e.name} is not JSON (strict JSON has no NaN or Infinity)")
        ) from None
    except RecursionError:
        raise JSONRefused(Problem(code="too_deep", where="", message=_deep_message(max_depth))) from None
    except ValueError as e:  # JSONDecodeError, and integers too long to convert
        raise JSONRefused(Problem(code="invalid_json", where="", message=str(e))) from None
    # Only text with more brackets than the limit can be nested deeper than it: skip the walk otherwise.
    if text.count("[") + text.count("{") > max_depth:
        problem = json_problem(value, max_depth=max_depth, max_chars=None)
        if problem is not None:
            raise JSONRefused(problem)
    return value


class _Constant(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _refuse_constant(name: str) -> Any:
    raise _Constant(name)


def _walk(value: Any, max_depth: int, max_chars: int | None, where: str) -> tuple[int, Problem | None]:
    """The value's approximate size in characters, and its first problem (then the size so far)."""
    total = 0
    limit = sys.maxsize if max_chars is None else max_chars
    stack: list[tuple[Any, int, _Trail]] = [(value, 0, None)]
    while stack:
        item, depth, trail = stack.pop()
        kind = type(item)
        if kind is dict or (kind is not str and isinstance(item, dict)):
            if depth >= max_depth:
                return total, Problem(code="too_deep", where=_path(where, trail), message=_deep_message(max_depth))
            total += len(item) + 1
            for key, member in item.items():
                if type(key) is not str and not isinstance(key, str):
                    what = f"the key {_short_repr(key)} ({_article(type(key).__name__)}) is not a string"
                    return total, _not_json(what, _path(where, trail))
                total += len(key) + 3
                size = _scalar_chars(member)
                if size < 0:
                    stack.append((member, depth + 1, (trail, key)))
                else:
                    total += size
                    if total > limit:
                        return total, _too_large(total, limit, _path(where, (trail, key)))
        elif kind is list or kind is tuple or (kind is not str and isinstance(item, list | tuple)):
            if depth >= max_depth:
                return total, Problem(code="too_deep", where=_path(where, trail), message=_deep_message(max_depth))
            total += len(item) + 1
            for index in range(len(item) - 1, -1, -1):
                member = item[index]
                size = _scalar_chars(member)
                if size < 0:
                    stack.append((member, depth + 1, (trail, index)))
                else:
                    total += size
                    if total > limit:
                        return total, _too_large(total, limit, _path(where, (trail, index)))
        else:
            size = _scalar_chars(item)
            if size < 0:  # a scalar of a kind JSON has not, or a float JSON cannot write
                return total, _not_scalar(item, _path(where, trail))
            total += size
        if total > limit:
            return total, _too_large(total, limit, _path(where, trail))
    return total, None


def _scalar_chars(value: Any) -> int:
    """About how many characters a JSON scalar takes; -1 for anything else (a container, a value
    JSON has no form for, NaN or an infinity), which the walk looks at more closely."""
    kind = type(value)
    if kind is str:
        return len(value) + 2
    if kind is int:
        bits = value.bit_length()
        return 8 if bits <= 64 else _int_chars(value) if bits <= MAX_INT_BITS else -1
    if kind is bool or value is None:
        return 5
    if kind is float:
        return _FLOAT_CHARS if math.isfinite(value) else -1
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, int):
        bits = value.bit_length()
        return 8 if bits <= 64 else _int_chars(value) if bits <= MAX_INT_BITS else -1
    if isinstance(value, float) and math.isfinite(value):
        return _FLOAT_CHARS
    return -1


def _not_scalar(value: Any, where: str) -> Problem:
    if isinstance(value, float):
        return _not_json(f"{_float_name(value)} is not JSON", where)
    if isinstance(value, int) and not isinstance(value, bool):
        digits = _int_chars(value)
        return _not_json(
            f"an integer of about {digits:,} digits is too large to store (at most {MAX_INT_BITS:,} bits)", where
        )
    return _not_json(f"{_article(type(value).__name__)} is not JSON data", where)


def _path(where: str, trail: _Trail) -> str:
    parts: list[str] = []
    while trail is not None:
        trail, key = trail
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif _PLAIN_KEY.match(key):
            parts.append(f".{key}")
        else:
            parts.append(f"[{_short_repr(key)}]")
    return where + "".join(reversed(parts))


def _too_large(total: int, limit: int, where: str) -> Problem:
    return Problem(
        code="too_large", where=where, message=f"about {total:,} characters, more than the limit of {limit:,}"
    )


def _not_json(message: str, where: str) -> Problem:
    return Problem(code="not_json", where=where, message=message)


def _deep_message(max_depth: int) -> str:
    return f"nested deeper than {max_depth} levels"


def _int_chars(value: int) -> int:
    return value.bit_length() * 30103 // 100000 + 2


def _float_name(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def _short_repr(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
    except Exception:  # a key's own repr may fail; the message must not
        text = f"<{type(value).__name__}>"
    return clip(text, 60)
