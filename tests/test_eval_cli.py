"""``planexec eval`` on the command line: reports, baselines and exit statuses, the ReAct baseline on
the example suite, and bad input."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from planexec import Agent
from planexec.models import resolve_model
from planexec.react import ReactAgent
from tests.cli_support import invoke
from tests.test_eval import TOOLS_SOURCE, step, write_module, write_script

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "eval"


def half_suite(folder: Path, *, tolerances: str = "") -> Path:
    """A suite in ``folder`` where task ``good`` passes and task ``bad`` fails."""
    tools = write_module(folder, TOOLS_SOURCE, "arith")
    write_script(
        folder,
        "planner.json",
        [{"steps": [step("s", "add", {"a": 1, "b": 2}), step("d", "double", {"x": "${s}"}, "s")]}, {"answer": "6"}],
    )
    path = folder / "suite.yaml"
    path.write_text(
        f"""
name: halves
{tolerances}
defaults: {{tools: ["{tools}:TOOLS"], planner: scripted:planner.json, goal: double 1 + 2}}
tasks:
  - {{id: good, expect_answer: {{exact: "6"}}, expect_tools: [add, double]}}
  - {{id: bad, expect_answer: {{exact: "7"}}}}
"""
    )
    return path


def eval_cli(*args: str | Path) -> Result:
    return invoke(["eval", *map(str, args)])


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_eval_prints_the_table_and_writes_the_report(tmp_path: Path) -> None:
    suite = half_suite(tmp_path)
    result = eval_cli(suite, "--json", tmp_path / "report.json")
    assert result.exit_code == 0, result.output
    assert "halves — planexec agent" in result.output
    assert "FAIL bad#0: answer.exact: expected '7', got '6'" in result.output
    assert "pass good#0" in result.output
    report = read(tmp_path / "report.json")
    assert (report["format"], report["version"], report["suite"]) == ("planexec.eval.report", 2, "halves")
    assert report["summary"]["pass_rate"] == 0.5
    assert [t["id"] for t in report["tasks"]] == ["good", "bad"]


def test_fail_on_task_failure_exits_1(tmp_path: Path) -> None:
    result = eval_cli(half_suite(tmp_path), "--fail-on-task-failure")
    assert result.exit_code == 1
    assert "1 run failed" in result.output


def test_json_on_stdout(tmp_path: Path) -> None:
    result = eval_cli(half_suite(tmp_path), "--json", "-")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["summary"]["runs"] == 2
    assert "FAIL bad#0" in result.stderr


def better_baseline(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as if every task had passed."""
    base: dict[str, Any] = json.loads(json.dumps(report))
    base["summary"]["pass_rate"] = 1.0
    for task in base["tasks"]:
        task["summary"]["pass_rate"] = 1.0
    return base


def slower(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with runs that took far longer, so that this run's timing cannot regress against it."""
    base: dict[str, Any] = json.loads(json.dumps(report))
    base["summary"]["latency_mean"] = 3600.0
    return base


def test_a_regression_against_the_baseline_exits_1_and_is_named(tmp_path: Path) -> None:
    suite = half_suite(tmp_path)
    assert eval_cli(suite, "--json", tmp_path / "now.json").exit_code == 0
    (tmp_path / "base.json").write_text(json.dumps(slower(better_baseline(read(tmp_path / "now.json")))))
    result = eval_cli(suite, "--baseline", tmp_path / "base.json")
    assert result.exit_code == 1, result.output
    assert "2 regressions against the baseline" in result.output
    assert "REGRESSION pass rate fell from 1.00 to 0.50 (tolerance 0.00)" in result.output
    assert "REGRESSION task 'bad': pass rate fell from 1.00 to 0.00 (tolerance 0.00)" in result.output


def test_no_regression_exits_0(tmp_path: Path) -> None:
    suite = half_suite(tmp_path)
    assert eval_cli(suite, "--json", tmp_path / "now.json").exit_code == 0
    (tmp_path / "base.json").write_text(json.dumps(slower(read(tmp_path / "now.json"))))
    result = eval_cli(suite, "--baseline", tmp_path / "base.json")
    assert result.exit_code == 0, result.output
    assert "no regression against the baseline" in result.output


def test_tolerances_from_the_options_and_from_the_suite(tmp_path: Path) -> None:
    suite = half_suite(tmp_path)
    assert eval_cli(suite, "--json", tmp_path / "now.json").exit_code == 0
    (tmp_path / "base.json").write_text(json.dumps(slower(better_baseline(read(tmp_path / "now.json")))))
    assert eval_cli(suite, "--baseline", tmp_path / "base.json", "--tolerance-pass-rate", "1").exit_code == 0
    lenient = tmp_path / "lenient"
    lenient.mkdir()
    shutil.copy(tmp_path / "base.json", lenient / "base.json")
    relaxed = half_suite(lenient, tolerances="tolerances: {pass_rate: 1.0}")
    assert eval_cli(relaxed, "--baseline", lenient / "base.json").exit_code == 0
    strict = eval_cli(relaxed, "--baseline", lenient / "base.json", "--tolerance-pass-rate", "0")
    assert strict.exit_code == 1


def test_the_react_baseline_runs_the_example_suite(tmp_path: Path) -> None:
    result = eval_cli(
        EXAMPLE / "suite.yaml", "--agent", "react", "--json", tmp_path / "react.json", "--fail-on-task-failure"
    )
    assert result.exit_code == 0, result.output
    report = read(tmp_path / "react.json")
    assert report["agent"] == "react"
    assert report["summary"]["pass_rate"] == 1.0
    assert report["summary"]["replans"] == 0
    tools = {t["id"]: t["runs"][0]["tools_called"] for t in report["tasks"]}
    assert tools["spend"] == ["find_customer", "orders_of", "total"]
    assert tools["restock"] == ["stock", "archived_stock"]


def test_the_example_suite_passes_with_planexec_and_compares_with_react(tmp_path: Path) -> None:
    first = eval_cli(EXAMPLE / "suite.yaml", "--json", tmp_path / "planexec.json", "--fail-on-task-failure")
    assert first.exit_code == 0, first.output
    report = read(tmp_path / "planexec.json")
    assert report["summary"]["pass_rate"] == 1.0
    assert report["summary"]["replans"] == 1  # restock: the warehouse is down, the plan is patched
    assert report["summary"]["judged_both"] == 2
    (tmp_path / "base.json").write_text(json.dumps(slower(report)))
    second = eval_cli(EXAMPLE / "suite.yaml", "--agent", "react", "--baseline", tmp_path / "base.json")
    assert second.exit_code == 0, second.output
    assert "note: the baseline ran the planexec agent, this report the react agent" in second.output


@pytest.mark.parametrize("profile", ["chaos", "rate-limit-storm"])
def test_the_example_suite_passes_under_the_documented_faults(tmp_path: Path, profile: str) -> None:
    """Rate-limit storms meet the scripted models' retries, as a provider's 429s would; the example's
    planners patch what a fault broke; a call the fault failed is not held against the agent."""
    plain = eval_cli(EXAMPLE / "suite.yaml", "--json", tmp_path / "plain.json")
    assert plain.exit_code == 0, plain.output
    result = eval_cli(
        EXAMPLE / "suite.yaml", "--faults", profile, "--json", tmp_path / "r.json", "--fail-on-task-failure"
    )
    assert result.exit_code == 0, result.output
    report, clean = read(tmp_path / "r.json"), read(tmp_path / "plain.json")
    assert report["faults"] == profile
    assert report["summary"]["pass_rate"] == 1.0
    if profile == "rate-limit-storm":  # absorbed inside each call: nothing else changes
        assert report["summary"]["model_calls"] == clean["summary"]["model_calls"]
        assert report["summary"]["tool_calls"] == clean["summary"]["tool_calls"]
    else:  # faults struck, and were recovered from
        assert report["summary"]["replans"] > clean["summary"]["replans"]
        assert report["summary"]["tool_calls_ok"] < report["summary"]["tool_calls"]


def test_runs_are_logged_in_a_store_when_asked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    result = eval_cli(half_suite(tmp_path), "--store", url, "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    run_ids = [r["run_id"] for t in read(tmp_path / "r.json")["tasks"] for r in t["runs"]]
    assert all(isinstance(i, str) and i.startswith("eval-") for i in run_ids)
    listing = invoke(["--store", url, "runs", "--json"])
    assert {r["run_id"] for r in json.loads(listing.stdout)} >= set(run_ids)


def test_a_bad_invocation_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text("tasks:\n  - {id: t}\n")
    (tmp_path / "base.json").write_text('{"format": "something else"}')
    result = eval_cli(tmp_path / "suite.yaml", "--faults", "hurricane", "--baseline", tmp_path / "base.json")
    assert result.exit_code == 2
    assert "4 problems" in result.stderr
    assert "tasks[0] (t).goal: is required" in result.stderr
    assert "tasks[0] (t).planner: is required" in result.stderr
    assert "--faults: unknown fault profile 'hurricane'" in result.stderr
    assert "--baseline: " in result.stderr
    assert "is not an evaluation report" in result.stderr


def test_eval_has_help() -> None:
    result = invoke(["eval", "--help"])
    assert result.exit_code == 0
    assert "--baseline" in result.output
    assert "[planexec|react]" in result.output
    assert "eval" in invoke(["--help"]).output


async def test_on_compare_both_agents_overlap_the_lookups_and_react_takes_a_turn_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What examples/eval/README.md says of the compare task."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    planners = importlib.import_module("bookshop_planners")
    tools = importlib.import_module("bookshop_tools").TOOLS
    goal = "Who has spent more, customer c-1 (Ada) or customer c-2 (Bob)?"
    planned = await Agent(planners.compare(), tools=tools, store=None).run(goal)
    kinds = [(e.kind, getattr(e, "step_id", None)) for e in planned.events]
    first_done = kinds.index(("step_succeeded", "ada"))
    assert {("step_started", "ada"), ("step_started", "bob")} <= set(kinds[:first_done])
    assert planned.model_calls == 2
    react = await ReactAgent(resolve_model(f"scripted:{EXAMPLE / 'replies' / 'compare.react.json'}"), tools=tools).run(
        goal
    )
    assert [c.tool for c in react.calls if c.step_id == react.calls[0].step_id] == ["orders_of", "orders_of"]
    assert react.model_calls == 3
