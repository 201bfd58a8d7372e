"""Reading a planner's JSON answer while it streams: each step object is handed on the moment its
closing brace arrives, so that ready steps can start before the plan is complete.

The reader follows the JSON text (strings and escapes included) and knows only the top-level
object: the elements of its ``"steps"`` array (or its ``"step"`` object, for the step-by-step
policy) and its scalar members (``"confidence"``, ``"stop"``). Anything before the first ``{`` (a
code fence, a sentence) is skipped. Malformed text simply yields nothing more: the whole answer is
still validated, and repaired if need be, when it is complete.

Each chunk is looked at once, and only the text of the value being read (one step, one top-level
scalar) is kept, so reading costs time linear in the whole answer and memory bounded by its
largest step. Each step is parsed as strict JSON (no ``NaN``); a step nested deeper than
``STEP_DEPTH`` levels is skipped, and stops being kept as soon as it is that deep.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from planexec._util.strict_json import MAX_DEPTH, JSONRefused, loads

__all__ = ["STEP_DEPTH", "StreamedSteps"]

STEP_DEPTH = MAX_DEPTH + 3
"""How deep one streamed step may nest: its arguments or schemas may be ``MAX_DEPTH`` levels deep,
inside the step, its checks and a check."""

_IN_STRING = re.compile(r'["\\]')
"""What ends a run of ordinary characters inside a string."""

_IN_VALUE = re.compile(r'["{}\[\]]')
"""What matters inside a nested value: strings and brackets."""


class StreamedSteps:
    """``feed`` text as it arrives; it returns the step objects completed by that text."""

    def __init__(self, key: str = "steps") -> None:
        self._key = key
        self._started = False
        self._done = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._key_string = False
        """The string being read is a top-level member name."""
        self._last_key: str | None = None
        self._member: str | None = None
        """The top-level member whose value is being read."""
        self._expect_key = True
        self._value_seen = False
        """The current top-level member's value has begun."""
        self._in_steps = False
        # the value being kept: its text so far, where it began in this chunk, and what it is
        self._held: list[str] = []
        self._held_chars = 0
        self._from: int | None = None
        self._capture: str | None = None
        """``key``, ``scalar``, ``item`` (an element of the steps array) or ``step`` (the step object)."""
        self._capture_depth = 0
        self.scalars: dict[str, Any] = {}
        """Top-level members with a scalar value, as soon as each is complete."""

    @property
    def key(self) -> str:
        return self._key

    @property
    def held(self) -> int:
        """How many characters of the answer the reader keeps now: only the value being read."""
        return self._held_chars

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        if self._done or not chunk:
            return []
        found: list[dict[str, Any]] = []
        if self._capture is not None:
            self._from = 0
        i, n = 0, len(chunk)
        while i < n and not self._done:
            if not self._started:
                j = chunk.find("{", i)
                if j < 0:
                    break
                self._started, self._depth, self._expect_key = True, 1, True
                i = j + 1
            elif self._in_string:
                if self._escape:
                    self._escape = False
                    i += 1
                    continue
                m = _IN_STRING.search(chunk, i)
                if m is None:
                    break
                i = m.end()
                if m.group() == "\\":
                    self._escape = True
                else:
                    self._in_string = False
                    if self._key_string:
                        self._end_key(chunk, i)
            elif self._depth >= 2:
                m = _IN_VALUE.search(chunk, i)
                if m is None:
                    break
                i = m.end()
                self._nested(chunk, m.start(), m.group(), found)
            else:
                c = chunk[i]
                if c not in " \t\r\n":
                    self._top_level(chunk, i, c)
                i += 1
        if self._capture is not None and self._from is not None:
            piece = chunk[self._from :]
            self._held.append(piece)
            self._held_chars += len(piece)
        return found

    # -- inside the top-level object ---------------------------------------------------------------

    def _top_level(self, chunk: str, i: int, c: str) -> None:
        if c == '"':
            self._in_string = True
            self._key_string = self._expect_key
            if self._expect_key:
                self._begin("key", i)
            elif not self._value_seen:
                self._value_seen = True
                self._begin("scalar", i)
        elif c == ":":
            self._drop()
            self._member = self._last_key
            self._expect_key = False
            self._value_seen = False
        elif c in ",}":
            if self._capture == "scalar" and self._member is not None:
                with contextlib.suppress(JSONRefused):  # not a complete JSON value: leave it out
                    self.scalars[self._member] = loads(self._end(chunk, i), max_depth=0)
            self._drop()
            self._expect_key = True
            self._value_seen = False
            if c == "}":
                self._depth = 0
                self._done = True  # the object is complete: nothing more to read
        elif c in "{[":
            self._depth = 2
            self._value_seen = True
            wanted = self._member == self._key
            self._in_steps = wanted and c == "["
            if wanted and self._key == "step" and c == "{":
                self._begin("step", i)
                self._capture_depth = 2
        elif not self._expect_key and not self._value_seen:
            self._value_seen = True
            self._begin("scalar", i)  # a number, true, false or null

    def _end_key(self, chunk: str, end: int) -> None:
        try:
            name = loads(self._end(chunk, end), max_depth=0)
        except JSONRefused:
            self._done = True
            return
        self._last_key = name if isinstance(name, str) else None

    # -- inside a nested value ----------------------------------------------------------------------

    def _nested(self, chunk: str, i: int, c: str, found: list[dict[str, Any]]) -> None:
        if c == '"':
            self._in_string = True
            self._key_string = False
        elif c in "{[":
            if self._in_steps and self._depth == 2 and c == "{":
                self._begin("item", i)
                self._capture_depth = 3
            self._depth += 1
            if self._capture in ("item", "step") and self._depth - self._capture_depth >= STEP_DEPTH:
                self._drop()  # too deep to be a step: stop keeping it
        else:
            self._depth -= 1
            if self._depth == 2 and self._in_steps and c == "}":
                if self._capture == "item":
                    self._emit(self._end(chunk, i + 1), found)
            elif self._depth == 1:
                if self._capture == "step" and c == "}":
                    self._emit(self._end(chunk, i + 1), found)
                self._drop()
                self._in_steps = False

    def _emit(self, raw: str, found: list[dict[str, Any]]) -> None:
        try:
            value = loads(raw, max_depth=STEP_DEPTH)
        except JSONRefused:
            return
        if isinstance(value, dict):
            found.append(value)

    # -- keeping the text of the value being read ---------------------------------------------------

    def _begin(self, what: str, i: int) -> None:
        self._capture = what
        self._from = i
        self._held = []
        self._held_chars = 0

    def _end(self, chunk: str, end: int) -> str:
        """The kept value, up to ``end`` (exclusive) in this chunk; it is no longer kept."""
        start = self._from if self._from is not None else end
        text = "".join([*self._held, chunk[start:end]])
        self._drop()
        return text

    def _drop(self) -> None:
        self._capture = None
        self._from = None
        self._held = []
        self._held_chars = 0
