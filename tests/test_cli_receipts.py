"""``planexec verify``, ``show --receipts`` and the chain check of ``replay``, each run as a process of
its own on a real SQLite file (and a PostgreSQL database), with the log changed behind the
store's back between two commands."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import planexec
from planexec.log import ApprovalRequested, StepStarted, StepSucceeded
from planexec.store import StoredEvent, open_store
from tests.test_store_support import postgres_schema

TOOLS = '''
from planexec import tool


@tool(trusted=True)  # a sum of the planner's own numbers: as trusted as they are
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(side_effect=True)
def publish(value: int) -> str:
    """Publish a value."""
    return f"published {value}"


TOOLS = [add, publish]
'''

SUM_THEN_PUBLISH = {
    "reason": "add, then publish the sum",
    "steps": [
        {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
        {
            "id": "pub",
            "description": "Publish the sum",
            "tool": "publish",
            "args": {"value": "${sum}"},
            "depends_on": ["sum"],
        },
    ],
}
SRC = Path(planexec.__file__).resolve().parents[1]
"""Where the planexec under test lives: the processes import it from there."""


def _command() -> list[str]:
    script = Path(sys.executable).with_name("planexec")
    if script.is_file():
        return [str(script)]
    found = shutil.which("planexec")
    return [found] if found else [sys.executable, "-m", "planexec"]


@dataclass
class Cli:
    """planexec as processes of their own, on one store, with a tools module and a planner script."""

    tmp: Path
    store: str

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "PLANEXEC_ALLOW_MODEL_REQUESTS": "0",
            "PYTHONPATH": os.pathsep.join([str(SRC), str(self.tmp)]),
            "COLUMNS": "200",
        }
        env.pop("PLANEXEC_STORE", None)
        return subprocess.run(
            [*_command(), "--store", self.store, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )

    def json(self, *args: str, code: int = 0) -> Any:
        done = self(*args, "--json")
        assert done.returncode == code, done.stderr
        return json.loads(done.stdout)

    def run(self, *extra: str) -> str:
        """Start the sum-then-publish run; return its id."""
        script = self.tmp / "planner.json"
        script.write_text(json.dumps([SUM_THEN_PUBLISH, {"answer": "published 5"}]))
        flags = ["--planner", f"scripted:{script}", "--tools", "receipt_tools:TOOLS", *extra]
        data = self.json("run", "publish the sum", *flags, code=3 if "--approve-plan" in extra else 0)
        return str(data["run_id"])

    def read(self, run_id: str) -> list[StoredEvent]:
        async def read() -> list[StoredEvent]:
            store = open_store(self.store)
            try:
                return await store.read(run_id)
            finally:
                await store.close()

        return asyncio.run(read())


def make_cli(tmp_path: Path, store: str) -> Cli:
    (tmp_path / "receipt_tools.py").write_text(TOOLS)
    return Cli(tmp=tmp_path, store=store)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return make_cli(tmp_path, f"sqlite:///{tmp_path}/runs.db")


def approved_run(cli: Cli) -> str:
    """A run whose plan waited for a human, was approved by alice from another process, and resumed."""
    run_id = cli.run("--approve-plan")
    (question,) = [e for e in cli.read(run_id) if isinstance(e.event, ApprovalRequested)]
    assert isinstance(question.event, ApprovalRequested)
    approve = cli("approve", run_id, question.event.approval_id, "--by", "alice", "--no-resume")
    assert approve.returncode == 0, approve.stderr
    resume = cli("resume", run_id, "--no-live")
    assert resume.returncode == 0, resume.stderr
    return run_id


def edit_event(path: Path, seq: int, old: str, new: str) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        (data,) = conn.execute("SELECT data FROM planexec_events WHERE seq = ?", (seq,)).fetchone()
        assert old in data
        conn.execute("UPDATE planexec_events SET data = ? WHERE seq = ?", (data.replace(old, new), seq))


def test_receipts_and_verify_of_an_approved_run(cli: Cli) -> None:
    run_id = approved_run(cli)
    stored = cli.read(run_id)

    report = cli.json("verify", run_id)
    assert (report["intact"], report["events"], report["begins_at"], report["broken"]) == (True, len(stored), 1, None)
    assert report["head"] == stored[-1].hash
    text = cli("verify", run_id)
    assert text.returncode == 0, text.stderr
    assert f"run {run_id}: chain intact over {len(stored)} events" in text.stdout
    assert f"head (event {len(stored)}): {stored[-1].hash}" in text.stdout

    data = cli.json("show", run_id, "--receipts")
    assert data["chain"]["intact"] is True
    (receipt,) = data["receipts"]
    started = next(s for s in stored if isinstance(s.event, StepStarted) and s.event.step_id == "pub")
    succeeded = next(s for s in stored if isinstance(s.event, StepSucceeded) and s.event.step_id == "pub")
    asked = next(s for s in stored if isinstance(s.event, ApprovalRequested))
    assert isinstance(started.event, StepStarted)
    assert (receipt["tool"], receipt["args"], receipt["outcome"]) == ("publish", {"value": 5}, "succeeded")
    assert receipt["idempotency_key"] == started.event.idempotency_key
    assert (receipt["started"]["seq"], receipt["started"]["hash"]) == (started.seq, started.hash)
    assert (receipt["ended"]["seq"], receipt["ended"]["hash"]) == (succeeded.seq, succeeded.hash)
    assert receipt["plan"]["version"] == 1
    (approval,) = receipt["approvals"]
    assert (approval["subject"], approval["by"]) == ("plan", "alice")
    assert (approval["asked"]["seq"], approval["asked"]["hash"]) == (asked.seq, asked.hash)
    assert receipt["no_approval"] is None

    shown = cli("show", run_id, "--receipts")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"receipts of run {run_id}: 1 side-effecting call; chain intact over {len(stored)} events" in out
    assert "1. publish — step pub, a tool step: tool publish has side effects" in out
    assert "approved by alice" in out
    assert f"approval_requested, event {asked.seq} #{(asked.hash or '')[:16]}…" in out
    assert f"step_started, event {started.seq} #" in out
    assert 'publish {"value": 5}' in out

    replay = cli("replay", run_id)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "warning" not in replay.stderr


def test_a_call_without_approval_says_so(cli: Cli) -> None:
    run_id = cli.run("--no-live")
    shown = cli("show", run_id, "--receipts")
    assert shown.returncode == 0, shown.stderr
    assert "approval  no human approval: tool publish is not gated" in shown.stdout
    (receipt,) = cli.json("show", run_id, "--receipts")["receipts"]
    assert receipt["approvals"] == []
    assert receipt["no_approval"].startswith("no human approval: ")


def test_an_edited_log_is_named_by_verify_show_and_replay(cli: Cli) -> None:
    """Who approved is rewritten directly in the SQLite file: the log reads as edited, and every
    command that trusts it says where the chain breaks."""
    run_id = approved_run(cli)
    kept = cli.json("verify", run_id)["head"]
    decided = next(s for s in cli.read(run_id) if s.event.kind == "approval_decided")
    edit_event(cli.tmp / "runs.db", decided.seq, '"alice"', '"mallory"')

    text = cli("verify", run_id)
    assert text.returncode == 1
    assert f"run {run_id}: chain broken at event {decided.seq} (changed)" in text.stdout
    assert "the event was edited" in text.stdout
    assert f"found    {decided.hash}" in text.stdout
    report = cli.json("verify", run_id, code=1)
    assert (report["intact"], report["broken"]["seq"], report["broken"]["problem"]) == (False, decided.seq, "changed")
    assert report["broken"]["found"] == decided.hash
    assert report["head"] is None

    shown = cli("show", run_id, "--receipts")
    assert shown.returncode == 1
    assert "approved by mallory" in shown.stdout
    assert f"its chain is broken at event {decided.seq}" in shown.stdout

    replay = cli("replay", run_id)
    assert replay.returncode == 1, "a replay that matches a changed log is not a clean pass"
    assert f"warning: run {run_id}: its chain is broken at event {decided.seq}" in replay.stderr
    assert "replayed exactly" in replay.stdout
    data = cli.json("replay", run_id, code=1)
    assert (data["matched"], data["chain"]["intact"]) == (True, False)

    edit_event(cli.tmp / "runs.db", decided.seq, '"mallory"', '"alice"')
    assert cli("verify", run_id, "--head", kept).returncode == 0


def test_a_kept_head_from_verify(cli: Cli) -> None:
    first, other = cli.run("--no-live"), cli.run("--no-live")
    head = cli.json("verify", first)["head"]
    again = cli("verify", first, "--head", head.upper())
    assert again.returncode == 0, again.stderr
    assert "the kept head is event" in again.stdout
    foreign = cli("verify", other, "--head", head)
    assert foreign.returncode == 1
    assert "(kept)" in foreign.stdout
    assert "no event hashes to the kept head" in foreign.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("verify", "nope"), "no run 'nope'"),
        (("verify", "nope", "--head", "xyz"), "is not a head: 64 hex digits"),
        (("verify",), "Missing argument 'RUN'"),
        (("show", "nope", "--receipts"), "no run 'nope'"),
    ],
)
def test_usage_errors_exit_2(cli: Cli, args: tuple[str, ...], says: str) -> None:
    done = cli(*args)
    assert done.returncode == 2, done.stdout
    assert says in done.stderr


@pytest.fixture
def pg_cli(tmp_path: Path) -> Iterator[Cli]:
    with postgres_schema() as url:
        yield make_cli(tmp_path, url)


def test_verify_on_postgresql_names_a_deleted_event(pg_cli: Cli) -> None:
    import psycopg

    run_id = pg_cli.run("--no-live")
    stored = pg_cli.read(run_id)
    assert pg_cli.json("verify", run_id)["head"] == stored[-1].hash
    (receipt,) = pg_cli.json("show", run_id, "--receipts")["receipts"]
    assert receipt["started"]["hash"] == next(s.hash for s in stored if s.seq == receipt["started"]["seq"])
    with psycopg.connect(pg_cli.store, autocommit=True) as pg:
        pg.execute("DELETE FROM planexec_events WHERE run_id = %s AND seq = 4", (run_id,))
    done = pg_cli("verify", run_id)
    assert done.returncode == 1
    assert f"run {run_id}: chain broken at event 4 (missing)" in done.stdout
    assert "event 4 is missing" in done.stdout
