"""End-to-end runs that go well: plan, steps, answer, and the record they leave behind."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from planexec import Agent, Event, Limits, RunContext, ToolError, UsageError, tool
from planexec.log import (
    ModelCalled,
    PlanProposed,
    RunFinished,
    RunStarted,
    RunState,
    StepStarted,
    StepSucceeded,
    dump_event,
    load_event,
)
from planexec.models import ModelRequest, Usage
from planexec.testing import FunctionModel, ScriptedModel
from tests.support import add, events_of, tool_step


class TickClock:
    """A clock that moves one second every time it is read: timestamps are deterministic."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


POPULATIONS = {"paris": 2, "rome": 3}


@tool
async def population(city: str) -> int:
    """The population of a city, in millions."""
    return POPULATIONS[city]


def city_plan() -> dict[str, Any]:
    return {
        "reason": "look both up, then add",
        "steps": [
            tool_step("paris", "population", {"city": "paris"}),
            tool_step("rome", "population", {"city": "rome"}),
            tool_step("total", "add", {"a": "${paris}", "b": "${rome}"}, "paris", "rome"),
        ],
    }


async def test_happy_path_plan_steps_answer() -> None:
    planner = ScriptedModel([city_plan(), {"answer": "5 million together"}])
    clock = TickClock()
    result = await Agent(planner, tools=[population, add], context=RunContext(clock=clock)).run(
        "How many people live in Paris and Rome?", run_id="run-1"
    )

    assert result.ok
    assert result.stop.kind == "goal_met"
    assert result.answer == "5 million together"
    assert result.run_id == "run-1"
    assert result.goal == "How many people live in Paris and Rome?"
    assert result.outputs == {"paris": 2, "rome": 3, "total": 5}
    assert result.raise_for_stop() is result

    # One plan version, made by the planner, with its reason.
    assert len(result.plans) == 1
    plan = result.plans[0]
    assert (plan.version, plan.author, plan.reason) == (1, "planner", "look both up, then add")
    assert plan.ids == ("paris", "rome", "total")

    # Counters and usage.
    assert result.model_calls == 2
    assert result.tool_calls == 3
    assert result.replans == 0
    assert result.usage.requests == 2
    assert result.usage.input_tokens > 0
    assert result.usage.output_tokens > 0

    # Step records: status, executor, resolved arguments, timings.
    total = result.steps["total"]
    assert total.status == "succeeded"
    assert total.executor == "tools"
    assert total.args == {"a": 2, "b": 3}  # whole-value bindings keep their type
    assert total.attempts == 1
    assert total.verdict is not None
    assert total.verdict.passed
    for rec in result.steps.values():
        assert rec.started_at is not None
        assert rec.finished_at is not None
        assert rec.duration is not None
        assert rec.duration > 0
        assert rec.plan_version == 1
    assert result.finished_at > result.started_at
    assert result.duration == result.finished_at - result.started_at

    # The event log: the run's story, in order.
    kinds = [e.kind for e in result.events]
    assert kinds[0] == "run_started"
    assert kinds[1:5] == ["planning_started", "model_called", "plan_forecast", "plan_proposed"]
    assert kinds[-3:] == ["planning_started", "model_called", "run_finished"]
    assert kinds.count("step_started") == 3
    assert kinds.count("step_succeeded") == 3
    timestamps = [e.at for e in result.events]
    assert timestamps == sorted(timestamps)
    started = events_of(result, RunStarted)[0]
    assert started.tools == ("population", "add")
    assert started.policy == "upfront"
    calls = events_of(result, ModelCalled)
    assert [(c.role, c.purpose) for c in calls] == [("planner", "planner.propose"), ("planner", "planner.finish")]
    assert all(c.response is not None and c.error is None for c in calls)
    finished = events_of(result, RunFinished)
    assert len(finished) == 1
    assert finished[0].answer == "5 million together"

    # The planner's requests: the plan, then the answer from the record.
    assert [c.purpose for c in planner.calls] == ["planner.propose", "planner.finish"]
    propose_text = planner.calls[0].last_user_text
    assert "How many people live in Paris and Rome?" in propose_text
    assert "population" in propose_text
    assert "add" in propose_text
    finish_text = planner.calls[1].last_user_text
    assert re.search(r"^- total add .* → 5$", finish_text, re.MULTILINE)
    planner.assert_consumed()


async def test_the_join_step_waits_for_its_dependencies_and_gets_their_outputs() -> None:
    planner = ScriptedModel([city_plan(), {"answer": "5"}])
    result = await Agent(planner, tools=[population, add]).run("sum")
    index = {(e.kind, getattr(e, "step_id", None)): i for i, e in enumerate(result.events)}
    assert index[("step_started", "total")] > index[("step_succeeded", "paris")]
    assert index[("step_started", "total")] > index[("step_succeeded", "rome")]
    started = [e for e in events_of(result, StepStarted) if e.step_id == "total"]
    assert started[0].args == {"a": 2, "b": 3}


async def test_usage_and_cost_add_up_over_every_model_call() -> None:
    planner = ScriptedModel(
        [city_plan(), {"answer": "5"}],
        usage=Usage(input_tokens=100, output_tokens=10),
        cost_per_million=(1.0, 2.0),
    )
    result = await Agent(planner, tools=[population, add]).run("sum")
    assert result.usage == Usage(input_tokens=200, output_tokens=20, requests=2)
    assert result.cost == pytest.approx(2 * (100 * 1.0 + 10 * 2.0) / 1e6)
    per_call = [e.cost for e in events_of(result, ModelCalled)]
    assert per_call == [pytest.approx(120 / 1e6), pytest.approx(120 / 1e6)]


async def test_a_function_model_can_plan_from_the_request() -> None:
    def plan_or_answer(request: ModelRequest) -> dict[str, Any]:
        if request.purpose == "planner.propose":
            return {"steps": [tool_step("s1", "add", {"a": 1, "b": 2})]}
        assert request.purpose == "planner.finish"
        return {"answer": "3"}

    model = FunctionModel(plan_or_answer)
    result = await Agent(model, tools=[add]).run("1+2")
    assert (result.stop.kind, result.answer, result.outputs) == ("goal_met", "3", {"s1": 3})
    assert len(model.calls) == 2


async def test_events_stream_live_in_order_and_end_with_run_finished() -> None:
    release = asyncio.Event()

    @tool
    async def slow(x: int) -> int:
        """Wait for the test, then echo."""
        await release.wait()
        return x

    planner = ScriptedModel([{"steps": [tool_step("s1", "slow", {"x": 7})]}, {"answer": "7"}])
    run = Agent(planner, tools=[slow]).start("echo")
    seen: list[Event] = []
    async for event in run.events():
        seen.append(event)
        if isinstance(event, StepStarted):
            assert not run.done
            release.set()
    result = await run.result()
    assert isinstance(seen[-1], RunFinished)
    assert seen == list(result.events)
    assert [e.kind for e in seen].count("run_finished") == 1
    assert result.outputs == {"s1": 7}


async def test_events_of_a_finished_run_replay_the_whole_log() -> None:
    planner = ScriptedModel([city_plan(), {"answer": "5"}])
    run = Agent(planner, tools=[population, add]).start("sum")
    result = await run.result()
    assert run.done
    replayed = [e async for e in run.events()]
    assert replayed == list(result.events)


async def test_the_fold_reproduces_the_final_state() -> None:
    calls: list[str] = []

    @tool
    async def parse(text: str) -> int:
        """Parse a number."""
        calls.append(text)
        if not text.isdigit():
            raise ToolError(f"not a number: {text!r}")
        return int(text)

    planner = ScriptedModel(
        [
            {"steps": [tool_step("p1", "parse", {"text": "12"}), tool_step("p2", "parse", {"text": "x"})]},
            {"reason": "use a number", "steps": [tool_step("p3", "parse", {"text": "30"})]},
            {"answer": "42"},
        ]
    )
    result = await Agent(planner, tools=[parse]).run("parse")
    assert result.stop.kind == "goal_met"
    assert result.replans == 1

    for events in (list(result.events), [load_event(dump_event(e)) for e in result.events]):
        state = RunState.fold(events)
        assert state.stop == result.stop
        assert state.answer == result.answer
        assert {sid: rec.status for sid, rec in state.steps.items()} == {
            sid: rec.status for sid, rec in result.steps.items()
        }
        assert {sid: rec.output for sid, rec in state.steps.items()} == {
            sid: rec.output for sid, rec in result.steps.items()
        }
        assert state.outputs == result.outputs == {"p1": 12, "p3": 30}
        assert [p.version for p in state.plans] == [1, 2]
        assert state.plans == list(result.plans)
        assert (state.model_calls, state.tool_calls, state.replans) == (
            result.model_calls,
            result.tool_calls,
            result.replans,
        )
        assert state.usage == result.usage
        assert state.steps["p2"].error == result.steps["p2"].error
        assert state.events == len(result.events)
        assert state.finished


async def test_max_concurrency_one_still_finishes_every_step() -> None:
    planner = ScriptedModel([city_plan(), {"answer": "5"}])
    result = await Agent(planner, tools=[population, add], limits=Limits(max_concurrency=1)).run("sum")
    assert result.outputs == {"paris": 2, "rome": 3, "total": 5}
    # Never two steps in flight at once: every start follows the previous step's end.
    open_steps = 0
    for e in result.events:
        if isinstance(e, StepStarted):
            open_steps += 1
            assert open_steps == 1
        elif isinstance(e, StepSucceeded):
            open_steps -= 1


async def test_plan_proposed_event_carries_the_plan_in_force() -> None:
    planner = ScriptedModel([city_plan(), {"answer": "5"}])
    result = await Agent(planner, tools=[population, add]).run("sum")
    proposed = events_of(result, PlanProposed)
    assert len(proposed) == 1
    assert proposed[0].trigger == "initial"
    assert proposed[0].cancelled == ()
    assert proposed[0].plan == result.plans[0]


def test_run_sync_returns_the_result() -> None:
    planner = ScriptedModel([city_plan(), {"answer": "5"}])
    result = Agent(planner, tools=[population, add]).run_sync("sum")
    assert result.stop.kind == "goal_met"
    assert result.outputs["total"] == 5


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    planner = ScriptedModel([])
    with pytest.raises(UsageError, match=r"running event loop") as caught:
        Agent(planner, tools=[add], store=None).run_sync("sum")
    assert [(p.code, p.message) for p in caught.value.problems] == [
        ("running_loop", "use `await agent.run(...)` there instead")
    ]
    assert planner.calls == []


async def test_an_empty_goal_is_a_usage_error() -> None:
    planner = ScriptedModel([])
    with pytest.raises(UsageError, match="goal is empty"):
        await Agent(planner, tools=[add]).run("   ")
    assert planner.calls == []
