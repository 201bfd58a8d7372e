"""What a server open to the network does with its connections, whoever is at the other end.

- A connection waits at most ``idle_timeout`` for the first byte of a request (when it opens and
  after each response), then at most ``header_timeout`` for the rest of the request's head, which
  may be at most ``max_head_bytes`` long.
- A request's body must have arrived ``body_timeout`` after its head; a request without the token
  (``/healthz``, the page, a refusal) must also be answered within it.
- Connections that have not shown the token — idle, half-sent, or asking without it — are capped
  per client address (``max_connections_per_client``, IPv6 addresses counted by their /64), and
  when the server holds ``max_connections`` the oldest of them is closed to make room for a new
  one: they never crowd out a request that carries the token, nor ``/healthz``. A connection that
  has shown the token is never closed to make room; when every connection has, a new one is
  answered 503.

uvicorn alone gives none of this: its keep-alive timer starts only after a response (a connection
that sends nothing, or half a head, or a body one byte at a time, is kept for ever) and its
``limit_concurrency`` counts idle connections, answering 503 to every request once they fill it.
So each connection's uvicorn protocol is wrapped here (:func:`guarded_protocol`): the wrapper sees
the connection open and close and its bytes arrive, and the ASGI app in front of the served one
(:class:`Tracked`) tells it when a request begins, when its body is in, when it is answered, and
(:func:`vouch`, called by the token check) that it carried the token.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import itertools
import logging
import math
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from planexec.errors import Problem, UsageError

try:
    import fcntl
    import termios
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]
    termios = None  # type: ignore[assignment]

__all__ = [
    "App",
    "ConnectionLimits",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "Tracked",
    "connection_cap",
    "guarded_protocol",
    "has_body",
    "vouch",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_STATE_KEY = "planexec.connection"
"""Where a connection hands itself to the app: in the lifespan state uvicorn copies into each
request's scope (``scope["state"]``); :class:`Tracked` takes it out and puts it in the scope's
``extensions`` under the same name."""
CLOSE_GRACE = 2.0
"""Seconds a connection being closed gets to send what is left in its buffer before it is cut."""
EVICTION_SCAN = 64
"""How many of the oldest connections without the token are looked at for an idle one to close."""
FILE_RESERVE = 256
"""File descriptors kept for everything but connections (the store, logs, child processes)."""
BACKLOG = 512
"""Connections the system may queue before the server accepts them."""

_END_OF_HEAD = b"\r\n\r\n"
_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_TOO_LONG = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_FULL = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\nretry-after: 1\r\n\r\n"

_log = logging.getLogger("planexec.hosting")


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    """How long a client may take and how many connections it may hold (see the module's text)."""

    header_timeout: float = 10.0
    """Seconds from a request's first byte to the end of its head."""
    idle_timeout: float = 5.0
    """Seconds a connection may wait, with no request under way, for the next one's first byte."""
    body_timeout: float = 30.0
    """Seconds from a request's head to the end of its body; for a request without the token, to
    the end of its answer."""
    max_connections: int = 1_000
    """Connections held at once (fewer when the process may not open that many files)."""
    max_connections_per_client: int = 64
    """Connections one client address may hold without having shown the token."""
    max_head_bytes: int = 65_536
    """The longest request head (request line and headers) read."""

    def __post_init__(self) -> None:
        problems = [
            Problem(code="not_positive", where=name, message=f"must be a number above 0, not {value!r}")
            for name, value in (
                ("header_timeout", self.header_timeout),
                ("idle_timeout", self.idle_timeout),
                ("body_timeout", self.body_timeout),
            )
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf
        ]
        problems += [
            Problem(code="not_positive", where=name, message=f"must be a whole number above 0, not {value!r}")
            for name, value in (
                ("max_connections", self.max_connections),
                ("max_connections_per_client", self.max_connections_per_client),
                ("max_head_bytes", self.max_head_bytes),
            )
            if isinstance(value, bool) or not isinstance(value, int) or value < 1
        ]
        if problems:
            raise UsageError("connection limits out of range", problems)


def connection_cap(limits: ConnectionLimits) -> int:
    """How many connections the server holds: ``limits.max_connections``, or fewer when the
    process may not open that many files. The soft limit on open files is raised toward the hard
    one first, as far as that needs."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return limits.max_connections
    wanted = limits.max_connections + BACKLOG + FILE_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    cap = min(limits.max_connections, max(soft - BACKLOG - FILE_RESERVE, 16))
    if cap < limits.max_connections:
        _log.warning("open files are limited to %d: serving at most %d connections at once", soft, cap)
    return cap


def has_body(scope: Scope) -> bool:
    """Whether the request's head announces a body (a ``Content-Length`` above 0, or chunks)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip() not in (b"0", b""):
            return True
    return False


def vouch(scope: Scope) -> None:
    """Say that the request of ``scope`` carried the server's token: its connection is then never
    closed to make room for others, and needs no answer within the body timeout."""
    connection = (scope.get("extensions") or {}).get(_STATE_KEY)
    if isinstance(connection, _Connection):
        connection.trust()


def _unread(fd: int) -> int:
    """How many bytes wait to be read on the socket ``fd``."""
    if fd < 0 or fcntl is None or termios is None:
        return 0
    try:
        answer = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", answer)[0])


def _client_of(peer: Any) -> str:
    """The address a connection's limits are counted by: an IPv6 address by its /64."""
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    try:
        address = ipaddress.ip_address(str(host).split("%", 1)[0])
    except ValueError:
        return str(host) or "local"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class _Phase(enum.Enum):
    IDLE = "idle"
    """No byte of a request yet."""
    HEAD = "head"
    """Part of a request's head has arrived."""
    REQUEST = "request"
    """The app has the request."""


class _Guard:
    """The connections of one server, with the ones that have not shown the token in the order
    they opened: overall and by client address."""

    def __init__(self, limits: ConnectionLimits, cap: int) -> None:
        self.limits = limits
        self.cap = cap
        self.count = 0
        self.untrusted: dict[_Connection, None] = {}
        self.by_client: dict[str, dict[_Connection, None]] = {}

    def admit(self, connection: _Connection) -> bool:
        """Count a new connection in, closing others to make room; False: no room for it."""
        self.count += 1
        mine = self.by_client.setdefault(connection.client, {})
        mine[connection] = None
        self.untrusted[connection] = None
        if len(mine) > self.limits.max_connections_per_client:
            self._evict(mine, connection)
        return self.count <= self.cap or self._evict(self.untrusted, connection)

    def _evict(self, pool: dict[_Connection, None], spare: _Connection) -> bool:
        """Close the oldest idle connection of ``pool``, else the oldest one being answered,
        never ``spare`` nor one whose request has arrived but is not read or not begun yet (a
        burst of connections, each with its request, is accepted before any of them is read)."""
        busy: _Connection | None = None
        for candidate in itertools.islice(pool, EVICTION_SCAN):
            if candidate is spare:
                continue
            rank = candidate.idleness()
            if rank == 0:
                candidate.evict()
                return True
            if rank == 1 and busy is None:
                busy = candidate
        if busy is None:
            return False
        busy.evict()
        return True

    def trusted(self, connection: _Connection) -> None:
        self._untrack(connection)

    def forget(self, connection: _Connection) -> None:
        """The connection is closed (or being closed): it no longer counts."""
        self._untrack(connection)
        self.count -= 1

    def _untrack(self, connection: _Connection) -> None:
        self.untrusted.pop(connection, None)
        mine = self.by_client.get(connection.client)
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self.by_client[connection.client]


class _Connection(asyncio.Protocol):
    """One connection: uvicorn's protocol for it (``inner``), with the timers and the accounting
    of the module's text around it."""

    guard: _Guard
    inner_class: Callable[..., asyncio.Protocol]

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.loop = _loop or asyncio.get_event_loop()
        self.limits = self.guard.limits
        self.inner = self.inner_class(
            config=config, server_state=server_state, app_state={**app_state, _STATE_KEY: self}, _loop=_loop
        )
        self.transport: asyncio.Transport | None = None
        self.fd = -1
        self.client = "local"
        self.phase = _Phase.IDLE
        self.trusted = False
        self.counted = False
        self.timer: asyncio.TimerHandle | None = None
        self.head_bytes = 0
        self.head_tail = b""
        self.head_done = False
        self.request = 0
        self.body_pending = False
        self.answering = False

    # -- the protocol, passed on to uvicorn's ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.client = _client_of(transport.get_extra_info("peername"))
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1
        self.inner.connection_made(transport)
        self.counted = True
        if not self.guard.admit(self):
            self._close(_FULL)
            return
        self._wait(self.limits.idle_timeout, self._idle_expired)

    def data_received(self, data: bytes) -> None:
        if self.phase is _Phase.IDLE:
            self.phase = _Phase.HEAD
            self.head_bytes = 0
            self.head_tail = b""
            self.head_done = False
            self._wait(self.limits.header_timeout, self._head_expired)
        if self.phase is _Phase.HEAD and not self.head_done:
            seen = self.head_tail + data
            end = seen.find(_END_OF_HEAD)
            self.head_done = end >= 0
            self.head_bytes += len(data) if end < 0 else end + len(_END_OF_HEAD) - len(self.head_tail)
            if self.head_bytes > self.limits.max_head_bytes:
                self._close(_TOO_LONG)
                return
            self.head_tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self._uncount()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def idleness(self) -> int | None:
        """How readily the connection is closed to make room: 0, first (nothing arrived, or half
        a head); 1, next (a request without the token being answered); None, not now (its request
        has arrived and is about to be read or begun)."""
        if self.phase is _Phase.REQUEST:
            return 1
        if self.phase is _Phase.HEAD:
            return None if self.head_done else 0
        return None if _unread(self.fd) else 0

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- what the app tells ----------------------------------------------------------------------

    def began(self, scope: Scope) -> int:
        """A request's head is in and the app has it; returns the request's number."""
        self.request += 1
        self.phase = _Phase.REQUEST
        self.answering = False
        self.body_pending = has_body(scope)
        if self.body_pending or not self.trusted:
            self._wait(self.limits.body_timeout, self._request_expired)
        else:
            self._stop_timer()
        return self.request

    def trust(self) -> None:
        if not self.trusted:
            self.trusted = True
            self.guard.trusted(self)
        if self.phase is _Phase.REQUEST and not self.body_pending:
            self._stop_timer()

    def body_in(self, request: int) -> None:
        if request == self.request and self.phase is _Phase.REQUEST:
            self.body_pending = False
            if self.trusted:
                self._stop_timer()

    def answered(self, request: int) -> None:
        if request == self.request:
            self.answering = True

    def ended(self, request: int) -> None:
        """The request's answer is sent (or the app gave up on it): wait for the next one, unless
        some of its body was left unread (what follows on the connection would be more of it)."""
        if request != self.request or self.phase is not _Phase.REQUEST:
            return
        self.phase = _Phase.IDLE
        if self.body_pending:
            self.body_pending = False
            self._close(b"")
            return
        if self.transport is not None and not self.transport.is_closing():
            self._wait(self.limits.idle_timeout, self._idle_expired)

    def evict(self) -> None:
        """Closed to make room for another connection."""
        self._close(_FULL if self.phase is _Phase.REQUEST and not self.answering else b"")

    # -- timers and closing ----------------------------------------------------------------------

    def _wait(self, seconds: float, then: Callable[[], None]) -> None:
        self._stop_timer()
        self.timer = self.loop.call_later(seconds, then)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _idle_expired(self) -> None:
        self._close(b"")

    def _head_expired(self) -> None:
        self._close(_TIMEOUT)

    def _request_expired(self) -> None:
        self._close(b"" if self.answering else _TIMEOUT)

    def _close(self, answer: bytes) -> None:
        """Close the connection, sending ``answer`` first if the app has not begun one; what is
        left unsent after :data:`CLOSE_GRACE` is dropped."""
        self._stop_timer()
        self._uncount()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if answer:
            transport.write(answer)
        transport.close()
        self.loop.call_later(CLOSE_GRACE, transport.abort)

    def _uncount(self) -> None:
        if self.counted:
            self.counted = False
            self.guard.forget(self)


def guarded_protocol(limits: ConnectionLimits, cap: int) -> type[asyncio.Protocol]:
    """A uvicorn HTTP protocol class (``uvicorn.Config(http=...)``) holding each connection to
    ``limits``, at most ``cap`` connections at once. The app served must be wrapped in
    :class:`Tracked`."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class Guarded(_Connection):
        guard = _Guard(limits, cap)
        inner_class = AutoHTTPProtocol

    return Guarded


class Tracked:
    """The ASGI app in front of ``app`` that tells each request's connection (see
    :func:`guarded_protocol`) when the request begins, when its body is in and when it is answered."""

    def __init__(self, app: App) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope.get("state")
        connection = state.pop(_STATE_KEY, None) if isinstance(state, dict) else None
        if scope["type"] != "http" or not isinstance(connection, _Connection):
            await self._app(scope, receive, send)
            return
        scope["extensions"] = {**(scope.get("extensions") or {}), _STATE_KEY: connection}
        request = connection.began(scope)

        async def received() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                connection.body_in(request)
            return message

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                connection.answered(request)
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                connection.ended(request)

        try:
            await self._app(scope, received, sent)
        finally:
            connection.ended(request)
