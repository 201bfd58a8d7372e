"""Backend details: the store-schema version table, SQLite's WAL mode and lock handling."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from planexec import UsageError
from planexec.store import AppendConflict, SQLiteStore
from tests.test_store_support import DURABLE, Backend, make_backend, step_batch


@pytest.fixture(params=DURABLE)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


def _raw(backend: Backend, sql: str) -> list[tuple[object, ...]]:
    """Run one statement on the backend's database outside the store."""
    if backend.kind == "sqlite":
        assert backend.path is not None
        with closing(sqlite3.connect(backend.path, isolation_level=None)) as conn:
            return conn.execute(sql).fetchall()
    import psycopg

    assert backend.url is not None
    with psycopg.connect(backend.url, autocommit=True) as pg:
        cur = pg.execute(sql.encode())
        return cur.fetchall() if cur.description else []


CURRENT = {"sqlite": 3, "postgres": 5}
"""The store schema version of each durable backend (PostgreSQL's 3 adds the workers' queue; SQLite's 3
and PostgreSQL's 4 the hash chain; PostgreSQL's 5 what a queued run is told before it begins)."""


async def test_the_schema_version_is_recorded(durable: Backend) -> None:
    store = durable.open()
    try:
        await store.append("r", step_batch("a"), expected_seq=0)
    finally:
        await store.close()
    version = CURRENT[durable.kind]
    assert _raw(durable, "SELECT component, version FROM planexec_schema") == [("store", version)]
    again = durable.open()
    try:
        assert await again.last_seq("r") == 2  # opening again migrates nothing and finds the data
    finally:
        await again.close()
    assert _raw(durable, "SELECT component, version FROM planexec_schema") == [("store", version)]


async def test_a_newer_schema_is_refused(durable: Backend) -> None:
    store = durable.open()
    await store.last_seq("r")
    await store.close()
    _raw(durable, "UPDATE planexec_schema SET version = 99 WHERE component = 'store'")
    newer = durable.open()
    try:
        with pytest.raises(UsageError, match="upgrade planexec"):
            await newer.last_seq("r")
    finally:
        await newer.close()


async def test_sqlite_uses_wal(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "w.db")
    await store.last_seq("r")
    await store.close()
    with closing(sqlite3.connect(tmp_path / "w.db")) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_sqlite_append_waits_for_a_lock_held_elsewhere(tmp_path: Path) -> None:
    """While another connection holds the write lock, the append moves to the worker thread and
    finishes once the lock is released."""
    path = tmp_path / "l.db"
    store = SQLiteStore(path)
    try:
        await store.append("r", step_batch("a"), expected_seq=0)
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            pending = asyncio.create_task(store.append("r", step_batch("b"), expected_seq=2))
            await asyncio.sleep(0)  # the task tries the loop connection, finds the lock taken, and hands over
            assert not pending.done()
            other.execute("COMMIT")
            assert await pending == 4
        assert [s.seq for s in await store.read("r")] == [1, 2, 3, 4]
    finally:
        await store.close()


async def test_two_sqlite_stores_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        assert await first.append("r", step_batch("a"), expected_seq=0) == 2
        with pytest.raises(AppendConflict) as caught:
            await second.append("r", step_batch("b"), expected_seq=0)
        assert caught.value.actual == 2
        assert await second.append("r", step_batch("b"), expected_seq=2) == 4
        assert [s.seq for s in await first.read("r")] == [1, 2, 3, 4]
        summary = await first.get_run("r")
        assert summary is not None
        assert summary.events == 4
    finally:
        await first.close()
        await second.close()


async def test_sqlite_synchronous_full(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "f.db", synchronous="full")
    try:
        assert await store.append("r", step_batch("a"), expected_seq=0) == 2
        assert await store.last_seq("r") == 2
        assert len(await store.read("r")) == 2
    finally:
        await store.close()


def test_sqlite_refuses_an_unknown_synchronous_mode(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        SQLiteStore(tmp_path / "x.db", synchronous="off")  # type: ignore[arg-type]


async def test_sqlite_checkpoints_in_the_worker(tmp_path: Path) -> None:
    """Enough appends on the event loop start a WAL checkpoint in the worker thread; closing waits for it."""
    store = SQLiteStore(tmp_path / "c.db")
    try:
        last = 0
        for i in range(1001):
            last = await store.append("r", step_batch(f"s{i}", size=1), expected_seq=last)
        assert store._checkpoint is not None
    finally:
        await store.close()
    assert store._checkpoint.done()


async def test_a_version_1_sqlite_database_is_brought_up_to_date_with_its_runs(tmp_path: Path) -> None:
    from planexec.log import RunStarted

    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    await store.append("r1", [RunStarted(at=1.0, run_id="r1", goal="before sessions", budget={})], expected_seq=0)
    await store.close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:  # as version 1 left it
        _drop_chain_columns(conn)
        conn.execute("DROP INDEX planexec_runs_session")
        conn.execute("ALTER TABLE planexec_runs DROP COLUMN turn")
        conn.execute("ALTER TABLE planexec_runs DROP COLUMN session_id")
        conn.execute("UPDATE planexec_schema SET version = 1 WHERE component = 'store'")
    again = SQLiteStore(path)
    try:
        [run] = await again.list_runs()
        assert (run.run_id, run.goal, run.session, run.turn) == ("r1", "before sessions", None, None)
        started = RunStarted(at=2.0, run_id="r2", goal="a turn", budget={}, config={"session": {"id": "s", "turn": 1}})
        await again.append("r2", [started], expected_seq=0)
        assert [r.run_id for r in await again.list_runs(session="s")] == ["r2"]
    finally:
        await again.close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert conn.execute("SELECT version FROM planexec_schema").fetchall() == [(3,)]


def _drop_chain_columns(conn: sqlite3.Connection) -> None:
    """Take the hash chain's columns away, as SQLite store schema 2 had none."""
    conn.execute("ALTER TABLE planexec_events DROP COLUMN link")
    conn.execute("ALTER TABLE planexec_events DROP COLUMN hash")
    conn.execute("ALTER TABLE planexec_runs DROP COLUMN chain_head")


async def test_a_version_2_postgres_database_gets_the_queue_and_keeps_its_runs() -> None:
    from planexec.store import PostgresStore, RunQueue
    from tests.test_store_support import postgres_schema

    with postgres_schema() as url:
        backend = Backend("postgres", url=url)
        store = PostgresStore(url)
        await store.append("r", step_batch("a"), expected_seq=0)
        await store.close()
        _raw(backend, "DROP TABLE planexec_queue")
        _raw(backend, "ALTER TABLE planexec_events DROP COLUMN link, DROP COLUMN hash")
        _raw(backend, "ALTER TABLE planexec_runs DROP COLUMN chain_head")
        _raw(backend, "UPDATE planexec_schema SET version = 2 WHERE component = 'store'")
        again = PostgresStore(url)
        try:
            assert await again.last_seq("r") == 2
            assert await RunQueue(again).submit("q", goal="g", constraints=(), spec={})
            assert [e.run_id for e in await RunQueue(again).entries()] == ["q"]
        finally:
            await again.close()
        assert _raw(backend, "SELECT version FROM planexec_schema") == [(CURRENT["postgres"],)]
