"""How stores report failures: one :class:`~planexec.StoreError` per failure, naming the store (its
password hidden) and what went wrong, never the driver's own exception or traceback.

A store URL's password is hidden everywhere a store shows its URL: in reprs, in error messages and
in the messages of the database driver that a store passes on (libpq repeats parts of a malformed
URL in its errors). Both the password as written in the URL (percent-encoded) and as decoded are
replaced with ``[REDACTED:password]``, as are ``password=`` and ``sslpassword=`` query parameters;
the secret rules of :class:`~planexec.store.Redactor` then run over the message as well.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from planexec.errors import StoreError
from planexec.store._redact import Redactor

__all__ = ["HIDDEN", "Damaged", "Secrets", "describe", "hide_url_password", "safe_url", "store_failure"]

HIDDEN = "[REDACTED:password]"
"""What a password becomes: the placeholder the redactor's ``url_password`` rule writes, so the
redactor, run over a message afterwards, leaves it as it is."""

_SECRET_PARAMS = frozenset({"password", "sslpassword"})
_SHORT = 4
"""Passwords shorter than this are hidden in messages only where they stand in a URL."""
_REDACTOR = Redactor()
_KEYWORD_PASSWORD = re.compile(r"(?:^|\s)(?:ssl)?password\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))", re.IGNORECASE)


class Damaged(Exception):
    """A row of a store's own tables could not be understood (the store is damaged)."""


def _userinfo_end(rest: str) -> int:
    """Where the ``user:password`` part of ``rest`` (a URL after ``scheme://``) ends: the index of
    its ``@``, or -1.

    A password that was not percent-encoded may hold ``@``, ``/`` or ``?``, so this is the last
    ``@`` that is not inside the query (an ``@`` after a ``?`` and a ``key=``), and failing that
    the last ``@`` of all: it is better to hide too much of a URL than too little.
    """
    ats = [i for i, c in enumerate(rest) if c == "@"]
    for at in reversed(ats):
        question = rest.rfind("?", 0, at)
        if question < 0 or "=" not in rest[question + 1 : at]:
            return at
    return ats[-1] if ats else -1


def _libpq_password(rest: str) -> str:
    """The password as libpq reads it: the userinfo ends at the first ``@``, unless a ``/`` comes first."""
    for i, c in enumerate(rest):
        if c == "/":
            return ""
        if c == "@":
            return rest[:i].partition(":")[2]
    return ""


def hide_url_password(url: str) -> str:
    """``url`` with its password (and any ``password=`` query parameter) shown as ``[REDACTED:password]``.

    Text that is not a ``scheme://`` URL (a ``key=value`` connection string) goes through the
    redactor's secret rules, which hide ``password=…``.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _REDACTOR.redact_text(url)
    end = _userinfo_end(rest)
    if end >= 0:
        user, colon, _ = rest[:end].partition(":")
        if colon:
            rest = f"{user}:{HIDDEN}{rest[end:]}"
    base, question, query = rest.partition("?")
    if question:
        pieces = []
        for piece in query.split("&"):
            key, equals, _ = piece.partition("=")
            pieces.append(f"{key}={HIDDEN}" if equals and unquote(key).lower() in _SECRET_PARAMS else piece)
        rest = f"{base}?{'&'.join(pieces)}"
    return _REDACTOR.redact_text(f"{scheme}://{rest}")


def _passwords(url: str) -> set[str]:
    """Every form in which ``url``'s passwords may appear in a message: as written and decoded, as
    this module reads the URL and as libpq does."""
    found: set[str] = set()
    _, sep, rest = url.partition("://")
    if not sep:  # a key=value connection string
        for quoted, plain in _KEYWORD_PASSWORD.findall(url):
            found |= {quoted, re.sub(r"\\(.)", r"\1", quoted)} if quoted else {plain}
    else:
        found.add(_libpq_password(rest))
        end = _userinfo_end(rest)
        if end >= 0:
            _, colon, password = rest[:end].partition(":")
            if colon:
                found.add(password)
            rest = rest[end + 1 :]
        _, _, query = rest.partition("?")
        for piece in query.split("&"):
            key, equals, value = piece.partition("=")
            if equals and unquote(key).lower() in _SECRET_PARAMS:
                found.add(value)
    found |= {unquote(p) for p in found} | {unquote(p.replace("+", " ")) for p in found}
    return {p for p in found if p}


class Secrets:
    """The passwords of one store URL, to be hidden in any text shown to a user."""

    __slots__ = ("_words",)

    def __init__(self, url: str) -> None:
        self._words = sorted(_passwords(url), key=len, reverse=True)

    def _replace(self, text: str) -> str:
        for word in self._words:
            if len(word) >= _SHORT:
                text = text.replace(word, HIDDEN)
            else:  # hiding every "ab" in a message would garble it: hide it where a URL holds it
                text = text.replace(f":{word}@", f":{HIDDEN}@").replace(f"={word}", f"={HIDDEN}")
        return text

    def hide(self, text: str) -> str:
        """``text`` with every form of the passwords hidden, then the redactor's secret rules applied."""
        return _REDACTOR.redact_text(self._replace(text))

    def show_url(self, url: str) -> str:
        """The store URL as it may be shown: every form of its passwords hidden, then
        :func:`hide_url_password` (for what a misread of the URL could have missed)."""
        return hide_url_password(self._replace(url))


def safe_url(url: str) -> str:
    """A store URL as it may be shown to anyone: every form of its passwords hidden."""
    return Secrets(url).show_url(url)


def describe(error: BaseException) -> str:
    """What a driver error says, on one line, with its type (and SQLSTATE or SQLite code)."""
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    code = getattr(error, "sqlstate", None) or getattr(error, "sqlite_errorname", None)
    label = f"{name}, {code}" if code else name
    text = " ".join(str(error).split())
    return f"{text} ({label})" if text else label


def store_failure(store: str, doing: str, what: str, secrets: Secrets | None = None) -> StoreError:
    """The error for a store that failed while ``doing`` something."""
    message = f"{store}: could not {doing}: {what}"
    return StoreError(secrets.hide(message) if secrets is not None else message)
