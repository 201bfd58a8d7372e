"""What every backend shares: argument checks, the closed state and ``async with`` support."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, get_args

from planexec.errors import Problem, UsageError
from planexec.log import Event
from planexec.store._base import RunStatus
from planexec.store._codec import EncodedEvent
from planexec.store._redact import Redactor
from planexec.store._signals import AppendSignals, Feed, Fresh
from planexec.store._summary import SUMMARY_COLUMNS

if TYPE_CHECKING:
    from planexec.store._queue import RunQueue

__all__ = ["StoreBase", "check_list_args", "check_run_id", "check_schema_version", "list_runs_sql"]

_STATUSES = get_args(RunStatus)


def check_run_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not run_id:
        raise UsageError(f"a run id must be a non-empty string, not {run_id!r}")


def check_list_args(status: str | None, limit: int, session: str | None = None) -> None:
    problems = []
    if session is not None and (not isinstance(session, str) or not session):
        problems.append(Problem(code="session", where="session", message="must be a session id (non-empty text)"))
    if status is not None and status not in _STATUSES:
        problems.append(Problem(code="status", where="status", message=f"must be one of {', '.join(_STATUSES)}"))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        problems.append(Problem(code="limit", where="limit", message=f"must be an int >= 0, not {limit!r}"))
    if problems:
        raise UsageError("invalid list_runs arguments", problems)


def list_runs_sql(
    placeholder: str, status: RunStatus | None, started_after: float | None, limit: int, session: str | None = None
) -> tuple[str, tuple[Any, ...]]:
    """The ``list_runs`` query on ``planexec_runs`` and its parameters; ``placeholder`` is the
    driver's parameter marker (``?`` or ``%s``). Each row is the run id, then the summary columns."""
    where: list[str] = []
    params: list[Any] = []
    if status is not None:
        where.append(f"status = {placeholder}")
        params.append(status)
    if started_after is not None:
        where.append(f"started_at > {placeholder}")
        params.append(started_after)
    if session is not None:
        where.append(f"session_id = {placeholder}")
        params.append(session)
    sql = f"SELECT run_id, {', '.join(SUMMARY_COLUMNS)} FROM planexec_runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += f" ORDER BY started_at DESC, run_id DESC LIMIT {placeholder}"
    return sql, (*params, limit)


def check_schema_version(version: int, known: int) -> None:
    """Refuse a database whose store schema is newer than the one this code knows."""
    if version > known:
        raise UsageError(
            f"this database has store schema version {version}, newer than this planexec knows "
            f"({known}): upgrade planexec"
        )


class StoreBase:
    """The parts of a store that do not depend on where the log lives."""

    _FOLLOW_POLL: float | None = None
    """How often a waiter reads the store anyway, for writers this process does not hear (None:
    never — every writer is in this process)."""

    def __init__(self, *, redactor: Redactor | None) -> None:
        self.redactor: Redactor = redactor if redactor is not None else Redactor()
        """Applied to every event (and the summary's text) before it is written."""
        self._closed = False
        self._signals = AppendSignals()

    async def wait_for_events(self, run_id: str, *, after: int, within: float) -> bool:
        """Wait until run ``run_id``'s log holds an event after seq ``after`` (True), or ``within``
        seconds pass (False). Woken as soon as this process stores a batch of the run (and, where
        the store can hear them, other processes' batches); never misses a batch stored before it
        began to wait."""
        self._check_open()
        self._hear_others()
        return await self._signals.wait(
            run_id, after=after, within=within, last_seq=self.last_seq, poll=self._FOLLOW_POLL
        )

    def feed(self, run_id: str) -> contextlib.AbstractContextManager[Feed]:
        """Run ``run_id``'s batches from now on, as this process stores them (see
        :class:`~planexec.store.Feed`): read what is stored already after opening it, then take
        each batch from the feed; an empty batch means "read the store"."""
        self._check_open()
        self._hear_others()
        return self._signals.feed(run_id, poll=self._FOLLOW_POLL)

    def _hear_others(self) -> None:
        """Start hearing other processes' appends, where the store can (PostgreSQL)."""

    def _stored(self, run_id: str, last: int, events: Sequence[Event], encoded: Sequence[EncodedEvent]) -> None:
        """``events`` of ``run_id`` are durable, its last seq now ``last``: wake its followers."""
        first = last - len(encoded) + 1
        fresh = [Fresh(first + i, event, e.data) for i, (event, e) in enumerate(zip(events, encoded, strict=True))]
        self._signals.appended(run_id, fresh)

    async def last_seq(self, run_id: str) -> int:
        """The run's last seq (0 for an unknown run)."""
        raise NotImplementedError

    def queue(self) -> RunQueue | None:
        """No workers' queue: runs cannot be submitted to workers here (a backend that has one
        says so)."""
        return None

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"this {type(self).__name__} is closed; open a new one")

    async def close(self) -> None:
        self._closed = True
        self._signals.appended_anywhere()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
