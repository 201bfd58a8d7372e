"""Planning policies: step-by-step turns, and when to replan (on failure, after each step, never)."""

from __future__ import annotations

import re

import pytest

from planexec import Agent, AnswerReview, Planner, tool
from planexec.errors import UnrecoverableError
from planexec.log import PlanProposed, RunStarted, StepStarted
from planexec.testing import ScriptedModel
from tests.support import add, events_of, failing_tool, failing_tool_of_n, tool_step, turn


@tool
async def double(n: int) -> int:
    """Double a number."""
    return 2 * n


async def test_step_by_step_policy_takes_one_step_per_turn() -> None:
    model = ScriptedModel(
        [
            turn(tool_step("a", "add", {"a": 1, "b": 2}), "first add", 0.9),
            turn(tool_step("b", "double", {"n": "${a}"}, "a"), "now double it", 0.7),
            {"thought": "6 is the answer", "confidence": 0.95, "stop": True, "answer": "6"},
        ]
    )
    planner = Planner(model=model, policy="step")
    result = await Agent(planner, tools=[add, double]).run("(1+2)*2")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "6"
    assert result.stop.detail == "6 is the answer"
    assert result.outputs == {"a": 3, "b": 6}
    assert [c.purpose for c in model.calls] == ["planner.turn"] * 3
    model.assert_consumed()

    # Each turn is a plan version: the finished steps stay, the new step is added.
    assert [p.ids for p in result.plans] == [("a",), ("a", "b")]
    assert [p.reason for p in result.plans] == ["first add", "now double it"]
    assert [e.trigger for e in events_of(result, PlanProposed)] == ["initial", "turn"]
    # The turn's thought and confidence are carried by its step.
    b = result.steps["b"].step
    assert (b.thought, b.confidence) == ("now double it", 0.7)
    # The second turn sees the first step's result; the first turn sees no record.
    assert "Record:" not in model.calls[0].last_user_text
    assert re.search(r"^- a .* → 3$", model.calls[1].last_user_text, re.MULTILINE)
    assert events_of(result, RunStarted)[0].policy == "step"
    assert result.replans == 0


async def test_step_by_step_stop_reply_needs_only_stop_and_answer() -> None:
    model = ScriptedModel([turn(tool_step("a", "add", {"a": 1, "b": 2}), "add"), {"stop": True, "answer": "3"}])
    result = await Agent(Planner(model=model, policy="step"), tools=[add]).run("1+2")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3"


async def test_step_by_step_policy_can_stop_at_once_only_when_the_answer_is_reviewed() -> None:
    model = ScriptedModel([{"thought": "nothing to do", "confidence": 1.0, "stop": True, "answer": "42"}] * 3)
    result = await Agent(Planner(model=model, policy="step"), tools=[add]).run("the answer")
    assert (result.stop.kind, result.stop.code) == ("error", "planner_output")
    assert "no step has been tried" in result.stop.detail

    model = ScriptedModel([{"thought": "nothing to do", "confidence": 1.0, "stop": True, "answer": "42"}])
    review = AnswerReview(checks=[lambda answer: answer == "42"])
    result = await Agent(Planner(model=model, policy="step"), tools=[add], review=review).run("the answer")
    assert result.stop.kind == "goal_met"
    assert result.answer == "42"
    assert result.plans == ()


async def test_step_by_step_invalid_turns_are_repaired() -> None:
    model = ScriptedModel(
        [
            {"thought": "go", "confidence": 0.5, "stop": False},  # no step
            {"thought": "go", "stop": False, "step": tool_step("a", "add", {"a": 1, "b": 2})},  # no confidence
            {"thought": "done", "confidence": 1.0, "stop": True, "answer": "x"},
        ]
    )
    review = AnswerReview(checks=[lambda _answer: True])
    result = await Agent(Planner(model=model, policy="step"), tools=[add], review=review).run("x")
    assert result.stop.kind == "goal_met"
    assert "a step is required" in model.calls[1].last_user_text
    assert "a turn with a step needs a confidence" in model.calls[2].last_user_text
    # A turn that stops without the answer is not refused: the answer is asked for (test_run_step_stop.py).


async def test_step_by_step_policy_after_a_failure() -> None:
    fails = failing_tool_of_n("cannot handle {n}")

    model = ScriptedModel(
        [
            turn(tool_step("a", "fails", {"n": 1}), "try the fast way"),
            turn(tool_step("b", "add", {"a": 1, "b": 0}), "fall back to add"),
            {"thought": "done", "confidence": 0.9, "stop": True, "answer": "1"},
        ]
    )
    result = await Agent(Planner(model=model, policy="step"), tools=[add, fails]).run("one")
    assert result.stop.kind == "goal_met"
    assert result.replans == 1
    assert [e.trigger for e in events_of(result, PlanProposed)] == ["initial", "failure"]
    assert "cannot handle 1" in model.calls[1].last_user_text
    assert result.steps["a"].status == "failed"
    assert result.outputs == {"b": 1}


async def test_replan_never_stops_with_an_error_on_a_failure() -> None:
    fails = failing_tool("the disk is full")

    model = ScriptedModel([{"steps": [tool_step("f", "fails", {}), tool_step("ok", "add", {"a": 1, "b": 1})]}])
    result = await Agent(Planner(model=model, replan="never"), tools=[add, fails]).run("fail")

    assert result.stop.kind == "error"
    assert "step f failed" in result.stop.detail
    assert "the disk is full" in result.stop.detail
    assert "replanning is off" in result.stop.detail
    assert [c.purpose for c in model.calls] == ["planner.propose"]
    assert result.replans == 0
    assert events_of(result, RunStarted)[0].replan == "never"
    with pytest.raises(UnrecoverableError):
        result.raise_for_stop()


async def test_replan_never_still_finishes_a_run_without_failures() -> None:
    model = ScriptedModel([{"steps": [tool_step("a", "add", {"a": 1, "b": 1})]}, {"answer": "2"}])
    result = await Agent(Planner(model=model, replan="never"), tools=[add]).run("1+1")
    assert result.stop.kind == "goal_met"
    assert result.answer == "2"


async def test_replan_after_each_step_patches_after_every_finished_step() -> None:
    model = ScriptedModel(
        [
            {"reason": "start", "steps": [tool_step("a", "add", {"a": 1, "b": 2})]},
            {"reason": "double it next", "steps": [tool_step("b", "double", {"n": "${a}"}, "a")]},
            {"reason": "nothing left", "steps": []},
            {"answer": "6"},
        ]
    )
    planner = Planner(model=model, replan="after_each_step")
    result = await Agent(planner, tools=[add, double]).run("(1+2)*2")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"a": 3, "b": 6}
    assert [c.purpose for c in model.calls] == ["planner.propose", "planner.patch", "planner.patch", "planner.finish"]
    assert [e.trigger for e in events_of(result, PlanProposed)] == ["initial", "after_step", "after_step"]
    assert [p.reason for p in result.plans] == ["start", "double it next", "nothing left"]
    assert [p.ids for p in result.plans] == [("a",), ("a", "b"), ("a", "b")]
    assert result.replans == 0  # patches after success are not failure replans
    assert "step a finished" in model.calls[1].last_user_text
    assert re.search(r"^- a .* → ", model.calls[1].last_user_text, re.MULTILINE)
    assert [e.step_id for e in events_of(result, StepStarted)] == ["a", "b"]
    model.assert_consumed()


async def test_replan_after_each_step_can_keep_the_rest_of_the_plan() -> None:
    plan = {"steps": [tool_step("a", "add", {"a": 1, "b": 2}), tool_step("b", "double", {"n": "${a}"}, "a")]}
    keep_b = {"reason": "carry on", "steps": [tool_step("b", "double", {"n": "${a}"}, "a")]}
    model = ScriptedModel([plan, keep_b, {"reason": "done", "steps": []}, {"answer": "6"}])
    result = await Agent(Planner(model=model, replan="after_each_step"), tools=[add, double]).run("(1+2)*2")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"a": 3, "b": 6}
    # b ran once, although two plan versions contained it.
    assert [e.step_id for e in events_of(result, StepStarted)] == ["a", "b"]


async def test_replan_on_failure_is_the_default() -> None:
    fails = failing_tool()

    model = ScriptedModel(
        [
            {"steps": [tool_step("f", "fails", {})]},
            {"reason": "use add", "steps": [tool_step("a", "add", {"a": 1, "b": 1})]},
            {"answer": "2"},
        ]
    )
    result = await Agent(model, tools=[add, fails]).run("two")
    assert result.stop.kind == "goal_met"
    assert events_of(result, RunStarted)[0].replan == "on_failure"
    assert result.replans == 1
