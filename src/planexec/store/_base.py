"""The store interface: append-only run logs with optimistic concurrency, listing and expiry.

Every backend (memory, SQLite, PostgreSQL) implements :class:`RunStore` and passes the same
conformance suite. A run's log is a sequence of events numbered from 1; an append names the
sequence number it expects to follow (``expected_seq``, 0 for a new run), so two writers can
never interleave: exactly one of two appends after the same number wins, the other gets
:class:`AppendConflict` and must read what it missed. Every event is stored with the hash of the
log before it (a hash chain: see :func:`~planexec.store.verify_chain`), so that a change made to
the log behind the store's back is found.

What a caller of any store can get besides results (every backend, every method):

    AppendConflict   another writer appended first (``append`` only): read, then try again
    UsageError       the store is closed, an argument is wrong, or the database was written by a
                     newer planexec (upgrade it)
    StoreError       the store failed: it cannot be reached or opened, did not answer within its
                     timeout, refused the write (a full disk, a read-only file, a value that JSON
                     cannot represent such as NaN), or is damaged. The message names the store,
                     never with its password, and says what went wrong; no driver exception is
                     chained to it. A failed append wrote nothing.
    LogUnreadable    (a StoreError, from ``read`` only) some events of the log cannot be read:
                     damaged text, an unknown event kind, a newer event schema version. It carries
                     every event that could be read (``events``, as :class:`StoredEvent`, in order)
                     and one problem per event that could not (``where`` is ``event <seq>``). The
                     other methods keep working on such a log.

No call waits without a limit: SQLite waits at most its ``busy_timeout`` for a lock held elsewhere;
PostgreSQL at most its ``connect_timeout`` plus its ``statement_timeout``.

Besides the logs, a store says what it offers, so that nobody above it asks which class it is:

    redactor       what is hidden before anything is written (the command line and the
                   telemetry hide the same)
    durable        whether its runs outlive this process (False: they cannot be resumed elsewhere)
    queue()        the workers' queue of submitted runs in its database, or None when runs cannot
                   be submitted to workers there (see :class:`~planexec.store.RunQueue`)
    plan_memory()  where plan memory keeps its entries beside the run logs (see
                   :class:`~planexec.store.PlanMemoryBackend`)
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from planexec.errors import PlanexecError

if TYPE_CHECKING:  # the runtime imports this module: importing it back here would be a cycle
    from planexec.log import Event
    from planexec.store._chain import RawLog
    from planexec.store._plan_memory import PlanMemoryBackend
    from planexec.store._queue import RunQueue
    from planexec.store._redact import Redactor
    from planexec.store._signals import Feed

__all__ = ["AppendConflict", "RunStatus", "RunStore", "RunSummary", "StoredEvent"]

RunStatus = Literal["running", "waiting", "finished"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredEvent:
    """An event as a store holds it: its 1-based position in the run's log and the event."""

    seq: int
    event: Event
    hash: str | None = None
    """The event's own hash in the run's chain (64 hex digits; see :func:`verify_chain`), as stored:
    None for an event written before the store kept a chain. ``verify_chain`` says whether it holds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """One row of ``list_runs``: what a listing needs without reading the whole log."""

    run_id: str
    goal: str
    status: RunStatus
    """``finished`` after run_finished; ``waiting`` after run_suspended (until run_resumed); else ``running``."""
    stop_kind: str | None
    stop_detail: str | None
    cost: float
    model_calls: int
    started_at: float
    updated_at: float
    """The ``at`` of the newest event."""
    finished_at: float | None
    events: int
    """The log's last sequence number."""
    pending_approvals: int
    session: str | None = None
    """The session the run is a turn of (``run_started``'s ``config.session.id``), if any."""
    turn: int | None = None
    """Its turn in the session, from 1."""

    @property
    def duration(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at


class AppendConflict(PlanexecError):
    """Another writer appended to the run first: read from ``actual`` and try again."""

    def __init__(self, run_id: str, expected: int, actual: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"run {run_id}: expected to append after event {expected}, but the log has {actual}")


@runtime_checkable
class RunStore(Protocol):
    """Where run logs live. All methods are safe to call from several tasks at once."""

    redactor: Redactor
    """Applied to every event (and the summary's text) before it is written."""

    @property
    def durable(self) -> bool:
        """Whether runs kept here outlive this process, so that another process can read, answer
        and resume them (False for a store in memory)."""
        ...

    def queue(self) -> RunQueue | None:
        """The queue through which workers share runs submitted to this store (see
        :func:`planexec.runs.submit`), or None when this store has none (only PostgreSQL has)."""
        ...

    def plan_memory(self) -> PlanMemoryBackend:
        """A new handle on the plan memory entries kept beside the run logs, in the store's own
        database (in this process, for a store in memory: each handle its own entries). The caller
        closes it; it needs the store neither open nor closed."""
        ...

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        """Append ``events`` after event ``expected_seq`` (0: the run is new); return the new last seq.

        All or nothing. Raises :class:`AppendConflict` when the log's last seq is not
        ``expected_seq``. Secrets are redacted before anything is written. An event holding a value
        JSON cannot represent (NaN, Infinity) is refused with :class:`~planexec.StoreError`. Each
        event is stored with its link and hash in the run's chain, computed over the bytes written
        (see :mod:`planexec.store._chain`), and the run's summary with the new head.
        """
        ...

    async def read(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        """The run's events with seq > ``after``, in order (empty for an unknown run).

        Raises :class:`~planexec.LogUnreadable` when some of them cannot be read; it holds the others.
        """
        ...

    async def last_seq(self, run_id: str) -> int:
        """The run's last seq (0 for an unknown run)."""
        ...

    async def wait_for_events(self, run_id: str, *, after: int, within: float) -> bool:
        """Wait until the run's log holds an event after seq ``after`` (True), or ``within``
        seconds pass (False): how a follower learns of new events without reading the log again
        and again. Woken as soon as a batch is durable — from this process, and from others where
        the store can hear them (PostgreSQL's ``LISTEN``/``NOTIFY``; a SQLite file written by
        another process is looked at every quarter of a second)."""
        ...

    def feed(self, run_id: str) -> AbstractContextManager[Feed]:
        """The run's batches from now on, each as it was stored (:class:`Fresh`: the event and its
        redacted JSON), for a follower that sends them on: open it, read what is stored already,
        then take batches from it. An empty batch means one was stored that this process did not
        write: read the store for it."""
        ...

    async def read_raw(self, run_id: str) -> RawLog:
        """The run's log as stored, in one consistent read: every event's bytes, link and hash, and
        the last seq and chain head its summary records (no events, last seq 0, for an unknown run).
        Nothing is decoded, so this works on a log ``read`` cannot read; :func:`verify_chain` checks it."""
        ...

    async def get_run(self, run_id: str) -> RunSummary | None: ...

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        started_after: float | None = None,
        limit: int = 100,
        session: str | None = None,
    ) -> list[RunSummary]:
        """Runs, newest first, optionally only those with ``status``, started after a time, or
        the turns of ``session``."""
        ...

    async def delete(self, run_id: str) -> bool:
        """Delete a run and its log; False when there was no such run."""
        ...

    async def expire(self, *, older_than: float) -> list[str]:
        """Delete every run whose newest event is older than ``older_than`` (epoch seconds);
        return their ids."""
        ...

    async def close(self) -> None: ...
