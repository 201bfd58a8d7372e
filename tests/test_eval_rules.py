"""The pattern's rules in evaluation suites: the turn format, escalation and the final answer's
review, read from a suite (every problem listed with its place) and applied to each run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from planexec.eval import SuiteInvalid, load_suite, run_suite, suite_from_mapping
from tests.test_eval import ARITHMETIC, planner_of, step

CHECKS = """
def says_seven(answer: str) -> str | None:
    return None if "7" in answer else "the answer does not say 7"
"""


@pytest.fixture
def checks_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"suite_checks_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(CHECKS)
    return name


async def test_a_refused_answer_goes_back_and_the_second_passes(tmp_path: Path, checks_module: str) -> None:
    add = {"steps": [step("s", "add", {"a": 3, "b": 4})]}
    suite = suite_from_mapping(
        {
            "tasks": [
                {
                    "id": "t",
                    "goal": "add 3 and 4",
                    "tools": ARITHMETIC,
                    "planner": planner_of(add, {"answer": "done"}, {"steps": []}, {"answer": "7"}),
                    "review": {"checks": [f"{checks_module}:says_seven"]},
                    "expect_answer": "7",
                }
            ]
        },
        root=tmp_path,
    )
    assert suite.tasks[0].review is not None
    assert suite.tasks[0].review.check_refs == (f"{checks_module}:says_seven",)
    report = await run_suite(suite)
    assert report.summary.pass_rate == 1.0, report.failed_runs


async def test_an_answer_refused_every_round_stops_the_run_escalated(tmp_path: Path, checks_module: str) -> None:
    add = {"steps": [step("s", "add", {"a": 3, "b": 4})]}
    suite = suite_from_mapping(
        {
            "tasks": [
                {
                    "id": "t",
                    "goal": "add 3 and 4",
                    "tools": ARITHMETIC,
                    "planner": planner_of(add, {"answer": "done"}),
                    "review": {"checks": [f"{checks_module}:says_seven"], "max_rounds": 1},
                }
            ]
        },
        root=tmp_path,
    )
    (run,) = (await run_suite(suite)).tasks[0].runs
    assert not run.passed
    assert run.stop == "escalated"
    assert "says_seven: the answer does not say 7" in run.stop_detail


async def test_a_rubric_review_uses_the_tasks_judge_and_a_flat_turn_planner(tmp_path: Path) -> None:
    flat = {"thought": "add", "next_step": "add 3 and 4", "tool": "add", "arguments": {"a": 3, "b": 4}}
    suite = suite_from_mapping(
        {
            "tasks": [
                {
                    "id": "t",
                    "goal": "add 3 and 4",
                    "tools": ARITHMETIC,
                    "policy": "step",
                    "turn_format": "flat",
                    "planner": planner_of(flat, {"thought": "done", "stop": True, "answer": "7"}),
                    "judge": planner_of({"passed": True, "reason": "right"}, {"passed": True, "reason": "right"}),
                    "review": {"rubric": "the answer is the sum"},
                    "expect_answer": "7",
                }
            ]
        },
        root=tmp_path,
    )
    assert suite.tasks[0].turn_format == "flat"
    report = await run_suite(suite)
    assert report.summary.pass_rate == 1.0, report.failed_runs


async def test_a_low_confidence_plan_stops_the_run_when_nobody_can_be_asked(tmp_path: Path) -> None:
    unsure = {"confidence": 0.3, "steps": [step("s", "add", {"a": 3, "b": 4})]}
    suite = suite_from_mapping(
        {
            "defaults": {"escalation": {"confidence_floor": 0.5}},
            "tasks": [
                {
                    "id": "t",
                    "goal": "add",
                    "tools": ARITHMETIC,
                    "planner": planner_of(unsure),
                    "escalation": {"on_low_confidence": "stop"},
                }
            ],
        },
        root=tmp_path,
    )
    escalation = suite.tasks[0].escalation
    assert (escalation.confidence_floor, escalation.on_low_confidence) == (0.5, "stop")  # merged key by key
    (run,) = (await run_suite(suite)).tasks[0].runs
    assert run.stop == "escalated"
    assert run.metrics.escalations == 1


def test_every_wrong_rule_in_a_suite_file_is_listed_with_its_place(tmp_path: Path, checks_module: str) -> None:
    (tmp_path / "planner.json").write_text("[]")
    (tmp_path / "suite.yaml").write_text(
        f"""
defaults:
  planner: scripted:planner.json
tasks:
  - id: t
    goal: add
    turn_format: yaml
    escalation: {{confidence_floor: 2, on_low_confidence: maybe, on_fail: review, retries: 0, extra: 1}}
    review: {{checks: ["{checks_module}:nope", "no_colon"], rubric: "", checklist: [looks right], max_rounds: 0}}
  - id: u
    goal: add
    escalation: [1]
    review: {{max_rounds: 3}}
"""
    )
    with pytest.raises(SuiteInvalid) as caught:
        load_suite(tmp_path / "suite.yaml")
    found = {(p.where, p.message) for p in caught.value.problems}
    places = {where for where, _ in found}
    for place in (
        "tasks[0] (t).turn_format",
        "tasks[0] (t).escalation.confidence_floor",
        "tasks[0] (t).escalation.on_low_confidence",
        "tasks[0] (t).escalation.retries",
        "tasks[0] (t).escalation.extra",
        "tasks[0] (t).review.checks",
        "tasks[0] (t).review.rubric",
        "tasks[0] (t).review.checklist",
        "tasks[0] (t).review.max_rounds",
        "tasks[1] (u).escalation",
        "tasks[1] (u).review",
    ):
        assert place in places, (place, sorted(found))
    messages = " | ".join(m for _, m in found)
    assert "no attribute 'nope'" in messages
    assert "use the form module:attribute" in messages
    assert "nobody is at hand during an evaluation" in messages
    assert "needs checks or a rubric" in messages


def test_review_on_fail_is_refused_in_a_suite(tmp_path: Path) -> None:
    with pytest.raises(SuiteInvalid, match="nobody is at hand") as caught:
        suite_from_mapping(
            {"tasks": [{"id": "t", "goal": "g", "planner": planner_of(), "escalation": {"on_fail": "review"}}]},
            root=tmp_path,
        )
    assert [p.where for p in caught.value.problems] == ["tasks[0] (t).escalation.on_fail"]
