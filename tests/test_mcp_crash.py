"""Exactly-once for MCP write tools across a crash: ``planexec run`` with an MCP server of write
tools (tests/fixtures/mcp_ledger_server.py, which keeps a ledger of every call it gets) is killed
with SIGKILL while a call is under way, then ``planexec resume`` picks the run up in a new process.

An idempotent tool is sent again with the same idempotency key (the server sees the key twice and
applies the effect once); any other write tool is never sent again by itself: the resumed run holds
the step for a human, who marks it done or has it sent again (with the same key)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from planexec.log import ApprovalDecided, ApprovalRequested, Event, StepHeld, StepStarted, StepSucceeded
from planexec.store import open_store
from tests.cli_support import write_script
from tests.support import tool_step

LEDGER_SERVER = Path(__file__).parent / "fixtures" / "mcp_ledger_server.py"
PATIENCE = 60.0
"""Seconds a process may take to reach the state a test waits for: only turns a hang into a failure."""


def _command() -> list[str]:
    script = Path(sys.executable).with_name("planexec")
    if script.is_file():
        return [str(script)]
    found = shutil.which("planexec")
    return [found] if found else [sys.executable, "-m", "planexec"]


def wait_until(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether process ``pid`` is still running (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here: ask the process itself
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Crash:
    """One test's folder, store, ledger and planner, and planexec run against them as processes."""

    tmp: Path

    @property
    def store(self) -> str:
        return f"sqlite:///{self.tmp / 'runs.db'}"

    @property
    def ledger_path(self) -> Path:
        return self.tmp / "ledger.jsonl"

    def ledger(self) -> list[dict[str, Any]]:
        if not self.ledger_path.exists():
            return []
        return [json.loads(line) for line in self.ledger_path.read_text().splitlines()]

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "0"}
        env.pop("PLANEXEC_STORE", None)
        return env

    def planexec(self, *args: str) -> subprocess.CompletedProcess[str]:
        """planexec as a process of its own: no terminal, no model service."""
        return subprocess.run(
            [*_command(), "--store", self.store, *args],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            timeout=PATIENCE * 2,
            check=False,
        )

    def run_and_kill(self, goal: str, plan: list[dict[str, Any]], answer: str) -> str:
        """Start ``planexec run`` with the ledger server, SIGKILL it once the server has applied the
        first call, make sure the server is gone too, and return the run's id."""
        planner = write_script(self.tmp, [{"steps": plan}, {"answer": answer}])
        server = f"{sys.executable} {LEDGER_SERVER} {self.ledger_path}"
        argv = [*_command(), "--store", self.store, "run", goal, "--planner", planner, "--mcp", server]
        with (
            (self.tmp / "first.out").open("w") as out,
            subprocess.Popen(
                [*argv, "--no-live", "--no-input"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.tmp,
                start_new_session=True,  # its own process group, so that nothing it starts outlives the test
            ) as proc,
        ):
            try:
                wait_until(lambda: proc.poll() is not None or bool(self.ledger()), "the first call")
                assert proc.poll() is None, (self.tmp / "first.out").read_text()
                proc.send_signal(signal.SIGKILL)
                proc.wait(PATIENCE)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == -signal.SIGKILL
        [first] = self.ledger()
        server_pid = first["pid"]
        try:
            # The server ran in a session of its own (the SDK starts it so): the kill did not reach
            # it, but the end of its stdin did, and it stopped with its call still under way.
            wait_until(lambda: not alive(server_pid), "the killed run's MCP server to stop")
        finally:
            if alive(server_pid) and os.getpgid(server_pid) == server_pid:
                os.killpg(server_pid, signal.SIGKILL)
        listed = json.loads(self.planexec("runs", "--json").stdout)
        [run] = listed
        assert run["status"] != "finished"
        return str(run["run_id"])

    def log(self, run_id: str) -> list[Event]:
        async def read() -> list[Event]:
            store = open_store(self.store)
            try:
                return [s.event for s in await store.read(run_id)]
            finally:
                await store.close()

        return asyncio.run(read())


@pytest.fixture
def crash(tmp_path: Path) -> Crash:
    return Crash(tmp=tmp_path)


def starts(events: list[Event], step_id: str) -> list[StepStarted]:
    return [e for e in events if isinstance(e, StepStarted) and e.step_id == step_id]


def test_an_idempotent_mcp_call_cut_off_by_a_crash_is_sent_again_with_the_same_key(crash: Crash) -> None:
    plan = [tool_step("pay", "deposit", {"account": "acme", "amount": 5})]
    run_id = crash.run_and_kill("pay acme 5", plan, "paid")
    [intent] = starts(crash.log(run_id), "pay")  # written before the call: the resume knows of it
    key = intent.idempotency_key
    assert key is not None
    assert crash.ledger()[0]["key"] == key

    resumed = crash.planexec("resume", run_id, "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["answer"] == "paid"
    [step] = data["steps"]
    assert step["output"] == {"result": f'deposit {{"account": "acme", "amount": 5}} under key {key}'}

    ledger = crash.ledger()
    # Sent twice with the same key, by two server processes; applied once.
    assert [(e["tool"], e["key"], e["applied"]) for e in ledger] == [("deposit", key, True), ("deposit", key, False)]
    assert ledger[0]["pid"] != ledger[1]["pid"]
    events = crash.log(run_id)
    assert [e.idempotency_key for e in starts(events, "pay")] == [key, key]
    assert [e.step_id for e in events if isinstance(e, StepSucceeded)] == ["pay"]


@pytest.mark.parametrize("choice", ["done", "retry"])
def test_a_non_idempotent_mcp_call_cut_off_by_a_crash_is_held_for_a_human(crash: Crash, choice: str) -> None:
    plan = [tool_step("tell", "notify", {"to": "oncall", "text": "acme was paid"})]
    run_id = crash.run_and_kill("tell oncall", plan, "told")
    [intent] = starts(crash.log(run_id), "tell")
    key = intent.idempotency_key
    assert crash.ledger()[0]["key"] == key

    # No terminal: the resumed run saves its question and waits (exit status 3); nothing is sent.
    held = crash.planexec("resume", run_id, "--no-live")
    assert held.returncode == 3, held.stdout + held.stderr
    assert "step tell held for a human" in held.stdout
    assert "--choice retry|skip|done" in held.stdout
    assert len(crash.ledger()) == 1, "the call was sent again without a human's word"
    events = crash.log(run_id)
    [hold] = [e for e in events if isinstance(e, StepHeld)]
    [asked] = [e for e in events if isinstance(e, ApprovalRequested)]
    assert (asked.subject, asked.step_id, asked.approval_id) == ("effect", "tell", hold.approval_id)

    # A second resume while it waits changes nothing either.
    again = crash.planexec("resume", run_id, "--no-live")
    assert again.returncode == 3, again.stdout + again.stderr
    assert len(crash.ledger()) == 1

    answer = ["--choice", choice] + (["--output", '"told by phone"'] if choice == "done" else [])
    settled = crash.planexec("approve", run_id, hold.approval_id, *answer, "--json")
    assert settled.returncode == 0, settled.stdout + settled.stderr
    data = json.loads(settled.stdout)
    assert data["answer"] == "told"
    [step] = data["steps"]
    ledger = crash.ledger()
    if choice == "done":  # the human's word is the output; the server is not asked again
        assert step["output"] == "told by phone"
        assert [(e["key"], e["applied"]) for e in ledger] == [(key, True)]
    else:  # sent again, with the same key: the server drops the duplicate
        assert step["output"] == {"result": f'notify {{"text": "acme was paid", "to": "oncall"}} under key {key}'}
        assert [(e["key"], e["applied"]) for e in ledger] == [(key, True), (key, False)]
    events = crash.log(run_id)
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(d.approval_id, d.choice) for d in decided] == [(hold.approval_id, choice)]
