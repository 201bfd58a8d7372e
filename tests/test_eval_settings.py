"""Model settings per role and the step timeout in evaluation suites: read from the suite (defaults
merged key by key), checked with every problem listed, and used by each run's models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planexec import ModelSettings
from planexec.eval import EvalSettings, SuiteInvalid, load_suite, run_suite, suite_from_mapping
from planexec.testing import ScriptedModel
from tests.test_eval import ARITHMETIC, step


class Made:
    """Model factories that keep every model they make, so a test can see how each was asked."""

    def __init__(self) -> None:
        self.models: dict[str, list[ScriptedModel]] = {}

    def factory(self, role: str, *replies: Any, latency: float = 0.0) -> Any:
        def make() -> ScriptedModel:
            model = ScriptedModel(list(replies), name=role, latency=latency)
            self.models.setdefault(role, []).append(model)
            return model

        return make


async def test_each_role_of_each_run_asks_with_the_tasks_settings(tmp_path: Path) -> None:
    made = Made()
    plan = {"steps": [{"id": "m", "description": "say six"}]}
    suite = suite_from_mapping(
        {
            "defaults": {
                "tools": ARITHMETIC,
                "planner_settings": {"temperature": 0, "max_tokens": 1000},
                "judge_settings": {"temperature": 0},
            },
            "tasks": [
                {
                    "id": "t",
                    "goal": "say six",
                    "planner": made.factory("planner", plan, {"answer": "6"}),
                    "executor": made.factory("executor", "six"),
                    "judge": made.factory("judge", {"passed": True, "reason": "six"}),
                    "planner_settings": {"max_tokens": 500, "reasoning_effort": "low"},
                    "executor_settings": {"stop": ["END"], "seed": 1},
                    "step_timeout": 30,
                    "expect_answer": {"judge": {"rubric": "says six"}},
                }
            ],
        },
        root=tmp_path,
    )
    task = suite.tasks[0]
    assert task.planner_settings == ModelSettings(temperature=0, max_tokens=500, reasoning_effort="low")
    assert task.step_timeout == 30

    report = await run_suite(suite)

    assert report.summary.pass_rate == 1.0, report.failed_runs
    [planner], [executor], [judge] = made.models["planner"], made.models["executor"], made.models["judge"]
    assert planner.settings == [task.planner_settings] * 2
    assert executor.settings == [ModelSettings(stop=("END",), seed=1)]
    assert judge.settings == [ModelSettings(temperature=0)]


async def test_a_step_timeout_from_the_suite_fails_a_slow_model_step(tmp_path: Path) -> None:
    made = Made()
    suite = suite_from_mapping(
        {
            "tasks": [
                {
                    "id": "slow",
                    "goal": "think",
                    "planner": made.factory("planner", {"steps": [{"id": "m", "description": "think"}]}),
                    "executor": made.factory("executor", "late", latency=60),
                    "replan": "never",
                    "step_timeout": 0.05,
                }
            ]
        },
        root=tmp_path,
    )
    (run,) = (await run_suite(suite)).tasks[0].runs
    assert not run.passed
    assert run.stop == "error"
    assert "step m failed (timeout:" in run.stop_detail


async def test_the_react_baseline_asks_with_the_executor_settings(tmp_path: Path) -> None:
    made = Made()
    suite = suite_from_mapping(
        {
            "tasks": [
                {
                    "id": "t",
                    "goal": "say six",
                    "react_model": made.factory("react", "6"),
                    "executor_settings": {"temperature": 0.3},
                    "expect_answer": "6",
                }
            ]
        },
        root=tmp_path,
        agent="react",
    )
    report = await run_suite(suite, EvalSettings(agent="react"))
    assert report.summary.pass_rate == 1.0
    assert made.models["react"][0].settings == [ModelSettings(temperature=0.3)]


def test_every_wrong_setting_in_a_suite_file_is_listed_with_its_place(tmp_path: Path) -> None:
    (tmp_path / "planner.json").write_text("[]")
    (tmp_path / "suite.yaml").write_text(
        """
defaults:
  planner: scripted:planner.json
  judge_settings: {tempo: 1}
tasks:
  - id: t
    goal: g
    planner_settings: {temperature: -1, top_p: 2}
    executor_settings: [temperature]
    step_timeout: 0
  - id: u
    goal: g
    step_timeout: fast
"""
    )
    with pytest.raises(SuiteInvalid) as caught:
        load_suite(tmp_path / "suite.yaml")
    where = {p.where for p in caught.value.problems}
    assert where == {
        "defaults.judge_settings.tempo",
        "tasks[0] (t).planner_settings.temperature",
        "tasks[0] (t).planner_settings.top_p",
        "tasks[0] (t).executor_settings",
        "tasks[0] (t).step_timeout",
        "tasks[1] (u).step_timeout",
    }


def test_a_tasks_settings_merge_into_the_defaults_key_by_key(tmp_path: Path) -> None:
    suite = suite_from_mapping(
        {
            "defaults": {
                "tools": ARITHMETIC,
                "planner": lambda: ScriptedModel([{"steps": [step("s", "add", {"a": 1, "b": 2})]}]),
                "executor_settings": {"temperature": 0.2, "max_tokens": 100},
            },
            "tasks": [
                {"id": "a", "goal": "g"},
                {"id": "b", "goal": "g", "executor_settings": {"max_tokens": 50}},
                {"id": "c", "goal": "g", "executor_settings": ModelSettings(seed=4)},
            ],
        },
        root=tmp_path,
    )
    a, b, c = (t.executor_settings for t in suite.tasks)
    assert a == ModelSettings(temperature=0.2, max_tokens=100)
    assert b == ModelSettings(temperature=0.2, max_tokens=50)
    assert c == ModelSettings(seed=4)
