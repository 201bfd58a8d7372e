"""Crash torture: a 34-step run in a real process (tests/crash_worker.py) is killed with SIGKILL at
random moments and resumed, again and again, until a resume finishes. Every effect must then have
happened exactly once with the key the uninterrupted run used, no step may have started again once
it had succeeded, and the answer must be the uninterrupted run's.

Ten seeded trials of six kills each that land while the worker runs: 60 such kills (at least 50
are promised). A kill's moment is paced by the run, not by a clock, so that a slow or busy machine
moves it no less: the worker reports each event as it adds it to the log, and the test kills it a
random 0-5 ms after a randomly chosen one of the events still to come (or after ``ready``, before
the log is even opened). Kills so land while the store is created or read, during planning,
between an effect and its record, while branches run in parallel, and during the final answer.
Should a run finish before its kill, the trial starts another run.

Last, an effect that is not safe to repeat is cut off by a kill right after it happened: the
resumed run holds it for a human instead of calling the tool again, and finishes once a human
marks it done.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from planexec.log import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    PlanProposed,
    RunState,
    StepHeld,
    StepStarted,
    StepSucceeded,
)
from planexec.store import SQLiteStore

from .crash_worker import PLANS, read_effects, side_effecting_steps

WORKER = Path(__file__).with_name("crash_worker.py")
RUN_ID = "torture"
TRIALS = 6
KILLS_PER_TRIAL = 6
RUNS_PER_TRIAL = 10
"""A trial starts another run when one finishes before its kills are done (bounded)."""
ROUNDS_PER_RUN = KILLS_PER_TRIAL + 10
"""Processes one run may take, killed or not, before it must have finished."""
KILL_DELAY = 0.005
"""A kill comes up to this many seconds after the event it waits for."""
PATIENCE = 60.0
"""Seconds a worker may take before the test gives up on it: only turns a hang into a failure."""


@dataclass(frozen=True)
class Paths:
    """Where one run keeps its log, the service's effects and calls, and the workers' stderr."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "runs.db"

    @property
    def effects(self) -> Path:
        return self.root / "effects.jsonl"

    @property
    def calls(self) -> Path:
        return self.root / "effects.jsonl.calls"

    @property
    def stderr(self) -> Path:
        return self.root / "stderr.log"

    @classmethod
    def make(cls, root: Path) -> Paths:
        root.mkdir(parents=True, exist_ok=True)
        return cls(root)

    def argv(self, scenario: str, *args: str) -> list[str]:
        return [
            sys.executable,
            str(WORKER),
            *("--db", str(self.db), "--effects", str(self.effects), "--run-id", RUN_ID, "--scenario", scenario),
            *args,
        ]


@dataclass(frozen=True)
class Kill:
    """SIGKILL the worker ``delay`` seconds after it reports its ``after``-th event (0: ``ready``)."""

    after: int
    delay: float


@dataclass(frozen=True)
class Outcome:
    """What one worker process did: its exit code, and the stop and answer it printed, if it got
    that far."""

    code: int
    stop: str | None = None
    answer: str | None = None

    @property
    def killed_mid_run(self) -> bool:
        return self.code == -signal.SIGKILL and self.stop is None

    @property
    def finished(self) -> bool:
        return self.stop is not None


def worker(paths: Paths, command: str, *extra: str, scenario: str = "torture", kill: Kill | None = None) -> Outcome:
    """Run the worker to its end, or kill it as ``kill`` says."""
    hung: list[bool] = []

    def watchdog() -> None:
        hung.append(True)
        proc.kill()

    with (
        paths.stderr.open("a") as err,
        subprocess.Popen(
            paths.argv(scenario, command, *extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        ) as proc,
    ):
        timer = threading.Timer(PATIENCE, watchdog)
        timer.start()
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line == "ready\n" and kill is not None:
                seen = 0
                while seen < kill.after and line.startswith(("ready", "event")):
                    line = proc.stdout.readline()
                    seen += 1
                if line.startswith(("ready", "event")):  # else the run ended first
                    time.sleep(kill.delay)
                    proc.send_signal(signal.SIGKILL)  # does nothing if the process has exited meanwhile
            out, _ = proc.communicate()
        finally:
            timer.cancel()
    if hung or proc.returncode not in (0, -signal.SIGKILL):
        problem = f"did not stop within {PATIENCE:g}s" if hung else f"exited with {proc.returncode}"
        pytest.fail(f"the worker ({command}) {problem}:\n{paths.stderr.read_text()}")
    last = (line + out).splitlines()[-1:]
    if last and last[0].startswith("{"):
        printed = json.loads(last[0])
        return Outcome(code=proc.returncode, stop=printed["stop"], answer=printed["answer"])
    assert proc.returncode != 0, f"the worker printed no result:\n{paths.stderr.read_text()}"
    return Outcome(code=proc.returncode)


def read_log(paths: Paths) -> list[Event]:
    async def read() -> list[Event]:
        store = SQLiteStore(paths.db)
        try:
            return [s.event for s in await store.read(RUN_ID)]
        finally:
            await store.close()

    return asyncio.run(read())


def read_calls(paths: Paths) -> list[dict[str, Any]]:
    """Every call the service received, deduplicated or not."""
    return [json.loads(line) for line in paths.calls.read_text().splitlines()] if paths.calls.exists() else []


def key(step_id: str) -> str:
    return f"{RUN_ID}:{step_id}:v1"


@dataclass(frozen=True)
class Reference:
    answer: str
    effects: dict[str, dict[str, Any]]
    """The effects by idempotency key."""


def run_whole(paths: Paths, scenario: str) -> Reference:
    outcome = worker(paths, "start", scenario=scenario)
    assert outcome.code == 0
    assert outcome.stop == "goal_met", outcome
    assert outcome.answer is not None
    effects = {e["key"]: e for e in read_effects(paths.effects)}
    return Reference(answer=outcome.answer, effects=effects)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    return run_whole(Paths.make(tmp_path_factory.mktemp("reference")), "torture")


def test_the_uninterrupted_run_is_the_reference(reference: Reference) -> None:
    steps = PLANS["torture"]()
    assert len(steps) >= 30
    assert reference.answer.startswith(f"{len(steps)} steps succeeded; report: L")
    effecting = side_effecting_steps("torture")
    assert len(effecting) == 13
    assert set(reference.effects) == {key(s) for s in effecting}


# -- the torture -------------------------------------------------------------------------------


def events_to_go(succeeded: int) -> int:
    """About how many events a worker adds before the run ends, when ``succeeded`` steps have:
    two for each other step, and the first and last few (started or resumed, planning, finishing)."""
    return 2 * (len(PLANS["torture"]()) - succeeded) + 4


def torture_one_run(paths: Paths, rng: random.Random, reference: Reference, kills: int) -> int:
    """Start the run, SIGKILL it at a random moment, resume it, kill it again, … ``kills`` times
    (fewer if it finishes first), then let a resume finish; check the whole; return the kills
    that landed while the worker ran."""
    landed, logged, done = 0, False, 0
    outcome = None
    for _ in range(ROUNDS_PER_RUN):
        kill = None
        if landed < kills:
            kill = Kill(after=rng.randrange(events_to_go(done)), delay=rng.uniform(0.0, KILL_DELAY))
        # killed before the run's first event was written, it is started again
        outcome = worker(paths, "resume" if logged else "start", kill=kill)
        if outcome.finished:
            break
        assert outcome.killed_mid_run
        landed += 1
        events = read_log(paths)
        logged, done = bool(events), len({e.step_id for e in events if isinstance(e, StepSucceeded)})
    assert outcome is not None
    assert outcome.finished, f"the run did not finish in {ROUNDS_PER_RUN} processes"
    assert outcome.stop == "goal_met", outcome
    assert outcome.answer == reference.answer
    check_effects(paths, reference)
    check_log(read_log(paths), reference)
    return landed


def check_effects(paths: Paths, reference: Reference) -> None:
    """Each side-effecting step's effect happened exactly once, as in the reference run."""
    effects = read_effects(paths.effects)
    keys = Counter(e["key"] for e in effects)
    assert [k for k, n in keys.items() if n > 1] == [], "effects happened twice"
    assert sorted(keys) == sorted(reference.effects), "effects are missing or unexpected"
    assert {e["key"]: e for e in effects} == reference.effects
    assert {c["key"] for c in read_calls(paths)} == set(reference.effects)


def check_log(events: list[Event], reference: Reference) -> None:
    """Every step of the final plan succeeded once, nothing was started again once it had
    succeeded, and side-effecting steps were always called with the reference's key."""
    state = RunState.fold(events)
    assert state.finished
    assert state.answer == reference.answer
    assert state.plan is not None
    effecting = side_effecting_steps("torture")
    version = 0
    succeeded: Counter[tuple[int, str]] = Counter()
    for e in events:
        if isinstance(e, PlanProposed):
            version = e.plan.version
        elif isinstance(e, StepSucceeded):
            succeeded[version, e.step_id] += 1
        elif isinstance(e, StepStarted):
            assert (version, e.step_id) not in succeeded, f"{e.step_id} started again after it had succeeded"
            assert e.idempotency_key == key(e.step_id) or e.step_id not in effecting
    final = state.plan.version
    assert {sid: succeeded[final, sid] for sid in state.plan.ids} == dict.fromkeys(state.plan.ids, 1)
    assert all(state.steps[sid].status == "succeeded" for sid in state.plan.ids)


@pytest.mark.parametrize("seed", range(TRIALS))
def test_killed_at_random_moments_and_resumed_every_effect_happens_once(
    seed: int, tmp_path: Path, reference: Reference
) -> None:
    rng = random.Random(seed)
    landed = 0
    for n in range(RUNS_PER_TRIAL):
        landed += torture_one_run(Paths.make(tmp_path / f"run{n}"), rng, reference, KILLS_PER_TRIAL - landed)
        if landed >= KILLS_PER_TRIAL:
            break
    assert landed >= KILLS_PER_TRIAL, f"only {landed} kills landed while a worker ran"


# -- an effect that is not safe to repeat ---------------------------------------------------------


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.005)


def test_an_unsafe_effect_cut_off_by_a_kill_is_held_and_settled_by_a_human(tmp_path: Path) -> None:
    reference = run_whole(Paths.make(tmp_path / "reference"), "unsafe")
    paths = Paths.make(tmp_path / "run")
    gate = paths.root / "gate"  # never created: once the message is sent, the tool waits for good
    argv = paths.argv("unsafe", "--gate", str(gate), "start")
    with (
        paths.stderr.open("a") as err,
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err) as proc,
    ):
        try:
            wait_until(lambda: proc.poll() is not None or bool(read_effects(paths.effects)), "the message")
            assert proc.poll() is None, paths.stderr.read_text()
            intents = [e for e in read_log(paths) if isinstance(e, StepStarted) and e.step_id == "notify"]
            assert [e.idempotency_key for e in intents] == [key("notify")]
        finally:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    sent = read_effects(paths.effects)
    assert [e["key"] for e in sent] == [key("notify")]

    waiting = worker(paths, "resume", scenario="unsafe")
    assert (waiting.stop, waiting.answer) == ("waiting", None)
    events = read_log(paths)
    held = [e for e in events if isinstance(e, StepHeld)]
    assert [e.step_id for e in held] == ["notify"]
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [(a.subject, a.step_id, a.approval_id) for a in asked] == [("effect", "notify", held[0].approval_id)]
    assert [c["key"] for c in read_calls(paths)] == [key("notify")], "the unsafe call was made again"

    answer = ("--approval", held[0].approval_id, "--output", json.dumps(sent[0]["result"]))
    settled = worker(paths, "resume", *answer, scenario="unsafe")
    assert (settled.stop, settled.answer) == ("goal_met", reference.answer)
    assert read_effects(paths.effects) == sent
    assert [c["key"] for c in read_calls(paths)] == [key("notify")]
    events = read_log(paths)
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(d.approval_id, d.choice) for d in decided] == [(held[0].approval_id, "done")]
    assert [e.step_id for e in events if isinstance(e, StepStarted)].count("notify") == 1
    assert RunState.fold(events).steps["notify"].status == "succeeded"
