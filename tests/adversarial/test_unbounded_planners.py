"""Planners that would run forever, and budgets pushed at their edges: every run still ends by
itself, within its caps, with a typed stop reason; ``used`` is what was actually spent."""

from __future__ import annotations

import math
from typing import Any

import pytest

from planexec import Agent, Budget, Planner, UsageError, tool
from planexec.log import BudgetExhaustedEvent, RunState, StallDetected, StepStarted
from planexec.models import ModelRequest
from planexec.runtime import DEFAULT_CAPS
from planexec.testing import FunctionModel, ScriptedModel
from tests.support import events_of, tool_step, turn


@tool
async def echo(n: int) -> int:
    """Echo a number."""
    return n


@tool
async def ping(label: str) -> str:
    """Answer the same thing every time."""
    return f"pong {label}"


def endless_turns() -> FunctionModel:
    """A step-by-step planner that never stops: each turn asks for one more new step."""
    count = [0]

    def reply(request: ModelRequest) -> Any:
        count[0] += 1
        return turn(tool_step(f"s{count[0]}", "echo", {"n": count[0]}), "one more")

    return FunctionModel(reply)


def assert_ends_well(result: Any) -> None:
    assert result.events[-1].kind == "run_finished"
    folded = RunState.fold(result.events)
    assert folded.stop == result.stop
    assert folded.outputs == result.outputs


async def test_a_run_with_no_budget_given_still_ends_at_the_default_caps() -> None:
    agent = Agent(Planner(model=endless_turns(), policy="step"), tools=[echo], store=None)
    result = await agent.run("count forever")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "steps"
    assert len(events_of(result, StepStarted)) == DEFAULT_CAPS["steps"] == 100
    assert_ends_well(result)


async def test_an_after_each_step_planner_that_always_adds_a_step_ends_too() -> None:
    count = [0]

    def reply(request: ModelRequest) -> Any:
        count[0] += 1
        return {"reason": "more", "steps": [tool_step(f"s{count[0]}", "echo", {"n": count[0]})]}

    planner = Planner(model=FunctionModel(reply), replan="after_each_step")
    result = await Agent(planner, tools=[echo], store=None).run("count forever")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget in ("steps", "model_calls")
    assert result.model_calls <= DEFAULT_CAPS["model_calls"]
    assert len(events_of(result, StepStarted)) <= DEFAULT_CAPS["steps"]
    assert_ends_well(result)


def test_the_defaults_are_documented_caps_and_none_lifts_them() -> None:
    budget = Budget()
    assert budget.as_dict() == {
        "model_calls": 200,
        "input_tokens": None,
        "output_tokens": None,
        "cost": None,
        "wall_time": 600.0,
        "tool_calls": 1000,
        "steps": 100,
        "replans": 3,
    }
    assert {k: v for k, v in budget.as_dict().items() if v is not None} == DEFAULT_CAPS
    assert Budget(steps=None).steps is None
    assert set(Budget.unbounded().as_dict().values()) == {None}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cost", math.nan),
        ("wall_time", math.inf),
        ("steps", True),
        ("steps", 2.5),
        ("model_calls", "10"),
        ("tool_calls", -1),
        ("replans", math.nan),
    ],
)
def test_budgets_that_could_never_be_reached_are_refused(field: str, value: Any) -> None:
    with pytest.raises(UsageError, match=field):
        Budget(**{field: value})


def test_every_bad_budget_value_is_listed_at_once() -> None:
    with pytest.raises(UsageError) as raised:
        Budget(cost=math.nan, steps=-1, wall_time=math.inf)
    assert {p.where for p in raised.value.problems} == {"cost", "steps", "wall_time"}


async def test_the_same_successful_call_again_and_again_is_a_stall() -> None:
    planner = ScriptedModel([turn(tool_step(f"p{i}", "ping", {"label": "x"}), "ask again") for i in range(200)])
    result = await Agent(Planner(model=planner, policy="step"), tools=[ping], store=None).run("ping")
    assert result.stop.kind == "stalled"
    (stall,) = events_of(result, StallDetected)
    assert stall.rule == "repeated_success"
    assert len(events_of(result, StepStarted)) == 3  # three planning rounds asked for the same thing
    assert_ends_well(result)


async def test_ping_pong_between_two_calls_is_a_stall() -> None:
    labels = ["a", "b"] * 100
    planner = ScriptedModel([turn(tool_step(f"p{i}", "ping", {"label": x}), "flip") for i, x in enumerate(labels)])
    result = await Agent(Planner(model=planner, policy="step"), tools=[ping], store=None).run("ping")
    assert result.stop.kind == "stalled"
    (stall,) = events_of(result, StallDetected)
    assert stall.rule == "ping_pong"
    assert len(events_of(result, StepStarted)) == 4  # A B A B
    assert_ends_well(result)


async def test_identical_calls_within_one_plan_are_not_a_stall() -> None:
    plan = {"steps": [tool_step(f"p{i}", "ping", {"label": "x"}) for i in range(5)]}
    result = await Agent(ScriptedModel([plan, {"answer": "done"}]), tools=[ping], store=None).run("ping")
    assert result.stop.kind == "goal_met"


async def test_a_tool_call_budget_smaller_than_the_ready_steps_starts_the_calls_it_allows() -> None:
    plan = {"steps": [tool_step(f"s{i}", "echo", {"n": i}) for i in range(5)]}
    result = await Agent(ScriptedModel([plan]), tools=[echo], budget=Budget(tool_calls=3), store=None).run("five")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "tool_calls"
    (hit,) = events_of(result, BudgetExhaustedEvent)
    assert (hit.limit, hit.used) == (3, 3)
    assert result.tool_calls == 3
    assert len(result.outputs) == 3
    assert "used 3 of 3" in result.stop.detail
    assert_ends_well(result)


async def test_a_step_budget_smaller_than_the_ready_steps_starts_the_steps_it_allows() -> None:
    plan = {"steps": [tool_step(f"s{i}", "echo", {"n": i}) for i in range(2)]}
    # the plan fits the budget when proposed; a parallel patch later may not: start what fits
    patch = {"reason": "more", "steps": [tool_step(f"t{i}", "echo", {"n": i}) for i in range(3)]}
    planner = Planner(model=ScriptedModel([plan, patch]), replan="after_each_step", max_repairs=0)
    result = await Agent(planner, tools=[echo], budget=Budget(steps=4), store=None).run("more")
    assert result.stop.kind == "budget_exhausted"
    started = len(events_of(result, StepStarted))
    assert started <= 4
    (hit,) = events_of(result, BudgetExhaustedEvent)
    assert hit.used == started


async def test_a_priced_scripted_planner_cannot_run_past_its_cost_cap() -> None:
    # five dollars a million input tokens; each request is a few thousand tokens of goal
    planner = ScriptedModel(
        [turn(tool_step(f"s{i}", "echo", {"n": i}), "more") for i in range(100)],
        cost_per_million=(5.0, 5.0),
    )
    goal = "count " + "and count " * 4000
    agent = Agent(Planner(model=planner, policy="step"), tools=[echo], budget=Budget(cost=0.05), store=None)
    result = await agent.run(goal)
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "cost"
    assert result.cost <= 0.05
    (hit,) = events_of(result, BudgetExhaustedEvent)
    assert hit.used == pytest.approx(result.cost)
    assert hit.used + hit.needed > 0.05  # the refused call is why it stopped
    assert_ends_well(result)
