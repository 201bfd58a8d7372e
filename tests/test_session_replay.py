"""Replaying a session: every turn re-run from its log, first to last, with no model and no tool
called, and the session checked as a whole — its turns numbered 1 to n, each planner shown the
record the earlier turns' logs give, each turn's caps within the session's. A store whose logs
were tampered with is reported at the turn that differs, never with a crash."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, Approvals, Budget, UsageError
from planexec.log import RunStarted, StepStarted
from planexec.models import ModelRequest
from planexec.runs import SessionReplay, replay_session
from planexec.runtime import RECORD_CHARS
from planexec.store import SQLiteStore
from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_script, write_tools_module
from tests.test_sessions import PLANS, Drive, turn_planner

GOALS = ("enter docs", "where am I", "where am I now")


@dataclass
class Recorded:
    """A session recorded in a store, and what it took to record it."""

    path: Path
    store: SQLiteStore
    runs: list[str]
    seen: list[ModelRequest]
    """Every request the planner got."""
    drive: Drive
    """The tools' state."""

    def untouched(self, requests: int) -> None:
        """Nothing was asked of the planner since it had ``requests``, and no tool changed the drive."""
        assert len(self.seen) == requests
        assert (self.drive.cwd, sorted(self.drive.files)) == ("/docs", ["/report.txt"])


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "runs.db")
    try:
        yield opened
    finally:
        await opened.close()


async def record(
    tmp_path: Path,
    store: SQLiteStore,
    goals: tuple[str, ...] = GOALS,
    *,
    session_id: str = "chat",
    budget: Budget | None = None,
    record_chars: int = RECORD_CHARS,
) -> Recorded:
    seen: list[ModelRequest] = []
    drive = Drive()
    agent = Agent(turn_planner(PLANS, seen), tools=drive.tools(), store=store, approvals=Approvals(deferred=True))
    session = agent.session(session_id, budget=budget, record_chars=record_chars)
    for goal in goals:
        await session.run(goal)
    runs = [t.run_id for t in session.turns]
    return Recorded(path=tmp_path / "runs.db", store=store, runs=runs, seen=seen, drive=drive)


def edit_event(path: Path, run_id: str, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Change one stored event in place, behind the store's back (as a hostile hand would)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        (run,) = db.execute("SELECT id FROM planexec_runs WHERE run_id = ?", (run_id,)).fetchone()
        (data,) = db.execute("SELECT data FROM planexec_events WHERE run = ? AND seq = ?", (run, seq)).fetchone()
        envelope = json.loads(data)
        change(envelope["event"])
        db.execute("UPDATE planexec_events SET data = ? WHERE run = ? AND seq = ?", (json.dumps(envelope), run, seq))


def edit_session_record(path: Path, run_id: str, change: Callable[[dict[str, Any]], None]) -> None:
    edit_event(path, run_id, 1, lambda event: change(event["config"]["session"]))


async def seq_of(store: SQLiteStore, run_id: str, kind: type[Any]) -> int:
    return next(s.seq for s in await store.read(run_id) if isinstance(s.event, kind))


# -- a faithful session ------------------------------------------------------------------------------


async def test_a_session_replays_turn_by_turn_and_holds_together(tmp_path: Path, store: SQLiteStore) -> None:
    rec = await record(tmp_path, store, budget=Budget(model_calls=20, cost=1.0))
    asked = len(rec.seen)
    report = await replay_session(store, "chat")
    assert isinstance(report, SessionReplay)
    assert report.reproduced, report.all_problems()
    assert report.first_problem() is None
    assert report.diverged is None
    assert not report.unfinished
    assert [(t.turn, t.run_id, t.status) for t in report.turns] == [
        (1, rec.runs[0], "finished"),
        (2, rec.runs[1], "finished"),
        (3, rec.runs[2], "finished"),
    ]
    for turn in report.turns:
        assert turn.replay is not None
        assert turn.replay.matched
        assert turn.replay.compared == turn.events
        assert (turn.record, turn.budget) == ("matched", "matched")
    rec.untouched(asked)


async def test_a_turn_left_waiting_in_the_middle_and_a_short_record_replay_too(
    tmp_path: Path, store: SQLiteStore
) -> None:
    await record(tmp_path, store, ("enter docs", "clean up", "where am I"), record_chars=120)
    report = await replay_session(store, "chat")
    assert report.reproduced, report.all_problems()
    assert [t.status for t in report.turns] == ["finished", "waiting", "finished"]
    assert [t.record for t in report.turns] == ["matched"] * 3


async def test_a_last_turn_waiting_for_a_human_is_reported_as_unfinished_not_as_an_error(
    tmp_path: Path, store: SQLiteStore
) -> None:
    await record(tmp_path, store, ("enter docs", "clean up"))
    report = await replay_session(store, "chat")
    assert report.reproduced
    assert report.unfinished
    assert report.turns[-1].status == "waiting"


async def test_a_last_turn_cut_short_by_a_crash_is_replayed_up_to_where_its_log_ends(
    tmp_path: Path, store: SQLiteStore
) -> None:
    scratch = SQLiteStore(tmp_path / "scratch.db")
    try:
        rec = await record(tmp_path, scratch)
        for run_id in rec.runs:
            events = [s.event for s in await scratch.read(run_id)]
            if run_id == rec.runs[-1]:
                events = events[: next(i for i, e in enumerate(events) if isinstance(e, StepStarted)) + 1]
            await store.append(run_id, events, expected_seq=0)
    finally:
        await scratch.close()
    report = await replay_session(store, "chat")
    assert report.reproduced, report.all_problems()
    assert report.unfinished
    last = report.turns[-1]
    assert last.status == "unfinished"
    assert last.replay is not None
    assert last.replay.compared == last.events == 6


async def test_an_unknown_session_or_a_malformed_id_is_a_usage_error(store: SQLiteStore) -> None:
    with pytest.raises(UsageError) as caught:
        await replay_session(store, "nobody")
    assert [(p.code, p.where) for p in caught.value.problems] == [("unknown_session", "session_id")]
    with pytest.raises(UsageError) as caught:
        await replay_session(store, "no spaces")
    assert [p.where for p in caught.value.problems] == ["session_id"]


# -- a tampered store --------------------------------------------------------------------------------


Tamper = Callable[[Recorded], Awaitable[None]]


async def change_a_step(rec: Recorded) -> None:
    seq = await seq_of(rec.store, rec.runs[1], StepStarted)
    edit_event(rec.path, rec.runs[1], seq, lambda e: e.update(args={"folder": "elsewhere"}))


async def damage_an_event(rec: Recorded) -> None:
    with closing(sqlite3.connect(rec.path, isolation_level=None)) as db:
        (run,) = db.execute("SELECT id FROM planexec_runs WHERE run_id = ?", (rec.runs[1],)).fetchone()
        db.execute("UPDATE planexec_events SET data = '{not json' WHERE run = ? AND seq = 3", (run,))


async def drop_a_turn(rec: Recorded) -> None:
    assert await rec.store.delete(rec.runs[1])


async def claim_a_turn_twice(rec: Recorded) -> None:
    events = [s.event for s in await rec.store.read(rec.runs[1])]
    first = events[0]
    assert isinstance(first, RunStarted)
    await rec.store.append("intruder", [replace(first, run_id="intruder"), *events[1:]], expected_seq=0)


async def rewrite_the_record(rec: Recorded) -> None:
    edit_session_record(rec.path, rec.runs[2], lambda s: s.update(earlier="Earlier in this conversation:\nTurn 1: x"))


async def widen_the_caps(rec: Recorded) -> None:
    def wider(event: dict[str, Any]) -> None:
        event["budget"]["model_calls"] = 50
        event["config"]["session"]["budget"]["model_calls"] = 50

    edit_event(rec.path, rec.runs[1], 1, wider)


async def change_only_the_run_caps(rec: Recorded) -> None:
    edit_event(rec.path, rec.runs[2], 1, lambda e: e["budget"].update(tool_calls=999))


async def move_a_turn_to_another_session(rec: Recorded) -> None:
    edit_session_record(rec.path, rec.runs[2], lambda s: s.update(id="elsewhere"))


async def renumber_a_turn_far_away(rec: Recorded) -> None:
    edit_session_record(rec.path, rec.runs[2], lambda s: s.update(turn=10**15))


async def break_the_set_up(rec: Recorded) -> None:
    edit_event(rec.path, rec.runs[1], 1, lambda e: e["config"].update(tools=5, limits={"nonsense": 1}))


@pytest.mark.parametrize(
    ("tamper", "where", "code"),
    [
        (change_a_step, "turn 2", "diverged"),
        (damage_an_event, "turn 2", "unreadable"),
        (drop_a_turn, "turn 2", "missing_turn"),
        (claim_a_turn_twice, "turn 2", "duplicate_turn"),
        (rewrite_the_record, "turn 3", "record"),
        (widen_the_caps, "turn 2", "budget"),
        (change_only_the_run_caps, "turn 3", "budget"),
        (move_a_turn_to_another_session, "turn 3", "listing"),
        (renumber_a_turn_far_away, "turn 3", "missing_turn"),
        (break_the_set_up, "turn 2", "not_replayable"),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
async def test_a_tampered_store_is_reported_at_the_turn_that_differs(
    tmp_path: Path, store: SQLiteStore, tamper: Tamper, where: str, code: str
) -> None:
    rec = await record(tmp_path, store, budget=Budget(model_calls=20))
    asked = len(rec.seen)
    await tamper(rec)
    report = await replay_session(store, "chat")
    assert not report.reproduced
    first = report.first_problem()
    assert first is not None
    assert first.where.startswith(where), report.all_problems()
    assert first.code == code, report.all_problems()
    assert report.turns[0].reproduced  # what came before is untouched
    rec.untouched(asked)


async def test_what_a_tampered_turn_says_and_what_it_leaves_unchecked(tmp_path: Path, store: SQLiteStore) -> None:
    rec = await record(tmp_path, store, budget=Budget(model_calls=20))
    await change_a_step(rec)
    report = await replay_session(store, "chat")
    second, third = report.turns[1], report.turns[2]
    assert second.replay is not None
    assert not second.replay.matched
    [diverged] = second.problems
    assert diverged.where == f"turn 2 (run {rec.runs[1]})"
    assert "did not replay as recorded: event 6: the log has step_started" in diverged.message
    # the third turn's planner was shown the second turn as it ran, not as the log now says
    assert third.replay is not None
    assert third.replay.matched
    assert third.record == "differs"
    assert third.problems[0].message.endswith(
        """from line 6: recorded '  here: pwd() -> "/docs"', """
        """the logs give '  here: pwd({"folder":"elsewhere"}) -> "/docs"'"""
    )

    await drop_a_turn(rec)
    report = await replay_session(store, "chat")
    assert [t.turn for t in report.turns] == [1, 3]
    assert report.turns[1].record == "not_checked"  # the turn before it is gone: said once, for the session
    assert report.turns[1].reproduced
    assert [p.message for p in report.problems] == ["no run of the session is turn 2 (its turns are numbered 1 to 3)"]


async def test_caps_beyond_the_session_budget_and_a_record_of_another_bound_are_named(
    tmp_path: Path, store: SQLiteStore
) -> None:
    rec = await record(tmp_path, store, budget=Budget(model_calls=20), record_chars=60)
    await widen_the_caps(rec)
    edit_session_record(rec.path, rec.runs[2], lambda s: s.pop("record_chars"))  # as turns kept before it was
    report = await replay_session(store, "chat")
    [caps] = report.turns[1].problems
    assert caps.message == (
        "its caps are not within what the session's caps allowed after the turn before: model_calls 50 (expected 18)"
    )
    [bound] = report.turns[2].problems
    assert bound.code == "record"
    assert bound.message.endswith("(rebuilt within 6,000 characters, the default)")


# -- from the command line ---------------------------------------------------------------------------


def cli_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    tools = write_tools_module(tmp_path, monkeypatch, ARITHMETIC_TOOLS, "replay_tools")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    add = {"steps": [{"id": "a", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}
    script = write_script(tmp_path, [add, {"answer": "3"}])
    common = ["--planner", script, "--tools", f"{tools}:add", "--store", store, "--no-live", "--json"]
    runs = []
    for goal in ("add 1 and 2", "and again"):
        ran = invoke(["run", goal, *common, "--session", "cli-chat"])
        assert ran.exit_code == 0, ran.output
        runs.append(json.loads(ran.stdout)["run_id"])
    return store, runs


def test_the_command_line_replays_a_session_line_by_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, runs = cli_session(tmp_path, monkeypatch)
    shown = invoke(["replay", "--session", "cli-chat", "--store", store])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == "session cli-chat: 2 runs replayed, first turn to last"
    assert lines[1].startswith(f"  turn 1  run {runs[0]}  finished  replayed exactly (")
    assert lines[2].startswith(f"  turn 2  run {runs[1]}  finished  replayed exactly (")
    assert lines[3].startswith("session cli-chat replayed exactly: 2 turns, ")
    assert lines[4] == "no model and no tool was called"

    doc = json.loads(invoke(["replay", "--session", "cli-chat", "--store", store, "--json"]).stdout)
    assert (doc["session_id"], doc["reproduced"], doc["unfinished"], doc["problems"]) == ("cli-chat", True, False, [])
    assert [(t["turn"], t["run_id"], t["matched"], t["record"]) for t in doc["turns"]] == [
        (1, runs[0], True, "matched"),
        (2, runs[1], True, "matched"),
    ]

    edit_session_record(tmp_path / "runs.db", runs[1], lambda s: s.update(earlier="Earlier: nothing at all"))
    tampered = invoke(["replay", "--session", "cli-chat", "--store", store])
    assert tampered.exit_code == 1, tampered.output
    assert "    - record: the record of the earlier turns its planner was shown is not what their logs say" in (
        tampered.stdout
    )
    assert f"did not replay as recorded (1 problem); the first at turn 2 (run {runs[1]}): " in tampered.stdout
    doc = json.loads(invoke(["replay", "--session", "cli-chat", "--store", store, "--json"]).stdout)
    assert doc["reproduced"] is False
    assert [p["code"] for p in doc["turns"][1]["problems"]] == ["record"]


def test_the_command_line_refuses_to_fork_a_session_listing_every_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, runs = cli_session(tmp_path, monkeypatch)
    refused = invoke(
        ["replay", runs[0], "--session", "cli-chat", "--fork-at", "3", "--fail", "a", "--planner", "x", "--no-input"]
    )
    assert refused.exit_code == 2
    assert "5 problems" in refused.stderr
    for flag in ("RUN: give a run or --session, not both", "--fork-at: only for one run", "--fail:", "--planner:"):
        assert flag in refused.stderr
    assert "--no-input:" in refused.stderr
    unknown = invoke(["replay", "--session", "nobody", "--store", store])
    assert unknown.exit_code == 2
    assert "--session: no session 'nobody' in sqlite:///" in unknown.stderr
    bad = invoke(["replay", "--session", "no spaces", "--store", store])
    assert bad.exit_code == 2
    assert "--session: must be 1 to 200 letters" in bad.stderr
    neither = invoke(["replay", "--store", store])
    assert neither.exit_code == 2
    assert "RUN: give the run to replay (or --session ID for a whole session)" in neither.stderr


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("budget", "lots", "budget"),
        ("session_budget", {"model_calls": "many"}, "budget"),
        ("record_chars", -5, "record"),
    ],
)
async def test_a_session_record_field_that_cannot_be_read_is_named(
    tmp_path: Path, store: SQLiteStore, field: str, value: Any, code: str
) -> None:
    """A resumed or forked turn would go on without it (with the agent's caps, or the default
    bound): the replay says so instead of calling the session reproduced."""
    rec = await record(tmp_path, store, budget=Budget(model_calls=20))
    edit_session_record(rec.path, rec.runs[1], lambda s: s.update({field: value}))
    report = await replay_session(store, "chat")
    assert not report.reproduced
    [problem] = report.all_problems()
    assert (problem.code, problem.where) == (code, f"turn 2 (run {rec.runs[1]})")
    assert problem.message == f"its session record's {field} cannot be read: {value!r}"
    assert getattr(report.turns[1], code) == "differs"
