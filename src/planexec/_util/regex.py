"""Regular expressions a planner writes, compiled and run with RE2: matching takes time linear in
the text, whatever the pattern (no catastrophic backtracking).

RE2 syntax is Python's without lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), backreferences
(``\\1``) or possessive forms; ``\\z`` ends the text (Python's ``\\Z``). ``\\d``, ``\\w`` and
``\\s`` are ASCII, as in the JSON Schema regex dialect.

Developer-written patterns (a tool's own JSON Schema) keep using Python's ``re``.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol, cast

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

__all__ = ["MAX_PATTERN_CHARS", "PatternError", "Regex", "compile_pattern", "pattern_problem", "search"]

MAX_PATTERN_CHARS = 10_000
"""The longest pattern accepted."""

_MAX_MEM = 1 << 20
"""RE2's memory budget for one pattern (its program and its matching cache), in bytes; a pattern
needing more does not compile, and matching falls back to a slower linear-time engine."""

_HINT = "RE2 syntax is required (no lookaround, no backreferences; \\z for the end of the text)"


class Regex(Protocol):
    """A compiled RE2 pattern (only what planexec uses of it)."""

    def search(self, text: bytes) -> object | None: ...


class PatternError(ValueError):
    """A pattern RE2 cannot compile; the message says why and what RE2 accepts."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_MEM
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=128)
def compile_pattern(pattern: str) -> Regex:
    """``pattern`` compiled with RE2 (cached); raises ``PatternError`` when RE2 refuses it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern has {len(pattern):,} characters, more than the limit of {MAX_PATTERN_CHARS:,}")
    try:
        return cast(Regex, re2.compile(pattern, _OPTIONS))
    except re2.error as e:
        reason = e.args[0] if e.args else e
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"{reason}; {_HINT}") from None
    except (UnicodeError, TypeError, ValueError) as e:  # a lone surrogate cannot be encoded for RE2
        raise PatternError(f"{e}; {_HINT}") from None


def pattern_problem(pattern: str) -> str | None:
    """Why RE2 cannot use ``pattern``, or None when it can."""
    try:
        compile_pattern(pattern)
    except PatternError as e:
        return str(e)
    return None


def search(pattern: str | Regex, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text``; raises ``PatternError`` for a bad pattern."""
    regex = compile_pattern(pattern) if isinstance(pattern, str) else pattern
    # Encoded here (lone surrogates kept) rather than by the re2 module, which refuses them.
    return regex.search(text.encode("utf-8", "surrogatepass")) is not None
