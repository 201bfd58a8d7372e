"""A step-by-step turn that stops without the final answer — ``{thought, next_step, tool,
arguments, stop, confidence}`` exactly as the guide shows it, or a nested turn with ``stop`` and no
``answer`` — ends the run with an answer: the planner is asked for it as the upfront policy asks at
the end (a ``finish`` planning round). Stop wins over a step given with it; an empty answer is no
answer; an answer that is not text is sent back for repair; and a planner that never gives the
answer ends the run within its budget, with a typed stop."""

from __future__ import annotations

from typing import Any

import pytest

from planexec import Agent, AnswerReview, Budget, Planner
from planexec.log import ModelCalled, PlannerOutputRejected, PlanningStarted, RunResult, StepStarted, StepStreamed
from planexec.models import ModelRequest
from planexec.runtime import replay_log
from planexec.store import MemoryStore
from planexec.testing import FunctionModel, ScriptedModel, StreamingScriptedModel
from tests.support import SAFETY, add, events_of, tool_step, turn

FIRST = turn(tool_step("a", "add", {"a": 1, "b": 2}), "add first", 0.9)
FLAT_FIRST = {
    "thought": "add first",
    "next_step": "add 1 and 2",
    "tool": "add",
    "arguments": '{"a": 1, "b": 2}',
    "stop": False,
    "confidence": 0.9,
}
GUIDE_STOP = {
    "thought": "1 + 2 is known",
    "next_step": None,
    "tool": None,
    "arguments": "{}",
    "stop": True,
    "confidence": 1.0,
}
"""A flat turn that stops, every member the guide shows given, and no answer."""
STRICT_STOP = {
    "thought": "1 + 2 is known",
    "confidence": 1.0,
    "stop": True,
    "step": None,
    "answer": None,
    "question": None,
    "give_up": None,
}
"""A nested turn that stops, as strict structured output gives it: every member, null where none."""


async def run(planner: Planner, *, budget: Budget = SAFETY, **options: Any) -> RunResult:
    agent = Agent(planner, tools=[add], budget=budget, store=MemoryStore(), **options)
    return await agent.run("What is 1 + 2?")


def purposes(result: RunResult) -> list[str]:
    return [c.purpose for c in events_of(result, ModelCalled)]


def triggers(result: RunResult) -> list[str]:
    return [e.trigger for e in events_of(result, PlanningStarted)]


async def assert_replays(result: RunResult) -> None:
    log = list(result.events)
    report = await replay_log(log)
    assert report.divergence is None
    assert report.matched
    assert report.compared == len(log)
    assert list(report.events) == log


@pytest.mark.parametrize(
    ("turn_format", "first", "stop"),
    [
        ("nested", FIRST, {"thought": "1 + 2 is known", "stop": True}),
        ("nested", FIRST, STRICT_STOP),
        ("flat", FLAT_FIRST, GUIDE_STOP),
    ],
    ids=["nested", "nested-strict", "flat-as-the-guide-shows-it"],
)
async def test_a_turn_that_stops_without_an_answer_is_followed_by_a_request_for_it(
    turn_format: str, first: dict[str, Any], stop: dict[str, Any]
) -> None:
    model = ScriptedModel([first, stop, {"answer": "3"}])
    result = await run(Planner(model=model, policy="step", turn_format=turn_format))  # type: ignore[arg-type]

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3"
    assert result.outputs == {"a" if turn_format == "nested" else "s1": 3}
    model.assert_consumed()
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish"]
    assert triggers(result) == ["initial", "turn", "finish"]
    [finish] = [e for e in events_of(result, PlanningStarted) if e.trigger == "finish"]
    assert "stopped without the final answer" in finish.why
    assert events_of(result, PlannerOutputRejected) == []  # the turn was not refused
    # The request for the answer shows the record, and starts as every turn of the run does: the
    # same system prompt and schema, so a provider's prompt cache serves it.
    turn_request, asked = model.calls[1], model.calls[2]
    assert "→ 3" in asked.last_user_text
    assert "final answer" in asked.last_user_text
    assert asked.messages[0] == turn_request.messages[0]
    assert asked.output == turn_request.output
    assert asked.cache_key == turn_request.cache_key
    await assert_replays(result)


@pytest.mark.parametrize(
    "reply",
    [
        {"thought": "3", "stop": True, "answer": "3"},  # the nested turn's shape
        {"thought": "3", "next_step": "3", "tool": None, "arguments": "{}", "stop": True, "confidence": 1.0},
        {**GUIDE_STOP, "answer": "3"},
    ],
    ids=["nested-turn", "flat-turn-next-step", "flat-turn-answer"],
)
async def test_the_answer_may_come_in_the_shape_of_a_turn(reply: dict[str, Any]) -> None:
    model = ScriptedModel([FLAT_FIRST, GUIDE_STOP, reply])
    result = await run(Planner(model=model, policy="step", turn_format="flat"))

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3"
    await assert_replays(result)


@pytest.mark.parametrize("empty", ["", "   \n"])
async def test_an_empty_answer_is_no_answer(empty: str) -> None:
    model = ScriptedModel([FIRST, {"thought": "done", "stop": True, "answer": empty}, {"answer": "3"}])
    result = await run(Planner(model=model, policy="step"))

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3"
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish"]
    await assert_replays(result)


async def test_a_flat_turn_whose_next_step_is_empty_has_no_answer() -> None:
    model = ScriptedModel([FLAT_FIRST, {**GUIDE_STOP, "next_step": " "}, {"answer": "3"}])
    result = await run(Planner(model=model, policy="step", turn_format="flat"))

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish"]


@pytest.mark.parametrize("answer", [42, {"text": "3"}, ["3"], True])
async def test_an_answer_that_is_not_text_is_sent_back_for_repair(answer: Any) -> None:
    model = ScriptedModel([FIRST, {"thought": "done", "stop": True, "answer": answer}, {"stop": True, "answer": "3"}])
    result = await run(Planner(model=model, policy="step"))

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3"
    [rejected] = events_of(result, PlannerOutputRejected)
    assert [p.where for p in rejected.problems] == ["answer"]
    assert purposes(result) == ["planner.turn"] * 3
    assert "answer" in model.calls[2].last_user_text
    await assert_replays(result)


async def test_stop_wins_over_a_step_given_with_it() -> None:
    """Stop wins, as it does everywhere a turn is read: the step given with it is not run, and the
    answer given with it ends the run."""
    extra = tool_step("b", "add", {"a": 5, "b": 5})
    model = ScriptedModel([FIRST, {"thought": "done", "confidence": 0.9, "stop": True, "step": extra, "answer": "3"}])
    result = await run(Planner(model=model, policy="step"))

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert [e.step_id for e in events_of(result, StepStarted)] == ["a"]
    assert "b" not in result.steps


async def test_stop_with_a_step_and_no_answer_asks_for_the_answer_and_runs_no_step() -> None:
    extra = tool_step("b", "add", {"a": 5, "b": 5})
    model = ScriptedModel([FIRST, {"thought": "done", "confidence": 0.9, "stop": True, "step": extra}, {"answer": "3"}])
    result = await run(Planner(model=model, policy="step"))

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert [e.step_id for e in events_of(result, StepStarted)] == ["a"]
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish"]
    await assert_replays(result)


async def test_a_flat_stop_that_names_a_tool_has_a_step_not_an_answer() -> None:
    """In the flat form, next_step is the final answer when stop is true — unless the turn names a
    tool, when next_step says what that step would do: stop wins, the step is not run, and the
    answer is asked for."""
    stop = {**FLAT_FIRST, "next_step": "add 5 and 5", "arguments": '{"a": 5, "b": 5}', "stop": True}
    model = ScriptedModel([FLAT_FIRST, stop, {"answer": "3"}])
    result = await run(Planner(model=model, policy="step", turn_format="flat"))

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert [e.step_id for e in events_of(result, StepStarted)] == ["s1"]
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish"]


async def test_a_flat_stop_with_no_tool_answers_in_next_step() -> None:
    model = ScriptedModel([FLAT_FIRST, {**GUIDE_STOP, "next_step": "3"}])
    result = await run(Planner(model=model, policy="step", turn_format="flat"))

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert purposes(result) == ["planner.turn", "planner.turn"]


@pytest.mark.parametrize(
    "again",
    [{"thought": "done", "stop": True}, {"thought": "done", "stop": True, "answer": ""}, GUIDE_STOP],
    ids=["no-answer", "empty-answer", "flat"],
)
async def test_a_planner_that_never_gives_the_answer_stops_after_its_repairs(again: dict[str, Any]) -> None:
    asked: list[str] = []

    def planner(request: ModelRequest) -> dict[str, Any]:
        asked.append(request.purpose)
        return FIRST if len(asked) == 1 else again

    result = await run(Planner(model=FunctionModel(planner), policy="step", max_repairs=2))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    assert "answer" in result.stop.detail
    assert result.answer is None
    # one turn with a step, one that stops, then the request for the answer and its two repairs
    assert asked == ["planner.turn", "planner.turn", "planner.finish", "planner.finish", "planner.finish"]
    assert triggers(result) == ["initial", "turn", "finish"]
    await assert_replays(result)


async def test_a_planner_that_never_gives_the_answer_stops_within_the_model_call_budget() -> None:
    asked: list[str] = []

    def planner(request: ModelRequest) -> dict[str, Any]:
        asked.append(request.purpose)
        return FIRST if len(asked) == 1 else {"stop": True}

    result = await run(
        Planner(model=FunctionModel(planner), policy="step", max_repairs=50), budget=Budget(model_calls=4, wall_time=30)
    )

    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "model_calls"), result.stop
    assert asked == ["planner.turn", "planner.turn", "planner.finish", "planner.finish"]


async def test_a_stop_at_once_without_an_answer_is_refused_unless_answers_are_reviewed() -> None:
    """No step has been tried: as with a stop that gives an answer, only a reviewed answer may end
    a run that did nothing."""
    model = ScriptedModel([{"thought": "nothing to do", "stop": True}] * 3)
    result = await run(Planner(model=model, policy="step"))
    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    assert "no step has been tried" in result.stop.detail

    model = ScriptedModel([{"thought": "nothing to do", "stop": True}, {"answer": "42"}])
    review = AnswerReview(checks=[lambda answer: answer == "42"])
    result = await run(Planner(model=model, policy="step"), review=review)
    assert (result.stop.kind, result.answer) == ("goal_met", "42"), result.stop
    assert purposes(result) == ["planner.turn", "planner.finish"]
    await assert_replays(result)


async def test_the_answer_asked_for_is_reviewed_and_a_refusal_goes_back_to_the_turns() -> None:
    model = ScriptedModel(
        [
            FIRST,
            {"thought": "done", "stop": True},
            {"answer": "three"},
            {"thought": "as a number", "stop": True, "answer": "3"},
        ]
    )
    review = AnswerReview(checks=[lambda answer: answer.isdigit() or "the answer is a number"])
    result = await run(Planner(model=model, policy="step"), review=review)

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish", "planner.turn"]
    assert triggers(result) == ["initial", "turn", "finish", "turn"]
    await assert_replays(result)


async def test_a_streamed_turn_that_stops_after_giving_a_step_never_starts_that_step() -> None:
    """The step comes before ``stop`` in the streamed text: it is not started early, since stop may
    still come (a turn's step starts early only once the turn said it goes on)."""
    first = {"thought": "add first", "confidence": 0.9, "stop": False, "step": tool_step("a", "add", {"a": 1, "b": 2})}
    stop = {"thought": "done", "confidence": 0.9, "step": tool_step("b", "add", {"a": 5, "b": 5}), "stop": True}
    model = StreamingScriptedModel([first, stop, {"answer": "3"}], chunks=40)
    result = await run(Planner(model=model, policy="step"))

    assert (result.stop.kind, result.answer) == ("goal_met", "3"), result.stop
    assert [e.step.id for e in events_of(result, StepStreamed)] == ["a"]
    assert [e.step_id for e in events_of(result, StepStarted)] == ["a"]
    assert purposes(result) == ["planner.turn", "planner.turn", "planner.finish"]
    await assert_replays(result)
