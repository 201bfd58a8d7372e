"""The journal: writes a run's events to its store, in order, in batches, off the hot path.

The engine adds each event as it happens (no waiting); one writer task appends whatever has
gathered since its last write in a single call (group commit). Before anything that must not be
lost or repeated — calling a side-effecting tool, waiting for a human, ending the run — the engine
awaits ``flush()``: everything added so far is then in the store.

Another process may append to the same run only to answer an approval (``approval_decided``).
When such an event arrives first, the append conflicts; the journal reads the new events and hands
them to the engine (``on_foreign(events, unwritten)``, with the number of the engine's own events
not yet written, which belong after them), then writes its own after them. Any other foreign
event means two processes are running one run, and the journal fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from planexec.runtime._events import ApprovalDecided, Event
from planexec.store._base import AppendConflict, RunStore

__all__ = ["Journal", "JournalFailed"]


class JournalFailed(Exception):
    """The log could not be written; the run cannot go on durably."""


class Journal:
    def __init__(
        self,
        store: RunStore,
        run_id: str,
        *,
        persisted: int,
        on_foreign: Callable[[list[Event], int], None],
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.persisted = persisted
        """The store's last seq as far as this writer knows."""
        self._buffer: list[Event] = []
        self._added = 0
        self._written_own = 0
        self._on_foreign = on_foreign
        self._wake = asyncio.Event()
        self._written = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.error: BaseException | None = None

    def add(self, event: Event) -> None:
        self._buffer.append(event)
        self._added += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._write_loop(), name=f"journal:{self.run_id}")
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every event added so far is in the store."""
        target = self._added
        if self._written_own >= target:
            self._raise()
            return
        async with self._written:
            await self._written.wait_for(lambda: self._written_own >= target or self.error is not None)
        self._raise()

    async def close(self) -> None:
        """Flush, then stop the writer."""
        try:
            await self.flush()
        finally:
            if self._task is not None:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
                self._task = None

    async def close_failed(self, last: Event) -> bool:
        """After a failed write: try to save ``last`` (the run's ``run_finished``) on its own, so that
        the stored log at least ends, and says why it is incomplete; a run whose stored log ends is
        never picked up again. Best effort: False when the store refuses that too."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            async with self._lock:
                self.persisted = await self.store.append(self.run_id, [last], expected_seq=self.persisted)
        except Exception:
            return False
        return True

    def _raise(self) -> None:
        if self.error is not None:
            raise JournalFailed(f"the run log could not be written: {self.error}") from self.error

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            # Let the loop run once more first: the events of this round are written together.
            await asyncio.sleep(0)
            self._wake.clear()
            while self._buffer and self.error is None:
                batch = self._buffer
                self._buffer = []
                try:
                    async with self._lock:
                        await self._append(batch)
                    self._written_own += len(batch)
                except Exception as e:
                    self.error = e
                async with self._written:
                    self._written.notify_all()

    async def _append(self, batch: list[Event]) -> None:
        for _ in range(100):
            try:
                self.persisted = await self.store.append(self.run_id, batch, expected_seq=self.persisted)
                return
            except AppendConflict:
                await self._take_foreign(unwritten=len(batch) + len(self._buffer))
        raise JournalFailed(f"run {self.run_id}: the log kept changing under the writer")

    async def catch_up(self) -> None:
        """Read answers other processes wrote since this writer's last append."""
        async with self._lock:
            await self._take_foreign(unwritten=len(self._buffer))

    async def _take_foreign(self, *, unwritten: int) -> None:
        foreign = [s.event for s in await self.store.read(self.run_id, after=self.persisted)]
        if not foreign:
            return
        strangers = [e.kind for e in foreign if not isinstance(e, ApprovalDecided)]
        if strangers:
            raise JournalFailed(f"another process is writing run {self.run_id} ({', '.join(strangers)})")
        self.persisted += len(foreign)
        self._on_foreign(foreign, unwritten)
