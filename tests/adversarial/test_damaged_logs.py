"""A damaged store on the command line: a corrupt database, an event of an unknown kind, an
envelope of a future schema version. ``runs``, ``show``, ``export``, ``resume`` and ``approve``
answer with a message naming the run and the problem (exit status 2), never a traceback, and
``show`` and ``export`` still give every event they can read."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from planexec import Agent, tool
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel
from tests.cli_support import invoke
from tests.support import tool_step


@tool
async def note(text: str) -> str:
    """Write a note."""
    return f"noted: {text}"


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def recorded_run(db: Path) -> int:
    """A finished three-step run, ``damaged``, in the SQLite file ``db``; returns its number of events."""

    async def record() -> int:
        store = SQLiteStore(db)
        plan = {"steps": [tool_step(f"n{i}", "note", {"text": str(i)}) for i in range(3)]}
        result = await Agent(ScriptedModel([plan, {"answer": "noted"}]), tools=[note], store=store).run(
            "take notes", run_id="damaged"
        )
        await store.close()
        return len(result.events)

    return asyncio.run(record())


def damage(db: Path, changes: dict[int, str]) -> None:
    """Overwrite the stored text of events (by sequence number) of run ``damaged``."""
    with sqlite3.connect(db) as conn:
        for seq, text in changes.items():
            conn.execute(
                "UPDATE planexec_events SET data = ? WHERE seq = ? AND run = "
                "(SELECT id FROM planexec_runs WHERE run_id = 'damaged')",
                (text, seq),
            )


def stored(db: Path, seq: int) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        (data,) = conn.execute("SELECT data FROM planexec_events WHERE seq = ?", (seq,)).fetchone()
    value: dict[str, object] = json.loads(data)
    return value


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[str, int]:
    db = tmp_path / "runs.db"
    total = recorded_run(db)
    last = stored(db, total)
    damage(
        db,
        {
            3: '{"v": 4, "event": {"kind": "plan_prop',  # cut short
            total - 1: json.dumps({"v": 4, "event": {"kind": "step_teleported", "at": 1.0}}),
            total: json.dumps({**last, "v": 99}),
        },
    )
    return f"sqlite:///{db}", total


def no_traceback(output: str) -> None:
    assert "Traceback" not in output
    assert "Error" in output


def test_show_shows_what_it_can_and_names_the_run_and_the_problems(damaged: tuple[str, int]) -> None:
    store, _ = damaged
    result = invoke(["--store", store, "show", "damaged"])
    assert result.exit_code == 2
    no_traceback(result.output)
    assert "run damaged" in result.output
    assert "event 3" in result.stderr
    assert "step_teleported" in result.stderr
    assert "99" in result.stderr
    assert "take notes" in result.stdout  # the run is still shown from what can be read
    assert "noted" in result.stdout


def test_show_json_lists_what_could_not_be_read(damaged: tuple[str, int]) -> None:
    store, total = damaged
    result = invoke(["--store", store, "show", "damaged", "--json"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["goal"] == "take notes"
    assert len(data["unreadable"]) >= 3
    assert data["events"] <= total - 3


def test_export_writes_every_readable_event_then_exits_2(damaged: tuple[str, int], tmp_path: Path) -> None:
    store, total = damaged
    out = tmp_path / "log.jsonl"
    result = invoke(["--store", store, "export", "damaged", "-o", str(out)])
    assert result.exit_code == 2
    no_traceback(result.output)
    lines = out.read_text().splitlines()
    assert len(lines) == total - 3
    assert all(json.loads(line)["v"] for line in lines)


@pytest.mark.parametrize("command", [["resume", "damaged"], ["approve", "damaged"], ["replay", "damaged"]])
def test_commands_that_need_the_whole_log_refuse_it(damaged: tuple[str, int], command: list[str]) -> None:
    store, _ = damaged
    result = invoke(["--store", store, *command])
    assert result.exit_code == 2
    no_traceback(result.output)
    assert "run damaged" in result.output
    assert "cannot be read" in result.output or "event 3" in result.output


def test_runs_still_lists_a_run_whose_log_is_damaged(damaged: tuple[str, int]) -> None:
    store, _ = damaged
    result = invoke(["--store", store, "runs", "--json"])
    assert result.exit_code == 0
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["damaged"]


@pytest.mark.parametrize("command", [["runs"], ["show", "x"], ["export", "x"], ["resume", "x"], ["approvals"]])
def test_a_corrupt_database_is_a_clear_error(tmp_path: Path, command: list[str]) -> None:
    junk = tmp_path / "runs.db"
    junk.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    result = invoke(["--store", f"sqlite:///{junk}", *command])
    assert result.exit_code == 2
    no_traceback(result.output)
    assert "runs.db" in result.output
