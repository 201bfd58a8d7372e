"""The SQLite store's WAL stays bounded: a server's followers keep a reader on the file almost all
the time, which keeps a passive checkpoint from restarting the WAL; the store truncates it once it
passes ``wal_limit``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from planexec import UsageError
from planexec.log import InformationAdded, RunStarted
from planexec.store import SQLiteStore


async def _grow_wal(path: Path, wal_limit: int) -> int:
    """Append 2,100 events while another connection keeps reading (as a server's followers do):
    the size of the WAL after the store's last checkpoint."""
    import sqlite3
    import threading

    store = SQLiteStore(path, wal_limit=wal_limit)
    stop = threading.Event()

    def reader() -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        try:
            while not stop.is_set():
                try:
                    conn.execute("BEGIN")
                    conn.execute("SELECT count(*) FROM planexec_events").fetchall()
                    stop.wait(0.002)
                    conn.execute("COMMIT")
                except sqlite3.Error:
                    pass
        finally:
            conn.close()

    thread = threading.Thread(target=reader)
    try:
        await store.append("r", [RunStarted(at=1.0, run_id="r", goal="g", budget={})], expected_seq=0)
        thread.start()
        for seq in range(1, 2101):
            await store.append("r", [InformationAdded(at=2.0, text="x" * 200)], expected_seq=seq)
        stop.set()
        thread.join()
        await store.read("r")  # a whole log is read in the store's thread, after the checkpoints queued there
        return await asyncio.to_thread(os.path.getsize, f"{path}-wal")
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        await store.close()


async def test_the_wal_is_truncated_when_readers_keep_it_from_restarting(tmp_path: Path) -> None:
    grown = await _grow_wal(tmp_path / "kept.db", wal_limit=2**62)
    truncated = await _grow_wal(tmp_path / "truncated.db", wal_limit=1_000_000)
    assert grown > 4 * truncated, (grown, truncated)


def test_a_wal_limit_that_is_not_a_size_is_refused(tmp_path: Path) -> None:
    for wrong in (-1, 1.5, True, "16MB"):
        with pytest.raises(UsageError, match="wal_limit"):
            SQLiteStore(tmp_path / "runs.db", wal_limit=wrong)  # type: ignore[arg-type]
