"""Pause and raise instead of dying: a run that reaches a cap asks a human whether to raise it —
in this process (an approver), or saved in its log and answered from any other (the API, the CLI)
— and goes on where it stopped with the new caps, or stops budget_exhausted on a no. What was
spent stays counted through the pause, a resume and a replay."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from planexec import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    Approvals,
    Budget,
    Limits,
    ModelExecutor,
    UsageError,
    tool,
)
from planexec.log import ApprovalDecided, ApprovalRequested, BudgetExhaustedEvent, ModelCalled, RunState
from planexec.models import Usage
from planexec.runs import answer, load_run, open_questions
from planexec.runtime import replay_log
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel

from .cli_support import invoke, write_script, write_tools_module
from .support import events_of, tool_step

ROOT = Path(__file__).resolve().parent.parent

CHAIN = {
    "steps": [
        tool_step("s1", "add", {"a": 1, "b": 1}),
        tool_step("s2", "add", {"a": "${s1}", "b": 1}, "s1"),
        tool_step("s3", "add", {"a": "${s2}", "b": 1}, "s2"),
    ]
}


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _raising(caps: dict[str, Any], seen: list[ApprovalRequest]) -> Any:
    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        seen.append(request)
        return ApprovalDecision(approved=True, budget=caps, by="ana", reason="worth it")

    return approver


async def test_a_cap_reached_is_raised_by_the_approver_and_the_run_goes_on_where_it_stopped() -> None:
    seen: list[ApprovalRequest] = []
    planner = ScriptedModel([CHAIN, {"answer": "4"}])
    agent = Agent(
        planner,
        tools=[add],
        budget=Budget(tool_calls=2, wall_time=30),
        approvals=Approvals(approver=_raising({"tool_calls": 10}, seen)),
    )
    result = await agent.run("count to four")
    assert (result.stop.kind, result.answer) == ("goal_met", "4")
    assert result.tool_calls == 3
    assert [r.step.id for r in result.steps.values() if r.status == "succeeded"] == ["s1", "s2", "s3"]
    [request] = seen
    view = request.view
    assert view is not None
    assert (view.kind, view.rule, view.title) == ("budget", "budget_cap", "Raise the tool_calls budget?")
    assert view.budget is not None
    assert (view.budget.name, view.budget.limit, view.budget.used) == ("tool_calls", 2, 2)
    assert view.budget.spent.by_tool == {"add": 2}
    assert view.budget.caps["tool_calls"] == 2
    assert view.budget.rest is not None and view.budget.rest.tool_calls.low == 1  # noqa: PT018
    [hit] = events_of(result, BudgetExhaustedEvent)
    [decided] = events_of(result, ApprovalDecided)
    assert decided.budget == {"tool_calls": 10}
    kinds = [e.kind for e in result.events]
    assert kinds.index("budget_exhausted") < kinds.index("approval_requested") < kinds.index("approval_decided")
    assert hit.budget == "tool_calls"
    # the state folds the raised cap; a replay is exact
    assert RunState.fold(result.events).budget["tool_calls"] == 10
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence


async def test_a_no_ends_the_run_budget_exhausted_as_before() -> None:
    async def refuse(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=False, reason="enough", by="ana")

    agent = Agent(
        ScriptedModel([CHAIN]),
        tools=[add],
        budget=Budget(tool_calls=2, wall_time=30),
        approvals=Approvals(approver=refuse),
    )
    result = await agent.run("count")
    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "tool_calls")
    assert "ana did not raise it: enough" in result.stop.detail
    assert result.outputs == {"s1": 2, "s2": 3}


async def test_without_an_approver_or_with_on_budget_stop_nothing_is_asked() -> None:
    for approvals, limits in (
        (Approvals(), Limits()),
        (Approvals(approver=_raising({}, [])), Limits(on_budget="stop")),
    ):
        result = await Agent(
            ScriptedModel([CHAIN]),
            tools=[add],
            budget=Budget(tool_calls=2, wall_time=30),
            approvals=approvals,
            limits=limits,
        ).run("count")
        assert result.stop.kind == "budget_exhausted"
        assert events_of(result, ApprovalRequested) == []


async def test_a_cost_cap_reached_while_planning_is_raised_and_the_round_asked_again() -> None:
    usage = Usage(input_tokens=1_000, output_tokens=100)
    planner = ScriptedModel([CHAIN, {"answer": "4"}], usage=usage, cost_per_million=(10.0, 10.0))  # $0.011 a call
    seen: list[ApprovalRequest] = []
    agent = Agent(
        planner,
        tools=[add],
        budget=Budget(cost=0.015, wall_time=30),
        approvals=Approvals(approver=_raising({"cost": 0.05}, seen)),
        limits=Limits(over_forecast="run"),
    )
    result = await agent.run("count")
    assert (result.stop.kind, result.answer) == ("goal_met", "4"), result.stop
    assert [r.view.budget.name for r in seen if r.view and r.view.budget] == ["cost"]
    calls = events_of(result, ModelCalled)
    assert len(calls) == 2
    assert result.cost == pytest.approx(sum(c.cost for c in calls))  # exact through the pause
    assert result.cost <= 0.05


async def test_a_wall_time_cap_is_raised_and_the_step_it_cut_short_is_patched() -> None:
    gate = asyncio.Event()

    @tool
    async def slow(x: int) -> int:
        """Wait until let through."""
        await gate.wait()
        return x

    async def raise_wall(request: ApprovalRequest) -> ApprovalDecision:
        gate.set()
        return ApprovalDecision(approved=True, budget={"wall_time": 60}, by="ana")

    plan = {"steps": [tool_step("w", "slow", {"x": 1})]}
    patch = {"steps": [tool_step("w2", "slow", {"x": 2})]}
    agent = Agent(
        ScriptedModel([plan, patch, {"answer": "2"}]),
        tools=[slow],
        budget=Budget(wall_time=0.3),
        approvals=Approvals(approver=raise_wall),
    )
    result = await agent.run("wait")
    assert (result.stop.kind, result.answer) == ("goal_met", "2"), result.stop
    assert result.steps["w"].status == "failed"
    assert result.steps["w"].error is not None and result.steps["w"].error.kind == "timeout"  # noqa: PT018
    assert [e.budget for e in events_of(result, BudgetExhaustedEvent)] == ["wall_time"]


# -- saved, answered from another process ----------------------------------------------------------------


async def test_a_saved_run_waits_for_the_raise_and_goes_on_when_another_process_answers(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:

        def agent() -> Agent:
            return Agent(
                ScriptedModel([CHAIN, {"answer": "4"}]),
                tools=[add],
                store=store,
                budget=Budget(tool_calls=2, wall_time=30),
                approvals=Approvals(deferred=True),
                limits=Limits(on_budget="ask"),
            )

        first = await agent().run("count to four", run_id="saved")
        assert first.stop.kind == "waiting"
        [view] = await open_questions(store)
        assert view.kind == "budget"
        assert view.budget is not None and view.budget.spent.tool_calls == 2  # noqa: PT018
        # what is wrong with an answer is listed whole, and nothing is written
        with pytest.raises(UsageError) as refused:
            await answer(
                store, "saved", ApprovalDecision(approved=True, budget={"tool_calls": 1, "nonsense": 5, "cost": -1})
            )
        messages = " / ".join(p.message for p in refused.value.problems)
        assert "'nonsense' is not a budget" in messages
        with pytest.raises(UsageError, match="not above what the run has used"):
            await answer(store, "saved", ApprovalDecision(approved=True, budget={"tool_calls": 2}))
        with pytest.raises(UsageError, match="give a higher one"):
            await answer(store, "saved", ApprovalDecision(approved=True, budget={"cost": 1.0}))
        with pytest.raises(UsageError, match="caps to raise"):
            await answer(store, "saved", ApprovalDecision(approved=True))
        await answer(store, "saved", ApprovalDecision(approved=True, budget={"tool_calls": 3}, by="bo"))
        # a new process picks it up with the raised cap, which holds: the run is done in 3 calls
        resumed = await (await agent().resume("saved")).result()
        assert (resumed.stop.kind, resumed.answer) == ("goal_met", "4"), resumed.stop
        assert resumed.tool_calls == 3
        log = await load_run(store, "saved")
        assert RunState.fold(log).budget["tool_calls"] == 3
        report = await replay_log(log)
        assert report.matched, report.divergence
    finally:
        await store.close()


TOOLS_SOURCE = '''
from planexec import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


TOOLS = [add]
'''


def test_the_cli_suspends_on_a_cap_and_approve_raise_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, TOOLS_SOURCE, "raise_tools")
    planner = write_script(tmp_path, [CHAIN, {"answer": "4"}])
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    run = ["--store", store, "run", "count to four", "--planner", planner, "--tools", f"{tools}:TOOLS"]
    first = invoke([*run, "--max-tool-calls", "2", "--on-budget", "ask", "--json"])
    assert first.exit_code == 3, first.output
    data = json.loads(first.stdout)
    [question] = data["pending_approvals"]
    assert question["kind"] == "budget"
    assert question["commands"][0].endswith("--raise NAME=CAP [--raise ...]")
    run_id, qid = data["run_id"], question["question_id"]
    listed = invoke(["--store", store, "approvals"])
    flat = " ".join(listed.stdout.split())
    assert "Raise the tool_calls budget?" in flat
    assert "tool_calls: 2 used of 2" in flat
    assert "add ×2" in flat
    bad = invoke(["--store", store, "approve", run_id, qid, "--raise", "tool_calls=two", "--raise", "x"])
    assert bad.exit_code == 2
    assert "'tool_calls=two': 'two' is not a number" in bad.output
    assert "'x': give NAME=CAP" in bad.output
    wrong = invoke(["--store", store, "approve", run_id, qid, "--raise", "tool_calls=2"])
    assert wrong.exit_code == 2
    assert "is not above what the run has used (2)" in wrong.output
    done = invoke(["--store", store, "approve", run_id, qid, "--raise", "tool_calls=10", "--no-live", "--json"])
    assert done.exit_code == 0, done.output
    finished = json.loads(done.stdout)
    assert (finished["stop"]["kind"], finished["answer"]) == ("goal_met", "4")
    shown = invoke(["--store", store, "show", run_id])
    assert "raising tool_calls to 10" in " ".join(shown.stdout.split())


async def test_a_model_step_refused_before_its_first_call_runs_once_the_cap_is_raised() -> None:
    executor = ModelExecutor(model=ScriptedModel(["first draft", "second draft"]))
    plan = {
        "steps": [
            {"id": "d1", "description": "draft one", "executor": "model"},
            {"id": "d2", "description": "draft two", "executor": "model", "depends_on": ["d1"]},
        ]
    }
    seen: list[ApprovalRequest] = []
    agent = Agent(
        ScriptedModel([plan, {"answer": "drafted"}]),
        executors=[executor],
        budget=Budget(model_calls=2, wall_time=30),
        approvals=Approvals(approver=_raising({"model_calls": 10}, seen)),
    )
    result = await agent.run("draft")
    assert (result.stop.kind, result.answer) == ("goal_met", "drafted"), result.stop
    assert result.outputs == {"d1": "first draft", "d2": "second draft"}
    assert [r.budget for r in seen] == ["model_calls"]


async def test_the_mcp_tools_show_a_budget_question_and_raise_the_cap(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from planexec.hosting import mcp_server
    from planexec.runs import AgentSpec

    script = tmp_path / "planner.json"
    script.write_text(json.dumps([CHAIN, {"answer": "4"}]))
    spec = AgentSpec(
        planner=f"scripted:{script}",
        tools=("tests.serve_support:TOOLS",),
        cwd=str(ROOT),
        budget={"tool_calls": "2"},
        rules={"on_budget": "ask"},
    )
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        async with Client(mcp_server(spec, store)) as client:
            waiting = (await client.call_tool("run_goal", {"goal": "count to four"})).structured_content
            assert waiting is not None
            [question] = waiting["pending_questions"]
            assert (question["kind"], question["budget"]["name"]) == ("budget", "tool_calls")
            run_id = waiting["run_id"]
            low = await client.call_tool(
                "answer_question", {"run_id": run_id, "decision": "approve", "budget": {"tool_calls": 1}}
            )
            assert low.is_error
            text = " ".join(block.text for block in low.content if hasattr(block, "text"))
            assert "not above what the run has used (2)" in text
            answered = await client.call_tool(
                "answer_question", {"run_id": run_id, "decision": "approve", "budget": {"tool_calls": 10}}
            )
            assert answered.structured_content is not None
            assert answered.structured_content["ready_to_resume"] is True
            done = (await client.call_tool("resume_run", {"run_id": run_id})).structured_content
    finally:
        await store.close()
    assert done is not None
    assert (done["status"], done["answer"]) == ("finished", "4")
