"""Cutting text for a message without cutting a secret in two.

Messages quote what a model, a tool or a plan wrote, cut to a length. A cut through the middle of a
token could leave most of an API key, a password or a signed token in the message, where no
redaction rule recognizes it any more (the rules match whole tokens). :func:`clip` therefore never
keeps part of a token: it cuts at the last separator (whitespace, a quote, a bracket, a comma …)
before the limit, and drops the token the limit falls in.
"""

from __future__ import annotations

import re

__all__ = ["clip"]

_LAST_SEPARATOR = re.compile(r"[\s\"'`,;()\[\]{}<>|]")


def clip(text: str, limit: int, marker: str = "...") -> str:
    """``text``, or its beginning up to about ``limit`` characters followed by ``marker``, cut only
    where a token ends (a token cut by the limit is left out whole)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(marker))
    if _LAST_SEPARATOR.match(text, keep):  # the limit falls on a separator: nothing is cut in two
        return text[:keep] + marker
    head = text[:keep]
    end = -1
    for found in _LAST_SEPARATOR.finditer(head):
        end = found.end()
    return (head[:end] if end > 0 else "") + marker
