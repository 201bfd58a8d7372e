"""Durable operations on stored runs through ``planexec.runs``: every test talks to a real SQLite
file, and a second store opened on the same file stands in for another process."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from planexec import ApprovalDecision, Plan, UsageError
from planexec.log import ApprovalDecided, InformationAdded, RunState, load_event
from planexec.runs import (
    SPEC_VERSION,
    AgentSpec,
    ImportRef,
    answer,
    build_agent,
    export_lines,
    gc,
    list_runs,
    load_run,
    open_questions,
    parse_age,
    pick_question,
    read_run,
    resume,
    tell,
)
from planexec.store import SQLiteStore

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

PLAN = {
    "steps": [
        {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
        {
            "id": "pub",
            "description": "Publish it",
            "tool": "publish",
            "args": {"value": "${sum}"},
            "depends_on": ["sum"],
        },
    ]
}
FINAL = {"answer": "published 5"}


@pytest.fixture
def tools_ref(tmp_path: Path) -> str:
    name = f"runs_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(TOOLS)
    return f"{name}:TOOLS"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "runs.db")
    yield s
    await s.close()


def _spec(tmp_path: Path, tools_ref: str, replies: list[Any], **fields: Any) -> AgentSpec:
    script = tmp_path / f"planner-{uuid.uuid4().hex[:6]}.json"
    script.write_text(json.dumps(replies))
    return AgentSpec(planner=f"scripted:{script}", tools=(tools_ref,), cwd=str(tmp_path), **fields).recorded()


async def _waiting_run(store: SQLiteStore, spec: AgentSpec, goal: str = "publish the sum") -> str:
    """A run started from ``spec`` with plan approval on and no approver: it suspends on its plan."""
    agent = build_agent(spec, store=store)
    result = await agent.start(goal, metadata=spec.metadata()).result()
    assert result.stop.kind == "waiting"
    return result.run_id


async def test_a_run_suspended_on_its_plan_is_answered_and_resumed_from_another_process(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True)
    run_id = await _waiting_run(store, spec)

    other = SQLiteStore(tmp_path / "runs.db")  # another process's view of the same file
    try:
        [view] = await open_questions(other)
        assert (view.run_id, view.kind) == (run_id, "plan")
        state = RunState.fold(await load_run(other, run_id))
        question = pick_question(state)
        assert question.approval_id == view.question_id
        assert pick_question(state, question.approval_id) == question
        with pytest.raises(UsageError) as unknown:
            pick_question(state, "a-nope")
        assert [p.where for p in unknown.value.problems] == ["approval_id"]
        state = await answer(other, run_id, ApprovalDecision(approved=True, by="ana", reason="fine"))
        assert state.approvals[question.approval_id].approved is True
        assert state.pending_approvals == []
        run = await resume(other, run_id)  # the agent rebuilt from the spec the run recorded
        result = await run.result()
    finally:
        await other.close()
    assert result.stop.kind == "goal_met"
    assert result.answer == "published 5"
    decided = [e for e in (await load_run(store, run_id)) if isinstance(e, ApprovalDecided)]
    assert [(d.by, d.reason, d.approved) for d in decided] == [("ana", "fine", True)]


async def test_an_answer_lists_every_problem_at_once(tmp_path: Path, tools_ref: str, store: SQLiteStore) -> None:
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True)
    run_id = await _waiting_run(store, spec)
    edited = Plan.model_validate({"steps": [{"id": "x", "description": "wipe", "tool": "rm_rf", "args": {}}]})
    with pytest.raises(UsageError) as caught:
        await answer(
            store,
            run_id,
            ApprovalDecision(approved=True, choice="retry", text="hello", edited_plan=edited),
        )
    wheres = sorted(p.where for p in caught.value.problems)
    assert "edited_plan" in wheres
    assert sum(1 for p in caught.value.problems if "approval" in p.where) >= 2  # the choice and the text
    assert any("rm_rf" in p.message for p in caught.value.problems)
    with pytest.raises(UsageError) as unknown:
        await answer(store, run_id, ApprovalDecision(approved=True), approval_id="a-nope")
    assert [p.where for p in unknown.value.problems] == ["approval_id"]
    with pytest.raises(UsageError) as not_a_decision:
        await answer(store, run_id, {"approved": True})  # type: ignore[arg-type]
    assert [p.where for p in not_a_decision.value.problems] == ["decision"]
    state = RunState.fold(await load_run(store, run_id))
    assert len(state.pending_approvals) == 1  # nothing was written


async def test_two_processes_answering_the_same_question_at_once_record_one_answer(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True)
    run_id = await _waiting_run(store, spec)
    stores = [SQLiteStore(tmp_path / "runs.db") for _ in range(4)]
    try:
        outcomes = await asyncio.gather(
            *(answer(s, run_id, ApprovalDecision(approved=n % 2 == 0, by=f"h{n}")) for n, s in enumerate(stores)),
            return_exceptions=True,
        )
    finally:
        for s in stores:
            await s.close()
    won = [o for o in outcomes if isinstance(o, RunState)]
    refused = [o for o in outcomes if isinstance(o, UsageError)]
    assert (len(won), len(refused)) == (1, 3)
    decided = [e for e in await load_run(store, run_id) if isinstance(e, ApprovalDecided)]
    assert len(decided) == 1


async def test_a_finished_run_can_neither_be_answered_nor_told(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL])
    agent = build_agent(spec, store=store)
    result = await agent.start("publish", metadata=spec.metadata()).result()
    assert result.stop.kind == "goal_met"
    with pytest.raises(UsageError, match="finished"):
        await answer(store, result.run_id, ApprovalDecision(approved=True))
    with pytest.raises(UsageError, match="finished"):
        await tell(store, result.run_id, "too late")
    with pytest.raises(UsageError) as unknown:
        await tell(store, "no-such-run", "hello")
    assert [p.code for p in unknown.value.problems] == ["unknown_run"]


async def test_telling_a_waiting_run_is_logged_and_checked(tmp_path: Path, tools_ref: str, store: SQLiteStore) -> None:
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True)
    run_id = await _waiting_run(store, spec)
    with pytest.raises(UsageError) as bad:
        await tell(store, run_id, "   ", by="", constraint="yes")  # type: ignore[arg-type]
    assert sorted(p.where for p in bad.value.problems) == ["by", "constraint", "text"]
    with pytest.raises(UsageError, match="longer than"):
        await tell(store, run_id, "x" * 1_000_001)
    await tell(store, run_id, "budget is tight", constraint=True, by="ops")
    told = [e for e in await load_run(store, run_id) if isinstance(e, InformationAdded)]
    assert [(t.text, t.constraint, t.by) for t in told] == [("budget is tight", True, "ops")]


async def test_listing_reading_and_exporting(tmp_path: Path, tools_ref: str, store: SQLiteStore) -> None:
    done = build_agent(_spec(tmp_path, tools_ref, [PLAN, FINAL]), store=store)
    finished = (await done.start("one").result()).run_id
    waiting = await _waiting_run(store, _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True))
    assert {s.run_id for s in await list_runs(store)} == {finished, waiting}
    assert [s.run_id for s in await list_runs(store, status="waiting")] == [waiting]
    assert len(await list_runs(store, limit=1)) == 1
    with pytest.raises(UsageError) as bad:
        await list_runs(store, status="sleeping", limit=0)
    assert sorted(p.where for p in bad.value.problems) == ["limit", "status"]

    stored = await read_run(store, finished)
    assert stored.found
    assert not stored.unreadable
    lines = list(export_lines(stored.events))
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in lines)
    assert [load_event(json.loads(line)) for line in lines] == list(stored.events)
    missing = await read_run(store, "nope")
    assert not missing.found


async def test_a_damaged_log_is_read_as_far_as_it_can_be(tmp_path: Path, tools_ref: str, store: SQLiteStore) -> None:
    agent = build_agent(_spec(tmp_path, tools_ref, [PLAN, FINAL]), store=store)
    run_id = (await agent.start("one").result()).run_id
    total = len((await read_run(store, run_id)).events)

    with sqlite3.connect(tmp_path / "runs.db") as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        table = next(t for t in tables if "event" in t)
        columns = [r[1] for r in db.execute(f"pragma table_info({table})")]
        body = next(c for c in columns if c in ("data", "body", "payload", "event"))
        db.execute(f"update {table} set {body} = '{{not json' where seq = 3")
    stored = await read_run(store, run_id)
    assert len(stored.events) == total - 1
    assert len(stored.unreadable) == 1
    with pytest.raises(UsageError) as caught:
        await load_run(store, run_id)
    assert {p.code for p in caught.value.problems} == {"unreadable"}
    with pytest.raises(UsageError):
        await resume(store, run_id)


async def test_gc_deletes_only_old_runs(tmp_path: Path, tools_ref: str, store: SQLiteStore) -> None:
    agent = build_agent(_spec(tmp_path, tools_ref, [PLAN, FINAL]), store=store)
    run_id = (await agent.start("one").result()).run_id
    assert await gc(store, older_than=3600) == []
    later = (await list_runs(store))[0].updated_at + 7200
    assert await gc(store, older_than=3600, dry_run=True, now=later) == [run_id]
    assert [s.run_id for s in await list_runs(store)] == [run_id]
    assert await gc(store, older_than=3600, now=later) == [run_id]
    assert await list_runs(store) == []
    for bad in (-1, float("nan"), "30d", True):
        with pytest.raises(UsageError):
            await gc(store, older_than=bad)  # type: ignore[arg-type]
    assert parse_age("30d") == 30 * 86400
    assert parse_age(" 90m ") == 5400
    for text in ("30", "d", "-1d", "1e3d", "9" * 40 + "s", "30 days"):
        with pytest.raises(UsageError):
            parse_age(text)


def test_a_spec_survives_its_json_and_a_hostile_one_lists_every_problem() -> None:
    spec = AgentSpec(
        planner="openai:gpt-4.1-mini",
        tools=("pkg.mod:TOOLS",),
        executors=("pkg.deploy:EXECUTORS",),
        memory=True,
        budget={"steps": "10", "cost": "none"},
        rules={"on_fail": "retry", "review_items": ("cites sources",)},
        planner_settings=("temperature=0.2",),
    )
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["version"] == SPEC_VERSION
    assert AgentSpec.from_dict(data) == spec
    assert AgentSpec.from_dict({"planner": "scripted:x.json"}) == AgentSpec(planner="scripted:x.json")  # version 1

    hostile = {
        "version": 99,
        "planner": 7,
        "tools": "pkg:TOOLS",
        "executors": [3],
        "memory": "yes",
        "budget": {"steps": 5},
        "approve_plan": "yes",
        "rules": {"judge": ["a"], "rm": "-rf"},
        "shell": "echo",
    }
    with pytest.raises(UsageError) as caught:
        AgentSpec.from_dict(hostile)
    found = " ".join(p.message for p in caught.value.problems)
    for key in (
        "version",
        "planner",
        "tools",
        "executors",
        "budget",
        "approve_plan",
        "rules.judge",
        "rules.rm",
        "shell",
    ):
        assert repr(key) in found
    with pytest.raises(UsageError):
        AgentSpec.from_dict(["not", "an", "object"])  # type: ignore[arg-type]


def test_building_from_a_bad_spec_lists_every_problem(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "b.db")
    spec = AgentSpec(
        policy="sideways",
        tools=("no_such_module_here:TOOLS",),
        budget={"steps": "-3", "tokens": "5"},
        executor_settings=("temperature=0.1",),
        step_timeout="0",
        rules={"on_fail": "shrug"},
        executors=("no_such_module_here:EX", "json:dumps", "planexec.executor:ToolExecutor"),
    )
    with pytest.raises(UsageError) as caught:
        build_agent(spec, store=store)
    wheres = {p.where for p in caught.value.problems}
    assert {
        "executors 'no_such_module_here:EX'",
        "executors 'json:dumps'",
        "executors 'planexec.executor:ToolExecutor'",
        "planner",
        "policy",
        "budget.steps",
        "budget.tokens",
        "executor_settings",
        "step_timeout",
        "on_fail",
        "tools 'no_such_module_here:TOOLS'",
    } <= wheres


async def test_a_spec_routes_steps_to_the_executors_it_names(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    module = f"runs_executors_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from planexec import ToolExecutor\n"
        "EXECUTORS = [ToolExecutor(name='fast', description='quick lookups')]\n"
        "ONE = ToolExecutor(name='fast')\n"
    )
    step = {"id": "s", "description": "publish", "tool": "publish", "args": {"value": 5}, "executor": "fast"}
    spec = _spec(tmp_path, tools_ref, [{"steps": [step]}, FINAL], executors=(f"{module}:EXECUTORS",))
    agent = build_agent(spec, store=store)
    assert getattr(agent.executors["fast"], "description", None) == "quick lookups"
    result = await agent.start("publish").result()
    assert result.stop.kind == "goal_met", result.stop
    twice = replace(spec, executors=(ImportRef(module, "EXECUTORS"), ImportRef(module, "ONE")))
    with pytest.raises(UsageError) as caught:
        build_agent(twice, store=store)
    assert [p.message for p in caught.value.problems] == ["two executors are named 'fast'"]


async def test_a_resumed_scripted_planner_goes_on_after_the_replies_it_gave(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    """The first process used the plan; the resumed one must start at the final answer."""
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True)
    run_id = await _waiting_run(store, spec)
    await answer(store, run_id, ApprovalDecision(approved=True))
    result = await (await resume(store, run_id)).result()
    assert result.stop.kind == "goal_met"
    assert result.answer == "published 5"


async def test_a_resume_can_change_the_recorded_spec_and_names_what_is_missing(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    spec = _spec(tmp_path, tools_ref, [PLAN, FINAL], approve_plan=True)
    run_id = await _waiting_run(store, spec)
    await answer(store, run_id, ApprovalDecision(approved=True))
    with pytest.raises(UsageError) as caught:
        await resume(store, run_id, change=lambda s: AgentSpec(planner=s.planner, cwd=s.cwd))
    assert any("the run used tools that are not given: add, publish" in p.message for p in caught.value.problems)


@pytest.mark.parametrize("run_id", [123, None, "", "x" * 10_000, "run\n-1", "run\x00"])
async def test_what_is_not_a_run_id_is_refused_before_the_store_is_asked(store: SQLiteStore, run_id: Any) -> None:
    for call in (
        lambda: read_run(store, run_id),
        lambda: load_run(store, run_id),
        lambda: answer(store, run_id, ApprovalDecision(approved=True)),
        lambda: tell(store, run_id, "hello"),
        lambda: resume(store, run_id),
    ):
        with pytest.raises(UsageError) as caught:
            await call()
        assert [p.code for p in caught.value.problems] == ["run_id"]
        assert len(str(caught.value)) < 300  # a huge id is not echoed back whole


async def test_a_spec_resolves_its_model_strings_through_the_providers_given(
    tmp_path: Path, tools_ref: str, store: SQLiteStore
) -> None:
    from planexec.models import Providers
    from planexec.testing import ScriptedModel

    made: list[str] = []

    def house_models(name: str) -> ScriptedModel:
        made.append(name)
        return ScriptedModel([PLAN, FINAL], name=f"house:{name}")

    spec = AgentSpec(planner="house:planner-v2", tools=(tools_ref,), cwd=str(tmp_path)).recorded()
    with pytest.raises(UsageError) as unknown:
        build_agent(spec, store=store)  # the default providers know no "house"
    assert [p.where for p in unknown.value.problems] == ["planner"]
    providers = Providers.default().with_provider("house", house_models)
    result = await build_agent(spec, store=store, providers=providers).start("go", metadata=spec.metadata()).result()
    assert result.answer == "published 5"
    assert made == ["planner-v2"]
