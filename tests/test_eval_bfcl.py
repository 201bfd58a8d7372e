"""BFCL's multi-turn tasks as ``planexec eval`` suites (``bfcl:CATEGORY`` on the command line, or
``bfcl:`` in a suite file), with the oracle standing in for models not named, the ReAct baseline
on the same tasks, and multi-turn tasks of one's own (``turns:``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from planexec.eval import EvalSettings, run_suite, suite_from_mapping
from planexec.store import SQLiteStore
from tests.cli_support import invoke
from tests.test_eval import TOOLS_SOURCE, step, write_module, write_script

if os.environ.get("CI", "").lower() != "true":
    pytest.importorskip("bfcl_eval")


def _report(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output[result.output.index("{") :])
    return data


def test_bfcl_base_tasks_run_as_a_suite_in_one_command() -> None:
    result = invoke(["eval", "bfcl:multi_turn_base", "--limit", "12", "--json", "-", "--fail-on-task-failure"])
    report = _report(result)
    assert report["suite"] == "bfcl-multi_turn_base"
    assert report["summary"]["runs"] == 12
    assert report["summary"]["passed"] == 12
    run = report["tasks"][0]["runs"][0]
    checks = [c["name"] for c in run["checks"]]
    assert checks[0] == "stop"
    assert checks[1:] == [f"turn {n}: bfcl" for n in range(1, len(checks))]


def test_the_react_baseline_and_the_step_policy_run_the_same_tasks_with_a_failure_each() -> None:
    react = _report(invoke(["eval", "bfcl:multi_turn_base", "--limit", "8", "--agent", "react", "--json", "-"]))
    step = _report(
        invoke(["eval", "bfcl:multi_turn_base", "--limit", "8", "--policy", "step", "--fail-one", "4", "--json", "-"])
    )
    assert react["agent"] == "react"
    assert react["summary"]["passed"] == 8
    assert step["summary"]["passed"] == 8
    assert all(t["summary"]["tool_success_rate"] < 1 for t in step["tasks"])  # each task met its one failure


def test_miss_func_tasks_run_as_a_suite() -> None:
    report = _report(
        invoke(
            [
                "eval",
                "bfcl:multi_turn_miss_func",
                "--ids",
                "multi_turn_miss_func_0,multi_turn_miss_func_49",
                "--json",
                "-",
            ]
        )
    )
    assert [t["id"] for t in report["tasks"]] == ["multi_turn_miss_func_0", "multi_turn_miss_func_49"]
    assert report["summary"]["passed"] == 2


def test_a_planner_that_leaves_calls_out_fails_bfcls_checks_with_the_reason(tmp_path: Path) -> None:
    write_script(tmp_path, "lazy.json", [{"steps": []}, {"answer": "done"}] * 20)
    (tmp_path / "suite.yaml").write_text(
        "name: lazy\nbfcl: {ids: [multi_turn_base_0]}\ndefaults: {planner: scripted:lazy.json}\n", encoding="utf-8"
    )
    result = invoke(
        ["eval", str(tmp_path / "suite.yaml"), "--json", str(tmp_path / "r.json"), "--fail-on-task-failure"]
    )
    assert result.exit_code == 1
    run = json.loads((tmp_path / "r.json").read_text())["tasks"][0]["runs"][0]
    assert not run["passed"]
    assert any(r.startswith("turn 1: bfcl: multi_turn:") for r in run["reasons"]), run["reasons"]


def test_bad_bfcl_suites_list_every_problem(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(
        "bfcl: {category: single_turn, limit: 0, ids: [], colour: red, fail_one: -1}\n"
        "defaults: {expect_tools: [ls], goal: do it}\ntasks: [{id: a, goal: b}]\n",
        encoding="utf-8",
    )
    result = invoke(["eval", str(tmp_path / "suite.yaml")])
    assert result.exit_code == 2
    for where in (
        "bfcl.category",
        "bfcl.limit",
        "bfcl.ids",
        "bfcl.colour",
        "bfcl.fail_one",
        "defaults.expect_tools",
        "defaults.goal",
        "tasks",
    ):
        assert where in result.output, (where, result.output)
    (tmp_path / "null.yaml").write_text("bfcl: {ids: [multi_turn_base_0, multi_turn_base_0]}\ntasks:\n")
    both = invoke(["eval", str(tmp_path / "null.yaml")])
    assert both.exit_code == 2
    assert "lists no tasks of its own" in both.output
    assert "more than once: multi_turn_base_0" in both.output
    unknown = invoke(["eval", "bfcl:multi_turn_base", "--ids", "multi_turn_base_0,no_such_task"])
    assert unknown.exit_code == 2
    assert "no_such_task" in unknown.output
    misplaced = invoke(["eval", str(tmp_path / "suite.yaml"), "--planner", "scripted:x.json", "--limit", "2"])
    assert misplaced.exit_code == 2
    assert "--planner" in misplaced.output
    assert "--limit" in misplaced.output


async def test_a_task_of_several_turns_is_one_session_in_the_store(tmp_path: Path) -> None:
    tools = write_module(tmp_path, TOOLS_SOURCE, "arith_turns")
    write_script(
        tmp_path,
        "planner.json",
        [
            {"steps": [step("s", "add", {"a": 1, "b": 2})]},
            {"answer": "3"},
            {"steps": [step("d", "double", {"x": 3})]},
            {"answer": "6"},
        ],
    )
    suite = suite_from_mapping(
        {
            "name": "turns",
            "tasks": [
                {
                    "id": "twice",
                    "goal": "add 1 and 2",
                    "turns": ["now double it"],
                    "tools": [f"{tools}:TOOLS"],
                    "planner": "scripted:planner.json",
                    "expect_tools": {"match": "strict", "tools": ["add", "double"]},
                    "expect_answer": {"exact": "6"},
                }
            ],
        },
        root=tmp_path,
    )
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        report = await run_suite(suite, EvalSettings(store=store))
        [run] = report.tasks[0].runs
        assert run.passed, run.reasons
        assert run.metrics.tool_calls == 2
        assert run.metrics.model_calls == 4
        listed = await store.list_runs()
        sessions = {r.session for r in listed}
        assert len(listed) == 2
        assert len(sessions) == 1
        assert None not in sessions
        assert sorted(r.turn or 0 for r in listed) == [1, 2]
    finally:
        await store.close()


def test_turns_must_be_requests(tmp_path: Path) -> None:
    from planexec.eval import SuiteInvalid

    with pytest.raises(SuiteInvalid) as caught:
        suite_from_mapping(
            {"tasks": [{"id": "t", "goal": "g", "turns": ["ok", "  "], "planner": "scripted:p.json"}]}, root=tmp_path
        )
    assert any(p.where.endswith("turns") for p in caught.value.problems)
