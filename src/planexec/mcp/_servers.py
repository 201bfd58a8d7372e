"""Where an MCP server is: a command to spawn (stdio) or a URL (streamable HTTP)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from planexec.errors import Problem, UsageError

__all__ = ["MCPHttp", "MCPStdio"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPStdio:
    """An MCP server spawned as a subprocess, spoken to over its stdin and stdout.

    ``env`` is added to a minimal environment the SDK gives the process (not the whole of this
    process's, which may hold secrets); ``cwd`` is where it runs."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.command, str) or not self.command.strip():
            problems.append(Problem(code="mcp", where="command", message="must name the program to run"))
        if not isinstance(self.args, tuple) or not all(isinstance(a, str) for a in self.args):
            problems.append(Problem(code="mcp", where="args", message="must be a tuple of strings"))
        if not isinstance(self.env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()
        ):
            problems.append(Problem(code="mcp", where="env", message="must map names to strings"))
        if problems:
            raise UsageError("invalid MCP server", problems)

    @property
    def label(self) -> str:
        return " ".join([self.command, *self.args])

    def target(self) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=self.command, args=list(self.args), env=dict(self.env) or None, cwd=self.cwd
        )
        return stdio_client(params, errlog=_server_errors())


def _server_errors() -> Any:
    """Where a stdio server's stderr goes: this process's stderr when it is a file (a terminal, a
    log), else nowhere (a notebook's or a test's stderr has no file to hand a child process)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL
    return sys.stderr


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPHttp:
    """An MCP server reached over streamable HTTP at ``url``, with optional ``headers`` (for
    example ``{"Authorization": "Bearer …"}``: they are never logged)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            problems.append(Problem(code="mcp", where="url", message="must be an http:// or https:// URL"))
        if not isinstance(self.headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
        ):
            problems.append(Problem(code="mcp", where="headers", message="must map names to strings"))
        if problems:
            raise UsageError("invalid MCP server", problems)

    @property
    def label(self) -> str:
        return self.url

    def target(self) -> Any:
        if not self.headers:
            return self.url
        return _with_headers(self.url, dict(self.headers))


@contextlib.asynccontextmanager
async def _with_headers(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The streamable HTTP transport with an HTTP client of our own, closed with the connection."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams
