"""The ASGI guards in front of the API: the Host allow-list, the refusal of a request body over
the size limit before reading it, and the headers every response carries. Their refusals have the
API's one error body (``{"error": {"code", "message", "problems"}}``, see ``_shared``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.exceptions import HTTPException

from planexec.hosting import App
from planexec.server._shared import error_body

__all__ = [
    "MAX_BODY_BYTES",
    "BodyLimit",
    "HostAllowList",
    "SafeHeaders",
    "host_name",
]

MAX_BODY_BYTES = 1_048_576
"""The largest request body the API reads (1 MiB)."""
SAFE_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
"""Sent with every response: no content sniffing (an error echoing ``<script>`` stays JSON), and
the page is never framed by another site (whose clicks could approve a plan)."""
DRAIN_BYTES = 64 * 1_048_576
"""How much of a refused body is taken off the socket (and dropped) after the 413 is sent, so that
a client still sending it gets to read the answer; past this (or the server's body timeout), the
connection is closed instead."""


async def _drain(receive: Any) -> None:
    """Take the rest of a refused body off the socket, keeping none of it (at most DRAIN_BYTES)."""
    dropped = 0
    while dropped <= DRAIN_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _refusal(status: int, code: str, message: str) -> tuple[dict[str, Any], bytes]:
    """The start of a JSON refusal that closes the connection, and its body."""
    body = json.dumps(error_body(code, message)).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ],
    }
    return start, body


class _TooLarge(HTTPException):
    """Raised while the body is read, so that the framework answers 413 as for any HTTP error."""


class BodyLimit:
    """An ASGI app that refuses a request whose body is over ``limit`` bytes with 413: at once when
    its ``Content-Length`` says so (before any of the body is read), else as soon as the bytes read
    pass the limit. The whole answer is sent first; then, so that a client still sending the body
    gets to read it, the rest of the body is taken off the socket and dropped (at most
    :data:`DRAIN_BYTES`, within the server's body timeout) and the connection closed. A client that
    asked to be told before sending (``Expect: 100-continue``) is not waited for."""

    def __init__(self, app: App, limit: int = MAX_BODY_BYTES) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        waits = False
        declared = None
        for name, value in scope.get("headers", ()):
            name = name.lower()
            if name == b"expect" and value.strip().lower() == b"100-continue":
                waits = True
            elif name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    start, body = _refusal(400, "bad_request", "Content-Length is not a number")
                    await send(start)
                    await send({"type": "http.response.body", "body": body})
                    return
        if declared is not None and declared > self._limit:
            await self._refuse_large(send, None if waits else receive)
            return
        seen = 0
        over = False
        body_left = True
        started = False

        async def counted() -> Any:
            nonlocal seen, over, body_left
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                body_left = bool(message.get("more_body", False))
                if seen > self._limit:
                    over = True
                    raise _TooLarge(413, f"the request body is larger than {self._limit:,} bytes")
            else:
                body_left = False
            return message

        async def watched(message: Any) -> None:
            nonlocal started
            if not over:
                if message["type"] == "http.response.start":
                    started = True
                await send(message)
                return
            if message["type"] == "http.response.start":
                started = True
                headers = [(n, v) for n, v in message.get("headers", ()) if n.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            if message["type"] == "http.response.body" and not message.get("more_body", False) and body_left:
                await send({**message, "more_body": True})
                await _drain(receive)
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        try:
            await self._app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._refuse_large(send, receive if body_left else None)

    async def _refuse_large(self, send: Any, drain: Any) -> None:
        """Send the 413 whole; then take the rest of the body off the socket from ``drain``."""
        start, body = _refusal(413, "too_large", f"the request body is larger than {self._limit:,} bytes")
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": drain is not None})
        if drain is not None:
            await _drain(drain)
            await send({"type": "http.response.body", "body": b""})


def host_name(value: str) -> str:
    """The host a ``Host`` header (or an allow-list entry) names, without its port, in lower case;
    an IPv6 address in brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value.partition("]")[0] + "]"
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        return name
    if value.count(":") > 1:  # a bare IPv6 address
        return f"[{value}]"
    return value


class HostAllowList:
    """An ASGI app that lets a request through to ``app`` only when its ``Host`` header names one
    of ``hosts`` (any port); any other (or none) gets 421 Misdirected Request, as the MCP server
    answers, before anything else is looked at."""

    def __init__(self, app: App, hosts: Iterable[str]) -> None:
        self._app = app
        self._hosts = frozenset(host_name(h) for h in hosts)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = next((v for n, v in scope.get("headers", ()) if n.lower() == b"host"), None)
            if given is None or host_name(given.decode("latin-1")) not in self._hosts:
                start, body = _refusal(
                    421, "bad_host", "the Host header names no host this server answers for (see --allow-host)"
                )
                await send(start)
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


class SafeHeaders:
    """An ASGI app adding :data:`SAFE_HEADERS` to every HTTP response of ``app``."""

    def __init__(self, app: App) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                given = list(message.get("headers", ()))
                names = {name.lower() for name, _ in given}
                extra = [(name, value) for name, value in SAFE_HEADERS if name not in names]
                message = {**message, "headers": [*given, *extra]}
            await send(message)

        await self._app(scope, receive, with_headers)
