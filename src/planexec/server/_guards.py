"""What the API says when it refuses a request — always ``{"error": {"code", "message", "problems"}}``
— and the ASGI guard that refuses a request body over the size limit before reading it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.exceptions import HTTPException

from planexec.errors import Problem
from planexec.hosting import App

__all__ = ["MAX_BODY_BYTES", "BodyLimit", "SafeHeaders", "_ApiError", "error_body"]

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
"""How much of a refused body is taken off the socket (and dropped) so that the client, still
sending it, gets to read the 413; past this, the connection is closed instead."""


def error_body(code: str, message: str, problems: Sequence[Problem] = ()) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "problems": [{"where": p.where, "message": p.message, "code": p.code} for p in problems],
        }
    }


class _ApiError(Exception):
    """A refusal: the HTTP status, a code programs can test, a message, and every problem found."""

    def __init__(self, status: int, code: str, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = tuple(problems)


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


class _TooLarge(HTTPException):
    """Raised while the body is read, so that the framework answers 413 as for any HTTP error."""


class BodyLimit:
    """An ASGI app that refuses a request whose body is over ``limit`` bytes with 413: at once when
    its ``Content-Length`` says so, else as soon as the bytes read pass the limit."""

    def __init__(self, app: App, limit: int = MAX_BODY_BYTES) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._refuse(send, 400, "bad_request", "Content-Length is not a number")
                    return
                if declared > self._limit:
                    await _drain(receive)
                    await self._refuse_large(send)
                    return
        seen = 0
        started = False

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self._limit:
                    if message.get("more_body", False):
                        await _drain(receive)
                    raise _TooLarge(413, f"the request body is larger than {self._limit:,} bytes")
            return message

        async def watched(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._refuse_large(send)

    async def _refuse_large(self, send: Any) -> None:
        await self._refuse(send, 413, "too_large", f"the request body is larger than {self._limit:,} bytes")

    @staticmethod
    async def _refuse(send: Any, status: int, code: str, message: str) -> None:
        body = json.dumps(error_body(code, message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


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
