"""The bearer token an HTTP server asks of every request: from a file, from the environment, or
generated once into a file only its owner can read, beside the default store. The MCP server and
the HTTP API each have their own variable and file (``TOKEN_ENV``/``mcp-token`` for the MCP server)."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from planexec.errors import Problem, UsageError
from planexec.store import default_store_path

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_ENV", "Token", "default_token_path", "server_token"]

TOKEN_ENV = "PLANEXEC_MCP_TOKEN"
"""The environment variable a token may be given in."""
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 4_096


@dataclass(frozen=True, kw_only=True)
class Token:
    """A bearer token, where it came from, and whether it was generated just now (then it is
    shown to the user once)."""

    value: str = field(repr=False)
    source: str
    created: bool = False


def default_token_path(name: str = "mcp-token") -> Path:
    """The file ``name`` in planexec's data folder, beside the default store
    (``$XDG_DATA_HOME/planexec/``, else ``~/.local/share/planexec/``)."""
    return default_store_path().parent / name


def _checked(value: str, source: str) -> str:
    value = value.strip()
    problem = None
    if len(value) < MIN_TOKEN_CHARS:
        problem = f"is {len(value)} characters long; a token has at least {MIN_TOKEN_CHARS}"
    elif len(value) > MAX_TOKEN_CHARS:
        problem = f"is longer than {MAX_TOKEN_CHARS:,} characters"
    elif not all(33 <= ord(c) <= 126 for c in value):
        problem = "must be printable ASCII without spaces"
    if problem is not None:
        raise UsageError("not a usable token", [Problem(code="token", where=source, message=problem)])
    return value


def _read(path: Path, source: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            "cannot read the token", [Problem(code="token", where=source, message=f"{type(e).__name__}: {e}")]
        ) from None
    return _checked(text, source)


def server_token(
    token_file: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    env_name: str = TOKEN_ENV,
    default_file: Path | None = None,
) -> Token:
    """The token: read from ``token_file``; else from the variable ``env_name``
    (``$PLANEXEC_MCP_TOKEN`` by default); else read from ``default_file``
    (:func:`default_token_path` by default), generated there (readable by its owner only) when
    missing.

    Raises :class:`~planexec.UsageError` for a token that is too short, or a file that cannot be read.
    """
    env = os.environ if environ is None else environ
    if token_file is not None:
        return Token(value=_read(token_file, f"--token-file {token_file}"), source=f"the file {token_file}")
    given = env.get(env_name, "")
    if given.strip():
        return Token(value=_checked(given, f"${env_name}"), source=f"${env_name}")
    path = default_file if default_file is not None else default_token_path()
    if path.exists():
        return Token(value=_read(path, str(path)), source=f"the file {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    except FileExistsError:  # another server wrote it first: use that one
        return Token(value=_read(path, str(path)), source=f"the file {path}")
    os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(value + "\n")
    return Token(value=value, source=f"the file {path}", created=True)
