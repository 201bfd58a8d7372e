"""What a server is before it serves: its token, its instance id, and the extra it needs."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from planexec._util.extras import install_hint
from planexec.errors import Problem, UsageError
from planexec.hosting import Token, default_token_path, server_token

__all__ = ["DEFAULT_PORT", "TOKEN_ENV", "instance_id", "require_server", "serve_token"]

DEFAULT_PORT = 8700
TOKEN_ENV = "PLANEXEC_SERVE_TOKEN"
"""The environment variable the API's token may be given in."""
TOKEN_FILE = "serve-token"
INSTANCE_FILE = "serve-id"


def require_server() -> None:
    """Raise :class:`~planexec.UsageError` saying what to install when the ``server`` extra is missing."""
    missing = []
    for module in ("fastapi", "uvicorn"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(
            "planexec serve needs FastAPI and uvicorn",
            [Problem(code="extra", where="server", message=f"missing {', '.join(missing)}: {install_hint('server')}")],
        )


def serve_token(token_file: Path | None = None, *, environ: Mapping[str, str] | None = None) -> Token:
    """The API's token: read from ``token_file``; else ``$PLANEXEC_SERVE_TOKEN``; else read from
    ``serve-token`` beside the default store, generated there (owner-only) on first start."""
    return server_token(token_file, environ=environ, env_name=TOKEN_ENV, default_file=default_token_path(TOKEN_FILE))


def instance_id(folder: Path) -> str:
    """This server's id, kept in ``serve-id`` in ``folder`` (made on first start): the runs it
    starts record it, and the next start with the same id picks up the ones left unfinished."""
    path = folder / INSTANCE_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        text = ""
    if text:
        return text
    folder.mkdir(parents=True, exist_ok=True)
    made = secrets.token_hex(8)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(made + "\n")
    return made
