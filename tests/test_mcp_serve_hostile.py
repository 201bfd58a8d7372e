"""``planexec mcp serve`` against clients that send what they should not: lines on stdin that are
not JSON-RPC messages, tool arguments that do not fit the published schemas, and more sessions
over HTTP than the server keeps. The real command is started as a process and spoken to with raw
bytes, with plain HTTP requests, and with the official ``mcp`` client."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2
from mcp import Client, StdioServerParameters

from planexec.errors import UsageError
from planexec.hosting import SessionLimits, mcp_server
from planexec.runs import AgentSpec
from planexec.store import MemoryStore
from tests.cli_support import invoke
from tests.test_mcp_serve import TOKEN, Served, Setup, connected, data, error_text, make_setup, serve_http

WAIT = 60.0
"""Seconds a test waits for an answer before it fails (generous: the machine may be busy)."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return make_setup(tmp_path_factory.mktemp("hostile"))


INITIALIZE = {
    "jsonrpc": "2.0",
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


# -- stdio, byte by byte ------------------------------------------------------------------------------


class RawStdio:
    """A ``planexec mcp serve`` process written to and read from as bytes, one line a message."""

    def __init__(self, setup: Setup, store: str) -> None:
        env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "XDG_DATA_HOME": str(setup.folder / "data")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "planexec", "mcp", "serve", *setup.flags(store)],
            cwd=setup.folder,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self._ids = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def next(self) -> dict[str, Any]:
        """The next message the server writes (each on a line of its own, JSON)."""
        line = self.lines.get(timeout=WAIT)
        assert line, "the server closed its stdout"
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Send a request; return its id and every message written up to its answer."""
        self._ids += 1
        ident = 1000 + self._ids
        self.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}).encode())
        written: list[dict[str, Any]] = []
        while not written or written[-1].get("id") != ident:
            written.append(self.next())
        return ident, written

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(30)
        self.reader.join(30)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


@contextmanager
def raw_stdio(setup: Setup, store: str) -> Iterator[RawStdio]:
    server = RawStdio(setup, store)
    try:
        server.send(json.dumps({**INITIALIZE, "id": 0}).encode())
        assert server.next()["result"]["serverInfo"]["name"] == "planexec"
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)


PARSE_ERROR, INVALID_REQUEST = -32700, -32600
DEEP = b"[" * 300 + b"]" * 300

MALFORMED: list[tuple[bytes, int, Any, str]] = [
    # (the line, the error code answered, the id answered, words of the message)
    (b"not json", PARSE_ERROR, None, "not JSON"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', PARSE_ERROR, None, "not JSON"),  # cut short
    (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": NaN}}', PARSE_ERROR, None, "not JSON"),
    (b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 3, "method": "ping"}', PARSE_ERROR, None, "not JSON"),  # a BOM
    (b"\xff\xfe\x00garbage", PARSE_ERROR, None, "not JSON"),  # not UTF-8
    (b"x" * 2_000_000, PARSE_ERROR, None, "not JSON"),
    (b'{"jsonrpc": "2.0", "id": 5}', INVALID_REQUEST, 5, "method is missing"),
    (b'{"jsonrpc": "2.0", "id": "five"}', INVALID_REQUEST, "five", "method is missing"),
    (b'{"id": 6, "method": "ping"}', INVALID_REQUEST, 6, 'jsonrpc must be "2.0"'),
    (b'{"jsonrpc": "1.0", "id": 7, "method": 7}', INVALID_REQUEST, 7, "method must be a string"),
    (b'{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": "x"}', INVALID_REQUEST, 8, "params must be an object"),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', INVALID_REQUEST, None, "id must be a string or an integer"),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', INVALID_REQUEST, None, "id must be a string or an integer"),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', INVALID_REQUEST, None, "id must be a string or an integer"),
    (
        b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", '
        b'"params": {"name": "show_run", "arguments": {"run_id": "\\ud800"}}}',
        INVALID_REQUEST,
        9,
        "cannot be read",
    ),  # a lone surrogate
    (b'{"jsonrpc": "2.0", "id": "\\udfff", "method": "ping"}', INVALID_REQUEST, None, "cannot be read"),
    (
        b'{"jsonrpc": "2.0", "id": 10, "method": "ping", "params": {"deep": ' + DEEP + b"}}",
        INVALID_REQUEST,
        10,
        "cannot be read",
    ),
    (b'[{"jsonrpc": "2.0", "id": 11, "method": "ping"}]', INVALID_REQUEST, None, "batch"),
    (b"[]", INVALID_REQUEST, None, "batch"),
    (b"42", INVALID_REQUEST, None, "not a number"),
    (b'"ping"', INVALID_REQUEST, None, "not a string"),
    (b"null", INVALID_REQUEST, None, "not null"),
    (b'{"jsonrpc": "2.0", "id": 12, "result": "not an object"}', INVALID_REQUEST, None, "not a JSON-RPC"),
]


def test_stdio_answers_every_malformed_line_with_its_error_and_serves_the_next(setup: Setup) -> None:
    with raw_stdio(setup, setup.store("raw.db")) as server:
        for line, code, ident, words in MALFORMED:
            server.send(line)
            _, written = server.request("ping")
            assert len(written) == 2, (line[:80], written)  # the error, then the ping's answer
            error, pong = written
            assert error == {"jsonrpc": "2.0", "id": ident, "error": error["error"]}, line[:80]
            assert error["error"]["code"] == code, (line[:80], error)
            assert words in error["error"]["message"], (line[:80], error)
            assert pong["result"] == {}
        server.send(b"")  # a blank line is no message: nothing is answered
        server.send(b"   \t")
        _, written = server.request("tools/call", {"name": "list_runs", "arguments": {"limit": 5}})
        assert [m.get("result", {}).get("structuredContent") for m in written] == [{"runs": []}]
        assert server.close() == 0


async def test_strict_arguments_over_stdio_with_the_official_client(setup: Setup) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "planexec", "mcp", "serve", *setup.flags(setup.store("strict.db"))],
        cwd=str(setup.folder),
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "XDG_DATA_HOME": str(setup.folder / "data")},
    )
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        assert {t.name: t.input_schema.get("additionalProperties") for t in tools} == dict.fromkeys(
            ("run_goal", "list_runs", "show_run", "answer_question", "resume_run"), False
        )
        await refused_as_problems(client)
        assert data(await client.call_tool("list_runs", {"limit": 5})) == {"runs": []}


async def refused_as_problems(client: Client) -> None:
    """The strict argument checks a server must make, whatever the transport."""
    boolean = error_text(await client.call_tool("list_runs", {"limit": True}))
    assert "limit: must be an integer, not a boolean" in boolean
    unknown = error_text(await client.call_tool("list_runs", {"limit": 5, "colour": "red", "sort": "new"}))
    assert "colour: list_runs has no such argument (it takes status, limit)" in unknown
    assert "sort: list_runs has no such argument" in unknown
    every = error_text(
        await client.call_tool("run_goal", {"goal": 7, "constraints": ["ok", 3, ""], "budget": {"cost": 1}})
    )
    assert "cannot call run_goal (4 problems)" in every
    for said in ("budget: run_goal has no such argument", "goal: must be a string, not an integer"):
        assert said in every
    assert "constraints[1]: must be a string, not an integer" in every
    assert "constraints[2]: is empty" in every
    answer = error_text(
        await client.call_tool("answer_question", {"run_id": "r", "budget": {"cost": True, "steps": "9"}})
    )
    assert "budget.cost: must be a number or null, not a boolean" in answer
    assert "budget.steps: must be a number or null, not a string" in answer
    numeric = error_text(await client.call_tool("list_runs", {"limit": "5"}))
    assert "limit: must be an integer, not a string" in numeric


# -- strict arguments, in process ---------------------------------------------------------------------


async def test_a_refusal_lists_every_problem_up_to_a_bound() -> None:
    server = mcp_server(AgentSpec(planner="scripted:unused.json"), MemoryStore())
    async with Client(server) as client:
        await refused_as_problems(client)
        flood = await client.call_tool("list_runs", {f"x{i}": i for i in range(5_000)})
        text = error_text(flood)
        assert "cannot call list_runs (21 problems)" in text
        assert text.endswith("and more, not listed")
        huge = error_text(await client.call_tool("run_goal", {"goal": "g", "constraints": ["c"] * 200_000}))
        assert "constraints: has 200,000 items; at most 50" in huge
        status = error_text(await client.call_tool("list_runs", {"status": 3}))
        assert "status: must be a string or null, not an integer" in status
        assert data(await client.call_tool("list_runs", {"limit": 5.0, "status": None})) == {"runs": []}


# -- sessions over HTTP -------------------------------------------------------------------------------


@dataclass
class Opened:
    """What a raw ``initialize`` over HTTP was answered."""

    status: int
    session: str | None
    body: str


HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def open_session(http: httpx2.Client, url: str, *, initialized: bool = True) -> Opened:
    """``initialize``, then (``initialized``) ``notifications/initialized``, as a client opens a session."""
    response = http.post(url, json={**INITIALIZE, "id": 1}, headers=HEADERS)
    session = response.headers.get("mcp-session-id")
    if initialized and response.status_code == 200 and session is not None:
        headers = {**HEADERS, "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"}
        done = http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        assert done.status_code == 202
    return Opened(status=response.status_code, session=session, body=response.text)


def list_tools(http: httpx2.Client, url: str, session: str) -> int:
    """The status of ``tools/list`` in ``session`` (200 with the tools, or 404 for a session gone)."""
    headers = {**HEADERS, "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"}
    response = http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
    if response.status_code == 200:
        assert '"list_runs"' in response.text
    return response.status_code


@contextmanager
def http_served(setup: Setup, store: str, *flags: str) -> Iterator[tuple[Served, httpx2.Client]]:
    served = serve_http(setup, setup.flags(setup.store(store), "--token-file", str(setup.token_file), *flags))
    try:
        with httpx2.Client(timeout=WAIT) as http:
            yield served, http
    finally:
        served.stop()


def test_a_flood_of_initialize_beyond_the_cap_is_refused_and_open_sessions_go_on(setup: Setup) -> None:
    with http_served(setup, "capped.db", "--max-sessions", "4") as (served, http):
        with ThreadPoolExecutor(8) as pool:
            flood = list(pool.map(lambda _: open_session(http, served.url), range(40)))
        opened = [o.session for o in flood if o.status == 200]
        refused = [o for o in flood if o.status != 200]
        assert len(opened) == 4
        assert len(refused) == 36
        for o in refused:
            assert o.status == 503
            assert o.session is None
            assert json.loads(o.body)["error"]["message"] == "Too many open sessions"
        assert all(s is not None for s in opened)
        sessions = [s for s in opened if s is not None]
        assert [list_tools(http, served.url, s) for s in sessions] == [200] * 4  # the open ones go on
        ended = http.delete(served.url, headers={**HEADERS, "Mcp-Session-Id": sessions[0]})
        assert ended.status_code == 200
        assert list_tools(http, served.url, sessions[0]) == 404
        assert open_session(http, served.url).status == 200  # room again, for one
        assert open_session(http, served.url).status == 503
        assert served.process.poll() is None


async def test_strict_arguments_over_http(setup: Setup) -> None:
    with http_served(setup, "strict-http.db") as (served, _):
        async with connected(served.url, TOKEN) as client:
            await refused_as_problems(client)
            assert data(await client.call_tool("list_runs", {"limit": 1})) == {"runs": []}


def test_an_idle_session_expires_and_its_room_is_given_to_another(setup: Setup) -> None:
    with http_served(setup, "expiring.db", "--max-sessions", "1", "--session-expiry", "0.5") as (served, http):
        first = open_session(http, served.url, initialized=False)
        assert first.status == 200
        assert first.session is not None
        # A request in the first session would keep it alive: wait instead for the room it leaves
        # (the server keeps one session only).
        deadline = time.monotonic() + WAIT
        second = open_session(http, served.url, initialized=False)
        while second.status == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
            second = open_session(http, served.url, initialized=False)
        assert second.status == 200
        assert second.session not in (None, first.session)
        assert list_tools(http, served.url, first.session) == 404  # gone


def test_session_limits_are_http_flags_and_are_checked(setup: Setup) -> None:
    stdio = invoke(["mcp", "serve", "--max-sessions", "3", "--session-expiry", "5", *setup.flags("memory://")])
    assert stdio.exit_code == 2
    assert "--max-sessions: applies to --transport http only" in stdio.stderr
    assert "--session-expiry: applies to --transport http only" in stdio.stderr
    for flag, value in (("--max-sessions", "0"), ("--session-expiry", "0"), ("--session-expiry", "nan")):
        refused = invoke(["mcp", "serve", "--transport", "http", flag, value, *setup.flags("memory://")])
        assert refused.exit_code == 2, (flag, value)
        assert flag in refused.stderr
    with pytest.raises(UsageError) as caught:
        SessionLimits(max_sessions=0, idle_expiry=float("inf"))
    assert [p.where for p in caught.value.problems] == ["max_sessions", "idle_expiry"]
    assert SessionLimits().max_sessions == 100
