"""``open_store``: a store from a URL or a file path, the ``PLANEXEC_STORE`` variable, or the default
SQLite file."""

from __future__ import annotations

import os
import re
from pathlib import Path

from planexec.errors import Problem, UsageError
from planexec.store._base import RunStore
from planexec.store._failures import Secrets
from planexec.store._memory import MemoryStore
from planexec.store._plan_memory import PlanMemoryBackend
from planexec.store._postgres import PostgresStore
from planexec.store._redact import Redactor
from planexec.store._sqlite import SQLiteStore

__all__ = ["ENV_VAR", "PII_ENV_VAR", "SUPPORTED_URLS", "default_store_path", "open_store", "plan_memory_at", "store_at"]

ENV_VAR = "PLANEXEC_STORE"

PII_ENV_VAR = "PLANEXEC_REDACT_PII"
"""Set to ``1`` (or ``true``, ``yes``) to redact personal data too, in every store opened by URL
(and in what the command line prints): the one switch for PII redaction."""

SUPPORTED_URLS = (
    "a file path (an SQLite file: runs.db, ~/planexec/runs.db, /abs/path.db)",
    "memory://",
    "sqlite:///absolute/path.db",
    "sqlite:relative/path.db",
    "postgresql://user:password@host:5432/database (or postgres://…)",
)


def default_store_path() -> Path:
    """``$XDG_DATA_HOME/planexec/runs.db``, or ``~/.local/share/planexec/runs.db``."""
    data_home = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data_home) if data_home and Path(data_home).is_absolute() else Path.home() / ".local" / "share"
    return base / "planexec" / "runs.db"


def open_store(url: str | None = None, *, redactor: Redactor | None = None, pii: bool | None = None) -> RunStore:
    """The store ``url`` names; without one, ``$PLANEXEC_STORE``; without that, the default SQLite file.

    Forms: a file path (an SQLite file, ``~`` expanded: ``runs.db``, ``/abs/path.db``);
    ``memory://``; ``sqlite:///absolute/path.db``; ``sqlite:relative/path.db``;
    ``postgresql://…`` or ``postgres://…`` (needs the ``postgres`` extra). A text with
    ``://``, or that begins with a word and a colon (``mysql:…``), is a URL, never a path.
    Nothing is opened until the store is first used. ``redactor`` defaults to ``Redactor()`` —
    secrets only — or, with ``pii=True`` (or ``$PLANEXEC_REDACT_PII=1`` when ``pii`` is not given),
    ``Redactor(pii=True)``: secrets and personal data.

    A URL this function does not know raises :class:`~planexec.UsageError` that lists the forms it
    does, showing the URL with its password hidden. A PostgreSQL URL's ``connect_timeout`` and
    ``options=-c statement_timeout=…`` set the store's timeouts (see :class:`PostgresStore`).
    """
    if redactor is None:
        redactor = Redactor(pii=redact_pii() if pii is None else pii)
    if url is None:
        url = os.environ.get(ENV_VAR) or None
    if url is None:
        path = default_store_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteStore(path, redactor=redactor)
    return store_at(url, redactor=redactor)


def store_at(url: str, *, redactor: Redactor) -> RunStore:
    """The store ``url`` names (any form :func:`open_store` takes): the one reading of store URLs.
    A backend's URL scheme is one branch here."""
    scheme, sep, rest = url.partition(":")
    scheme = scheme.lower()
    if sep and scheme == "memory" and rest in ("", "//"):
        return MemoryStore(redactor=redactor)
    if sep and scheme == "sqlite":
        return SQLiteStore(_sqlite_path(url, rest), redactor=redactor)
    if sep and scheme in ("postgresql", "postgres") and rest.startswith("//"):
        return PostgresStore(url, redactor=redactor)
    if _is_path(url):
        return SQLiteStore(_file_path(url), redactor=redactor)
    raise _unsupported(url, "unknown store URL")


def plan_memory_at(where: str | os.PathLike[str]) -> PlanMemoryBackend:
    """The plan memory entries of the store ``where`` names — a URL or path as :func:`open_store`
    takes them, or a path object (an SQLite file, taken as it is) — without the store's run logs.

    Raises :class:`~planexec.UsageError` as :func:`open_store` does; a URL it does not know has a
    problem whose code is ``store_url``.
    """
    if isinstance(where, os.PathLike):
        return SQLiteStore(Path(where)).plan_memory()
    return store_at(where, redactor=Redactor()).plan_memory()


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")
"""What begins a URL (two characters at least: ``C:`` is a Windows drive)."""


def _is_path(text: str) -> bool:
    """Whether ``text`` names a file rather than a URL."""
    if not text.strip() or "://" in text:
        return False
    return text.startswith(("/", ".", "~")) or _SCHEME.match(text) is None


def _file_path(text: str) -> Path:
    path = Path(text).expanduser()
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise UsageError(
            "the store path is a folder",
            [
                Problem(
                    code="store_url", where=f"store path {text!r}", message="name an SQLite file in it, e.g. runs.db"
                )
            ],
        )
    return path


def redact_pii() -> bool:
    """Whether ``$PLANEXEC_REDACT_PII`` asks for personal data to be redacted too."""
    return os.environ.get(PII_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def _sqlite_path(url: str, rest: str) -> Path:
    if rest.startswith("///"):
        path = rest[2:]
    elif rest.startswith("//"):
        raise _unsupported(url, "a sqlite URL has no host: use sqlite:///absolute/path.db or sqlite:relative/path.db")
    else:
        path = rest
    if not path or path.endswith("/"):
        raise _unsupported(url, "a sqlite URL needs a file name")
    return Path(path).expanduser()


def _unsupported(url: str, summary: str) -> UsageError:
    shown = Secrets(url).show_url(url)
    forms = "; ".join(SUPPORTED_URLS)
    return UsageError(summary, [Problem(code="store_url", where=f"store URL {shown!r}", message=f"supported: {forms}")])
