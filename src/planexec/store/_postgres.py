"""PostgresStore: run logs in PostgreSQL, for teams and many machines (``pip install 'planexec[postgres]'``).

Uses psycopg 3's asyncio connections, a few at a time from a small pool. An append is one
transaction: it locks the run's summary row (``SELECT … FOR UPDATE``), checks the last sequence
number, inserts the batch and updates the summary. A second writer waits for the first one's
commit and then sees the new number, so it gets :class:`AppendConflict`; two writers creating the
same run collide on the primary key, and the loser gets :class:`AppendConflict` too. Each read is
one statement, so a reader sees whole batches and never a gap.

Tables are created on first use, under an advisory lock so several processes can start at once;
the URL's ``options=-csearch_path=…`` puts them in another schema. Events are stored as JSON text
(not ``jsonb``) so that every value, non-finite floats included, reads back exactly; cast
``data::jsonb`` to query inside them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from planexec._errors import UsageError
from planexec.runtime._events import Event
from planexec.store._base import AppendConflict, RunStatus, RunSummary, StoredEvent
from planexec.store._codec import decode_event, encode_events
from planexec.store._common import StoreBase, check_list_args, check_run_id, check_schema_version, list_runs_sql
from planexec.store._redact import Redactor
from planexec.store._summary import SUMMARY_COLUMNS, state_from_row, summarize, summary_row

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["PostgresStore"]

INSTALL_HINT = "pip install 'planexec[postgres]'"

SCHEMA_VERSION = 1
"""Store schema changelog (one line per version; each version adds a migration below):
    1: planexec_schema, planexec_runs (one summary row per run), planexec_events (the logs).
"""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE planexec_runs (
            run_id text PRIMARY KEY,
            goal text NOT NULL,
            status text NOT NULL,
            stop_kind text,
            stop_detail text,
            cost double precision NOT NULL,
            model_calls integer NOT NULL,
            started_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            finished_at double precision,
            last_seq integer NOT NULL,
            pending_approvals integer NOT NULL,
            pending text NOT NULL,
            suspended boolean NOT NULL
        )""",
        "CREATE INDEX planexec_runs_started ON planexec_runs (started_at DESC, run_id DESC)",
        """CREATE TABLE planexec_events (
            run_id text NOT NULL REFERENCES planexec_runs (run_id) ON DELETE CASCADE,
            seq integer NOT NULL,
            kind text NOT NULL,
            at double precision NOT NULL,
            data text NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
    ),
}

_MIGRATION_LOCK = 0x706C616E65786563  # "planexec": one advisory lock key for schema changes

_COLUMNS = ", ".join(SUMMARY_COLUMNS)
_SELECT_STATE = f"SELECT {_COLUMNS} FROM planexec_runs WHERE run_id = %s"
_INSERT_RUN = f"INSERT INTO planexec_runs (run_id, {_COLUMNS}) VALUES (%s, {', '.join(['%s'] * len(SUMMARY_COLUMNS))})"
_UPDATE_RUN = f"UPDATE planexec_runs SET {', '.join(f'{c} = %s' for c in SUMMARY_COLUMNS)} WHERE run_id = %s"
_INSERT_EVENT = "INSERT INTO planexec_events (run_id, seq, kind, at, data) VALUES (%s, %s, %s, %s, %s)"


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise UsageError(f"PostgresStore needs psycopg 3, which is not installed: {INSTALL_HINT}") from e


class PostgresStore(StoreBase):
    """Run logs in the PostgreSQL database at ``url`` (``postgresql://user:password@host:port/db``)."""

    def __init__(self, url: str, *, redactor: Redactor | None = None, pool_size: int = 4) -> None:
        _require_psycopg()
        super().__init__(redactor=redactor)
        if pool_size < 1:
            raise UsageError(f"pool_size must be at least 1, not {pool_size}")
        self.url = url
        self._pool = _Pool(url, pool_size)
        self._ready = False
        self._opening: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({Redactor().redact_text(self.url)!r})"

    def _clean(self, text: str) -> str:
        """Summary text: redacted, and without NUL, which a PostgreSQL text column cannot hold."""
        return self.redactor.redact_text(text).replace("\x00", "\ufffd")

    async def _ensure_open(self) -> None:
        self._check_open()
        if self._ready:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if not self._ready:
                async with self._pool.connection() as conn:
                    await _migrate(conn)
                self._ready = True

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        await self._ensure_open()
        async with self._pool.connection() as conn:
            yield conn

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        from psycopg import errors

        check_run_id(run_id)
        encoded = encode_events(events, self.redactor)
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    cur = await conn.execute(_SELECT_STATE + " FOR UPDATE", (run_id,))
                    row = await cur.fetchone()
                    previous = None if row is None else state_from_row(run_id, row)
                    current = 0 if previous is None else previous.summary.events
                    if current != expected_seq:
                        raise AppendConflict(run_id, expected_seq, current)
                    if not events:
                        return current
                    state = summarize(run_id, events, previous=previous, first_seq=current + 1, clean=self._clean)
                    values = summary_row(state)
                    if row is None:
                        await conn.execute(_INSERT_RUN, (run_id, *values))
                    else:
                        await conn.execute(_UPDATE_RUN, (*values, run_id))
                    async with conn.cursor() as cur:
                        await cur.executemany(
                            _INSERT_EVENT,
                            [(run_id, current + i, e.kind, e.at, e.data) for i, e in enumerate(encoded, start=1)],
                        )
                    return state.summary.events
            except (errors.UniqueViolation, errors.LockNotAvailable):
                raise AppendConflict(run_id, expected_seq, await _last_seq(conn, run_id)) from None

    async def read(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT seq, data FROM planexec_events WHERE run_id = %s AND seq > %s ORDER BY seq", (run_id, after)
            )
            rows = await cur.fetchall()
        return [StoredEvent(seq=seq, event=decode_event(data)) for seq, data in rows]

    async def last_seq(self, run_id: str) -> int:
        async with self._connection() as conn:
            return await _last_seq(conn, run_id)

    async def get_run(self, run_id: str) -> RunSummary | None:
        async with self._connection() as conn:
            cur = await conn.execute(_SELECT_STATE, (run_id,))
            row = await cur.fetchone()
        return None if row is None else state_from_row(run_id, row).summary

    async def list_runs(
        self, *, status: RunStatus | None = None, started_after: float | None = None, limit: int = 100
    ) -> list[RunSummary]:
        check_list_args(status, limit)
        sql, params = list_runs_sql("%s", status, started_after, limit)
        async with self._connection() as conn:
            cur = await conn.execute(sql, params)
            rows = await cur.fetchall()
        return [state_from_row(row[0], row[1:]).summary for row in rows]

    async def delete(self, run_id: str) -> bool:
        async with self._connection() as conn:
            cur = await conn.execute("DELETE FROM planexec_runs WHERE run_id = %s RETURNING run_id", (run_id,))
            return await cur.fetchone() is not None

    async def expire(self, *, older_than: float) -> list[str]:
        async with self._connection() as conn:
            cur = await conn.execute("DELETE FROM planexec_runs WHERE updated_at < %s RETURNING run_id", (older_than,))
            return [row[0] for row in await cur.fetchall()]

    async def close(self) -> None:
        if self._closed:
            return
        await super().close()
        await self._pool.close()


async def _last_seq(conn: AsyncConnection[Any], run_id: str) -> int:
    cur = await conn.execute("SELECT last_seq FROM planexec_runs WHERE run_id = %s", (run_id,))
    row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def _migrate(conn: AsyncConnection[Any]) -> None:
    """Create the tables, or bring them up to :data:`SCHEMA_VERSION`, in one transaction."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS planexec_schema "
            "(component text PRIMARY KEY, version integer NOT NULL, updated_at double precision NOT NULL)"
        )
        cur = await conn.execute("SELECT version FROM planexec_schema WHERE component = 'store'")
        row = await cur.fetchone()
        version = 0 if row is None else int(row[0])
        check_schema_version(version, SCHEMA_VERSION)
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                await conn.execute(statement)
        if version < SCHEMA_VERSION:
            await conn.execute(
                "INSERT INTO planexec_schema (component, version, updated_at) VALUES ('store', %s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at",
                (SCHEMA_VERSION, time.time()),
            )


class _Pool:
    """At most ``size`` connections, opened on demand and reused; broken ones are dropped."""

    def __init__(self, url: str, size: int) -> None:
        self._url = url
        self._slots = asyncio.Semaphore(size)
        self._idle: list[AsyncConnection[Any]] = []
        self._closed = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[Any]]:
        import psycopg

        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                yield conn
            finally:
                idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                if self._closed or conn.closed or conn.broken or not idle:
                    await conn.close()
                else:
                    self._idle.append(conn)

    async def _connect(self) -> AsyncConnection[Any]:
        import psycopg

        if self._closed:
            raise UsageError("this PostgresStore is closed; open a new one")
        return await psycopg.AsyncConnection.connect(self._url, autocommit=True)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
