"""The server's file of accepted runs: every request's line is synced before it is answered, a
burst of requests is written and synced in groups off the event loop, and a crowded file is
rewritten with the runs not begun yet."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from planexec.server._accepted import AcceptedRuns


async def test_a_burst_is_synced_in_groups_and_every_line_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    accepted = AcceptedRuns(tmp_path / "accepted.jsonl", keep=set)
    await asyncio.gather(*(accepted.remember({"run_id": f"r{i}", "goal": "g"}) for i in range(200)))
    assert [line["run_id"] for line in accepted.read()] == [f"r{i}" for i in range(200)]
    assert 1 <= len(syncs) < 200  # grouped: the requests that came while one write ran share the next
    assert accepted.lines == 200


async def test_a_failed_write_is_raised_to_every_request_of_its_group(tmp_path: Path) -> None:
    accepted = AcceptedRuns(tmp_path / "missing-folder" / "accepted.jsonl", keep=set)
    results = await asyncio.gather(*(accepted.remember({"run_id": f"r{i}"}) for i in range(5)), return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results)


async def test_a_crowded_file_keeps_the_runs_not_begun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("planexec.server._accepted.COMPACT_AFTER", 10)
    waiting = {"r3", "r19"}
    accepted = AcceptedRuns(tmp_path / "accepted.jsonl", keep=lambda: waiting)
    for i in range(20):
        await accepted.remember({"run_id": f"r{i}"})
    assert len(accepted.read()) < 20
    assert {"r3", "r19"} <= {line["run_id"] for line in accepted.read()}
