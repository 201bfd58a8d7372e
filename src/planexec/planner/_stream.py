"""Reading a planner's JSON answer while it streams: each step object is handed on the moment its
closing brace arrives, so that ready steps can start before the plan is complete.

The reader follows the JSON text one character at a time (strings and escapes included) and knows
only the top-level object: the elements of its ``"steps"`` array (or its ``"step"`` object, for
the step-by-step policy) and its scalar members (``"confidence"``, ``"stop"``). Anything before
the first ``{`` (a code fence, a sentence) is skipped. Malformed text simply yields nothing more:
the whole answer is still validated, and repaired if need be, when it is complete.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

__all__ = ["StreamedSteps"]


class StreamedSteps:
    """``feed`` text as it arrives; it returns the step objects completed by that text."""

    def __init__(self, key: str = "steps") -> None:
        self._key = key
        self._text: list[str] = []
        self._pos = 0
        self._started = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._string_start = 0
        self._last_string: str | None = None
        self._member: str | None = None
        """The top-level member whose value is being read."""
        self._expect_key = True
        self._value_start: int | None = None
        self._item_start: int | None = None
        self._in_steps = False
        self._broken = False
        self.scalars: dict[str, Any] = {}
        """Top-level members with a scalar value, as soon as each is complete."""

    @property
    def key(self) -> str:
        return self._key

    @property
    def text(self) -> str:
        return "".join(self._text)

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        if self._broken or not chunk:
            return []
        self._text.append(chunk)
        text = self.text
        self._text = [text]
        found: list[dict[str, Any]] = []
        for i in range(self._pos, len(text)):
            self._step(text, i, found)
            if self._broken:
                break
        self._pos = len(text)
        return found

    def _step(self, text: str, i: int, found: list[dict[str, Any]]) -> None:
        c = text[i]
        if not self._started:
            if c == "{":
                self._started = True
                self._depth = 1
                self._expect_key = True
            return
        if self._in_string:
            if self._escape:
                self._escape = False
            elif c == "\\":
                self._escape = True
            elif c == '"':
                self._in_string = False
                if self._depth == 1 and self._expect_key:
                    try:
                        self._last_string = json.loads(text[self._string_start : i + 1])
                    except ValueError:
                        self._broken = True
            return
        if c == '"':
            self._in_string = True
            self._string_start = i
            if self._depth == 1 and not self._expect_key and self._value_start is None:
                self._value_start = i
            return
        if c in " \t\r\n":
            return
        if self._depth == 1:
            self._top_level(text, i, c)
            return
        if c in "{[":
            if self._in_steps and self._depth == 2 and c == "{":
                self._item_start = i
            self._depth += 1
            return
        if c in "}]":
            self._depth -= 1
            if self._depth == 2 and self._in_steps and c == "}" and self._item_start is not None:
                self._emit(text[self._item_start : i + 1], found)
                self._item_start = None
            elif self._depth == 1:
                if self._member == self._key and self._key == "step" and c == "}" and self._value_start is not None:
                    self._emit(text[self._value_start : i + 1], found)
                self._in_steps = False
                self._value_start = None
            return

    def _top_level(self, text: str, i: int, c: str) -> None:
        if c == ":":
            self._member = self._last_string
            self._expect_key = False
            self._value_start = None
        elif c in ",}":
            if self._value_start is not None and self._member is not None:
                with contextlib.suppress(ValueError):  # not a complete JSON value: leave it out
                    self.scalars[self._member] = json.loads(text[self._value_start : i])
            self._value_start = None
            self._expect_key = True
            if c == "}":
                self._depth = 0
                self._broken = True  # the object is complete: nothing more to read
        elif c in "{[":
            self._depth = 2
            self._value_start = i
            self._in_steps = self._member == self._key and c == "["
        elif self._value_start is None and not self._expect_key:
            self._value_start = i  # a number, true, false or null

    def _emit(self, raw: str, found: list[dict[str, Any]]) -> None:
        try:
            value = json.loads(raw)
        except ValueError:
            return
        if isinstance(value, dict):
            found.append(value)
