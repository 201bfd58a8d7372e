"""Where plan memory (:class:`~planexec.memory.PlanMemory`) keeps its entries: beside the run
logs in a store's own database (SQLite file or PostgreSQL), or in this process. Each store gives
its own with ``RunStore.plan_memory()``; :func:`~planexec.store.plan_memory_at` gives the one a
store URL names.

Each backend holds one row per entry (its JSON record) and a change counter that every write
bumps, so a memory in another process notices a change with one small query and reloads. An
entry is changed in one transaction (read, changed, written), so that changes made at once by
several processes — two runs counting a use of one entry — are never lost. The tables
(``plan_memory`` and ``plan_memory_changes``) are created on first use, in the run logs'
database, and have not changed since plan memory began.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from planexec.errors import StoreError, UsageError

__all__ = ["EntryChange", "InProcessPlanMemory", "PlanMemoryBackend", "PostgresPlanMemory", "SQLitePlanMemory"]


EntryChange = Callable[[dict[str, Any] | None], dict[str, Any] | None]
"""Given an entry's stored record (None: there is none, or it is no JSON object), the record to
write in its place (None: leave it as it is)."""


class PlanMemoryBackend(Protocol):
    """The rows of plan memory's entries, as a store keeps them."""

    name: str
    """What the memory is shown as (``plan memory in SQLite file '…'``): in reprs and errors."""

    async def version(self) -> int:
        """The change counter: different after any write, by anyone."""
        ...

    async def load(self) -> list[tuple[str, str]]:
        """Every row, as (entry id, record as stored): a record is read by the memory, which
        skips the ones it cannot read."""
        ...

    async def update(self, entry_id: str, change: EntryChange) -> int:
        """Apply ``change`` to entry ``entry_id`` in one transaction; the change counter after it."""
        ...

    async def delete(self, entry_id: str) -> bool:
        """Delete entry ``entry_id``; False when there was none."""
        ...

    async def close(self) -> None: ...


class InProcessPlanMemory:
    """Entries in this process only (a memory store, tests)."""

    def __init__(self) -> None:
        self.name = "plan memory in this process"
        self._rows: dict[str, str] = {}
        self._version = 0

    async def version(self) -> int:
        return self._version

    async def load(self) -> list[tuple[str, str]]:
        return list(self._rows.items())

    async def update(self, entry_id: str, change: EntryChange) -> int:
        record = change(_decoded(self._rows.get(entry_id)))
        if record is not None:
            self._rows[entry_id] = _encode(record, self.name)
            self._version += 1
        return self._version

    async def delete(self, entry_id: str) -> bool:
        found = self._rows.pop(entry_id, None) is not None
        self._version += found
        return found

    async def close(self) -> None:
        return None


def _encode(record: dict[str, Any], name: str) -> str:
    try:
        return json.dumps(record, allow_nan=False, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{name}: an entry JSON cannot hold: {e}") from None


def _decoded(text: str | None) -> dict[str, Any] | None:
    """A stored record, or None when there is none or it is no JSON object (damaged)."""
    if text is None:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


_SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS plan_memory (id TEXT PRIMARY KEY, updated_at REAL NOT NULL, record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS plan_memory_changes (one INTEGER PRIMARY KEY CHECK (one = 1), n INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO plan_memory_changes (one, n) VALUES (1, 0)",
)


class SQLitePlanMemory:
    """Entries in a SQLite file (the run store's own file by default), used from one worker thread."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.name = f"plan memory in SQLite file {str(self.path)!r}"
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                for statement in _SQLITE_SCHEMA:
                    conn.execute(statement)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _do(self, work: Any) -> Any:
        def call() -> Any:
            with self._lock:
                try:
                    return work(self._connection())
                except sqlite3.Error as e:
                    raise StoreError(f"{self.name}: {type(e).__name__}: {e}") from None

        return await asyncio.to_thread(call)

    async def version(self) -> int:
        # Asked before every recall: read on the loop (a WAL reader never waits for a writer), with
        # the worker thread as the way round anything that would make it wait.
        if self._conn is not None:
            try:
                if self._reader is None:
                    self._reader = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
                return int(self._reader.execute("SELECT n FROM plan_memory_changes").fetchone()[0])
            except sqlite3.Error:
                pass
        return int(await self._do(lambda c: c.execute("SELECT n FROM plan_memory_changes").fetchone()[0]))

    async def load(self) -> list[tuple[str, str]]:
        rows = await self._do(lambda c: c.execute("SELECT id, record FROM plan_memory").fetchall())
        return [(str(r[0]), str(r[1])) for r in rows]

    async def update(self, entry_id: str, change: EntryChange) -> int:
        def write(c: sqlite3.Connection) -> int:
            c.execute("BEGIN IMMEDIATE")
            try:
                row = c.execute("SELECT record FROM plan_memory WHERE id = ?", (entry_id,)).fetchone()
                record = change(_decoded(None if row is None else str(row[0])))
                if record is None:
                    n = int(c.execute("SELECT n FROM plan_memory_changes").fetchone()[0])
                else:
                    c.execute(
                        "INSERT INTO plan_memory (id, updated_at, record) VALUES (?, ?, ?) "
                        "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, record = excluded.record",
                        (entry_id, float(record.get("updated_at", 0.0)), _encode(record, self.name)),
                    )
                    n = int(c.execute("UPDATE plan_memory_changes SET n = n + 1 RETURNING n").fetchone()[0])
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return n

        return int(await self._do(write))

    async def delete(self, entry_id: str) -> bool:
        def remove(c: sqlite3.Connection) -> bool:
            c.execute("BEGIN IMMEDIATE")
            try:
                found = c.execute("DELETE FROM plan_memory WHERE id = ?", (entry_id,)).rowcount > 0
                if found:
                    c.execute("UPDATE plan_memory_changes SET n = n + 1")
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return found

        return bool(await self._do(remove))

    async def close(self) -> None:
        def shut() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None

        await asyncio.to_thread(shut)


_PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS plan_memory (id TEXT PRIMARY KEY, updated_at DOUBLE PRECISION NOT NULL, "
    "record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS plan_memory_changes (one INTEGER PRIMARY KEY CHECK (one = 1), n BIGINT NOT NULL)",
    "INSERT INTO plan_memory_changes (one, n) VALUES (1, 0) ON CONFLICT DO NOTHING",
)


class PostgresPlanMemory:
    """Entries in a PostgreSQL database (the run store's own by default), over one connection."""

    def __init__(self, url: str, *, shown: str, connect_timeout: float = 10.0, statement_timeout: float = 30.0) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise UsageError("plan memory in PostgreSQL needs psycopg: pip install 'planexec[postgres]'") from None
        self._url = url
        self.name = f"plan memory in PostgreSQL {shown!r}"
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            conn = await asyncio.wait_for(
                psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=max(1, round(self._connect_timeout))
                ),
                self._connect_timeout + 1,
            )
            try:
                await conn.execute(f"SET statement_timeout = {max(1, round(self._statement_timeout * 1000))}")
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(7460001)")  # one creator at a time
                    for statement in _PG_SCHEMA:
                        await conn.execute(statement)
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _do(self, work: Any) -> Any:
        import psycopg

        async with self._lock:
            try:
                return await work(await self._connection())
            except (psycopg.Error, OSError, TimeoutError) as e:
                if self._conn is not None:
                    await self._conn.close()
                    self._conn = None
                raise StoreError(f"{self.name}: {type(e).__name__}") from None

    async def version(self) -> int:
        async def read(c: Any) -> int:
            cur = await c.execute("SELECT n FROM plan_memory_changes")
            row = await cur.fetchone()
            return int(row[0])

        return int(await self._do(read))

    async def load(self) -> list[tuple[str, str]]:
        async def read(c: Any) -> list[tuple[str, str]]:
            cur = await c.execute("SELECT id, record FROM plan_memory")
            return [(str(r[0]), str(r[1])) for r in await cur.fetchall()]

        result: list[tuple[str, str]] = await self._do(read)
        return result

    async def update(self, entry_id: str, change: EntryChange) -> int:
        async def write(c: Any) -> int:
            async with c.transaction():
                # The counter's row, locked first, makes every change wait for the one before it.
                cur = await c.execute("SELECT n FROM plan_memory_changes FOR UPDATE")
                n = int((await cur.fetchone())[0])
                cur = await c.execute("SELECT record FROM plan_memory WHERE id = %s", (entry_id,))
                row = await cur.fetchone()
                record = change(_decoded(None if row is None else str(row[0])))
                if record is not None:
                    await c.execute(
                        "INSERT INTO plan_memory (id, updated_at, record) VALUES (%s, %s, %s) "
                        "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at, record = excluded.record",
                        (entry_id, float(record.get("updated_at", 0.0)), _encode(record, self.name)),
                    )
                    cur = await c.execute("UPDATE plan_memory_changes SET n = n + 1 RETURNING n")
                    n = int((await cur.fetchone())[0])
            return n

        return int(await self._do(write))

    async def delete(self, entry_id: str) -> bool:
        async def remove(c: Any) -> bool:
            async with c.transaction():
                cur = await c.execute("DELETE FROM plan_memory WHERE id = %s", (entry_id,))
                found = bool(cur.rowcount > 0)
                if found:
                    await c.execute("UPDATE plan_memory_changes SET n = n + 1")
            return found

        return bool(await self._do(remove))

    async def close(self) -> None:
        async with self._lock:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
