"""MemoryStore: run logs in a dict, for tests and short-lived programs.

It keeps each event as the same redacted JSON text the other backends write, with its link and
hash in the run's chain, so redaction, round trips and verification behave exactly as they do on
disk. Every method finishes without awaiting, so calls
from many tasks on one event loop never interleave.

Errors: nothing here can time out or break, so the only errors are those every store shares:
:class:`~planexec.StoreError` for an event holding a value JSON cannot represent (NaN, Infinity;
nothing of that append is kept), :class:`~planexec.LogUnreadable` from ``read`` when a kept event
cannot be read back, :class:`AppendConflict` and :class:`~planexec.UsageError`.
"""

from __future__ import annotations

from collections.abc import Sequence

from planexec.log import Event
from planexec.store._base import AppendConflict, RunStatus, RunSummary, StoredEvent
from planexec.store._chain import RawEvent, RawLog, chain_hashes, genesis
from planexec.store._codec import decode_log, encode_events
from planexec.store._common import StoreBase, check_list_args, check_run_id
from planexec.store._plan_memory import InProcessPlanMemory
from planexec.store._redact import Redactor
from planexec.store._summary import SummaryState, summarize

__all__ = ["MemoryStore"]


class MemoryStore(StoreBase):
    """Run logs in memory; gone when the process exits."""

    def __init__(self, *, redactor: Redactor | None = None) -> None:
        super().__init__(redactor=redactor)
        self._logs: dict[str, list[str]] = {}
        self._chains: dict[str, list[tuple[bytes, bytes]]] = {}
        """Each run's events' (link, hash), in the order of ``_logs``."""
        self._heads: dict[str, bytes] = {}
        self._states: dict[str, SummaryState] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(runs={len(self._logs)})"

    @property
    def durable(self) -> bool:
        return False

    def plan_memory(self) -> InProcessPlanMemory:
        return InProcessPlanMemory()

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        self._check_open()
        check_run_id(run_id)
        encoded = encode_events(events, self.redactor, store="MemoryStore")
        log = self._logs.get(run_id)
        current = 0 if log is None else len(log)
        if current != expected_seq:
            raise AppendConflict(run_id, expected_seq, current)
        if not encoded:
            return current
        state = summarize(
            run_id, events, previous=self._states.get(run_id), first_seq=current + 1, clean=self.redactor.redact_text
        )
        hashes = chain_hashes(self._heads.get(run_id) or genesis(run_id), (e.data.encode() for e in encoded))
        self._logs.setdefault(run_id, []).extend(e.data for e in encoded)
        self._chains.setdefault(run_id, []).extend(hashes)
        self._heads[run_id] = hashes[-1][1]
        self._states[run_id] = state
        self._stored(run_id, state.summary.events, events, encoded)
        return state.summary.events

    async def read(self, run_id: str, *, after: int = 0) -> list[StoredEvent]:
        self._check_open()
        log = self._logs.get(run_id, [])
        chain = self._chains.get(run_id, [])
        start = max(after, 0)
        rows = [
            (seq, log[seq - 1], chain[seq - 1][1] if seq <= len(chain) else None)
            for seq in range(start + 1, len(log) + 1)
        ]
        return decode_log(run_id, rows, after=start)

    async def read_raw(self, run_id: str) -> RawLog:
        self._check_open()
        state = self._states.get(run_id)
        log, chain = self._logs.get(run_id, []), self._chains.get(run_id, [])
        return RawLog(
            run_id=run_id,
            events=tuple(
                RawEvent(seq=seq, data=data.encode("utf-8", "surrogatepass"), link=link, hash=own)
                for seq, data, (link, own) in zip(range(1, len(log) + 1), log, chain, strict=False)
            ),
            last_seq=0 if state is None else state.summary.events,
            head=self._heads.get(run_id),
        )

    async def last_seq(self, run_id: str) -> int:
        self._check_open()
        return len(self._logs.get(run_id, ()))

    async def get_run(self, run_id: str) -> RunSummary | None:
        self._check_open()
        state = self._states.get(run_id)
        return None if state is None else state.summary

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        started_after: float | None = None,
        limit: int = 100,
        session: str | None = None,
    ) -> list[RunSummary]:
        self._check_open()
        check_list_args(status, limit, session)
        runs = [
            s.summary
            for s in self._states.values()
            if (status is None or s.summary.status == status)
            and (started_after is None or s.summary.started_at > started_after)
            and (session is None or s.summary.session == session)
        ]
        runs.sort(key=lambda r: (r.started_at, r.run_id), reverse=True)
        return runs[:limit]

    async def delete(self, run_id: str) -> bool:
        self._check_open()
        self._states.pop(run_id, None)
        self._chains.pop(run_id, None)
        self._heads.pop(run_id, None)
        return self._logs.pop(run_id, None) is not None

    async def expire(self, *, older_than: float) -> list[str]:
        self._check_open()
        gone = [run_id for run_id, s in self._states.items() if s.summary.updated_at < older_than]
        for run_id in gone:
            del self._states[run_id]
            del self._logs[run_id]
            self._chains.pop(run_id, None)
            self._heads.pop(run_id, None)
        return gone
