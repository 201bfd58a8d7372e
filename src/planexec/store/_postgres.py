"""PostgresStore: run logs in PostgreSQL, for teams and many machines (the ``postgres`` extra).

Uses psycopg 3's asyncio connections, a few at a time from a small pool. An append is one
transaction: it locks the run's summary row (``SELECT … FOR UPDATE``), checks the last sequence
number, inserts the batch and updates the summary. A second writer waits for the first one's
commit and then sees the new number, so it gets :class:`AppendConflict`; two writers creating the
same run collide on the primary key, and the loser gets :class:`AppendConflict` too. Each read is
one statement, so a reader sees whole batches and never a gap.

Tables are created on first use, under an advisory lock so several processes can start at once;
the URL's ``options=-csearch_path=…`` puts them in another schema. Events are stored as JSON text
(not ``jsonb``, which cannot hold NUL characters or lone surrogates in strings, and reorders keys);
cast ``data::jsonb`` to query inside them. A value JSON cannot represent (NaN, Infinity) is refused
before anything is written. Each event row holds its ``link`` and ``hash`` in the run's chain and
the run's row the chain's ``chain_head`` (``bytea``), read and written with the summary row the
append locks anyway; rows written before store schema 4 have NULL there, and the first append
after the upgrade begins the chain (see :mod:`planexec.store._chain`).

Timeouts — no call waits on the server without a limit:
    connect_timeout     default 10 s, or the URL's ``?connect_timeout=5`` (decimals allowed; libpq
                        itself is given whole seconds, at least 2). The longest a call waits
                        for a new connection: TCP, TLS, authentication. A server that accepts the
                        connection and never answers fails here.
    statement_timeout   default 30 s, or the URL's ``?options=-c%20statement_timeout%3D5s``. The
                        longest a call's statements may take, together, once it has a connection
                        (creating the tables on first use included). Each connection also sets it
                        as the server's ``statement_timeout``, so the server itself cancels a
                        statement that waits too long, for example on a lock held by another
                        session.
A call therefore fails within ``connect_timeout + statement_timeout`` in all, waiting for a free
pooled connection included. Arguments to :class:`PostgresStore` win over the URL. When a call's time
runs out, or its caller cancels it, its connection is cut and dropped at once, without waiting for
the server to acknowledge a cancel request (an unresponsive server never would); a statement still
running on the server ends at the server's ``statement_timeout`` — or completes, if what held it
goes away first: a call that timed out may still have taken effect (an append that did is seen as
an ``AppendConflict`` by the next one, which reads what is there).

Errors: every failure of the server, the network or psycopg becomes :class:`~planexec.StoreError`,
whose message names the store by its URL with the password hidden and says what went wrong (a
timeout says which one; a database error keeps its SQLSTATE). The password never appears in an
error, a repr or a message passed on from psycopg, whether written plainly or percent-encoded.
``read`` raises :class:`~planexec.LogUnreadable` (a ``StoreError``) when some of a log's events
cannot be read, with the others. :class:`AppendConflict` and :class:`~planexec.UsageError` (a closed
store, bad arguments, a malformed URL, a database written by a newer planexec) keep their meaning.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from planexec._util.extras import install_hint
from planexec.errors import UsageError
from planexec.log import Event
from planexec.store._base import AppendConflict, RunStatus, RunSummary, StoredEvent
from planexec.store._chain import RawLog, chain_hashes, genesis, raw_events, stored_head, unchained_head
from planexec.store._codec import decode_log, encode_events
from planexec.store._common import StoreBase, check_list_args, check_run_id, check_schema_version, list_runs_sql
from planexec.store._failures import Damaged, Secrets, describe, store_failure
from planexec.store._pgconn import Pool, TimedOut, guarded, seconds, statement_timeout_of, url_seconds
from planexec.store._plan_memory import PostgresPlanMemory
from planexec.store._queue import RunQueue
from planexec.store._redact import Redactor
from planexec.store._summary import SUMMARY_COLUMNS, state_from_row, summarize, summary_row

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_STATEMENT_TIMEOUT", "NOTIFY_CHANNEL", "PostgresStore"]

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds a call may wait for a new connection, unless the store or its URL says otherwise."""
DEFAULT_STATEMENT_TIMEOUT = 30.0
"""Seconds a call's statements may take together, unless the store or its URL says otherwise."""

INSTALL_HINT = install_hint("postgres")

SCHEMA_VERSION = 5
"""Store schema changelog (one line per version; each version adds a migration below):
    1: planexec_schema, planexec_runs (one summary row per run), planexec_events (the logs).
    2: planexec_runs.session_id and .turn (the session a run is a turn of), indexed.
    3: planexec_queue: runs submitted for workers, and the lease each one is held under
       (see :mod:`planexec.store._queue`).
    4: the hash chain: planexec_events.link and .hash, planexec_runs.chain_head (32-byte bytea;
       NULL for events written before, where the chain begins later: see planexec.store._chain).
    5: planexec_queue.told: what a submitted run was told before it began (a JSON list), heard
       when a worker begins it.
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
    2: (
        "ALTER TABLE planexec_runs ADD COLUMN session_id text",
        "ALTER TABLE planexec_runs ADD COLUMN turn integer",
        "CREATE INDEX planexec_runs_session ON planexec_runs (session_id, turn)",
    ),
    3: (
        """CREATE TABLE planexec_queue (
            run_id text PRIMARY KEY,
            state text NOT NULL,
            goal text NOT NULL,
            constraints text NOT NULL,
            spec text NOT NULL,
            owner text,
            lease integer NOT NULL,
            expires_at double precision,
            claims integer NOT NULL,
            submitted_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            note text
        )""",
        "CREATE INDEX planexec_queue_ready ON planexec_queue (submitted_at, run_id) WHERE state <> 'done'",
    ),
    4: (
        "ALTER TABLE planexec_events ADD COLUMN link bytea, ADD COLUMN hash bytea",
        "ALTER TABLE planexec_runs ADD COLUMN chain_head bytea",
    ),
    5: ("ALTER TABLE planexec_queue ADD COLUMN told text NOT NULL DEFAULT '[]'",),
}

_MIGRATION_LOCK = 0x706C616E65786563  # "planexec": one advisory lock key for schema changes

_COLUMNS = ", ".join(SUMMARY_COLUMNS)
_SELECT_STATE = f"SELECT chain_head, {_COLUMNS} FROM planexec_runs WHERE run_id = %s"
_INSERT_RUN = (
    f"INSERT INTO planexec_runs (run_id, chain_head, {_COLUMNS}) "
    f"VALUES (%s, %s, {', '.join(['%s'] * len(SUMMARY_COLUMNS))})"
)
_UPDATE_RUN = (
    f"UPDATE planexec_runs SET chain_head = %s, {', '.join(f'{c} = %s' for c in SUMMARY_COLUMNS)} WHERE run_id = %s"
)
NOTIFY_CHANNEL = "planexec_appends"
"""The channel an append notifies (payload: the run's id) when it commits; a store waiting for
events listens on it."""
_INSERT_EVENT = (
    "INSERT INTO planexec_events (run_id, seq, kind, at, data, link, hash) VALUES (%s, %s, %s, %s, %s, %s, %s)"
)
_UNCHAINED = "SELECT data FROM planexec_events WHERE run_id = %s ORDER BY seq"
_READ_RAW = (  # one statement: the summary and the rows are one snapshot
    "SELECT r.last_seq, r.chain_head, e.seq, e.data, e.link, e.hash FROM planexec_runs r "
    "LEFT JOIN planexec_events e ON e.run_id = r.run_id WHERE r.run_id = %s ORDER BY e.seq"
)


def _require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise UsageError(f"PostgresStore needs psycopg 3, which is not installed: {INSTALL_HINT}") from e


class PostgresStore(StoreBase):
    """Run logs in the PostgreSQL database at ``url`` (``postgresql://user:password@host:port/db``).

    ``connect_timeout`` and ``statement_timeout`` (seconds) bound every call: see the module's
    documentation. Left out, they come from the URL, else 10 and 30 seconds.
    """

    _FOLLOW_POLL = 1.0  # while the LISTEN connection is down (or a pooler drops notifications)

    def __init__(
        self,
        url: str,
        *,
        redactor: Redactor | None = None,
        pool_size: int = 4,
        connect_timeout: float | None = None,
        statement_timeout: float | None = None,
    ) -> None:
        _require_psycopg()
        from psycopg import Error
        from psycopg.conninfo import conninfo_to_dict

        super().__init__(redactor=redactor)
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise UsageError(f"pool_size must be an int of at least 1, not {pool_size!r}")
        self.url = url
        """The URL as given, password included: show :func:`repr` of the store instead."""
        self._secrets = Secrets(url)
        shown = self._secrets.show_url(url)
        self._name = f"PostgreSQL store {shown!r}"
        try:
            params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
        except Error as e:
            raise UsageError(self._secrets.hide(f"invalid PostgreSQL store URL {shown!r}: {describe(e)}")) from None
        self.connect_timeout: float = (
            seconds("connect_timeout", connect_timeout)
            if connect_timeout is not None
            else url_seconds(params, shown) or DEFAULT_CONNECT_TIMEOUT
        )
        """Seconds a call may wait for a new connection."""
        self.statement_timeout: float = (
            seconds("statement_timeout", statement_timeout)
            if statement_timeout is not None
            else statement_timeout_of(params, shown) or DEFAULT_STATEMENT_TIMEOUT
        )
        """Seconds a call's statements may take together; also each connection's server-side limit."""
        self._server_timeout = f"{max(1, round(self.statement_timeout * 1000))}ms"
        self._pool = Pool(url, pool_size, self.connect_timeout)
        self._configured: weakref.WeakSet[AsyncConnection[Any]] = weakref.WeakSet()
        """Connections whose server-side statement_timeout is set."""
        self._ready = False
        self._opening: asyncio.Lock | None = None
        self._listener: asyncio.Task[None] | None = None
        """Hears other processes' appends while someone waits for events (started on the first wait)."""

    def __repr__(self) -> str:
        return f"PostgresStore({self._secrets.show_url(self.url)!r})"

    @property
    def durable(self) -> bool:
        return True

    def queue(self) -> RunQueue:
        return RunQueue(self)

    def plan_memory(self) -> PostgresPlanMemory:
        """The entries in this store's database, over a connection of their own (same timeouts)."""
        return PostgresPlanMemory(
            self.url,
            shown=self._secrets.show_url(self.url),
            connect_timeout=self.connect_timeout,
            statement_timeout=self.statement_timeout,
        )

    def _clean(self, text: str) -> str:
        """Summary text, redacted (the summary makes it storable in a text column)."""
        return self.redactor.redact_text(text)

    # -- one call: a connection, its set-up, the work, all within the timeouts ----------------------

    async def call(self, doing: str, work: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection within the store's timeouts. Every failure of the
        server, the network or psycopg becomes a :class:`~planexec.StoreError` saying ``doing``.
        The store's own methods and its workers' queue (:class:`~planexec.store.RunQueue`) call
        the database through it."""
        import psycopg

        self._check_open()
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.connect_timeout + self.statement_timeout
        limit = f"statement_timeout={self.statement_timeout:g} s"

        try:
            async with self._pool.connection(self.connect_timeout, give_up_at) as conn:
                deadline = min(loop.time() + self.statement_timeout, give_up_at)

                async def prepared(conn: AsyncConnection[Any]) -> T:
                    await self._prepare(conn, deadline, limit)
                    return await work(conn)

                return await guarded(conn, deadline, prepared, limit)
        except TimedOut as e:
            raise self._failure(doing, str(e)) from None
        except psycopg.errors.QueryCanceled as e:
            raise self._failure(doing, f"the server cancelled a statement ({limit}): {describe(e)}") from None
        except (psycopg.Error, OSError, Damaged) as e:
            raise self._failure(doing, str(e) if isinstance(e, Damaged) else describe(e)) from None

    async def _prepare(self, conn: AsyncConnection[Any], deadline: float, limit: str) -> None:
        """Set a new connection's server-side statement_timeout; create the tables on first use."""
        if conn not in self._configured:
            await conn.execute("SELECT set_config('statement_timeout', %s, false)", (self._server_timeout,))
            self._configured.add(conn)
        if self._ready:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        waiting = asyncio.timeout_at(deadline)
        try:
            async with waiting:
                await self._opening.acquire()
        except TimeoutError:
            if not waiting.expired():
                raise
            raise TimedOut(f"another call was still creating the tables after {limit}") from None
        try:
            if not self._ready:
                await _migrate(conn)
                self._ready = True
        finally:
            self._opening.release()

    def _failure(self, doing: str, what: str) -> Exception:
        return store_failure(self._name, doing, what, self._secrets)

    # -- the store interface ----------------------------------------------------------------------------

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        from psycopg import errors

        self._check_open()
        check_run_id(run_id)
        encoded = encode_events(events, self.redactor, store=self._name)

        async def write(conn: AsyncConnection[Any]) -> int:
            try:
                async with conn.transaction():
                    cur = await conn.execute(_SELECT_STATE + " FOR UPDATE", (run_id,))
                    row = await cur.fetchone()
                    previous = None if row is None else state_from_row(run_id, row[1:])
                    current = 0 if previous is None else previous.summary.events
                    if current != expected_seq:
                        raise AppendConflict(run_id, expected_seq, current)
                    if not events:
                        return current
                    state = summarize(run_id, events, previous=previous, first_seq=current + 1, clean=self._clean)
                    values = summary_row(state)
                    head = genesis(run_id) if row is None else stored_head(row[0])
                    if head is None:  # written before the store kept a chain (it begins here), or damaged
                        cur = await conn.execute(_UNCHAINED, (run_id,))
                        head = unchained_head(run_id, (r[0].encode() for r in await cur.fetchall()))
                    hashes = chain_hashes(head, (e.data.encode() for e in encoded))
                    new_head = hashes[-1][1]
                    if row is None:
                        await conn.execute(_INSERT_RUN, (run_id, new_head, *values))
                    else:
                        await conn.execute(_UPDATE_RUN, (new_head, *values, run_id))
                    async with conn.cursor() as cur:
                        await cur.executemany(
                            _INSERT_EVENT,
                            [
                                (run_id, current + i, e.kind, e.at, e.data, link, own)
                                for i, (e, (link, own)) in enumerate(zip(encoded, hashes, strict=True), start=1)
                            ],
                        )
                    await conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, run_id))  # sent on commit
                    return state.summary.events
            except (errors.UniqueViolation, errors.LockNotAvailable):
                raise AppendConflict(run_id, expected_seq, await _last_seq(conn, run_id)) from None

        last = await self.call(f"append to run {run_id!r}", write)
        if events:
            self._stored(run_id, last, events, encoded)
        return last

    def _hear_others(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen(), name="planexec-postgres-listen")

    async def _listen(self) -> None:
        """Hear other processes' appends (``LISTEN``): wake this process's waiters for each run
        named. A connection that fails is made again; meanwhile waiters read the store now and then."""
        import psycopg

        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=max(1, round(self.connect_timeout))
                )
            except (psycopg.Error, OSError):
                await asyncio.sleep(self._FOLLOW_POLL)
                continue
            try:
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                self._signals.appended_anywhere()  # what was stored before it listened is looked at
                async for note in conn.notifies():
                    self._signals.appended(note.payload)
            except (psycopg.Error, OSError):
                await asyncio.sleep(self._FOLLOW_POLL)
            finally:
                await conn.close()

    async def read(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        async def select(conn: AsyncConnection[Any]) -> tuple[int, list[tuple[int, str, bytes | None]]]:
            last = await _last_seq(conn, run_id)  # first: an append made meanwhile adds rows, never a false gap
            cur = await conn.execute(
                "SELECT seq, data, hash FROM planexec_events WHERE run_id = %s AND seq > %s ORDER BY seq",
                (run_id, after),
            )
            return last, await cur.fetchall()

        last, rows = await self.call(f"read run {run_id!r}", select)
        return decode_log(run_id, rows, after=after, last=last)

    async def read_raw(self, run_id: str) -> RawLog:
        async def select(conn: AsyncConnection[Any]) -> list[Any]:
            cur = await conn.execute(_READ_RAW, (run_id,))
            return await cur.fetchall()

        rows = await self.call(f"read the stored log of run {run_id!r}", select)
        if not rows:
            return RawLog(run_id=run_id, events=(), last_seq=0, head=None)
        last, head = int(rows[0][0]), rows[0][1]
        events = raw_events([r[2:] for r in rows if r[2] is not None])
        return RawLog(run_id=run_id, events=events, last_seq=last, head=None if head is None else bytes(head))

    async def last_seq(self, run_id: str) -> int:
        return await self.call(f"read the last seq of run {run_id!r}", lambda conn: _last_seq(conn, run_id))

    async def get_run(self, run_id: str) -> RunSummary | None:
        async def get(conn: AsyncConnection[Any]) -> RunSummary | None:
            cur = await conn.execute(_SELECT_STATE, (run_id,))
            row = await cur.fetchone()
            return None if row is None else state_from_row(run_id, row[1:]).summary

        return await self.call(f"read the summary of run {run_id!r}", get)

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        started_after: float | None = None,
        limit: int = 100,
        session: str | None = None,
    ) -> list[RunSummary]:
        check_list_args(status, limit, session)
        sql, params = list_runs_sql("%s", status, started_after, limit, session)

        async def select(conn: AsyncConnection[Any]) -> list[RunSummary]:
            cur = await conn.execute(sql, params)
            return [state_from_row(row[0], row[1:]).summary for row in await cur.fetchall()]

        return await self.call("list runs", select)

    async def delete(self, run_id: str) -> bool:
        async def delete(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute("DELETE FROM planexec_runs WHERE run_id = %s RETURNING run_id", (run_id,))
            deleted = await cur.fetchone() is not None
            await conn.execute("DELETE FROM planexec_queue WHERE run_id = %s AND state = 'done'", (run_id,))
            return deleted

        return await self.call(f"delete run {run_id!r}", delete)

    async def expire(self, *, older_than: float) -> list[str]:
        async def expire(conn: AsyncConnection[Any]) -> list[str]:
            cur = await conn.execute("DELETE FROM planexec_runs WHERE updated_at < %s RETURNING run_id", (older_than,))
            gone = [row[0] for row in await cur.fetchall()]
            await conn.execute("DELETE FROM planexec_queue WHERE state = 'done' AND updated_at < %s", (older_than,))
            return gone

        return await self.call("expire runs", expire)

    async def close(self) -> None:
        if self._closed:
            return
        await super().close()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
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
