"""Budgets: every kind, checked before the call it would pay for; a run that hits one stops with
``budget_exhausted`` (or ``max_replans``) and keeps its partial results."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planexec import Agent, Budget, Planner, RetryPolicy, RunResult, TransientToolError, tool
from planexec.errors import BudgetExhausted, MaxReplans
from planexec.log import BudgetExhaustedEvent, ModelCalled, StepCancelled, StepFailed, StepStarted
from planexec.models import ModelRequest, Usage
from planexec.testing import ScriptedModel
from tests.support import Blocker, FailingTool, events_of, failing_tool, failing_tool_of_n, tool_step

SAFETY_WALL_TIME = 30.0


class Counter:
    def __init__(self) -> None:
        self.calls = 0


def counting_add(counter: Counter) -> Any:
    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        counter.calls += 1
        return a + b

    return add


ONE_STEP = {"steps": [tool_step("s1", "add", {"a": 1, "b": 2})]}
CHAIN = {
    "steps": [
        tool_step("s1", "add", {"a": 1, "b": 1}),
        tool_step("s2", "add", {"a": "${s1}", "b": 1}, "s1"),
        tool_step("s3", "add", {"a": "${s2}", "b": 1}, "s2"),
    ]
}


def assert_budget_stop(result: RunResult, budget: str) -> BudgetExhaustedEvent:
    assert result.stop.kind == "budget_exhausted", result.stop
    assert result.stop.budget == budget
    assert budget.replace("_", " ") in result.stop.detail.replace("_", " ")
    hits = events_of(result, BudgetExhaustedEvent)
    assert len(hits) == 1, f"expected one budget event, found {hits}"
    assert hits[0].budget == budget
    assert result.events[-1].kind == "run_finished"
    with pytest.raises(BudgetExhausted) as raised:
        result.raise_for_stop()
    assert raised.value.result is result
    return hits[0]


async def test_model_calls_budget() -> None:
    counter = Counter()
    planner = ScriptedModel([ONE_STEP, {"answer": "never asked"}])
    result = await Agent(planner, tools=[counting_add(counter)], budget=Budget(model_calls=1)).run("1+2")

    hit = assert_budget_stop(result, "model_calls")
    assert (hit.limit, hit.used) == (1, 1)
    assert result.model_calls == 1
    assert len(planner.calls) == 1  # the second call was refused before it was made
    assert result.outputs == {"s1": 3}  # partial results are kept
    assert result.answer is None


async def test_input_tokens_budget() -> None:
    planner = ScriptedModel([ONE_STEP, {"answer": "never asked"}], usage=Usage(input_tokens=700, output_tokens=1))
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(input_tokens=1000)).run("1+2")

    hit = assert_budget_stop(result, "input_tokens")
    assert hit.limit == 1000
    assert hit.used == 700  # what was actually spent
    assert hit.needed == 700  # what the refused request would have added (the double counts its tokens)
    assert len(planner.calls) == 1
    assert result.usage.input_tokens == 700


async def test_a_request_counted_over_the_input_token_cap_is_not_made() -> None:
    # the double says how many tokens each request holds: the first one alone is over the cap
    planner = ScriptedModel([ONE_STEP], usage=Usage(input_tokens=2000, output_tokens=1))
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(input_tokens=1500)).run("1+2")
    hit = assert_budget_stop(result, "input_tokens")
    assert (hit.used, hit.needed) == (0, 2000)
    assert planner.calls == []


async def test_input_tokens_budget_refuses_a_first_request_that_is_too_large() -> None:
    planner = ScriptedModel([ONE_STEP])
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(input_tokens=5)).run("1+2")
    assert_budget_stop(result, "input_tokens")
    assert planner.calls == []
    assert result.model_calls == 0


async def test_output_tokens_budget() -> None:
    planner = ScriptedModel([ONE_STEP, {"answer": "never asked"}], usage=Usage(input_tokens=10, output_tokens=100))
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(output_tokens=50)).run("1+2")
    hit = assert_budget_stop(result, "output_tokens")
    assert (hit.limit, hit.used) == (50, 100)
    assert len(planner.calls) == 1


async def test_cost_budget() -> None:
    # One dollar per token: each call of one input and one output token costs two dollars.
    planner = ScriptedModel(
        [ONE_STEP, {"answer": "never asked"}],
        usage=Usage(input_tokens=1, output_tokens=1),
        cost_per_million=(1_000_000.0, 1_000_000.0),
    )
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(cost=1.0)).run("1+2")
    hit = assert_budget_stop(result, "cost")
    assert hit.limit == 1.0
    assert hit.used == pytest.approx(2.0)
    assert result.cost == pytest.approx(2.0)
    assert len(planner.calls) == 1


async def test_wall_time_budget_stops_a_run_that_would_block_forever() -> None:
    blocker = Blocker()
    planner = ScriptedModel([{"steps": [tool_step("b", "block", {})]}])
    result = await Agent(planner, tools=[blocker.tool], budget=Budget(wall_time=0.3)).run("block")

    assert_budget_stop(result, "wall_time")
    assert blocker.started.is_set()
    assert blocker.cancelled
    assert events_of(result, StepCancelled) == []
    (failed,) = events_of(result, StepFailed)
    assert failed.step_id == "b"
    assert failed.error.kind == "timeout"  # the step ran out of time with its run
    assert result.steps["b"].status == "failed"


async def test_wall_time_budget_stops_a_planner_that_never_answers() -> None:
    never = asyncio.Event()

    async def hang(request: ModelRequest) -> dict[str, Any]:
        await never.wait()
        return {}

    planner = ScriptedModel([hang])
    result = await Agent(planner, tools=[], budget=Budget(wall_time=0.05)).run("block")
    assert_budget_stop(result, "wall_time")


async def test_tool_calls_budget_in_a_chain() -> None:
    counter = Counter()
    planner = ScriptedModel([CHAIN, {"answer": "never asked"}])
    result = await Agent(planner, tools=[counting_add(counter)], budget=Budget(tool_calls=2)).run("chain")

    hit = assert_budget_stop(result, "tool_calls")
    assert (hit.limit, hit.used) == (2, 2)
    assert counter.calls == 2
    assert result.tool_calls == 2
    assert result.outputs == {"s1": 2, "s2": 3}
    assert result.steps["s3"].status == "pending"


async def test_tool_calls_budget_holds_for_steps_dispatched_together() -> None:
    counter = Counter()
    parallel = {"steps": [tool_step(f"s{i}", "add", {"a": i, "b": 0}) for i in range(3)]}
    planner = ScriptedModel([parallel, {"answer": "done"}])
    result = await Agent(planner, tools=[counting_add(counter)], budget=Budget(tool_calls=2)).run("parallel")

    hit = assert_budget_stop(result, "tool_calls")
    assert counter.calls == 2, f"the tool was called {counter.calls} times with a budget of 2"
    assert result.tool_calls == 2
    assert (hit.limit, hit.used) == (2, 2)  # the two calls allowed were made, and counted as made


async def test_tool_calls_budget_counts_retries() -> None:
    busy = FailingTool(
        "busy", name="busy", error=TransientToolError, retry=RetryPolicy(max_attempts=5, initial_delay=0)
    )
    planner = ScriptedModel([{"steps": [tool_step("b", "busy", {})]}])
    result = await Agent(planner, tools=[busy.tool], budget=Budget(tool_calls=2)).run("busy")
    assert_budget_stop(result, "tool_calls")
    assert busy.calls == 2
    assert result.steps["b"].status in ("failed", "cancelled")


async def test_model_calls_budget_holds_for_model_steps_running_together() -> None:
    async def answer(request: ModelRequest) -> str:
        await asyncio.sleep(0)  # a real model awaits its answer: let the other step run meanwhile
        return "done"

    executor = ScriptedModel([answer, answer])
    plan = {"steps": [{"id": "m1", "description": "think"}, {"id": "m2", "description": "think more"}]}
    planner = ScriptedModel([plan, {"answer": "done"}])
    result = await Agent(planner, executor=executor, budget=Budget(model_calls=2)).run("think")

    assert len(planner.calls) + len(executor.calls) <= 2, "the model call budget was exceeded"
    assert_budget_stop(result, "model_calls")


async def test_steps_budget_stops_a_plan_larger_than_the_budget() -> None:
    counter = Counter()
    planner = Planner(model=ScriptedModel([CHAIN]), max_repairs=0)
    result = await Agent(planner, tools=[counting_add(counter)], budget=Budget(steps=2)).run("chain")

    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "steps"
    assert "the step budget allows 2" in result.stop.detail
    assert counter.calls == 0
    assert events_of(result, StepStarted) == []


async def test_steps_budget_stop_is_logged_as_a_budget_event() -> None:
    planner = Planner(model=ScriptedModel([CHAIN]), max_repairs=0)
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(steps=2)).run("chain")
    assert_budget_stop(result, "steps")


async def test_a_plan_larger_than_the_step_budget_is_sent_back_for_repair() -> None:
    smaller = {"steps": CHAIN["steps"][:2]}
    planner = ScriptedModel([CHAIN, smaller, {"answer": "3"}])
    result = await Agent(planner, tools=[counting_add(Counter())], budget=Budget(steps=2)).run("chain")
    assert result.stop.kind == "goal_met"
    assert "the plan has 3 steps to run; the step budget allows 2" in planner.calls[1].last_user_text
    assert "steps 2" in planner.calls[0].last_user_text  # the budget left is shown to the planner


async def test_steps_budget_counts_steps_of_earlier_plan_versions() -> None:
    fails = failing_tool()

    add = counting_add(Counter())
    planner = Planner(
        model=ScriptedModel(
            [
                {"steps": [tool_step("ok", "add", {"a": 1, "b": 1}), tool_step("bad", "fails", {})]},
                {"steps": [tool_step("again", "add", {"a": 1, "b": 2})]},
            ]
        ),
        max_repairs=0,
    )
    result = await Agent(planner, tools=[add, fails], budget=Budget(steps=2)).run("two then one more")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "steps"
    assert result.outputs == {"ok": 2}


async def test_replans_budget_zero_stops_with_max_replans() -> None:
    fails = failing_tool()

    planner = ScriptedModel([{"steps": [tool_step("f", "fails", {})]}])
    result = await Agent(planner, tools=[fails], budget=Budget(replans=0)).run("fail")

    assert result.stop.kind == "max_replans"
    assert "still failing: f" in result.stop.detail
    assert result.replans == 0
    assert len(planner.calls) == 1  # no patch was asked for
    with pytest.raises(MaxReplans) as raised:
        result.raise_for_stop()
    assert raised.value.result is result


async def test_replans_budget_allows_that_many_patches() -> None:
    fails = failing_tool_of_n("no {n}")

    planner = ScriptedModel(
        [
            {"steps": [tool_step("f1", "fails", {"n": 1})]},
            {"reason": "try 2", "steps": [tool_step("f2", "fails", {"n": 2})]},
        ]
    )
    result = await Agent(planner, tools=[fails], budget=Budget(replans=1)).run("fail")
    assert result.stop.kind == "max_replans"
    assert result.replans == 1
    assert [p.version for p in result.plans] == [1, 2]
    planner.assert_consumed()


async def test_the_budget_left_is_part_of_every_planning_request() -> None:
    planner = ScriptedModel([ONE_STEP, {"answer": "3"}])
    budget = Budget(model_calls=5, tool_calls=9, wall_time=SAFETY_WALL_TIME)
    result = await Agent(planner, tools=[counting_add(Counter())], budget=budget).run("1+2")
    assert result.stop.kind == "goal_met"
    assert "model_calls 5" in planner.calls[0].last_user_text
    assert "tool_calls 9" in planner.calls[0].last_user_text
    # The final answer is written from the record: no budget is left to plan with.
    assert "Budget left" not in planner.calls[1].last_user_text
    assert [e.role for e in events_of(result, ModelCalled)] == ["planner", "planner"]


async def test_a_call_whose_input_alone_would_go_over_the_cost_cap_is_not_made() -> None:
    from planexec.models import Price, Providers

    providers = Providers.default().with_price("priced-test-model", Price(input=1_000_000.0, output=0.0))  # $1/token
    planner = ScriptedModel([ONE_STEP, {"answer": "never asked"}], name="priced-test-model")
    agent = Agent(planner, tools=[counting_add(Counter())], budget=Budget(cost=0.5), providers=providers)
    result = await agent.run("1+2")
    hit = assert_budget_stop(result, "cost")
    assert hit.used == 0  # nothing was spent
    assert hit.needed > 0.5  # what the refused call would have cost
    assert planner.calls == []
