"""Both servers — ``planexec serve`` and ``planexec mcp serve --transport http`` — against clients
that hold connections: thousands of idle ones, half-sent heads, heads and bodies sent a byte at a
time, a 50 MB body without the token. Each server is a process of its own on 127.0.0.1, spoken to
over real sockets. Idle and slow connections are closed after their timeouts; those that have not
shown the token never lock out ``/healthz``, an authorised API call or an MCP ``initialize``; the
token is checked before any body is read; a request naming another host is refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from planexec.errors import UsageError
from planexec.hosting import ConnectionLimits
from tests.cli_support import invoke
from tests.serve_support import ADD_PLAN, ROOT, TOKEN, Server, wait_for, write_agent

FLOOD = 1_200
"""Idle connections a flood opens."""
LOCKOUT_BEFORE = 1_000
"""How many idle connections locked every client out before (the old connection cap)."""
CLOSED_WITHIN = 15.0
"""A generous bound for a connection to be closed once its (1 s) timeout passed."""
QUICK = ["--header-timeout", "1", "--idle-timeout", "1", "--body-timeout", "1"]
"""Short timeouts, for the tests that wait for them."""
SLOW = ["--header-timeout", "120", "--idle-timeout", "120", "--body-timeout", "120"]
"""Timeouts out of the way, so that only the connection caps keep room."""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def enough_files(wanted: int) -> None:
    """Raise this process's soft limit on open files to ``wanted`` (skip when the hard one is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"this test opens {wanted} files at once; the hard limit on open files is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def loopback_sources(count: int) -> list[str]:
    """``count`` loopback addresses to connect from (127.0.0.10 on), skipping the test when the
    system does not let a socket bind to them."""
    sources = [f"127.0.0.{10 + i}" for i in range(count)]
    with socket.socket() as probe:
        try:
            probe.bind((sources[-1], 0))
        except OSError as e:
            pytest.skip(f"cannot connect from {sources[-1]}: {e}")
    return sources


def where(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- the servers ---------------------------------------------------------------------------------------


@dataclass
class ApiServer(Server):
    """``planexec serve`` (see :class:`Server`), what it writes on stderr read as it comes."""

    lines: list[str] = field(default_factory=list)

    def start(self) -> ApiServer:
        super().start()
        assert self.process is not None
        stderr = self.process.stderr
        assert stderr is not None
        self.reader = threading.Thread(target=lambda: self.lines.extend(stderr), daemon=True)
        self.reader.start()
        return self

    def stop(self) -> str:
        """Stop the server and return what it wrote."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.reader.join(10)
        self.kill()
        return "".join(self.lines)


def api_server(folder: Path, *flags: str) -> ApiServer:
    return ApiServer(folder, [write_agent(folder, "adder", [ADD_PLAN, {"answer": "5"}])], extra=list(flags)).start()


def assert_quiet(logged: str) -> None:
    """Nothing went wrong in the server: no traceback, no error from the ASGI app."""
    assert "Traceback" not in logged, logged[-4000:]
    assert "Exception in ASGI application" not in logged, logged[-4000:]


@dataclass
class McpServer:
    """``planexec mcp serve --transport http`` as a process of its own."""

    folder: Path
    flags: list[str]
    process: subprocess.Popen[str] | None = None
    url: str = ""
    lines: list[str] = field(default_factory=list)

    def start(self) -> McpServer:
        (self.folder / "planner.json").write_text(json.dumps([{"answer": "nothing to do"}]))
        (self.folder / "token").write_text(TOKEN)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PLANEXEC_ALLOW_MODEL_REQUESTS": "0"}
        env.pop("PLANEXEC_STORE", None)
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "planexec", "mcp", "serve", "--transport", "http", "--port", "0"),
                *("--store", f"sqlite:///{self.folder}/runs.db", "--token-file", str(self.folder / "token")),
                *("--planner", f"scripted:{self.folder / 'planner.json'}", *self.flags),
            ],
            cwd=self.folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        said: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert self.process is not None
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.lines.append(line)
                said.put(line)
            said.put("")

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        while not self.url:
            line = said.get(timeout=60)
            assert line, "".join(self.lines)
            if "serving MCP over streamable HTTP at " in line:
                self.url = line.rsplit(" ", 1)[1].strip()
        return self

    def stop(self) -> str:
        """Stop the server and return what it wrote."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()
        return "".join(self.lines)


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """``planexec serve`` with its default connection caps and the timeouts out of the way."""
    served = api_server(tmp_path_factory.mktemp("roomy"), *SLOW)
    yield served
    assert_quiet(served.stop())


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """``planexec serve`` with 1 s timeouts."""
    served = api_server(tmp_path_factory.mktemp("quick"), *QUICK)
    yield served
    assert_quiet(served.stop())


@pytest.fixture(scope="module")
def mcp_roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    pytest.importorskip("mcp")
    served = McpServer(tmp_path_factory.mktemp("mcp-roomy"), SLOW).start()
    yield served
    assert_quiet(served.stop())


@pytest.fixture(scope="module")
def mcp_quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpServer]:
    pytest.importorskip("mcp")
    served = McpServer(tmp_path_factory.mktemp("mcp-quick"), QUICK).start()
    yield served
    assert_quiet(served.stop())


# -- clients that hold connections ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def held(
    url: str, count: int, sources: list[str] | None = None
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    """``count`` connections to the server of ``url`` that send nothing, opened one after the
    other from ``sources`` in turn (the connection's address: 127.0.0.1 when None); each is given
    5 s to connect, and all are cut (no lingering) on the way out."""
    host, port = where(url)
    connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for i in range(count):
            local = (sources[i % len(sources)], 0) if sources else None
            opened = asyncio.open_connection(host, port, local_addr=local)
            connections.append(await asyncio.wait_for(opened, timeout=5))
        yield connections
    finally:
        for _, writer in connections:
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()


async def exchange(connection: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes) -> bytes:
    """Send ``request`` on an open connection and read one answer's head and body (by its length)."""
    reader, writer = connection
    writer.write(request)
    await writer.drain()
    timeout = 10
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    return head + await asyncio.wait_for(reader.readexactly(length), timeout)


def get(path: str, host: str, *, token: bool = False) -> bytes:
    authorization = f"Authorization: Bearer {TOKEN}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{authorization}\r\n".encode()


def connect(url: str) -> socket.socket:
    return socket.create_connection(where(url), timeout=CLOSED_WITHIN + 5)


def until_closed(sock: socket.socket, *, trickle: bytes = b"") -> bytes:
    """Everything the server sends until it closes the connection (within :data:`CLOSED_WITHIN`,
    else the test fails), sending ``trickle`` one byte at a time meanwhile."""
    deadline = time.monotonic() + CLOSED_WITHIN
    sock.settimeout(0.2)
    received = b""
    sent = 0
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if sent < len(trickle):
                with contextlib.suppress(OSError):
                    sock.sendall(trickle[sent : sent + 1])
                sent += 1
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the connection was still open after {CLOSED_WITHIN} s; it sent {received[:200]!r}")


def read_answer(sock: socket.socket) -> bytes:
    """One answer's head and body (by its length), the connection left open."""
    sock.settimeout(CLOSED_WITHIN)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed before the whole answer: {received!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


# -- thousands of idle connections ---------------------------------------------------------------------


async def test_thousands_of_idle_connections_lock_no_one_out_of_the_api(roomy: ApiServer) -> None:
    enough_files(FLOOD + 512)
    assert roomy.process is not None
    host = roomy.url.removeprefix("http://")
    sources = loopback_sources(40)  # 30 connections each: under the per-client cap, so the overall cap does the work
    async with httpx.AsyncClient(base_url=roomy.url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        assert (await api.get("/v1/runs")).status_code == 200
        async with held(roomy.url, 1) as (trusted,):
            assert (await exchange(trusted, get("/v1/runs", host, token=True))).startswith(b"HTTP/1.1 200")
            async with held(roomy.url, FLOOD, sources) as flood:
                assert len(flood) > LOCKOUT_BEFORE
                health = await api.get("/healthz", headers={"Authorization": ""})
                assert health.status_code == 200, health.text
                listed = await api.get("/v1/runs")
                assert listed.status_code == 200, listed.text
                started = await api.post("/v1/runs", json={"agent": "adder", "goal": "add 2 and 3"})
                assert started.status_code == 201, started.text
                # the connection that showed the token was not closed to make room
                again = await exchange(trusted, get("/v1/runs", host, token=True))
                assert again.startswith(b"HTTP/1.1 200"), again[:200]
                pid = roomy.process.pid
                wait_for(lambda: open_files(pid) <= LOCKOUT_BEFORE + 64, timeout=10, what="the server to hold its cap")


async def test_idle_connections_from_one_address_leave_the_others_alone(roomy: ApiServer) -> None:
    enough_files(FLOOD + 512)
    assert roomy.process is not None
    pid = roomy.process.pid
    host = roomy.url.removeprefix("http://")
    before = open_files(pid)
    sources = loopback_sources(2)
    async with held(roomy.url, 10, sources[:1]) as bystanders, held(roomy.url, FLOOD, sources[1:]) as flood:
        assert len(flood) == FLOOD
        for bystander in bystanders:
            answer = await exchange(bystander, get("/healthz", host))
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        # the flooding address keeps at most its share (64 by default) of the server's connections
        wait_for(lambda: open_files(pid) <= before + 10 + 64 + 8, timeout=10, what="the flood cut")


async def test_thousands_of_idle_connections_lock_no_one_out_of_mcp(mcp_roomy: McpServer) -> None:
    enough_files(FLOOD + 512)
    assert mcp_roomy.process is not None
    pid = mcp_roomy.process.pid
    async with held(mcp_roomy.url, FLOOD, loopback_sources(40)) as flood:
        assert len(flood) > LOCKOUT_BEFORE
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            initialized = await client.post(mcp_roomy.url, json=INITIALIZE, headers=MCP_HEADERS)
        assert initialized.status_code == 200, initialized.text
        assert "serverInfo" in initialized.text
        wait_for(lambda: open_files(pid) <= LOCKOUT_BEFORE + 64, timeout=10, what="the server to hold its cap")


# -- slow and half-sent -------------------------------------------------------------------------------


def test_idle_half_sent_and_trickling_connections_are_closed(quick: ApiServer) -> None:
    host = quick.url.removeprefix("http://")
    head = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n".encode()
    slow_post = (
        f"POST /v1/runs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    ).encode()
    cases = {
        "idle": (b"", b""),
        "half a head": (head, b""),
        # a head sent a byte at a time is cut all the same: its bytes do not restart the clock
        "a trickling head": (b"", head + b"X-Pad: " + b"a" * 10_000),
        "answered, then idle": (get("/healthz", host), b""),
        "a trickling body": (slow_post, b'"agent": "adder", ' * 100),
        "a head too long": (head + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n", b""),
    }
    answers = closed_concurrently(quick.url, cases)
    assert answers["idle"] == b""
    assert answers["half a head"].startswith(b"HTTP/1.1 408")
    assert answers["a trickling head"].startswith(b"HTTP/1.1 408")
    assert answers["answered, then idle"].startswith(b"HTTP/1.1 200")
    assert answers["a trickling body"].startswith(b"HTTP/1.1 408")
    assert answers["a head too long"].startswith(b"HTTP/1.1 431")
    with httpx.Client(base_url=quick.url) as client:
        assert client.get("/healthz").status_code == 200


def closed_concurrently(url: str, cases: dict[str, tuple[bytes, bytes]]) -> dict[str, bytes]:
    """For each case (what to send at once, what to send a byte at a time after), a connection of
    its own, all at the same time; what each got before the server closed it."""

    def one(case: tuple[bytes, bytes]) -> bytes:
        at_once, trickle = case
        with connect(url) as sock:
            if at_once:
                sock.sendall(at_once)
            return until_closed(sock, trickle=trickle)

    with ThreadPoolExecutor(len(cases)) as pool:
        return dict(zip(cases, pool.map(one, cases.values()), strict=True))


def test_mcp_closes_idle_half_sent_and_trickling_connections(mcp_quick: McpServer) -> None:
    host = mcp_quick.url.removeprefix("http://").split("/", 1)[0]
    body = json.dumps(INITIALIZE).encode()
    post = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    answers = closed_concurrently(
        mcp_quick.url,
        {"idle": (b"", b""), "half a head": (post[:40], b""), "a trickling body": (post + body[:1], body[1:])},
    )
    assert answers["idle"] == b""
    assert answers["half a head"].startswith(b"HTTP/1.1 408")
    assert answers["a trickling body"].startswith(b"HTTP/1.1 408")


# -- the token before the body ------------------------------------------------------------------------


def big_post(path: str, host: str, *, token: bool, expect: bool = False) -> bytes:
    authorization = f"Authorization: Bearer {TOKEN}\r\n" if token else ""
    expecting = "Expect: 100-continue\r\n" if expect else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{authorization}{expecting}Content-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {50 * 1_000_000}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("server", ["api", "mcp"])
def test_a_50_mb_body_without_the_token_is_refused_before_it_is_read(
    server: str, roomy: ApiServer, mcp_roomy: McpServer
) -> None:
    url = roomy.url + "/v1/runs" if server == "api" else mcp_roomy.url
    host, port = where(url)
    path = "/" + url.removeprefix("http://").split("/", 1)[1]
    with connect(url) as sock:
        sock.sendall(big_post(path, f"{host}:{port}", token=False))  # the head only: none of the body
        answer = until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert b"connection: close" in answer.lower()


def test_a_50_mb_body_with_the_token_gets_413_at_once(roomy: ApiServer) -> None:
    host = roomy.url.removeprefix("http://")
    with connect(roomy.url) as sock:
        sock.sendall(big_post("/v1/runs", host, token=True))
        answer = read_answer(sock)  # while all of the body is still owed
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"
    with connect(roomy.url) as sock:
        sock.sendall(big_post("/v1/runs", host, token=True, expect=True))
        answer = until_closed(sock)  # asked before sending: told, and not waited for
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"100 Continue" not in answer


# -- the Host allow-list --------------------------------------------------------------------------------


def status_for(url: str, host_header: str) -> int:
    with connect(url) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n".encode())
        answer = until_closed(sock)
    return int(answer.split(b" ", 2)[1])


def test_a_request_naming_another_host_is_refused(roomy: ApiServer, tmp_path: Path) -> None:
    port = where(roomy.url)[1]
    for name in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST", "127.0.0.1"):
        assert status_for(roomy.url, name) == 200, name
    for name in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", f"localhost:{port}x"):
        assert status_for(roomy.url, name) == 421, name
    with connect(roomy.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")  # no Host at all
        assert until_closed(sock).startswith(b"HTTP/1.1 421")
    extended = api_server(tmp_path, "--allow-host", "planexec.example", "--allow-host", "::2")
    try:
        port = where(extended.url)[1]
        assert status_for(extended.url, f"planexec.example:{port}") == 200
        assert status_for(extended.url, f"[::2]:{port}") == 200
        assert status_for(extended.url, f"localhost:{port}") == 200
        assert status_for(extended.url, f"evil.example:{port}") == 421
        with httpx.Client(base_url=extended.url, headers={"Host": "evil.example"}) as client:
            refused = client.get("/v1/runs")
        assert refused.status_code == 421
        assert refused.json()["error"]["code"] == "bad_host"
    finally:
        assert_quiet(extended.stop())


def test_odd_limits_and_hosts_are_refused_together() -> None:
    result = invoke(
        ["serve", "--allow-host", "http://planexec.example", "--allow-host", "host:8700", "--allow-host", "[::1"]
    )
    assert result.exit_code == 2, result.output
    for name in ("http://planexec.example", "host:8700", "[::1"):
        assert f"--allow-host: {name!r} is not a host name or address" in result.stderr
    refused = invoke(["mcp", "serve", "--idle-timeout", "0", "--planner", "scripted:x.json"])
    assert refused.exit_code == 2
    assert "--idle-timeout" in refused.stderr
    stdio = invoke(["mcp", "serve", "--max-connections", "10", "--planner", "scripted:x.json"])
    assert stdio.exit_code == 2
    assert "--max-connections: applies to --transport http only" in stdio.stderr
    with pytest.raises(UsageError) as caught:
        ConnectionLimits(header_timeout=0, body_timeout=float("nan"), max_connections=0, max_head_bytes=True)
    assert {p.where for p in caught.value.problems} == {
        "header_timeout",
        "body_timeout",
        "max_connections",
        "max_head_bytes",
    }
