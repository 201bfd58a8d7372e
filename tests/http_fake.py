"""A scripted HTTP server on 127.0.0.1 for wire-level tests of model adapters.

Each request is recorded (method, path, headers, JSON body) and answered with the next scripted
reply: JSON with a status and headers, a stream of server-sent events (each sent and flushed on
its own, optionally after waiting for a signal), a body sent as it is, or no answer at all (to make
a client time out).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Json:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    """A body sent as it is (e.g. text that is not the JSON its content type promises)."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Event:
    """One server-sent event; ``wait`` blocks before sending it until the event is set."""

    data: str | dict[str, Any]
    name: str | None = None
    wait: threading.Event | None = None


@dataclass(frozen=True)
class Sse:
    events: Sequence[Event]
    status: int = 200


@dataclass(frozen=True)
class Hang:
    """Never answer (until the server closes): the client's timeout fires."""

    release: threading.Event = field(default_factory=threading.Event)


Reply = Json | Raw | Sse | Hang


class FakeServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.open_streams = 0
        """Streams being answered right now."""
        self.most_open_streams = 0
        """The most streams that were being answered at once."""
        self.open_connections = 0
        """Client connections open right now (kept alive between requests, or being answered)."""
        self._counting = threading.Lock()
        self._replies: queue.Queue[Reply] = queue.Queue()
        self._hangs: list[Hang] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def setup(self) -> None:
                super().setup()
                with server._counting:
                    server.open_connections += 1

            def finish(self) -> None:
                with server._counting:
                    server.open_connections -= 1
                super().finish()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                server.requests.append(
                    Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                try:
                    reply = server._replies.get_nowait()
                except queue.Empty:
                    reply = Json({"error": {"message": "no scripted reply left", "type": "test"}}, status=599)
                if isinstance(reply, Hang):
                    server._hangs.append(reply)
                    reply.release.wait(30)
                    self.close_connection = True
                    return
                if isinstance(reply, Raw):
                    self.send_response(reply.status)
                    self.send_header("content-type", reply.content_type)
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                if isinstance(reply, Json):
                    payload = json.dumps(reply.body).encode()
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(reply.status)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                with server._counting:
                    server.open_streams += 1
                    server.most_open_streams = max(server.most_open_streams, server.open_streams)
                try:
                    self._send_events(reply.events)
                finally:
                    with server._counting:
                        server.open_streams -= 1

            def _send_events(self, events: Sequence[Event]) -> None:
                for event in events:
                    if event.wait is not None:
                        event.wait.wait(30)
                    data = event.data if isinstance(event.data, str) else json.dumps(event.data)
                    chunk = (f"event: {event.name}\n" if event.name else "") + f"data: {data}\n\n"
                    try:
                        self.wfile.write(chunk.encode())
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply(self, *replies: Reply) -> None:
        for r in replies:
            self._replies.put(r)

    def reset(self) -> None:
        """Forget the requests and the replies left over, and let hanging requests end: as new."""
        for h in self._hangs:
            h.release.set()
        self._hangs.clear()
        self.requests.clear()
        while not self._replies.empty():
            self._replies.get_nowait()
        self.most_open_streams = self.open_streams

    def close(self) -> None:
        for h in self._hangs:
            h.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve() -> Iterator[FakeServer]:
    """For a pytest fixture: ``server = pytest.fixture(serve)``."""
    server = FakeServer()
    try:
        yield server
    finally:
        server.close()
