"""Serving an MCP server: over this process's stdin and stdout, or over streamable HTTP on a
socket, every request carrying the bearer token."""

from __future__ import annotations

import contextlib
import functools
import hmac
import ipaddress
import json
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import redirect_stdout
from typing import TYPE_CHECKING, Any

from planexec.hosting._sessions import SessionLimits

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = [
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "App",
    "BearerGuard",
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

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


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
    TOKEN`` (compared in constant time); any other gets 401 with ``unauthorized`` as its JSON body,
    before its body is read. ``is_open(path)`` names paths that need no token (a health check)."""

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

    def _allowed(self, scope: Scope) -> bool:
        if self._is_open is not None and self._is_open(str(scope.get("path", ""))):
            return True
        given = b""
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                given = value
                break
        scheme, _, credentials = given.partition(b" ")
        ok = hmac.compare_digest(credentials.strip(), self._token)
        return scheme.lower() == b"bearer" and ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self._app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(self._body)).encode()),
                    (b"www-authenticate", b'Bearer realm="planexec"'),
                ],
            }
        )
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
    return BearerGuard(app, token)


MAX_CONNECTIONS = 1_000
"""Connections and requests served at once; more are answered 503 Service Unavailable."""


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
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the ASGI ``app`` with uvicorn on ``host``:``port`` until the process is told to stop
    (SIGINT, SIGTERM). ``on_ready`` is told the URL (ending in ``path``) once the socket listens
    (with ``port=0``, the port chosen)."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: without it, a response written in two parts (head, then
        # body) waits for the client's delayed acknowledgement, some 40 ms a request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
        sock.setblocking(False)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
            limit_concurrency=MAX_CONNECTIONS,  # beyond it, 503: open connections cannot use up the process's files
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
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP until the process is told to stop (SIGINT, SIGTERM).

    ``on_ready`` is told the URL once the socket listens (with ``port=0``, the port chosen)."""
    app = http_app(server, token=token, path=path, host=host, max_body=max_body, sessions=sessions)
    await serve_asgi(app, host=host, port=port, path=path, on_ready=on_ready)


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
