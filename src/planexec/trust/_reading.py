"""Whether a text contains another: the test of what a model's request actually carried.

A planner's request is text made from many parts — the goal, the tools, the record of what ran. To
know whether it carried an untrusted value, the value's text is looked for in the request's, in
pieces: the text is cut into words (runs of letters, digits and ``_``; a word longer than
``PIECE`` characters into pieces of that length), and each run of ``RUN`` consecutive words of the
value (the whole value, when it has fewer) is looked up among the request's. A run counts only
when it has at least ``MIN_CHARS`` characters and is not also in the trusted texts the request
could have taken it from (the goal, the constraints, what humans said, the tools' descriptions):
a value that only repeats the goal carries nothing new.

Looking words up in a set costs time linear in the texts' sizes, however many values there are;
only the first ``MAX_CHARS`` characters of a value are looked at (the part a request shows).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MAX_CHARS", "MIN_CHARS", "PIECE", "RUN", "TextIndex", "words"]

RUN = 3
"""How many consecutive words make a run looked for."""
MIN_CHARS = 4
"""The fewest characters (of its words) a run must have to count: shorter runs ("ok", "12") are
too common to tell apart from the request's own wording, and carry no instruction."""
PIECE = 16
"""Words longer than this are cut into pieces this long (text with no spaces, a long token)."""
MAX_CHARS = 20_000
"""How much of a value (as text) is looked for."""

_WORD = re.compile(r"\w+")


def words(text: str, limit: int = MAX_CHARS) -> list[str]:
    """The words of the first ``limit`` characters of ``text`` (long words cut into pieces)."""
    found: list[str] = []
    for match in _WORD.finditer(text, 0, min(len(text), limit)):
        word = match.group()
        if len(word) > PIECE:
            found.extend(word[i : i + PIECE] for i in range(0, len(word), PIECE))
        else:
            found.append(word)
    return found


def _runs(found: list[str]) -> Iterable[tuple[str, int]]:
    """Each run of ``RUN`` consecutive words (the whole list, when shorter), with its characters."""
    if len(found) < RUN:
        if found:
            yield "\x00".join(found), sum(map(len, found))
        return
    for i in range(len(found) - RUN + 1):
        part = found[i : i + RUN]
        yield "\x00".join(part), sum(map(len, part))


class TextIndex:
    """The runs of one to ``RUN`` consecutive words of some texts, to look values up in."""

    __slots__ = ("_runs",)

    def __init__(self, texts: Iterable[str], *, limit: int | None = None) -> None:
        runs: set[str] = set()
        for text in texts:
            found = words(text, len(text) if limit is None else limit)
            for n in range(1, RUN + 1):
                for i in range(len(found) - n + 1):
                    runs.add("\x00".join(found[i : i + n]))
        self._runs = runs

    def __contains__(self, run: object) -> bool:
        return run in self._runs

    def carries(self, value_words: list[str], trusted: TextIndex) -> bool:
        """Whether the text indexed carries a run of ``value_words`` that ``trusted`` does not explain."""
        return any(chars >= MIN_CHARS and run in self._runs and run not in trusted for run, chars in _runs(value_words))
