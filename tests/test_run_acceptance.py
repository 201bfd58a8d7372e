"""Acceptance: deterministic checks and a model rubric judge every result; a failed verdict replans."""

from __future__ import annotations

from typing import Any

import pytest

from planexec import Acceptance, Agent, AnswerReview, Step, tool
from planexec.log import ModelCalled, StepFailed
from planexec.testing import ScriptedModel
from tests.support import events_of, tool_step

ANY_ANSWER = AnswerReview(checks=[lambda _answer: True])
"""Lets a run with no step done end with its answer (these tests judge steps, not answers)."""


@tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


@tool
async def number(n: int) -> int:
    """Return the number."""
    return n


def positive(step: Step, output: Any) -> bool | str:
    return True if output > 0 else f"{output} is not positive"


CASES = [
    pytest.param({"kind": "non_empty"}, "echo", {"text": ""}, {"text": "x"}, "non_empty", "empty", id="non_empty"),
    pytest.param(
        {"kind": "contains", "text": "needle"},
        "echo",
        {"text": "hay"},
        {"text": "a needle"},
        "contains",
        "lacks 'needle'",
        id="contains",
    ),
    pytest.param(
        {"kind": "matches", "pattern": r"^\d{3}$"},
        "echo",
        {"text": "12a"},
        {"text": "123"},
        "matches",
        "no match",
        id="matches",
    ),
    pytest.param(
        {"kind": "schema", "json_schema": {"type": "integer", "minimum": 10}},
        "number",
        {"n": 3},
        {"n": 30},
        "schema",
        "less than the minimum",
        id="schema",
    ),
    pytest.param(
        {"kind": "predicate", "name": "positive"},
        "number",
        {"n": -4},
        {"n": 4},
        "predicate:positive",
        "-4 is not positive",
        id="predicate",
    ),
]


@pytest.mark.parametrize(("check", "tool_name", "bad_args", "good_args", "check_name", "detail"), CASES)
async def test_a_failed_check_replans(
    check: dict[str, Any],
    tool_name: str,
    bad_args: dict[str, Any],
    good_args: dict[str, Any],
    check_name: str,
    detail: str,
) -> None:
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", tool_name, bad_args, checks=[check])]},
            {"reason": "better input", "steps": [tool_step("s2", tool_name, good_args, checks=[check])]},
            {"answer": "ok"},
        ]
    )
    acceptance = Acceptance(predicates={"positive": positive})
    result = await Agent(planner, tools=[echo, number], acceptance=acceptance).run("check")

    assert result.stop.kind == "goal_met", result.stop
    assert result.replans == 1
    assert set(result.outputs) == {"s2"}

    rec = result.steps["s1"]
    assert rec.status == "failed"
    assert rec.error is not None
    assert rec.error.kind == "acceptance"
    assert rec.verdict is not None
    assert not rec.verdict.passed
    assert [c.name for c in rec.verdict.failures] == [check_name]
    assert detail in rec.verdict.failures[0].detail
    assert rec.output is not None  # the rejected output is kept for the planner to see

    failed = events_of(result, StepFailed)
    assert [e.step_id for e in failed] == ["s1"]
    assert failed[0].verdict == rec.verdict

    patch_prompt = planner.calls[1].last_user_text
    assert planner.calls[1].purpose == "planner.patch"
    assert "acceptance" in patch_prompt
    assert f"failed checks: {check_name}" in patch_prompt

    good = result.steps["s2"]
    assert good.verdict is not None
    assert good.verdict.passed
    assert [c.name for c in good.verdict.checks] == [check_name]


async def test_an_unknown_predicate_in_the_plan_is_sent_back_for_repair() -> None:
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "number", {"n": 1}, checks=[{"kind": "predicate", "name": "even"}])]},
            {"steps": [tool_step("s1", "number", {"n": 1}, checks=[{"kind": "predicate", "name": "positive"}])]},
            {"answer": "1"},
        ]
    )
    acceptance = Acceptance(predicates={"positive": positive})
    result = await Agent(planner, tools=[number], acceptance=acceptance).run("check")
    assert result.stop.kind == "goal_met"
    assert "unknown predicate 'even'" in planner.calls[1].last_user_text


async def test_the_accept_predicate_applies_to_every_step() -> None:
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "number", {"n": 5}), tool_step("s2", "number", {"n": -5})]},
            {"reason": "positive only", "steps": [tool_step("s3", "number", {"n": 6})]},
            {"answer": "11"},
        ]
    )
    result = await Agent(planner, tools=[number], acceptance=Acceptance(accept=positive)).run("check")
    assert result.stop.kind == "goal_met"
    assert result.outputs == {"s1": 5, "s3": 6}
    rec = result.steps["s2"]
    assert rec.verdict is not None
    assert [(c.name, c.detail) for c in rec.verdict.failures] == [("accept", "-5 is not positive")]


async def test_a_predicate_that_raises_fails_the_check_with_the_reason() -> None:
    def explodes(step: Step, output: Any) -> bool:
        raise ValueError("cannot judge")

    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "number", {"n": 5}, checks=[{"kind": "predicate", "name": "explodes"}])]},
            {"reason": "no check", "steps": [tool_step("s2", "number", {"n": 5})]},
            {"answer": "5"},
        ]
    )
    result = await Agent(planner, tools=[number], acceptance=Acceptance(predicates={"explodes": explodes})).run("x")
    assert result.stop.kind == "goal_met"
    verdict = result.steps["s1"].verdict
    assert verdict is not None
    assert "ValueError: cannot judge" in verdict.failures[0].detail


async def test_a_rubric_judge_rejecting_a_result_replans() -> None:
    judge = ScriptedModel(
        [
            {"passed": False, "reason": "the summary does not name the city"},
            {"passed": True, "reason": "names the city"},
        ]
    )
    expected = "a one-line summary that names the city"
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "echo", {"text": "a nice place"}, expected=expected)]},
            {
                "reason": "name the city",
                "steps": [tool_step("s2", "echo", {"text": "Paris: a nice place"}, expected=expected)],
            },
            {"answer": "Paris: a nice place"},
        ]
    )
    result = await Agent(planner, tools=[echo], acceptance=Acceptance(judge=judge)).run("summarize")

    assert result.stop.kind == "goal_met", result.stop
    assert result.replans == 1
    judge.assert_consumed()
    rec = result.steps["s1"]
    assert rec.error is not None
    assert rec.error.kind == "acceptance"
    assert rec.verdict is not None
    assert [(c.name, c.passed, c.detail) for c in rec.verdict.checks] == [
        ("rubric", False, "the summary does not name the city")
    ]
    assert "the summary does not name the city" in planner.calls[1].last_user_text

    # The judge saw the criteria and the result, and its calls are logged and counted.
    assert [c.purpose for c in judge.calls] == ["judge", "judge"]
    assert expected in judge.calls[0].last_user_text
    assert "a nice place" in judge.calls[0].last_user_text
    judge_calls = [e for e in events_of(result, ModelCalled) if e.role == "judge"]
    assert [e.step_id for e in judge_calls] == ["s1", "s2"]
    assert result.model_calls == len(planner.calls) + len(judge.calls)


async def test_the_judge_only_grades_steps_with_criteria() -> None:
    judge = ScriptedModel([])  # any call would fail the run
    planner = ScriptedModel([{"steps": [tool_step("s1", "echo", {"text": "x"})]}, {"answer": "x"}])
    result = await Agent(planner, tools=[echo], acceptance=Acceptance(judge=judge)).run("no criteria")
    assert result.stop.kind == "goal_met"
    assert judge.calls == []


async def test_an_unreadable_judge_reply_fails_the_check() -> None:
    judge = ScriptedModel(["looks fine to me"])
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "echo", {"text": "x"}, expected="an x")]},
            {"reason": "skip", "steps": []},
            {"answer": "x"},
        ]
    )
    result = await Agent(planner, tools=[echo], acceptance=Acceptance(judge=judge), review=ANY_ANSWER).run("unreadable")
    assert result.stop.kind == "goal_met"
    verdict = result.steps["s1"].verdict
    assert verdict is not None
    assert not verdict.passed
    assert "unreadable" in verdict.failures[0].detail


async def test_checks_that_fail_skip_the_judge() -> None:
    judge = ScriptedModel([])
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "echo", {"text": ""}, expected="text", checks=[{"kind": "non_empty"}])]},
            {"reason": "skip", "steps": []},
            {"answer": "none"},
        ]
    )
    result = await Agent(planner, tools=[echo], acceptance=Acceptance(judge=judge), review=ANY_ANSWER).run("skip judge")
    assert result.stop.kind == "goal_met"
    assert judge.calls == []


async def test_an_invalid_check_is_refused_before_the_run() -> None:
    planner = ScriptedModel(
        [
            {"steps": [tool_step("s1", "echo", {"text": "x"}, checks=[{"kind": "matches", "pattern": "(unclosed"}])]},
            {"steps": [tool_step("s1", "echo", {"text": "x"})]},
            {"answer": "x"},
        ]
    )
    result = await Agent(planner, tools=[echo]).run("bad pattern")
    assert result.stop.kind == "goal_met"
    assert "[invalid_pattern]" in planner.calls[1].last_user_text
