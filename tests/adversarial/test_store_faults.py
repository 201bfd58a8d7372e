"""A broken store or a broken database never hangs a caller, never shows a store URL's password, and
never surfaces as a raw driver error: every failure is a StoreError naming the store and the fault.

The PostgreSQL cases that need no real server use :class:`StuckServer`, a TCP server on 127.0.0.1
that accepts connections and never answers (or answers only PostgreSQL's start-up, then nothing).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import struct
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

import pytest

from planexec import UsageError
from planexec.errors import LogUnreadable, StoreError
from planexec.executor import Verdict
from planexec.log import Event, ModelCalled, RunStarted, StepSucceeded
from planexec.store import MemoryStore, PostgresStore, Redactor, RunStore, SQLiteStore, open_store
from planexec.store._codec import decode_event, encode_events
from tests.test_store_support import Backend, full_run, postgres_schema, postgres_url, rewrite_events, step_batch

ROOT = Path(__file__).resolve().parents[2]

PASSWORD = "Quokka-Zebra-Yak"
ENCODED = "Quokka%40Zebra%2FYak%3Ab%25"
"""Percent-encoded; decoded it is ``Quokka@Zebra/Yak:b%``."""
PASSWORDS = (PASSWORD, ENCODED, unquote(ENCODED), "Quokka", "Zebra", "Yak")
"""The passwords, and the words of them: a password that is hidden only in part is not hidden."""

SLACK = 1.5
"""Seconds a failing call may take beyond its timeout on a busy machine (psycopg's own cancel of a
query takes about ten seconds against a server that does not answer)."""

Call = Callable[[RunStore], Awaitable[object]]

CALLS: dict[str, Call] = {
    "append": lambda s: s.append("r", step_batch("a"), expected_seq=0),
    "read": lambda s: s.read("r"),
    "last_seq": lambda s: s.last_seq("r"),
    "get_run": lambda s: s.get_run("r"),
    "list_runs": lambda s: s.list_runs(),
    "delete": lambda s: s.delete("r"),
    "expire": lambda s: s.expire(older_than=1.0),
}
"""Every method of a store that reaches its database."""


def assert_clean(error: BaseException, *, secrets: tuple[str, ...] = PASSWORDS) -> str:
    """``error`` as a user would see it, printed with its traceback: a StoreError or UsageError alone
    (no driver exception chained to it), with no password anywhere. Returns its message."""
    assert isinstance(error, StoreError | UsageError), repr(error)
    assert error.__cause__ is None
    assert error.__suppress_context__ or error.__context__ is None
    printed = "".join(traceback.format_exception(error))
    assert printed.count("Traceback (most recent call last)") == 1, printed
    for shown in (printed, str(error), repr(error)):
        for secret in secrets:
            assert secret not in shown, f"{secret!r} shown in {shown!r}"
    return str(error)


# -- a PostgreSQL server that never answers ----------------------------------------------------------------

_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST = 80877103, 80877104, 80877102


def _startup_reply() -> bytes:
    """Authentication OK, a few parameters, a backend key, ready for a query."""
    out = b"R" + struct.pack("!ii", 8, 0)
    for key, value in (
        ("server_version", "15.0"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("standard_conforming_strings", "on"),
        ("integer_datetimes", "on"),
        ("DateStyle", "ISO, MDY"),
    ):
        body = key.encode() + b"\0" + value.encode() + b"\0"
        out += b"S" + struct.pack("!i", 4 + len(body)) + body
    out += b"K" + struct.pack("!iii", 12, 4242, 2424)
    return out + b"Z" + struct.pack("!i", 5) + b"I"


class StuckServer:
    """A TCP server on 127.0.0.1 that accepts connections and reads everything sent to it. ``silent``:
    it never writes a byte. Otherwise it completes PostgreSQL's start-up (no TLS, no password) and
    then never answers a query. It counts open connections, messages after start-up and cancel
    requests, and closes whatever is still open when it stops."""

    def __init__(self, *, silent: bool) -> None:
        self.silent = silent
        self.open = 0
        self.messages = 0
        self.cancel_requests = 0
        self.port = 0
        self._changed = asyncio.Condition()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> StuckServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self.until(lambda: self.open == 0)
        await self._server.wait_closed()

    def url(self, *, password: str = PASSWORD, query: str = "") -> str:
        return f"postgresql://planexec:{password}@127.0.0.1:{self.port}/runs{query}"

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (at most 5 s) until ``condition`` holds."""
        async with asyncio.timeout(5.0), self._changed:
            await self._changed.wait_for(condition)

    async def _changed_now(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.open += 1
        await self._changed_now()
        try:
            await self._converse(reader, writer)
            while await reader.read(65536):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            self.open -= 1
            await self._changed_now()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            length, code = struct.unpack("!ii", await reader.readexactly(8))
            await reader.readexactly(length - 8)
            if code == _CANCEL_REQUEST:
                self.cancel_requests += 1
                await self._changed_now()
                return
            if self.silent:
                return
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                writer.write(b"N")
                continue
            writer.write(_startup_reply())
            break
        while True:
            _, length = struct.unpack("!ci", await reader.readexactly(5))
            await reader.readexactly(length - 4)
            self.messages += 1
            await self._changed_now()


async def _timed(call: Awaitable[object]) -> tuple[BaseException | None, float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        await call
    except Exception as e:
        return e, loop.time() - start
    return None, loop.time() - start


async def _no_call_left(server: StuckServer, store: PostgresStore) -> None:
    """The store closes at once, every connection it made is closed, and no task of it is left."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    await store.close()
    assert loop.time() - start < SLACK
    await server.until(lambda: server.open == 0)
    assert server.cancel_requests == 0, "a cancel request was sent to a server that does not answer"
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if not t.done() and t is not asyncio.current_task()]
    assert all(t.get_coro().__qualname__.startswith("StuckServer.") for t in left), left  # type: ignore[union-attr]


async def test_a_server_that_never_answers_fails_every_call_within_the_connect_timeout() -> None:
    async with StuckServer(silent=True) as server:
        store = PostgresStore(server.url(), connect_timeout=0.1, statement_timeout=0.2, pool_size=len(CALLS))
        shown = f"PostgreSQL store 'postgresql://planexec:[REDACTED:password]@127.0.0.1:{server.port}/runs'"
        results = await asyncio.gather(*(_timed(call(store)) for call in CALLS.values()))
        for name, (error, took) in zip(CALLS, results, strict=True):
            assert error is not None, name
            message = assert_clean(error)
            assert not isinstance(error, LogUnreadable)
            assert message.startswith(f"{shown}: could not "), message
            assert "connect_timeout=0.1 s" in message, message
            assert took < 0.1 + SLACK, (name, took)
        await _no_call_left(server, store)


async def test_a_server_that_stops_answering_after_start_up_fails_every_call_within_the_statement_timeout() -> None:
    async with StuckServer(silent=False) as server:
        store = PostgresStore(server.url(), connect_timeout=5, statement_timeout=0.15, pool_size=len(CALLS))
        results = await asyncio.gather(*(_timed(call(store)) for call in CALLS.values()))
        for name, (error, took) in zip(CALLS, results, strict=True):
            assert error is not None, name
            message = assert_clean(error)
            assert "did not answer within statement_timeout=0.15 s" in message, message
            assert "127.0.0.1" in message
            assert took < 0.15 + SLACK, (name, took)
        assert server.messages >= len(CALLS), "every call sent a statement and waited for its answer"
        await _no_call_left(server, store)


async def test_a_cancelled_call_ends_at_once_without_waiting_for_the_server() -> None:
    """psycopg, cancelled during a query, asks the server to cancel it and waits for the answer (about
    ten seconds against a server that never gives one). The store cuts the connection instead."""
    loop = asyncio.get_running_loop()
    async with StuckServer(silent=False) as server:
        store = PostgresStore(server.url(), connect_timeout=5, statement_timeout=60)
        call = asyncio.create_task(store.last_seq("r"))
        await server.until(lambda: server.messages >= 1)
        start = loop.time()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert loop.time() - start < SLACK
        # the caller's own time limit works the same way
        error, took = await _timed(asyncio.wait_for(store.read("r"), 0.2))
        assert isinstance(error, TimeoutError)
        assert took < 0.2 + SLACK
        await _no_call_left(server, store)


async def test_many_calls_at_once_all_fail_in_time() -> None:
    """More calls than pooled connections: the ones waiting for a connection fail in time too."""
    async with StuckServer(silent=True) as server:
        store = PostgresStore(server.url(), pool_size=2, connect_timeout=0.1, statement_timeout=0.2)
        results = await asyncio.gather(*(_timed(store.last_seq(f"r{i}")) for i in range(8)))
        for error, took in results:
            assert isinstance(error, StoreError)
            assert_clean(error)
            assert took < 0.1 + 0.2 + SLACK
        await _no_call_left(server, store)


async def test_timeouts_come_from_the_url_unless_given() -> None:
    async with StuckServer(silent=True) as server:
        url = server.url(query="?connect_timeout=0.1&options=-c%20statement_timeout%3D250ms")
        store = open_store(url)
        assert isinstance(store, PostgresStore)
        assert (store.connect_timeout, store.statement_timeout) == (0.1, 0.25)
        error, took = await _timed(store.last_seq("r"))
        assert error is not None
        assert "connect_timeout=0.1 s" in assert_clean(error)
        assert took < 0.1 + SLACK
        await _no_call_left(server, store)
        given = PostgresStore(url, connect_timeout=3, statement_timeout=4.5)
        assert (given.connect_timeout, given.statement_timeout) == (3.0, 4.5)
    plain = PostgresStore("postgresql://localhost/runs")
    assert (plain.connect_timeout, plain.statement_timeout) == (10.0, 30.0)


@pytest.mark.parametrize(
    ("options", "seconds"),
    [
        ("-cstatement_timeout%3D2s", 2.0),
        ("-c%20statement_timeout%3D1500", 1.5),
        ("--statement-timeout%3D1min", 60.0),
        ("-c%20search_path%3Dx%20-c%20statement_timeout%3D0.5s", 0.5),
        ("-c%20search_path%3Dx", 30.0),
    ],
)
def test_the_statement_timeout_is_read_from_the_url_options(options: str, seconds: float) -> None:
    assert PostgresStore(f"postgresql://localhost/runs?options={options}").statement_timeout == seconds


@pytest.mark.parametrize(
    ("url", "kwargs"),
    [
        ("postgresql://localhost/runs", {"connect_timeout": 0}),
        ("postgresql://localhost/runs", {"statement_timeout": -1}),
        ("postgresql://localhost/runs", {"statement_timeout": float("nan")}),
        ("postgresql://localhost/runs", {"connect_timeout": float("inf")}),
        ("postgresql://localhost/runs", {"connect_timeout": True}),
        ("postgresql://localhost/runs?connect_timeout=0", {}),
        ("postgresql://localhost/runs?connect_timeout=soon", {}),
        ("postgresql://localhost/runs?options=-cstatement_timeout%3D0", {}),
        ("postgresql://localhost/runs?options=-cstatement_timeout%3Dlater", {}),
    ],
)
def test_timeouts_must_be_positive(url: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        PostgresStore(url, **kwargs)


# -- a real PostgreSQL server -------------------------------------------------------------------------------


async def test_a_statement_blocked_by_a_lock_fails_within_the_statement_timeout() -> None:
    import psycopg

    with postgres_schema() as url:
        store = PostgresStore(url, statement_timeout=0.2, pool_size=len(CALLS))
        try:
            await store.append("r", step_batch("a"), expected_seq=0)

            async def server_setting(conn: Any) -> str:
                cur = await conn.execute("SHOW statement_timeout")
                row = await cur.fetchone()
                return str(row[0])

            assert await store.call("show the setting", server_setting) == "200ms", "the server enforces it too"
            async with await psycopg.AsyncConnection.connect(url) as holder:
                await holder.execute("LOCK TABLE planexec_runs, planexec_events IN ACCESS EXCLUSIVE MODE")
                results = await asyncio.gather(*(_timed(call(store)) for call in CALLS.values()))
                await holder.rollback()
            for name, (error, took) in zip(CALLS, results, strict=True):
                assert isinstance(error, StoreError), (name, error)
                message = assert_clean(error, secrets=(_password_of(url),))
                assert "statement_timeout=0.2 s" in message, message
                assert 0.15 < took < 0.2 + SLACK, (name, took)
            # the lock is gone: the store works again (the timed-out delete of "r" may or may not have
            # gone through on the server after the lock was released: a timed-out call can still take effect)
            assert await store.append("r2", step_batch("b"), expected_seq=0) == 2
            assert await store.last_seq("r2") == 2
        finally:
            await store.close()


def _password_of(url: str) -> str:
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def _with_password(url: str, password: str) -> str:
    user_and_password, at, rest = url.split("://", 1)[1].partition("@")
    user = user_and_password.split(":", 1)[0]
    return f"postgresql://{user}:{password}{at}{rest}"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("password", [PASSWORD, ENCODED])
async def test_postgres_failures_name_the_store_and_never_its_password(password: str) -> None:
    real = postgres_url()
    cases = {
        "Connection refused": f"postgresql://planexec:{password}@127.0.0.1:{_closed_port()}/runs",
        "password authentication failed": _with_password(real, password),
        "no_such_database": _with_password(real, password).rsplit("/", 1)[0] + "/no_such_database",
        "invalid sslmode": f"postgresql://planexec:{password}@127.0.0.1:{_closed_port()}/runs?sslmode=bogus",
    }
    for expected, url in cases.items():
        store = PostgresStore(url, connect_timeout=5)
        assert all(secret not in repr(store) and secret not in str(store) for secret in PASSWORDS)
        try:
            with pytest.raises(StoreError) as caught:
                await store.last_seq("r")
        finally:
            await store.close()
        message = assert_clean(caught.value)
        assert message.startswith("PostgreSQL store 'postgresql://"), message
        assert ":[REDACTED:password]@127.0.0.1:" in message.split("': could not ")[0], message
        assert expected in message, message


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app:{PASSWORD}@[bad/runs",
        f"postgresql://app:Qu%zz{PASSWORD}@localhost/runs",
        f"postgresql://app:{unquote(ENCODED)}@localhost:notaport/runs",
        f"postgresql://app:{ENCODED}@localhost/runs?no_such_option=1",
    ],
)
def test_a_malformed_postgres_url_is_a_usage_error_without_the_password(url: str) -> None:
    for make in (PostgresStore, open_store):
        with pytest.raises(UsageError) as caught:
            make(url)
        assert_clean(caught.value)


def test_open_store_never_shows_a_password_of_a_url_it_does_not_know() -> None:
    for url in (
        f"mysql://app:{PASSWORD}@db/x",
        f"mysql://app:{ENCODED}@db/x",
        f"mysql://app:{unquote(ENCODED)}@db/x",
        f"redis://:{PASSWORD}@db:6379/0",
        f"file:///tmp/x.db?password={PASSWORD}",
    ):
        with pytest.raises(UsageError) as caught:
            open_store(url)
        message = assert_clean(caught.value)
        assert "[REDACTED:" in message, message


async def test_a_password_in_the_query_or_in_a_keyword_string_is_hidden_too() -> None:
    port = _closed_port()
    for conninfo in (
        f"postgresql://127.0.0.1:{port}/runs?user=app&password={ENCODED}&sslmode=disable",
        f"host=127.0.0.1 port={port} user=app password='Quokka Zebra\\'Yak' dbname=runs",
    ):
        store = PostgresStore(conninfo, connect_timeout=5)
        assert all(secret not in repr(store) for secret in PASSWORDS), repr(store)
        assert "password=[REDACTED:password]" in repr(store) or "password='[REDACTED:password]'" in repr(store)
        try:
            with pytest.raises(StoreError) as caught:
                await store.get_run("r")
        finally:
            await store.close()
        assert "Connection refused" in assert_clean(caught.value)


async def test_postgres_database_errors_are_store_errors() -> None:
    import psycopg

    with postgres_schema() as url:
        store = PostgresStore(url)
        try:
            with pytest.raises(StoreError) as caught:
                await store.append("bad\x00id", step_batch("a"), expected_seq=0)
            assert "NUL" in assert_clean(caught.value, secrets=(_password_of(url),))
            await store.append("r", step_batch("a"), expected_seq=0)
            with psycopg.connect(url, autocommit=True) as pg:
                pg.execute("UPDATE planexec_runs SET status = 'bogus', pending = '{' WHERE run_id = 'r'")
            for call in (store.get_run("r"), store.list_runs(), store.append("r", step_batch("b"), expected_seq=2)):
                with pytest.raises(StoreError) as caught:
                    await call
                assert "summary row of run 'r' is damaged" in assert_clean(caught.value), caught.value
            assert [s.seq for s in await store.read("r")] == [1, 2], "the events themselves still read"
        finally:
            await store.close()


# -- SQLite -----------------------------------------------------------------------------------------------------


async def _every_call_fails(store: SQLiteStore, *expected: str) -> None:
    for name, call in CALLS.items():
        with pytest.raises(StoreError) as caught:
            await call(store)
        message = assert_clean(caught.value, secrets=())
        assert message.startswith(f"SQLite store {str(store.path)!r}: could not "), (name, message)
        assert any(e in message for e in expected), (name, message)


async def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(b"these are not the pages you are looking for\n" * 200)
    store = SQLiteStore(path)
    try:
        await _every_call_fails(store, "file is not a database")
    finally:
        await store.close()


async def test_a_folder_that_does_not_exist_or_a_folder_as_the_file(tmp_path: Path) -> None:
    for path in (tmp_path / "missing" / "runs.db", tmp_path):
        store = SQLiteStore(path)
        try:
            await _every_call_fails(store, "unable to open database file")
        finally:
            await store.close()


def _page(path: Path, table: str) -> tuple[int, int]:
    """The page size and the root page of ``table``."""
    with closing(sqlite3.connect(path)) as conn:
        (size,) = conn.execute("PRAGMA page_size").fetchone()
        (root,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()
    return int(size), int(root)


async def test_a_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    await store.append("r", full_run("r"), expected_seq=0)
    await store.close()
    size, root = _page(path, "planexec_events")
    with path.open("r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xa5" * size)
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreError) as caught:
            await store.read("r")
        message = assert_clean(caught.value, secrets=())
        assert not isinstance(caught.value, LogUnreadable)
        assert "malformed" in message, message
        assert "SQLITE_CORRUPT" in message, message
    finally:
        await store.close()


async def test_a_full_disk(tmp_path: Path) -> None:
    """SQLite's max_page_count stands in for a full disk: the append fails whole, the store goes on."""
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        await store.append("r", step_batch("a"), expected_seq=0)
        for conn in (store._loop_conn, store._worker_conn):
            assert conn is not None
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            conn.execute(f"PRAGMA max_page_count = {pages}")
        big = [
            StepSucceeded(at=3.0, step_id=f"s{i}", output="x" * 8192, verdict=Verdict(passed=True)) for i in range(8)
        ]
        with pytest.raises(StoreError) as caught:
            await store.append("r", big, expected_seq=2)
        message = assert_clean(caught.value, secrets=())
        assert "database or disk is full" in message, message
        assert "SQLITE_FULL" in message, message
        assert await store.last_seq("r") == 2
        assert [s.seq for s in await store.read("r")] == [1, 2]
    finally:
        await store.close()


async def test_a_lock_held_longer_than_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path, busy_timeout=0.2)
    try:
        await store.append("r", step_batch("a"), expected_seq=0)
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN EXCLUSIVE")
            for name in ("append", "delete", "expire"):
                error, took = await _timed(CALLS[name](store))
                assert isinstance(error, StoreError), (name, error)
                assert "busy_timeout=0.2 s" in assert_clean(error, secrets=())
                assert took < 0.2 + SLACK
            other.execute("ROLLBACK")
        assert await store.append("r", step_batch("b"), expected_seq=2) == 4
    finally:
        await store.close()


async def test_a_damaged_summary_row(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        await store.append("r", step_batch("a"), expected_seq=0)
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("UPDATE planexec_runs SET status = 'bogus' WHERE run_id = 'r'")
        for call in (store.get_run("r"), store.list_runs(), store.append("r", step_batch("b"), expected_seq=2)):
            with pytest.raises(StoreError) as caught:
                await call
            assert "summary row of run 'r' is damaged" in assert_clean(caught.value, secrets=())
        assert [s.seq for s in await store.read("r")] == [1, 2]
    finally:
        await store.close()


async def test_an_event_that_is_not_utf8_or_not_an_event(tmp_path: Path) -> None:
    backend = Backend("sqlite", path=tmp_path / "runs.db")
    store = backend.open()
    try:
        events = full_run("r")
        await store.append("r", events, expected_seq=0)
        envelope = json.dumps({"v": 3, "event": {"kind": "step_started", "at": "noon"}})
        rewrite_events(backend, store, "r", {3: b'{"v":3,"event":\xff}', 5: "[1, 2]", 7: "{}", 8: envelope})
        with pytest.raises(LogUnreadable) as caught:
            await store.read("r")
        problems = {p.where: (p.code, p.message) for p in caught.value.problems}
        assert problems.keys() == {"event 3", "event 5", "event 7", "event 8"}
        assert problems["event 3"][0] == "damaged"
        assert "UTF-8" in problems["event 3"][1]
        assert problems["event 5"][0] == problems["event 7"][0] == "damaged"
        assert problems["event 8"][0] == "invalid_event"
        assert "step_started" in problems["event 8"][1]
        assert len(caught.value.events) == len(events) - 4
    finally:
        await store.close()


_READ_ONLY = r"""
import asyncio, json, sys
from planexec.errors import StoreError
from planexec.log import StepStarted
from planexec.store import SQLiteStore

async def attempt(path, name):
    store = SQLiteStore(path)
    try:
        if name == "append":
            await store.append("new", [StepStarted(at=1.0, step_id="s", executor="tools")], expected_seq=0)
        else:
            await store.last_seq("r")
        return ["ok"]
    except StoreError as e:
        return ["StoreError", str(e), e.__cause__ is None]
    except BaseException as e:
        return [type(e).__name__, str(e)]
    finally:
        await store.close()

async def main():
    out = {}
    for path in sys.argv[1:]:
        out[path] = [await attempt(path, "last_seq"), await attempt(path, "append")]
    print(json.dumps(out))

asyncio.run(main())
"""


def _without_file_permission_override() -> list[str]:
    """A command prefix under which file permissions apply (root ignores them unless it drops the
    capabilities that let it)."""
    if os.geteuid() != 0:
        return []
    caps = "-dac_override,-dac_read_search"
    probe = subprocess.run(["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", "true"], check=False)
    if probe.returncode != 0:
        pytest.skip("running as root, and setpriv cannot drop the file-permission capabilities")
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


async def test_a_read_only_file_or_folder(tmp_path: Path) -> None:
    prefix = _without_file_permission_override()
    read_only_file = tmp_path / "ro-file" / "runs.db"
    in_read_only_folder = tmp_path / "ro-folder" / "runs.db"
    new_in_read_only_folder = tmp_path / "ro-folder" / "new.db"
    for path in (read_only_file, in_read_only_folder):
        path.parent.mkdir()
        store = SQLiteStore(path)
        await store.append("r", step_batch("a"), expected_seq=0)
        await store.close()
    read_only_file.chmod(0o444)
    in_read_only_folder.parent.chmod(0o555)
    paths = [str(p) for p in (read_only_file, in_read_only_folder, new_in_read_only_folder)]
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [*prefix, sys.executable, "-c", _READ_ONLY, *paths],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        in_read_only_folder.parent.chmod(0o755)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for shown in paths:
        _, appended = results[shown]
        assert appended[0] == "StoreError", (shown, appended)
        assert appended[1].startswith(f"SQLite store {shown!r}: could not "), appended
        assert appended[2] is True, "no driver error chained"
    assert "readonly" in results[paths[0]][1][1]
    assert results[paths[2]][0][0] == "StoreError"
    assert "unable to open database file" in results[paths[2]][0][1]


# -- the codec ------------------------------------------------------------------------------------------------


def test_nan_in_any_output_is_refused_or_written_as_valid_json() -> None:
    """A tool's output is dumped by pydantic before the codec sees it; depending on how the event
    adapter is configured NaN reaches the codec (which refuses it) or arrives as null. Either way,
    nothing that is not JSON is ever written."""
    event = StepSucceeded(
        at=1.0, step_id="s", output={"rows": [1.5, float("nan")], "total": float("inf")}, verdict=Verdict(passed=True)
    )
    try:
        encoded = encode_events([event], Redactor(), store="a store")
    except StoreError as e:
        message = str(e)
        assert message.startswith("a store: refused to write a step_succeeded event")
        assert "the value at output.rows[1] is NaN" in message, message
        return

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} written")

    json.loads(encoded[0].data, parse_constant=refuse)


def test_the_refusal_names_the_event_and_the_path() -> None:
    events: list[Event] = [
        RunStarted(at=1.0, run_id="r", goal="g", budget={}),
        RunStarted(at=1.0, run_id="r", goal="g", budget={"a b": float("nan")}),
        ModelCalled(at=2.0, role="planner", purpose="plan", model="m"),
    ]
    with pytest.raises(StoreError) as caught:
        encode_events(events, Redactor())
    assert str(caught.value) == (
        'refused to write event 2 of 3 (run_started): the value at budget["a b"] is NaN, which JSON cannot '
        "represent (use null, a finite number or a string); nothing of this append was written"
    )


def test_lone_surrogates_round_trip_exactly() -> None:
    """Undecodable bytes (decoded with surrogateescape) and lone surrogates in string values are written
    as JSON escapes, so the stored text is valid UTF-8, and read back exactly."""
    text = "ok\udcff and \ud800 alone, \U0001f680 paired"
    event = StepSucceeded(at=1.0, step_id="s", output={"text": [text, {"nested": text}]}, verdict=Verdict(passed=True))
    (encoded,) = encode_events([event], Redactor.off())
    encoded.data.encode("utf-8")  # storable as UTF-8
    assert "\\udcff" in encoded.data
    assert decode_event(encoded.data) == event


def test_a_lone_surrogate_in_a_key_is_refused_not_raised_raw() -> None:
    """pydantic cannot dump a dictionary key holding a lone surrogate: the append is refused cleanly."""
    event = StepSucceeded(at=1.0, step_id="s", output={"k\udcff": 1}, verdict=Verdict(passed=True))
    with pytest.raises(StoreError, match=r"^refused to write a step_succeeded event: .*surrogates not allowed"):
        encode_events([event], Redactor.off())


async def test_the_memory_store_keeps_refused_appends_out() -> None:
    store = MemoryStore()
    events: list[Event] = [
        RunStarted(at=1.0, run_id="r", goal="g", budget={}),
        ModelCalled(at=2.0, role="planner", purpose="plan", model="m", cost=float("nan")),
    ]
    with pytest.raises(StoreError, match=r"^MemoryStore: refused to write event 2 of 2 \(model_called\)"):
        await store.append("r", events, expected_seq=0)
    assert store._logs == {}
    assert await store.get_run("r") is None
    await store.close()
