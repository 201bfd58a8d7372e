"""SQLiteStore: run logs in one SQLite file (WAL mode, no server), the default store.

Several stores, threads and processes may share a file. Every append is one ``BEGIN IMMEDIATE``
transaction that checks the run's last sequence number, inserts the batch and updates the run's
summary row, so exactly one of two appends after the same number wins; ``(run, seq)`` is also a
unique key. Each read is one statement, so a reader sees whole batches and never a gap.

Each event row holds its ``link`` and ``hash`` in the run's chain and the run's row the chain's
``chain_head`` (32-byte BLOBs): an append reads the head with the summary row it locks anyway, so
the chain costs one SHA-256 per event and no extra statement. A run written before the store kept
a chain (store schema 2) has NULL there; the first append after the upgrade hashes its stored
events once, and the chain begins with that append.

How the work is split between the event loop and a thread: a commit in WAL mode with
``synchronous=NORMAL`` writes to the WAL without syncing, which takes microseconds — less than
handing the work to a thread. So appends and point reads (``last_seq``, ``get_run``) run directly
on the event loop on a connection that never waits for a lock; when the file is locked by another
connection (another store, thread or process) the call moves to the store's own worker thread,
whose connection waits up to ``busy_timeout`` seconds. So does a follower's read of a log's tail
(at most 64 events after a given one). Reading whole logs, listing, deleting, expiring and
checkpointing the WAL always run in the worker thread. With ``synchronous="full"`` (each commit
synced to disk, surviving power loss) every call runs in the worker thread.

A cancelled append may still have been committed by the worker thread: read the log to find out.

Timeouts: a call that finds the file locked by another connection waits up to ``busy_timeout``
seconds (default 30) for the lock, then fails with :class:`~planexec.StoreError`. SQLite has no
other wait: it never blocks on a network.

Errors: every failure of SQLite or of the file system becomes :class:`~planexec.StoreError`, whose
message names the file and says what went wrong (with SQLite's own error and code), for example
a folder that does not exist or cannot be written, a file that is not a database or is read-only,
a damaged page, a full disk, or a lock held for longer than ``busy_timeout``. ``read`` raises
:class:`~planexec.LogUnreadable` (a ``StoreError``) when some of a log's events cannot be read,
with the others; a damaged summary row is a ``StoreError``. :class:`AppendConflict` and
:class:`~planexec.UsageError` (a closed store, bad arguments, a database written by a newer
planexec) keep their meaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from planexec.errors import UsageError
from planexec.log import Event
from planexec.store._base import AppendConflict, RunStatus, RunSummary, StoredEvent
from planexec.store._chain import RawLog, chain_hashes, genesis, raw_events, stored_head, unchained_head
from planexec.store._codec import EncodedEvent, decode_log, encode_events
from planexec.store._common import StoreBase, check_list_args, check_run_id, check_schema_version, list_runs_sql
from planexec.store._failures import Damaged, describe, store_failure
from planexec.store._plan_memory import SQLitePlanMemory
from planexec.store._redact import Redactor
from planexec.store._summary import SUMMARY_COLUMNS, state_from_row, summarize, summary_row

__all__ = ["SQLiteStore"]

T = TypeVar("T")

SCHEMA_VERSION = 3
"""Store schema changelog (one line per version; each version adds a migration below):
    1: planexec_schema, planexec_runs (one summary row per run), planexec_events (the logs).
    2: planexec_runs.session_id and .turn (the session a run is a turn of), indexed.
    3: the hash chain: planexec_events.link and .hash, planexec_runs.chain_head (32-byte BLOBs;
       NULL for events written before, where the chain begins later: see planexec.store._chain).
"""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE planexec_runs (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL UNIQUE,
            goal TEXT NOT NULL,
            status TEXT NOT NULL,
            stop_kind TEXT,
            stop_detail TEXT,
            cost REAL NOT NULL,
            model_calls INTEGER NOT NULL,
            started_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            finished_at REAL,
            last_seq INTEGER NOT NULL,
            pending_approvals INTEGER NOT NULL,
            pending TEXT NOT NULL,
            suspended INTEGER NOT NULL
        )""",
        "CREATE INDEX planexec_runs_started ON planexec_runs (started_at DESC, run_id DESC)",
        """CREATE TABLE planexec_events (
            run INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            at REAL NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run, seq)
        )""",
    ),
    2: (
        "ALTER TABLE planexec_runs ADD COLUMN session_id TEXT",
        "ALTER TABLE planexec_runs ADD COLUMN turn INTEGER",
        "CREATE INDEX planexec_runs_session ON planexec_runs (session_id, turn)",
    ),
    3: (
        "ALTER TABLE planexec_events ADD COLUMN link BLOB",
        "ALTER TABLE planexec_events ADD COLUMN hash BLOB",
        "ALTER TABLE planexec_runs ADD COLUMN chain_head BLOB",
    ),
}

_COLUMNS = ", ".join(SUMMARY_COLUMNS)
_SELECT_STATE = f"SELECT id, chain_head, {_COLUMNS} FROM planexec_runs WHERE run_id = ?"
_INSERT_RUN = (
    f"INSERT INTO planexec_runs (run_id, chain_head, {_COLUMNS}) VALUES (?, ?, {', '.join('?' * len(SUMMARY_COLUMNS))})"
)
_INSERT_EVENT = "INSERT INTO planexec_events (run, seq, kind, at, data, link, hash) VALUES (?, ?, ?, ?, ?, ?, ?)"
_READ = (  # as bytes: text that is not UTF-8 is then one unreadable event, not a failed read
    "SELECT seq, CAST(data AS BLOB), hash FROM planexec_events "
    "WHERE run = (SELECT id FROM planexec_runs WHERE run_id = ?) AND seq > ? ORDER BY seq"
)
_READ_RAW = (  # one statement: the summary and the rows are one snapshot
    "SELECT r.last_seq, r.chain_head, e.seq, CAST(e.data AS BLOB), e.link, e.hash FROM planexec_runs r "
    "LEFT JOIN planexec_events e ON e.run = r.id WHERE r.run_id = ? ORDER BY e.seq"
)
_UNCHAINED = "SELECT CAST(data AS BLOB) FROM planexec_events WHERE run = ? ORDER BY seq"
_INLINE_TAIL = 64
"""A read of at most this many new events after a given one (a follower's) runs on the event loop
when the file is free: a few indexed rows, cheaper than a trip through the worker thread, where it
would queue behind every other follower's read."""
_CHECKPOINT_EVERY = 1000
"""Appends made on the event loop between two WAL checkpoints (run in the worker thread)."""
WAL_LIMIT = 16 * 1_048_576
"""The size past which the WAL is truncated. SQLite cuts the file back to it whenever the WAL
restarts (``journal_size_limit``). A passive checkpoint cannot restart it while some reader still
uses it, so under a steady stream of readers (a server following many runs) the file would only
grow: a checkpoint that finds it larger tries to truncate it without waiting (the store's own reads
and writes queue behind a checkpoint, so a wait would stall them); only past
``_WAITED_TRUNCATE_FACTOR`` times the limit does it wait, a second at most, for a moment with no
reader."""
_WAITED_TRUNCATE_FACTOR = 8
_TRUNCATE_WAIT_MS = 1_000


def _wal_size(path: Path) -> int:
    try:
        return os.path.getsize(f"{path}-wal")
    except OSError:
        return 0


def _busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in str(error)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class SQLiteStore(StoreBase):
    """Run logs in the SQLite file at ``path`` (created, with its tables, on first use)."""

    _FOLLOW_POLL = 0.25  # another process may append to the same file: it is not heard

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        redactor: Redactor | None = None,
        busy_timeout: float = 30.0,
        synchronous: Literal["normal", "full"] = "normal",
        wal_limit: int = WAL_LIMIT,
    ) -> None:
        super().__init__(redactor=redactor)
        if synchronous not in ("normal", "full"):
            raise UsageError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = Path(path)
        self._name = f"SQLite store {str(self.path)!r}"
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        if isinstance(wal_limit, bool) or not isinstance(wal_limit, int) or wal_limit < 0:
            raise UsageError(f"wal_limit must be a whole number of bytes >= 0, not {wal_limit!r}")
        self.wal_limit = wal_limit
        """Past this size (bytes) the WAL is truncated at the next checkpoint (every 1,000 appends)."""
        self._inline = synchronous == "normal"
        self._loop_conn: sqlite3.Connection | None = None
        """Used on the event loop; never waits for a lock."""
        self._worker_conn: sqlite3.Connection | None = None
        """Used only in the worker thread; waits up to ``busy_timeout`` for a lock."""
        self._worker: ThreadPoolExecutor | None = None
        self._ready = False
        self._opening: asyncio.Lock | None = None
        self._since_checkpoint = 0
        self._checkpoint: Future[None] | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    @property
    def durable(self) -> bool:
        return True

    def plan_memory(self) -> SQLitePlanMemory:
        """The entries in this store's file, over a connection of their own (same ``busy_timeout``)."""
        return SQLitePlanMemory(self.path, busy_timeout=self.busy_timeout)

    # -- connections ------------------------------------------------------------------------

    def _connect(self, timeout: float) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            conn.execute(f"PRAGMA journal_size_limit = {min(self.wal_limit, 2**62)}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_in_worker(self) -> None:
        if self._worker_conn is not None:
            return
        conn = self._connect(self.busy_timeout)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            _migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._worker_conn = conn

    async def _ensure_open(self) -> None:
        self._check_open()
        if self._ready:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            self._check_open()
            if self._ready:
                return
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planexec-sqlite")
            await asyncio.get_running_loop().run_in_executor(self._worker, self._open_in_worker)
            if self._inline and self._loop_conn is None:
                conn = self._connect(0)
                try:
                    conn.execute("PRAGMA wal_autocheckpoint = 0")
                except BaseException:
                    conn.close()
                    raise
                self._loop_conn = conn
            self._ready = True

    async def _in_worker(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` with the worker's connection in the worker thread."""
        await self._ensure_open()
        worker = self._worker
        if worker is None:
            raise UsageError(f"this {type(self).__name__} is closed; open a new one")

        def call() -> T:
            conn = self._worker_conn
            if conn is None:
                raise UsageError(f"this {type(self).__name__} is closed; open a new one")
            return fn(conn)

        return await asyncio.get_running_loop().run_in_executor(worker, call)

    async def _on_loop_or_worker(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the event loop when the file is free, else in the worker thread."""
        await self._ensure_open()
        if self._loop_conn is not None:
            try:
                return fn(self._loop_conn)
            except sqlite3.OperationalError as e:
                if not _busy(e):
                    raise
        return await self._in_worker(fn)

    # -- the store interface ----------------------------------------------------------------

    async def _run(self, doing: str, fn: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Open the store if needed and run ``fn``: on the event loop when ``inline`` and the file is
        free, else in the worker thread. Every failure of SQLite or the file system becomes a
        :class:`~planexec.StoreError` that says what the store was ``doing``."""
        self._check_open()
        try:
            await self._ensure_open()
            return await (self._on_loop_or_worker(fn) if inline else self._in_worker(fn))
        except (sqlite3.Error, OSError, Damaged) as e:
            raise self._failure(doing, e) from None

    def _failure(self, doing: str, error: BaseException) -> Exception:
        what = str(error) if isinstance(error, Damaged) else describe(error)
        if isinstance(error, sqlite3.OperationalError) and _busy(error):
            what += f"; another connection held the file's lock for longer than busy_timeout={self.busy_timeout:g} s"
        return store_failure(self._name, doing, what)

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        self._check_open()
        check_run_id(run_id)
        encoded = encode_events(events, self.redactor, store=self._name)

        def write(conn: sqlite3.Connection) -> int:
            return self._append(conn, run_id, events, encoded, expected_seq)

        last = await self._run(f"append to run {run_id!r}", write, inline=True)
        self._after_write()
        if events:
            self._stored(run_id, last, events, encoded)
        return last

    def _append(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        events: Sequence[Event],
        encoded: list[EncodedEvent],
        expected_seq: int,
    ) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(_SELECT_STATE, (run_id,)).fetchone()
            previous = None if row is None else state_from_row(run_id, row[2:])
            current = 0 if previous is None else previous.summary.events
            if current != expected_seq:
                raise AppendConflict(run_id, expected_seq, current)
            if not events:
                conn.execute("ROLLBACK")
                return current
            state = summarize(run_id, events, previous=previous, first_seq=current + 1, clean=self.redactor.redact_text)
            values = summary_row(state)
            head = genesis(run_id) if row is None else stored_head(row[1])
            if head is None:  # written before the store kept a chain (it begins here), or damaged
                head = unchained_head(run_id, (bytes(r[0]) for r in conn.execute(_UNCHAINED, (row[0],))))
            hashes = chain_hashes(head, (e.data.encode() for e in encoded))
            new_head = hashes[-1][1]
            if row is None:
                key = conn.execute(_INSERT_RUN, (run_id, new_head, *values)).lastrowid
            else:
                key = row[0]
                _update_run(conn, key, row[2:], values, new_head)
            conn.executemany(
                _INSERT_EVENT,
                [
                    (key, current + i, e.kind, e.at, e.data, link, own)
                    for i, (e, (link, own)) in enumerate(zip(encoded, hashes, strict=True), start=1)
                ],
            )
            conn.execute("COMMIT")
            return state.summary.events
        except sqlite3.IntegrityError:
            _rollback(conn)
            raise AppendConflict(run_id, expected_seq, _last_seq(conn, run_id)) from None
        except BaseException:
            _rollback(conn)
            raise

    def _after_write(self) -> None:
        """Checkpoint the WAL in the worker thread now and then, so the event loop never does."""
        if self._loop_conn is None or self._worker is None:
            return
        self._since_checkpoint += 1
        if self._since_checkpoint < _CHECKPOINT_EVERY or (self._checkpoint is not None and not self._checkpoint.done()):
            return
        self._since_checkpoint = 0
        self._checkpoint = self._worker.submit(self._checkpoint_in_worker)

    def _checkpoint_in_worker(self) -> None:
        conn = self._worker_conn
        if conn is None:
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            size = _wal_size(self.path)
            if size <= self.wal_limit:
                return
            waited = size > self.wal_limit * _WAITED_TRUNCATE_FACTOR
            conn.execute(f"PRAGMA busy_timeout = {_TRUNCATE_WAIT_MS if waited else 0}")
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        except sqlite3.Error:
            return  # best effort: the next checkpoint catches up

    async def read(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            last = _last_seq(conn, run_id)  # first: an append made meanwhile adds rows, never a false gap
            return decode_log(run_id, conn.execute(_READ, (run_id, after)).fetchall(), after=after, last=last)

        tail = after > 0 and self._inline and await self.last_seq(run_id) - after <= _INLINE_TAIL
        return await self._run(f"read run {run_id!r}", read, inline=tail)

    async def read_raw(self, run_id: str) -> RawLog:
        def read(conn: sqlite3.Connection) -> RawLog:
            rows = conn.execute(_READ_RAW, (run_id,)).fetchall()
            if not rows:
                return RawLog(run_id=run_id, events=(), last_seq=0, head=None)
            last, head = int(rows[0][0]), rows[0][1]
            events = raw_events([r[2:] for r in rows if r[2] is not None])
            return RawLog(run_id=run_id, events=events, last_seq=last, head=None if head is None else bytes(head))

        return await self._run(f"read the stored log of run {run_id!r}", read)

    async def last_seq(self, run_id: str) -> int:
        return await self._run(f"read the last seq of run {run_id!r}", lambda c: _last_seq(c, run_id), inline=True)

    async def get_run(self, run_id: str) -> RunSummary | None:
        def get(conn: sqlite3.Connection) -> RunSummary | None:
            row = conn.execute(_SELECT_STATE, (run_id,)).fetchone()
            return None if row is None else state_from_row(run_id, row[2:]).summary

        return await self._run(f"read the summary of run {run_id!r}", get, inline=True)

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        started_after: float | None = None,
        limit: int = 100,
        session: str | None = None,
    ) -> list[RunSummary]:
        check_list_args(status, limit, session)
        sql, params = list_runs_sql("?", status, started_after, limit, session)

        def select(conn: sqlite3.Connection) -> list[RunSummary]:
            rows = conn.execute(sql, params).fetchall()
            return [state_from_row(row[0], row[1:]).summary for row in rows]

        return await self._run("list runs", select)

    async def delete(self, run_id: str) -> bool:
        return bool(await self._run(f"delete run {run_id!r}", lambda conn: _delete(conn, "run_id = ?", run_id)))

    async def expire(self, *, older_than: float) -> list[str]:
        return await self._run("expire runs", lambda conn: _delete(conn, "updated_at < ?", older_than))

    async def close(self) -> None:
        if self._closed:
            return
        await super().close()
        worker = self._worker
        if worker is None:
            return
        # The worker runs one call at a time, in order: a checkpoint under way finishes first.
        try:
            await asyncio.get_running_loop().run_in_executor(worker, self._close_in_worker)
        finally:
            worker.shutdown(wait=True)
            self._worker = None

    def _close_in_worker(self) -> None:
        conns, self._loop_conn, self._worker_conn = (self._loop_conn, self._worker_conn), None, None
        for conn in conns:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):  # closing cannot fail in a way a caller could act on
                    conn.close()


def _update_run(conn: sqlite3.Connection, key: int, old: Sequence[Any], new: Sequence[Any], head: bytes) -> None:
    """Set the chain's head and only the summary columns that changed, so that an index whose
    columns did not change (``started_at``, ``status``) is not rewritten: fewer pages per commit."""
    changed = [
        (column, value) for column, before, value in zip(SUMMARY_COLUMNS, old, new, strict=True) if before != value
    ]
    changed.append(("chain_head", head))
    assignments = ", ".join(f"{column} = ?" for column, _ in changed)
    conn.execute(f"UPDATE planexec_runs SET {assignments} WHERE id = ?", (*(v for _, v in changed), key))


def _last_seq(conn: sqlite3.Connection, run_id: str) -> int:
    row = conn.execute("SELECT last_seq FROM planexec_runs WHERE run_id = ?", (run_id,)).fetchone()
    return 0 if row is None else int(row[0])


def _delete(conn: sqlite3.Connection, condition: str, value: Any) -> list[str]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = conn.execute(f"SELECT id, run_id FROM planexec_runs WHERE {condition}", (value,)).fetchall()
        conn.executemany("DELETE FROM planexec_events WHERE run = ?", [(key,) for key, _ in rows])
        conn.executemany("DELETE FROM planexec_runs WHERE id = ?", [(key,) for key, _ in rows])
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return [run_id for _, run_id in rows]


def _migrate(conn: sqlite3.Connection) -> None:
    """Create the tables, or bring them up to :data:`SCHEMA_VERSION`, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS planexec_schema "
            "(component TEXT PRIMARY KEY, version INTEGER NOT NULL, updated_at REAL NOT NULL)"
        )
        row = conn.execute("SELECT version FROM planexec_schema WHERE component = 'store'").fetchone()
        version = 0 if row is None else int(row[0])
        check_schema_version(version, SCHEMA_VERSION)
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                conn.execute(statement)
        if version < SCHEMA_VERSION:
            conn.execute(
                "INSERT INTO planexec_schema (component, version, updated_at) VALUES ('store', ?, ?) "
                "ON CONFLICT (component) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at",
                (SCHEMA_VERSION, time.time()),
            )
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
