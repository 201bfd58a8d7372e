"""BFCL's multi-turn base tasks through the full path (planner → static checks → scheduler →
executor → journal → store), each task a session, checked turn by turn with BFCL's own checks,
driven by the oracle planner (no model is reachable here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from planexec.log import RunResult, RunStarted
from planexec.models import FunctionModel, ModelRequest
from planexec.store import SQLiteStore

bfcl = pytest.importorskip("bfcl_eval") if os.environ.get("CI", "").lower() != "true" else None

from planexec.bfcl import BfclWorld, load_tasks, parse_call, run_task  # noqa: E402


async def test_all_200_base_tasks_pass_bfcls_checks_through_the_full_path(tmp_path: Path) -> None:
    tasks = load_tasks("multi_turn_base")
    assert len(tasks) == 200
    store = SQLiteStore(tmp_path / "runs.db")
    failed: list[tuple[str, Any]] = []
    turns = 0
    try:
        for task in tasks:
            outcome = await run_task(task, store=store)
            turns += len(outcome.turns)
            if not outcome.valid:
                failed.append((task.id, outcome.error))
            assert all(t.stop.kind == "goal_met" for t in outcome.turns), task.id
        assert failed == []
        runs = await store.list_runs(limit=10_000)
        assert len(runs) == turns == sum(len(t.turns) for t in tasks)
        sessions = {r.session for r in runs}
        assert sessions == {f"bfcl-{t.id}" for t in tasks}
    finally:
        await store.close()


async def test_bfcls_checks_fail_a_turn_that_leaves_out_a_call() -> None:
    [task] = load_tasks(ids=["multi_turn_base_0"])
    world = BfclWorld(task)
    first_turn = [parse_call(c, world.signature_of) for c in task.ground_truth[0]]

    def lazy(request: ModelRequest) -> Any:  # plans the first turn's calls but the last
        if request.purpose == "planner.finish":
            return {"answer": "done"}
        steps = [
            {"id": f"c{i}", "description": name, "tool": name, "args": args, "depends_on": [f"c{i - 1}"] if i else []}
            for i, (name, args) in enumerate(first_turn[:-1])
        ]
        return {"steps": steps}

    outcome = await run_task(task, planner=FunctionModel(lazy))
    assert not outcome.valid
    assert outcome.failed_turn == 0
    assert outcome.error["error_type"].startswith("multi_turn:")


def test_tools_come_from_bfcls_documentation_with_its_type_names_made_json_schema() -> None:
    [task] = load_tasks(ids=["multi_turn_base_0"])
    tools = {t.name: t for t in BfclWorld(task).tools()}
    assert {"cd", "mv", "grep", "sort", "diff", "post_tweet"} <= set(tools)
    assert tools["cd"].parameters["type"] == "object"
    assert tools["cd"].parameters["required"] == ["folder"]
    assert "Change the current working directory" in tools["cd"].description
    assert tools["cd"].check_args({"folder": 3})[0] is None  # a string, as documented
    assert not task.excluded & set(tools)


async def test_the_oracle_plans_calls_to_different_classes_in_parallel() -> None:
    tasks = [t for t in load_tasks() if len(t.involved_classes) > 1]
    parallel = 0
    for task in tasks[:20]:
        outcome = await run_task(task)
        assert outcome.valid, (task.id, outcome.error)
        for turn in outcome.turns:
            assert isinstance(turn, RunResult)
            for plan in turn.plans:
                roots = [s for s in plan.steps if not s.depends_on]
                tools_of_roots = {s.tool for s in roots}
                if len(roots) > 1 and len(tools_of_roots) > 1:
                    parallel += 1
    assert parallel > 0


def test_calls_are_read_without_eval() -> None:
    [task] = load_tasks(ids=["multi_turn_base_0"])
    world = BfclWorld(task)
    assert parse_call("sort('final_report.pdf')", world.signature_of) == ("sort", {"file_name": "final_report.pdf"})
    assert parse_call("mv(source='a', destination='b')", world.signature_of) == (
        "mv",
        {"source": "a", "destination": "b"},
    )
    for hostile in ("__import__('os').system('true')", "mv(**{'a': 1})", "x.y()", "1 + 1"):
        with pytest.raises(ValueError, match=r"call|literal|node|kwargs"):
            parse_call(hostile, world.signature_of)


def _ground_truth_calls(task: Any) -> list[list[Any]]:
    world = BfclWorld(task)
    calls = [[parse_call(text, world.signature_of) for text in turn] for turn in task.ground_truth]
    return [sorted((name, tuple(sorted(kwargs.items()))) for name, kwargs in turn) for turn in calls]


async def test_one_failure_per_task_is_patched_with_one_planner_call_and_nothing_done_twice() -> None:
    for task in load_tasks("multi_turn_base"):
        plain_calls = 2 * len(task.turns)  # each turn: a plan, then its answer
        outcome = await run_task(task, fail_one=7)
        assert outcome.valid, (task.id, outcome.error)
        assert outcome.injected == 1, task.id
        assert outcome.planner_calls == plain_calls + 1, task.id  # one patch for the one failure
        # every ground-truth call happened exactly once: no finished step ran again
        assert [sorted(turn) for turn in outcome.calls] == _ground_truth_calls(task), task.id
        failed = [e for t in outcome.turns for e in t.events if e.kind == "step_failed"]
        assert len(failed) == 1, task.id


async def test_transient_faults_are_absorbed_by_retries() -> None:
    from planexec.faults import FaultProfile
    from planexec.tools import RetryPolicy

    profile = FaultProfile(seed=3, tool_error_rate=0.2, tool_timeout_rate=0.1)
    retries = 0
    for task in load_tasks("multi_turn_base"):
        outcome = await run_task(task, faults=profile, retry=RetryPolicy(initial_delay=0, jitter=0))
        assert outcome.valid, (task.id, outcome.error)
        retries += sum(1 for t in outcome.turns for e in t.events if e.kind == "step_attempt_failed")
    assert retries > 100  # the faults did happen


async def test_the_step_by_step_policy_and_the_react_baseline_pass_base_tasks() -> None:
    for task in load_tasks("multi_turn_base")[::2]:  # every other one: the upfront policy runs all 200 above
        calls = sum(len(turn) for turn in task.ground_truth)
        step = await run_task(task, policy="step")
        assert step.valid, (task.id, step.error)
        assert step.planner_calls == calls + len(task.turns), task.id  # a call each, then the answer
        react = await run_task(task, agent="react")
        assert react.valid, (task.id, react.error)
        assert react.tool_calls == calls, task.id
        assert react.planner_calls <= calls + len(task.turns), task.id  # independent calls asked for together


async def test_one_failure_per_task_under_the_step_policy_and_react_is_tried_again_once() -> None:
    for task in load_tasks("multi_turn_base")[:60]:
        for agent, policy in (("planexec", "step"), ("react", "upfront")):
            outcome = await run_task(task, agent=agent, policy=policy, fail_one=11)  # type: ignore[arg-type]
            assert outcome.valid, (task.id, agent, outcome.error)
            assert outcome.injected == 1, task.id
            assert [sorted(turn) for turn in outcome.calls] == _ground_truth_calls(task), (task.id, agent)


async def test_miss_func_tasks_pass_with_a_toolset_that_changes_within_the_session() -> None:
    for task in load_tasks("multi_turn_miss_func")[::4]:  # 50 of the 200, each under three agents
        for agent, policy in (("planexec", "upfront"), ("planexec", "step"), ("react", "upfront")):
            outcome = await run_task(task, agent=agent, policy=policy)  # type: ignore[arg-type]
            assert outcome.valid, (task.id, agent, policy, outcome.error)
    outcome = await run_task(task, fail_one=5)
    assert outcome.valid, outcome.error
    assert outcome.injected == 1


async def test_a_withheld_function_is_refused_as_an_unknown_tool_then_added_at_its_turn() -> None:
    [task] = load_tasks("multi_turn_miss_func", ids=["multi_turn_miss_func_0"])
    assert task.missed == {3: ("sort",)}
    outcome = await run_task(task)
    assert outcome.valid, outcome.error
    runs = [t for t in outcome.turns if isinstance(t, RunResult)]
    tools = [next(e for e in r.events if isinstance(e, RunStarted)).tools for r in runs]
    assert ["sort" in names for names in tools] == [False, False, False, True, True]
    withheld = runs[2]  # asked to sort before sort is there: the plan naming it is refused
    refused = [e for e in withheld.events if e.kind == "planner_output_rejected"]
    assert refused, [e.kind for e in withheld.events]
    assert "unknown_tool" in str(refused[0])
    assert withheld.stop.kind == "goal_met"
    assert withheld.tool_calls == 0
    assert withheld.answer == "No tool I have can do that yet."
    assert runs[3].goal == "You have more tools now: sort. Please go on with what I asked."
    assert [name for name, _ in outcome.calls[3]] == ["sort"]


async def test_a_turn_that_names_a_withheld_tool_with_nobody_to_ask_stops_escalated() -> None:
    """A planner that keeps naming the missing function: one repair, then the run stops escalated."""
    [task] = load_tasks("multi_turn_miss_func", ids=["multi_turn_miss_func_0"])

    def stubborn(request: ModelRequest) -> Any:
        if request.purpose == "planner.finish":
            return {"answer": "done"}
        return {"steps": [{"id": "s1", "description": "sort it", "tool": "sort", "args": {"file_name": "a"}}]}

    outcome = await run_task(task, planner=FunctionModel(stubborn))
    assert not outcome.valid
    assert outcome.error["stop"] == "escalated"


async def test_the_other_multi_turn_categories_pass_and_long_context_loads_its_long_state() -> None:
    [short] = load_tasks("multi_turn_base", ids=["multi_turn_base_0"])
    [long] = load_tasks("multi_turn_long_context", ids=["multi_turn_long_context_0"])
    assert long.long_context
    assert not short.long_context
    sizes = [len(repr(vars(BfclWorld(t).instances["GorillaFileSystem"]))) for t in (short, long)]
    assert sizes[1] > 2 * sizes[0]  # the long context's extra files and folders are there
    for category in ("multi_turn_miss_param", "multi_turn_long_context"):
        for task in load_tasks(category)[:25]:
            for agent, policy in (("planexec", "upfront"), ("planexec", "step"), ("react", "upfront")):
                outcome = await run_task(task, agent=agent, policy=policy)  # type: ignore[arg-type]
                assert outcome.valid, (task.id, agent, policy, outcome.error)
