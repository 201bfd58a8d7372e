"""A whole-step timeout for model-driven steps: past it the step fails with an error of kind
``timeout`` — whether its model or a tool it called is slow — and the run goes on as its failure
policy says. Nothing here measures time: each slow part takes far longer than the timeout."""

from __future__ import annotations

import asyncio

from planexec import Agent, Limits, ModelExecutor, Planner, tool
from planexec.log import StepFailed
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel, tool_calls
from tests.support import SAFETY, add, events_of, tool_step

SLOW = 60.0
"""Far longer than any step timeout here, and shorter than nothing a test waits for."""


def model_step(step_id: str, *tools: str) -> dict[str, str | list[str]]:
    return {"id": step_id, "description": "think it over", "allowed_tools": list(tools)}


async def test_a_slow_model_times_the_step_out_and_the_plan_is_patched() -> None:
    planner = ScriptedModel(
        [
            {"steps": [model_step("think")]},
            {"reason": "thinking took too long", "steps": [tool_step("sum", "add", {"a": 1, "b": 2})]},
            {"answer": "3"},
        ]
    )
    slow = ScriptedModel(["too late"], latency=SLOW)
    executor = ModelExecutor(model=slow, step_timeout=0.05)
    result = await Agent(Planner(model=planner), tools=[add], executor=executor, budget=SAFETY).run("add 1 and 2")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"sum": 3}
    error = result.steps["think"].error
    assert error is not None
    assert error.kind == "timeout"
    assert "did not finish step 'think' within 0.05s" in error.message
    assert planner.calls[1].purpose == "planner.patch"
    assert "timeout" in planner.calls[1].last_user_text


async def test_with_replanning_off_a_timed_out_step_stops_the_run() -> None:
    planner = ScriptedModel([{"steps": [model_step("think")]}])
    executor = ModelExecutor(model=ScriptedModel(["too late"], latency=SLOW), step_timeout=0.05)
    agent = Agent(Planner(model=planner, replan="never"), executor=executor, budget=SAFETY)
    result = await agent.run("think")

    assert (result.stop.kind, result.stop.code) == ("error", "step_failed")
    [failed] = events_of(result, StepFailed)
    assert (failed.step_id, failed.error.kind) == ("think", "timeout")


async def test_a_slow_tool_inside_the_step_times_the_whole_step_out() -> None:
    called = asyncio.Event()

    @tool
    async def crawl(url: str) -> str:
        """Crawl a site (never ends)."""
        called.set()
        await asyncio.Event().wait()
        return "never"

    executor_model = ScriptedModel([tool_calls(("crawl", {"url": "https://example.com"}))])
    planner = ScriptedModel([{"steps": [model_step("read", "crawl")]}])
    agent = Agent(
        Planner(model=planner, replan="never"),
        tools=[crawl],
        executor=ModelExecutor(model=executor_model, step_timeout=0.05),
        budget=SAFETY,
    )
    result = await agent.run("read the site")

    assert called.is_set()
    error = result.steps["read"].error
    assert error is not None
    assert error.kind == "timeout"
    assert result.stop.code == "step_failed"


async def test_a_tool_that_ignores_its_cancellation_does_not_hold_the_step() -> None:
    @tool
    async def stubborn() -> str:
        """Keeps going whatever it is told."""
        while True:
            try:
                await asyncio.sleep(SLOW)
            except asyncio.CancelledError:
                continue

    executor_model = ScriptedModel([tool_calls(("stubborn", {}))])
    planner = ScriptedModel([{"steps": [model_step("hold", "stubborn")]}])
    agent = Agent(
        Planner(model=planner, replan="never"),
        tools=[stubborn],
        executor=ModelExecutor(model=executor_model, step_timeout=0.05),
        limits=Limits(cancel_grace=0.05),
        budget=SAFETY,
    )
    result = await agent.run("hold on")

    error = result.steps["hold"].error
    assert error is not None
    assert error.kind == "timeout"


async def test_a_step_within_its_timeout_is_untouched() -> None:
    planner = ScriptedModel([{"steps": [model_step("think")]}, {"answer": "thought"}])
    executor = ModelExecutor(model=ScriptedModel(["an idea"]), step_timeout=SLOW)
    result = await Agent(Planner(model=planner), executor=executor, budget=SAFETY).run("think")
    assert result.stop.kind == "goal_met"
    assert result.outputs == {"think": "an idea"}


async def test_a_run_with_a_timed_out_step_replays_exactly() -> None:
    store = MemoryStore()
    planner = ScriptedModel([{"steps": [model_step("think")]}])
    executor = ModelExecutor(model=ScriptedModel(["too late"], latency=SLOW), step_timeout=0.05)
    agent = Agent(Planner(model=planner, replan="never"), executor=executor, budget=SAFETY, store=store)
    result = await agent.run("think", run_id="timed-out")
    assert result.steps["think"].error is not None

    report = await agent.replay("timed-out")
    assert report.matched, report.divergence
