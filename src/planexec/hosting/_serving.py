"""Serving an MCP server: over this process's stdin and stdout, or over streamable HTTP on a
socket, every request carrying the bearer token; and serving any ASGI app on a socket with the
connection limits of :mod:`planexec.hosting._connections`."""

from __future__ import annotations

import contextlib
import functools
import hmac
import ipaddress
import json
import logging
import math
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from typing import TYPE_CHECKING, Any

from planexec.hosting._connections import (
    BACKLOG,
    App,
    ConnectionLimits,
    Receive,
    Scope,
    Send,
    Tracked,
    connection_cap,
    guarded_protocol,
    has_body,
    vouch,
)
from planexec.hosting._sessions import SessionLimits

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK_HOSTS",
    "MAX_BODY_BYTES",
    "App",
    "BearerGuard",
    "ConnectionLimits",
    "http_app",
    "is_loopback",
    "serve_asgi",
    "serve_http",
    "serve_stdio",
]

DEFAULT_PORT = 8765
MAX_BODY_BYTES = 1_048_576
"""The largest request body the HTTP server reads (1 MiB); a larger one is refused with 413."""
SHUTDOWN_GRACE = 5
"""Seconds open connections get to finish when the HTTP server is stopped."""

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The host names a server listening on a loopback address answers by default (as the MCP SDK's
server does): a page on another site whose name is made to point at this machine (DNS rebinding)
sends its own name in the ``Host`` header, and is refused."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only: ``localhost`` or a loopback address."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


UNAUTHORIZED = {"error": "unauthorized: send the server's token as Authorization: Bearer TOKEN"}
"""What the MCP server answers a request without the token."""


class BearerGuard:
    """An ASGI app that lets an HTTP request through to ``app`` only with ``Authorization: Bearer
    TOKEN`` (compared in constant time); any other gets 401 with ``unauthorized`` as its JSON body
    at once, none of its body read (and the connection closed when it announced one, whatever its
    size). ``is_open(path)`` names paths that need no token (a health check)."""

    def __init__(
        self,
        app: App,
        token: str,
        *,
        unauthorized: Any = None,
        is_open: Callable[[str], bool] | None = None,
    ) -> None:
        self._app = app
        self._token = token.encode("ascii")
        self._body = json.dumps(UNAUTHORIZED if unauthorized is None else unauthorized).encode()
        self._is_open = is_open

    def _has_token(self, scope: Scope) -> bool:
        given = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                given = value
                break
        scheme, _, credentials = given.partition(b" ")
        ok = hmac.compare_digest(credentials.strip(), self._token)
        return scheme.lower() == b"bearer" and ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if self._has_token(scope):
            vouch(scope)
            await self._app(scope, receive, send)
            return
        if self._is_open is not None and self._is_open(str(scope.get("path", ""))):
            await self._app(scope, receive, send)
            return
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(self._body)).encode()),
            (b"www-authenticate", b'Bearer realm="planexec"'),
        ]
        if has_body(scope):  # left unread: the connection cannot carry another request after it
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": self._body})


def http_app(
    server: MCPServer[Any],
    *,
    token: str,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    max_body: int = MAX_BODY_BYTES,
    sessions: SessionLimits | None = None,
) -> App:
    """``server`` as an ASGI app speaking streamable HTTP at ``path``: every request needs
    ``Authorization: Bearer <token>``; bodies over ``max_body`` bytes are refused. On a loopback
    ``host``, requests naming another host or origin are refused too (DNS rebinding). ``sessions``
    bounds the sessions kept open at once and how long an idle one is kept (default:
    :class:`SessionLimits`'s)."""
    sessions = sessions or SessionLimits()
    app: App = server.streamable_http_app(
        streamable_http_path=path,
        max_request_body_size=max_body,
        host=host.strip("[]"),
        max_sessions=sessions.max_sessions,
        session_idle_timeout=sessions.idle_expiry,
    )
    _quiet_disconnects()
    return BearerGuard(app, token)


class _NotDisconnects(logging.Filter):
    """Drops the records of a request whose client went away mid-body (or was cut off for sending
    it too slowly): the SDK logs each with a whole traceback, which is no error of the server's
    and, under a flood of slow clients, a cost of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        from starlette.requests import ClientDisconnect

        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, ClientDisconnect)


def _quiet_disconnects() -> None:
    logger = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _NotDisconnects) for f in logger.filters):
        logger.addFilter(_NotDisconnects())


@functools.cache
def _flushing_server() -> type[Any]:
    """uvicorn's server class, made on first use (uvicorn is an optional import)."""
    import uvicorn

    class FlushingServer(uvicorn.Server):
        """uvicorn's server, sending the process's telemetry before a stopping signal it caught is
        raised again (the process then ends by that signal: no exit handler runs after it)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                try:
                    yield
                finally:
                    from planexec.telemetry import flush_telemetry

                    flush_telemetry()

    return FlushingServer


async def serve_asgi(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    path: str = "/",
    limits: ConnectionLimits | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the ASGI ``app`` with uvicorn on ``host``:``port`` until the process is told to stop
    (SIGINT, SIGTERM), each connection held to ``limits`` (timeouts, caps: see
    :class:`ConnectionLimits`). ``on_ready`` is told the URL (ending in ``path``) once the socket
    listens (with ``port=0``, the port chosen).

    A request that carries the token (checked by a :class:`BearerGuard` in ``app``) keeps its
    connection from being closed to make room for others."""
    import uvicorn

    limits = limits or ConnectionLimits()
    protocol = guarded_protocol(limits, connection_cap(limits))

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: without it, a response written in two parts (head, then
        # body) waits for the client's delayed acknowledgement, some 40 ms a request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
        config = uvicorn.Config(
            Tracked(app),
            http=protocol,  # uvicorn's own, with the timeouts and the connection caps around it
            ws="none",
            log_level="warning",
            access_log=False,
            backlog=BACKLOG,
            timeout_keep_alive=max(1, math.ceil(limits.idle_timeout)),
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
            lifespan="on",
        )
        bound = sock.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if family == socket.AF_INET6 else host
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound}{path}")
        await _flushing_server()(config).serve(sockets=[sock])
    finally:
        sock.close()


async def serve_http(
    server: MCPServer[Any],
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    path: str = "/mcp",
    max_body: int = MAX_BODY_BYTES,
    sessions: SessionLimits | None = None,
    limits: ConnectionLimits | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP until the process is told to stop (SIGINT, SIGTERM),
    each connection held to ``limits``.

    ``on_ready`` is told the URL once the socket listens (with ``port=0``, the port chosen)."""
    app = http_app(server, token=token, path=path, host=host, max_body=max_body, sessions=sessions)
    await serve_asgi(app, host=host, port=port, path=path, limits=limits, on_ready=on_ready)


async def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve ``server`` over this process's stdin and stdout until stdin closes.

    Every line is answered: one that is not a JSON-RPC message gets the error JSON-RPC prescribes
    (``-32700`` Parse error, ``-32600`` Invalid Request, with the request's id when it can be read)
    and the next line is served as usual.

    Nothing but the protocol reaches stdout meanwhile: the process's file descriptors 0 and 1 point
    elsewhere (so a child process neither reads the protocol's input nor writes into its output),
    and what Python code prints (a tool's ``print``) goes to stderr.
    """
    from planexec.hosting._stdio import checked_stdio

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async serves; the streams are ours to wrap
    async with checked_stdio() as (read_stream, write_stream):
        sys.stdout.flush()
        with redirect_stdout(sys.stderr):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
