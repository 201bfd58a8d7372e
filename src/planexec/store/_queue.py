"""RunQueue: runs submitted to workers, and the leases they are held under (PostgreSQL only).

One table, ``planexec_queue``, created with the store's own tables (store schema version 3), holds
a row per submitted run: its goal, constraints and agent spec (so that any worker can build the
agent), its state and, while a worker holds it, the lease:

    queued   waiting for a worker (submitted, drained by a stopping worker, or requeued)
    leased   held by ``owner`` until ``expires_at``; a lease that has expired may be claimed by
             another worker, which takes the run over from its log
    waiting  suspended for a human's answer: requeue it once answered
    done     finished (or failed for good); kept as a record until its run is deleted

Claiming is one statement: ``SELECT … FOR UPDATE SKIP LOCKED`` picks the oldest rows that are
queued or whose lease has expired, skipping the rows other workers are claiming at that moment,
and the same statement marks them leased to the claimer. Every claim adds one to the row's
``lease`` number, so a worker's renewal or release names the lease it holds and does nothing once
another worker has claimed the run (its lease is gone). Times come from the database server's
clock, so workers on machines whose clocks disagree still agree on when a lease expires.

A lease keeps two workers from running one run at once only while its holder renews it in time;
the run's log is the last line of defence: appends name the sequence number they follow, so a
worker that lost its lease without knowing it cannot write after the new holder's first event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from planexec.errors import Problem, UsageError
from planexec.store._common import check_run_id

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from planexec.store._postgres import PostgresStore

__all__ = ["Claim", "QueueEntry", "QueueState", "RunQueue", "Told"]

QueueState = Literal["queued", "leased", "waiting", "done"]

_NOW = "extract(epoch from clock_timestamp())::double precision"
"""The database server's clock, in epoch seconds: the one clock every worker shares."""

_CLAIM = f"""
WITH picked AS (
    SELECT run_id FROM planexec_queue
    WHERE state = 'queued' OR (state = 'leased' AND expires_at < {_NOW})
    ORDER BY submitted_at, run_id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
UPDATE planexec_queue AS q
SET state = 'leased', owner = %s, lease = q.lease + 1, claims = q.claims + 1,
    expires_at = {_NOW} + %s, updated_at = {_NOW}
FROM picked
WHERE q.run_id = picked.run_id
RETURNING q.run_id, q.lease, q.claims, q.goal, q.constraints, q.spec, q.told
"""

_ENTRY_COLUMNS = "run_id, state, owner, lease, claims, expires_at, submitted_at, updated_at, note"


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A run a worker has just claimed: ``lease`` names the lease it holds (renew and release with
    it); ``claims`` counts every claim of the run since it was submitted or given back after a
    human's answer, this one included (more than one: a take-over)."""

    run_id: str
    lease: int
    claims: int
    goal: str
    constraints: tuple[str, ...]
    spec: Mapping[str, Any]
    told: tuple[Told, ...] = ()
    """What the run was told before it began, in order: heard when it begins."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Told:
    """Something a submitted run was told before a worker began it."""

    text: str
    constraint: bool = False
    by: str = "user"


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueEntry:
    """A submitted run's row: its state, who holds it and until when (database clock)."""

    run_id: str
    state: QueueState
    owner: str | None
    lease: int
    claims: int
    expires_at: float | None
    submitted_at: float
    updated_at: float
    note: str | None


class RunQueue:
    """The queue of submitted runs in a :class:`~planexec.store.PostgresStore`'s database.

    Every call runs within the store's timeouts and fails with :class:`~planexec.StoreError` as
    the store's calls do.
    """

    def __init__(self, store: PostgresStore) -> None:
        from planexec.store._postgres import PostgresStore

        if not isinstance(store, PostgresStore):
            raise UsageError(
                "runs are queued for workers in PostgreSQL",
                [
                    Problem(
                        code="store",
                        where="store",
                        message=f"is a {type(store).__name__}: workers share runs through a PostgresStore "
                        "(postgresql://…)",
                    )
                ],
            )
        self.store = store

    def with_connections(self, size: int) -> RunQueue:
        """This queue over a new store on the same database — the same redactor and timeouts — with
        up to ``size`` connections at once (a worker's runs, its renewals and its claims). Close
        its ``store`` when done; this one's stays as it is."""
        from planexec.store._postgres import PostgresStore

        store = self.store
        return RunQueue(
            PostgresStore(
                store.url,
                redactor=store.redactor,
                pool_size=size,
                connect_timeout=store.connect_timeout,
                statement_timeout=store.statement_timeout,
            )
        )

    async def submit(
        self, run_id: str, *, goal: str, constraints: Sequence[str], spec: Mapping[str, Any], note: str | None = None
    ) -> bool:
        """Queue run ``run_id``; False (and nothing written) when a run by that id was queued or
        stored already."""
        check_run_id(run_id)
        values = (run_id, goal, json.dumps(list(constraints)), json.dumps(dict(spec)), note)

        async def insert(conn: AsyncConnection[Any]) -> bool:
            async with conn.transaction():
                cur = await conn.execute("SELECT 1 FROM planexec_runs WHERE run_id = %s", (run_id,))
                if await cur.fetchone() is not None:
                    return False
                cur = await conn.execute(
                    "INSERT INTO planexec_queue (run_id, state, goal, constraints, spec, lease, claims, "
                    f"submitted_at, updated_at, note) VALUES (%s, 'queued', %s, %s, %s, 0, 0, {_NOW}, {_NOW}, %s) "
                    "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
                    values,
                )
                return await cur.fetchone() is not None

        return await self.store.call(f"queue run {run_id!r}", insert)

    async def tell(self, run_id: str, told: Told) -> bool:
        """Keep ``told`` for a submitted run no worker has begun (queued, never claimed): the
        worker that begins it has it heard first. False when the run is not such a run (it has
        begun: tell its log instead)."""
        check_run_id(run_id)
        item = json.dumps([{"text": told.text, "constraint": told.constraint, "by": told.by}])

        async def tell(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(
                f"UPDATE planexec_queue SET told = (told::jsonb || %s::jsonb)::text, updated_at = {_NOW} "
                "WHERE run_id = %s AND state = 'queued' AND claims = 0 "
                "AND NOT EXISTS (SELECT 1 FROM planexec_runs WHERE run_id = %s) RETURNING run_id",
                (item, run_id, run_id),
            )
            return await cur.fetchone() is not None

        return await self.store.call(f"tell queued run {run_id!r}", tell)

    async def claim(self, owner: str, *, limit: int, lease_seconds: float) -> list[Claim]:
        """Claim up to ``limit`` runs for ``owner`` for ``lease_seconds``: the oldest queued ones,
        and those whose lease has expired (a worker that stopped renewing: they are taken over)."""

        async def claim(conn: AsyncConnection[Any]) -> list[Claim]:
            cur = await conn.execute(_CLAIM, (limit, owner, lease_seconds))
            rows = await cur.fetchall()
            return [
                Claim(
                    run_id=row[0],
                    lease=int(row[1]),
                    claims=int(row[2]),
                    goal=row[3],
                    constraints=tuple(str(c) for c in json.loads(row[4])),
                    spec=json.loads(row[5]),
                    told=_told(row[6]),
                )
                for row in sorted(rows, key=lambda r: r[0])
            ]

        if limit < 1:
            return []
        return await self.store.call("claim queued runs", claim)

    async def renew(self, owner: str, leases: Mapping[str, int], *, lease_seconds: float) -> set[str]:
        """Extend ``owner``'s leases (run id → lease number) by ``lease_seconds`` from now; return
        the runs whose lease is still ``owner``'s (a missing one was taken over: stop running it)."""
        if not leases:
            return set()
        ids = list(leases)
        numbers = [leases[r] for r in ids]

        async def renew(conn: AsyncConnection[Any]) -> set[str]:
            cur = await conn.execute(
                f"UPDATE planexec_queue AS q SET expires_at = {_NOW} + %s, updated_at = {_NOW} "
                "FROM unnest(%s::text[], %s::integer[]) AS held(run_id, lease) "
                "WHERE q.run_id = held.run_id AND q.lease = held.lease AND q.owner = %s AND q.state = 'leased' "
                "RETURNING q.run_id",
                (lease_seconds, ids, numbers, owner),
            )
            return {row[0] for row in await cur.fetchall()}

        return await self.store.call("renew leases", renew)

    async def release(self, run_id: str, *, owner: str, lease: int, state: QueueState, note: str | None = None) -> bool:
        """Give the lease up, leaving the run ``state`` (``queued``: for another worker at once);
        False when the lease was no longer ``owner``'s."""

        async def release(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(
                f"UPDATE planexec_queue SET state = %s, owner = NULL, expires_at = NULL, updated_at = {_NOW}, "
                "note = coalesce(%s, note) WHERE run_id = %s AND owner = %s AND lease = %s AND state = 'leased' "
                "RETURNING run_id",
                (state, note, run_id, owner, lease),
            )
            return await cur.fetchone() is not None

        return await self.store.call(f"release the lease of run {run_id!r}", release)

    async def requeue(self, run_id: str) -> bool:
        """Queue a run that waited for a human (or was left ``done`` unfinished) again, its claims
        counted afresh (a human's answer is not a worker that stopped); False when it is not in the
        queue or is queued or leased already."""

        async def requeue(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(
                f"UPDATE planexec_queue SET state = 'queued', claims = 0, updated_at = {_NOW} "
                "WHERE run_id = %s AND state IN ('waiting', 'done') RETURNING run_id",
                (run_id,),
            )
            return await cur.fetchone() is not None

        return await self.store.call(f"requeue run {run_id!r}", requeue)

    async def withdraw(self, run_id: str, *, note: str) -> bool:
        """Take a run the workers left ``waiting`` out of their hands (``done``, with ``note``), to
        be run elsewhere; False when it is not waiting (queued, leased, done, or not in the queue)."""

        async def withdraw(conn: AsyncConnection[Any]) -> bool:
            cur = await conn.execute(
                f"UPDATE planexec_queue SET state = 'done', note = %s, updated_at = {_NOW} "
                "WHERE run_id = %s AND state = 'waiting' RETURNING run_id",
                (note, run_id),
            )
            return await cur.fetchone() is not None

        return await self.store.call(f"withdraw run {run_id!r}", withdraw)

    async def holder(self, run_id: str) -> str | None:
        """The worker whose lease on run ``run_id`` is live now (database clock), or None."""

        async def select(conn: AsyncConnection[Any]) -> str | None:
            cur = await conn.execute(
                f"SELECT owner FROM planexec_queue WHERE run_id = %s AND state = 'leased' AND expires_at >= {_NOW}",
                (run_id,),
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self.store.call(f"read the lease of run {run_id!r}", select)

    async def entries(self, *, state: QueueState | None = None, limit: int = 1000) -> list[QueueEntry]:
        """The queue's rows, oldest first (only ``state`` when given)."""

        async def select(conn: AsyncConnection[Any]) -> list[QueueEntry]:
            where = "WHERE state = %s" if state is not None else ""
            params: tuple[Any, ...] = (state, limit) if state is not None else (limit,)
            cur = await conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM planexec_queue {where} ORDER BY submitted_at, run_id LIMIT %s", params
            )
            return [_entry(row) for row in await cur.fetchall()]

        return await self.store.call("list the queue", select)

    async def entry(self, run_id: str) -> QueueEntry | None:
        """Run ``run_id``'s row, or None when it was never queued."""

        async def select(conn: AsyncConnection[Any]) -> QueueEntry | None:
            cur = await conn.execute(f"SELECT {_ENTRY_COLUMNS} FROM planexec_queue WHERE run_id = %s", (run_id,))
            row = await cur.fetchone()
            return None if row is None else _entry(row)

        return await self.store.call(f"read the queue row of run {run_id!r}", select)


def _entry(row: Sequence[Any]) -> QueueEntry:
    return QueueEntry(
        run_id=row[0],
        state=row[1],
        owner=row[2],
        lease=int(row[3]),
        claims=int(row[4]),
        expires_at=row[5],
        submitted_at=row[6],
        updated_at=row[7],
        note=row[8],
    )


def _told(raw: object) -> tuple[Told, ...]:
    """The ``told`` column as values (anything unreadable in it is left out)."""
    try:
        items = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return ()
    found = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("text"), str) and item["text"].strip():
            found.append(
                Told(text=item["text"], constraint=item.get("constraint") is True, by=str(item.get("by") or "user"))
            )
    return tuple(found)
