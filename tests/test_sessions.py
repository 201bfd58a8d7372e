"""Sessions: goals run one after another as turns of one conversation, with the same tools and their
state; the planner of each turn sees the earlier turns; each turn is a run in the store, linked to
the session, that can be listed, resumed and replayed; budgets per turn and per session."""

from __future__ import annotations

from typing import Any

import pytest

from planexec import Agent, Approvals, Budget, UsageError, tool
from planexec.log import ApprovalDecided, ApprovalRequested
from planexec.models import FunctionModel, ModelRequest
from planexec.runtime import replay_log
from planexec.store import MemoryStore, SQLiteStore
from tests.support import tool_step


class Drive:
    """A stateful tool backend: a working directory that turns build on."""

    def __init__(self) -> None:
        self.cwd = "/"
        self.files: dict[str, str] = {"/report.txt": "budget analysis"}

    def tools(self) -> list[Any]:
        @tool
        def cd(folder: str) -> str:
            """Change the working directory."""
            self.cwd = f"{self.cwd.rstrip('/')}/{folder}"
            return self.cwd

        @tool
        def pwd() -> str:
            """The working directory."""
            return self.cwd

        @tool(sensitive=True, side_effect=True)
        def remove(name: str) -> str:
            """Remove a file."""
            self.files.pop(f"/{name}", None)
            return f"removed {name}"

        return [cd, pwd, remove]


def turn_planner(plans: dict[str, Any], seen: list[ModelRequest]) -> FunctionModel:
    """A planner that plans each turn from its goal (the key that the goal starts with)."""

    def reply(request: ModelRequest) -> Any:
        seen.append(request)
        goal = next(m.content for m in request.messages if m.content.startswith("Goal:"))
        key = next(k for k in plans if k in goal)
        if request.purpose == "planner.finish":
            return {"answer": f"done: {key}"}
        return plans[key]

    return FunctionModel(reply, name="turns")


PLANS = {
    "enter docs": {"steps": [tool_step("go", "cd", {"folder": "docs"})]},
    "where am I": {"steps": [tool_step("here", "pwd", {})]},
    "clean up": {"steps": [tool_step("rm", "remove", {"name": "report.txt"})]},
}


async def test_turns_share_the_tools_state_and_each_planner_sees_the_turns_before() -> None:
    drive = Drive()
    seen: list[ModelRequest] = []
    store = MemoryStore()
    agent = Agent(turn_planner(PLANS, seen), tools=drive.tools(), store=store)
    session = agent.session("chat-1")
    first = await session.run("enter docs")
    second = await session.run("where am I now?")
    assert (first.stop.kind, second.stop.kind) == ("goal_met", "goal_met")
    assert second.outputs["here"] == "/docs"  # the state the first turn left
    assert [t.run_id for t in session.turns] == [first.run_id, second.run_id]

    # the second turn's planner was shown the first turn: its goal, what its steps did, its answer
    turn_two = [r for r in seen if any("where am I" in m.content for m in r.messages)]
    assert turn_two
    record = next(m.content for m in turn_two[0].messages if m.content.startswith("Earlier in this conversation"))
    assert "Turn 1: enter docs" in record
    assert 'go: cd({"folder":"docs"}) -> "/docs"' in record
    assert "answer: done: enter docs" in record
    first_requests = [r for r in seen if any("Goal: enter docs" in m.content for m in r.messages)]
    assert not any(m.content.startswith("Earlier") for r in first_requests for m in r.messages)

    # each turn is a run of the store, linked to the session
    rows = await store.list_runs(session="chat-1")
    assert sorted((r.turn, r.run_id) for r in rows) == [(1, first.run_id), (2, second.run_id)]


async def test_a_session_budget_caps_its_turns_together() -> None:
    seen: list[ModelRequest] = []
    agent = Agent(turn_planner(PLANS, seen), tools=Drive().tools(), store=None)
    session = agent.session(budget=Budget(model_calls=3))
    first = await session.run("enter docs")  # a plan and an answer: two calls
    assert first.stop.kind == "goal_met"
    assert first.model_calls == 2
    second = await session.run("where am I")  # one call left: the plan, then no answer
    assert second.stop.kind == "budget_exhausted"
    assert second.stop.budget == "model_calls"
    third = await session.run("where am I")  # nothing left: it stops before its first call
    assert third.stop.kind == "budget_exhausted"
    assert third.model_calls == 0
    # a turn's own cap is lowered to what the session allows, never raised
    wide = agent.session(budget=Budget(model_calls=10))
    capped = await wide.run("enter docs", budget=Budget(model_calls=1))
    assert capped.stop.kind == "budget_exhausted"


async def test_a_session_goes_on_from_the_store_in_a_new_agent_and_its_unfinished_turn_resumes(tmp_path: Any) -> None:
    drive = Drive()
    seen: list[ModelRequest] = []
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        agent = Agent(turn_planner(PLANS, seen), tools=drive.tools(), store=store, approvals=Approvals(deferred=True))
        session = agent.session("chat-2", budget=Budget(model_calls=20))
        await session.run("enter docs")
        waiting = await session.run("clean up")  # a sensitive step: saved for a human, the run waits
        assert waiting.stop.kind == "waiting"
        [asked] = [e for e in waiting.events if isinstance(e, ApprovalRequested)]
        last = await store.last_seq(waiting.run_id)
        decided = ApprovalDecided(at=1.0, approval_id=asked.approval_id, approved=True, by="ops")
        await store.append(waiting.run_id, [decided], expected_seq=last)

        again = Agent(turn_planner(PLANS, seen), tools=drive.tools(), store=store, approvals=Approvals(deferred=True))
        reopened = await again.open_session("chat-2", budget=Budget(model_calls=20))
        assert len(reopened.turns) == 1
        assert reopened.unfinished == waiting.run_id
        with pytest.raises(UsageError, match="unfinished"):
            reopened.start("where am I")
        seen.clear()
        done = await reopened.resume()
        assert done.stop.kind == "goal_met", done.stop
        assert "/report.txt" not in drive.files
        # the resumed turn's planner saw the same record of turn 1 as when it began
        assert any(m.content.startswith("Earlier in this conversation") for r in seen for m in r.messages)
        third = await reopened.run("where am I")
        assert third.outputs["here"] == "/docs"
        rows = await store.list_runs(session="chat-2")
        assert sorted(r.turn for r in rows if r.turn is not None) == [1, 2, 3]
        record = reopened.record()
        assert record is not None
        assert "Turn 2: clean up" in record
        assert "Turn 3: where am I" in record

        # every turn replays exactly from its log
        for row in rows:
            log = [s.event for s in await store.read(row.run_id)]
            report = await replay_log(log)
            assert report.matched, report.divergence
        empty = await again.open_session("chat-nobody")
        assert empty.turns == ()
        assert empty.unfinished is None
    finally:
        await store.close()


async def test_long_sessions_keep_the_record_within_its_bound() -> None:
    seen: list[ModelRequest] = []
    agent = Agent(turn_planner(PLANS, seen), tools=Drive().tools(), store=None)
    session = agent.session(record_chars=300)
    assert session.record() is None
    for _ in range(12):
        await session.run("enter docs")
    record = session.record()
    assert record is not None
    assert len(record) <= 300 + len("Earlier in this conversation:\n")
    assert "Turn 12: enter docs" in record
    assert "left out" in record


def test_bad_sessions_are_refused_with_every_problem() -> None:
    agent = Agent(FunctionModel(lambda r: {"answer": "x"}), store=None)
    with pytest.raises(UsageError) as caught:
        agent.session("no spaces allowed", budget="lots", record_chars=-1)  # type: ignore[arg-type]
    assert {p.where for p in caught.value.problems} == {"session_id", "budget", "record_chars"}


# -- from the command line ------------------------------------------------------------------------------


def test_the_command_line_runs_turns_of_a_session_and_lists_them(tmp_path: Any, monkeypatch: Any) -> None:
    import json

    from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_script, write_tools_module

    tools = write_tools_module(tmp_path, monkeypatch, ARITHMETIC_TOOLS, "session_tools")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    add = {"steps": [{"id": "a", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}
    script = write_script(tmp_path, [add, {"answer": "3"}])
    common = ["--planner", script, "--tools", f"{tools}:add", "--store", store, "--no-live"]
    first = invoke(["run", "add 1 and 2", *common, "--session", "cli-chat"])
    assert first.exit_code == 0, first.output
    second = invoke(["run", "and again", *common, "--session", "cli-chat"])
    assert second.exit_code == 0, second.output
    listed = invoke(["sessions", "--store", store, "--json"])
    assert listed.exit_code == 0, listed.output
    [session] = json.loads(listed.output)
    assert (session["session_id"], session["turns"], session["status"]) == ("cli-chat", 2, "finished")
    turns = invoke(["sessions", "cli-chat", "--store", store, "--json"])
    assert [t["turn"] for t in json.loads(turns.output)["turns"]] == [1, 2]
    assert [t["goal"] for t in json.loads(turns.output)["turns"]] == ["add 1 and 2", "and again"]
    bad = invoke(["run", "x", *common, "--session", "no spaces"])
    assert bad.exit_code == 2
    assert "--session" in bad.output
    memory = invoke(["run", "x", *common[:-3], "--store", "memory://", "--no-live", "--session", "m"])
    assert memory.exit_code == 2
    assert "lasting" in memory.output


async def test_a_session_opened_again_goes_on_under_the_caps_it_began_with(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        first_agent = Agent(turn_planner(PLANS, []), tools=Drive().tools(), store=store)
        first = await first_agent.session("capped", budget=Budget(model_calls=3)).run("enter docs")
        assert first.model_calls == 2
        again = await Agent(turn_planner(PLANS, []), tools=Drive().tools(), store=store).open_session("capped")
        assert again.budget is not None
        assert again.budget.model_calls == 3
        second = await again.run("where am I")  # one call left of the session's three
        assert second.stop.kind == "budget_exhausted"
        wider = await Agent(turn_planner(PLANS, []), tools=Drive().tools(), store=store).open_session(
            "capped", budget=Budget(model_calls=10)
        )
        assert (await wider.run("where am I")).stop.kind == "goal_met"  # caps given again replace them
    finally:
        await store.close()


def test_the_command_line_caps_a_session_and_later_turns_keep_the_cap(tmp_path: Any, monkeypatch: Any) -> None:
    from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_script, write_tools_module

    tools = write_tools_module(tmp_path, monkeypatch, ARITHMETIC_TOOLS, "capped_tools")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    add = {"steps": [{"id": "a", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}
    script = write_script(tmp_path, [add, {"answer": "3"}])
    common = ["--planner", script, "--tools", f"{tools}:add", "--store", store, "--no-live"]
    capped = ["--session", "cli-capped", "--session-budget", "model_calls=3", "--session-budget", "cost=0.5"]
    first = invoke(["run", "add 1 and 2", *common, *capped])
    assert first.exit_code == 0, first.output
    second = invoke(["run", "and again", *common, "--session", "cli-capped"])  # one call of three left
    assert second.exit_code == 1, second.output
    assert "model_calls" in second.output
    bad = invoke(["run", "x", *common, "--session-budget", "colour=3", "--session-budget", "steps=many"])
    assert bad.exit_code == 2
    for problem in ("caps a session", "'colour=3'", "'many' is not a number"):
        assert problem in bad.output, bad.output
    negative = invoke(["run", "x", *common, "--session", "s2", "--session-budget", "steps=-1"])
    assert negative.exit_code == 2
    assert "--session-budget" in negative.output
