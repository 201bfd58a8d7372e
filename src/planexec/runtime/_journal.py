"""The journal: writes a run's events to its store, in order, in batches, off the hot path.

The engine adds each event as it happens (no waiting); one writer task appends whatever has
gathered since its last write in a single call (group commit). Before anything that must not be
lost or repeated — calling a side-effecting tool, waiting for a human, ending the run — the engine
awaits ``flush()``: everything added so far is then in the store.

Another process may append to the same run only to answer an approval (``approval_decided``) or
to tell it something new (``information_added``, ``planexec tell``).
When such an event arrives first, the append conflicts; the journal reads the new events and hands
them to the engine (``on_foreign(events, unwritten)``, with the number of the engine's own events
not yet written, which belong after them), then writes its own after them. Any other foreign
event means two processes are running one run, and the journal fails.

The writer task may be cancelled from outside: when a program leaves its event loop with a run in
flight, every task is cancelled at once, the writer with the run. The batch it was writing goes
back to the front of the buffer, and ``flush()`` writes what is left itself, so the cancelled run
still ends its stored log. A batch whose append was cut off after the store took it is recognised
when it is found there (same kinds, same times) and not written twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from planexec.log import ApprovalDecided, Event, InformationAdded
from planexec.store import AppendConflict, RunStore

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
        self._progress = asyncio.Event()
        """Set after each batch the writer ends (written or failed), and when the writer stops."""
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.error: BaseException | None = None

    def add(self, event: Event) -> None:
        self._buffer.append(event)
        self._added += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._write_loop(), name=f"journal:{self.run_id}")
            self._task.add_done_callback(lambda _task: self._progress.set())
        self._wake.set()

    async def flush(self) -> None:
        """Wait until every event added so far is in the store."""
        target = self._added
        while self._written_own < target and self.error is None:
            task = self._task
            if task is None or task.done():
                await self._drain()  # the writer was cancelled from outside: write what is left here
                break
            self._progress.clear()
            await self._progress.wait()
        self._raise()

    async def close(self) -> None:
        """Flush, then stop the writer. Cancelled while flushing, it still writes what is left
        before the cancellation goes on: a log must not lose its end to the way its program quit."""
        try:
            await self.flush()
        except asyncio.CancelledError:
            await self._stop_writer()
            await self._drain()
            raise
        finally:
            await self._stop_writer()

    async def _stop_writer(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def close_failed(self, last: Event) -> bool:
        """After a failed write: try to save ``last`` (the run's ``run_finished``) on its own, so that
        the stored log at least ends, and says why it is incomplete; a run whose stored log ends is
        never picked up again. Best effort: False when the store refuses that too."""
        await self._stop_writer()
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
            await self._drain()

    async def _drain(self) -> None:
        """Write the buffer, batch by batch, until it is empty or a write failed."""
        while self._buffer and self.error is None:
            batch = self._buffer
            self._buffer = []
            try:
                async with self._lock:
                    await self._append(batch)
                self._written_own += len(batch)
            except asyncio.CancelledError:
                self._buffer[:0] = batch  # perhaps written: the next append finds out
                raise
            except Exception as e:
                self.error = e
            self._progress.set()

    async def _append(self, batch: list[Event]) -> None:
        for _ in range(100):
            try:
                self.persisted = await self.store.append(self.run_id, batch, expected_seq=self.persisted)
                return
            except AppendConflict:
                stored = await self._take_foreign(unwritten=len(batch) + len(self._buffer), mine=batch)
                if stored == len(batch):
                    return
                batch = batch[stored:]
        raise JournalFailed(f"run {self.run_id}: the log kept changing under the writer")

    async def catch_up(self) -> None:
        """Read answers other processes wrote since this writer's last append."""
        async with self._lock:
            await self._take_foreign(unwritten=len(self._buffer))

    async def _take_foreign(self, *, unwritten: int, mine: Sequence[Event] = ()) -> int:
        """Take in what others appended since this writer's last append; how many of ``mine`` (the
        batch being written) were already stored, by an append cut off after the store took it."""
        foreign = [s.event for s in await self.store.read(self.run_id, after=self.persisted)]
        stored = 0
        for theirs, ours in zip(foreign, mine, strict=False):
            if (theirs.kind, theirs.at) != (ours.kind, ours.at):
                break
            stored += 1
        self.persisted += stored
        foreign = foreign[stored:]
        if not foreign:
            return stored
        strangers = [e.kind for e in foreign if not isinstance(e, ApprovalDecided | InformationAdded)]
        if strangers:
            raise JournalFailed(f"another process is writing run {self.run_id} ({', '.join(strangers)})")
        self.persisted += len(foreign)
        self._on_foreign(foreign, unwritten - stored)
        return stored
