"""Evaluations under seeded fault profiles are reproducible: the same seed, the same report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planexec.eval import EvalSettings, dump_report, load_suite, run_suite
from tests.cli_support import invoke
from tests.test_eval import write_module

TOOLS = '''
from planexec import RetryPolicy, tool

QUICK = RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)


@tool(retry=QUICK)
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(retry=QUICK)
async def double(x: int) -> int:
    """Double a number."""
    return 2 * x


TOOLS = [add, double]
'''

PLANNER = """
from planexec.testing import FunctionModel

PLAN = {"steps": [
    {"id": "s", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}},
    {"id": "d", "description": "double", "tool": "double", "args": {"x": "${s}"}, "depends_on": ["s"]},
]}


def planner():
    def answer(request):
        if request.purpose == "planner.finish":
            return {"answer": "6"}
        return PLAN

    return FunctionModel(answer, name="planner")
"""

TIMINGS = ("latency", "latency_mean", "latency_max", "parallelism", "parallelism_mean", "created_at")


def without_timings(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: without_timings(v) for k, v in data.items() if k not in TIMINGS}
    if isinstance(data, list):
        return [without_timings(v) for v in data]
    return data


def faulty_suite(folder: Path, faults: str) -> Path:
    tools = write_module(folder, TOOLS, "faulty_tools")
    planner = write_module(folder, PLANNER, "faulty_planner")
    path = folder / "suite.yaml"
    path.write_text(
        f"""
name: under-faults
seed: 11
defaults:
  tools: ["{tools}:TOOLS"]
  planner: "object:{planner}:planner"
  goal: double 1 + 2
  budget: {{replans: 2}}
  expect_answer: {{exact: "6"}}
tasks:
  - {{id: a, repeat: 6{faults}}}
  - {{id: b, repeat: 6{faults}}}
"""
    )
    return path


def run_twice(*args: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    reports = []
    for _ in range(2):
        target = Path(str(args[0])).parent / "report.json"
        result = invoke(["eval", *map(str, args), "--json", str(target), "--concurrency", "4"])
        assert result.exit_code == 0, result.output
        reports.append(json.loads(target.read_text()))
    return reports[0], reports[1]


def test_a_task_fault_profile_with_a_seed_gives_the_same_report_twice(tmp_path: Path) -> None:
    suite = faulty_suite(tmp_path, ", faults: {tool_error_rate: 0.4}")
    first, second = run_twice(suite)
    assert without_timings(first) == without_timings(second)
    runs = [r for t in first["tasks"] for r in t["runs"]]
    assert all(isinstance(r["fault_seed"], int) for r in runs)
    assert len({r["fault_seed"] for r in runs}) == len(runs)  # every run meets its own faults
    assert first["summary"]["tool_calls_ok"] < first["summary"]["tool_calls"]  # faults were met
    assert [t["faults"] for t in first["tasks"]] == [{"tool_error_rate": 0.4}] * 2
    assert 0 < first["summary"]["pass_rate"] < 1


def test_faults_from_the_command_line_and_another_seed(tmp_path: Path) -> None:
    suite = faulty_suite(tmp_path, "")
    (tmp_path / "profile.yaml").write_text("tool_error_rate: 0.4\nname: flaky\n")
    first, second = run_twice(suite, "--faults", tmp_path / "profile.yaml", "--seed", "5")
    assert without_timings(first) == without_timings(second)
    assert first["faults"] == {"tool_error_rate": 0.4, "name": "flaky"}
    assert first["seed"] == 5
    other, _ = run_twice(suite, "--faults", tmp_path / "profile.yaml", "--seed", "6")
    assert [r["fault_seed"] for r in other["tasks"][0]["runs"]] != [r["fault_seed"] for r in first["tasks"][0]["runs"]]


async def test_a_named_profile_through_the_python_api(tmp_path: Path) -> None:
    suite = load_suite(faulty_suite(tmp_path, ""))
    settings = EvalSettings(faults="flaky-tools", seed=3, concurrency=8)
    first = dump_report(await run_suite(suite, settings))
    second = dump_report(await run_suite(suite, settings))
    assert first["faults"] == "flaky-tools"
    assert without_timings(first) == without_timings(second)


def test_without_faults_every_run_passes(tmp_path: Path) -> None:
    result = invoke(["eval", str(faulty_suite(tmp_path, "")), "--fail-on-task-failure"])
    assert result.exit_code == 0, result.output
