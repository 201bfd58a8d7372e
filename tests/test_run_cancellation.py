"""Cancellation: steps a patch made obsolete, a run cancelled by its caller, and the event stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planexec import Agent, RunResult, tool
from planexec.errors import RunCancelled
from planexec.log import PlanProposed, RunFinished, RunState, StepCancelled, StepStarted
from planexec.testing import ScriptedModel
from tests.support import SAFETY, Blocker, events_of, failing_tool, tool_step


def assert_fold_matches(result: RunResult) -> None:
    state = RunState.fold(result.events)
    assert state.stop == result.stop
    assert {sid: rec.status for sid, rec in state.steps.items()} == {
        sid: rec.status for sid, rec in result.steps.items()
    }
    assert state.outputs == result.outputs
    assert [r.id for r in state.superseded] == [r.id for r in result.superseded]


async def test_a_patch_that_drops_an_in_flight_step_cancels_it() -> None:
    blocker = Blocker()

    fails = failing_tool("broken", after=blocker.started)

    @tool
    async def quick() -> str:
        """Return at once."""
        return "quick"

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {}), tool_step("b", "block", {"label": "b"})]},
            {"reason": "b is no longer needed", "steps": [tool_step("c", "quick", {})]},
            {"answer": "quick"},
        ]
    )
    result = await Agent(planner, tools=[blocker.tool, fails, quick], budget=SAFETY).run("cancel b")

    assert result.stop.kind == "goal_met", result.stop
    assert blocker.cancelled
    assert not blocker.completed
    cancelled = events_of(result, StepCancelled)
    assert [e.step_id for e in cancelled] == ["b"]
    assert "obsolete after plan v2" in cancelled[0].reason
    patch = [e for e in events_of(result, PlanProposed) if e.plan.version == 2]
    assert patch[0].cancelled == ("b",)
    assert result.steps["b"].status == "cancelled"
    assert result.outputs == {"c": "quick"}
    # The cancellation is logged before the plan that caused it, and b never succeeded.
    position = {id(e): i for i, e in enumerate(result.events)}
    assert position[id(cancelled[0])] < position[id(patch[0])]
    assert all(e.step_id != "b" for e in result.events if e.kind == "step_succeeded")
    assert_fold_matches(result)


async def test_a_patch_that_keeps_an_in_flight_step_lets_it_finish_once() -> None:
    blocker = Blocker()
    calls = 0

    fails = failing_tool("broken", after=blocker.started)

    @tool
    async def quick() -> str:
        """Return at once and let the blocking step go."""
        nonlocal calls
        calls += 1
        blocker.release.set()
        return "quick"

    keep_b = tool_step("b", "block", {"label": "b"})
    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {}), keep_b]},
            {"reason": "keep b, replace a", "steps": [keep_b, tool_step("c", "quick", {})]},
            {"answer": "both"},
        ]
    )
    result = await Agent(planner, tools=[blocker.tool, fails, quick], budget=SAFETY).run("keep b")

    assert result.stop.kind == "goal_met", result.stop
    assert not blocker.cancelled
    assert blocker.completed
    assert events_of(result, StepCancelled) == []
    assert [e.step_id for e in events_of(result, StepStarted)].count("b") == 1
    assert result.outputs == {"b": "b", "c": "quick"}
    assert result.steps["b"].status == "succeeded"


async def test_run_cancel_stops_the_run_with_kind_cancelled() -> None:
    blocker = Blocker()
    planner = ScriptedModel([{"steps": [tool_step("b", "block", {"label": "b"})]}])
    run = Agent(planner, tools=[blocker.tool], budget=SAFETY).start("block")
    await blocker.started.wait()
    run.cancel()
    result = await run.result()

    assert run.done
    assert result.stop.kind == "cancelled"
    assert blocker.cancelled
    assert not blocker.completed
    assert [e.step_id for e in events_of(result, StepCancelled)] == ["b"]
    assert result.steps["b"].status == "cancelled"
    assert isinstance(result.events[-1], RunFinished)
    assert result.events[-1].stop.kind == "cancelled"
    with pytest.raises(RunCancelled) as raised:
        result.raise_for_stop()
    assert raised.value.result is result
    assert "cancelled" in str(raised.value)
    assert_fold_matches(result)


async def test_run_cancel_while_the_planner_is_thinking() -> None:
    thinking = asyncio.Event()
    never = asyncio.Event()

    async def slow_plan(request: Any) -> dict[str, Any]:
        thinking.set()
        await never.wait()
        return {}

    planner = ScriptedModel([slow_plan])
    run = Agent(planner, tools=[], budget=SAFETY).start("think")
    await thinking.wait()
    run.cancel()
    result = await run.result()
    assert result.stop.kind == "cancelled"
    assert result.plans == ()


async def test_run_cancel_right_after_start_still_gives_a_cancelled_result() -> None:
    planner = ScriptedModel([{"steps": []}, {"answer": "nothing"}])
    run = Agent(planner, tools=[], budget=SAFETY).start("cancel at once")
    run.cancel()
    result = await run.result()
    assert result.stop.kind == "cancelled"


async def test_the_event_stream_ends_when_a_run_is_cancelled() -> None:
    blocker = Blocker()
    planner = ScriptedModel([{"steps": [tool_step("b", "block", {"label": "b"})]}])
    run = Agent(planner, tools=[blocker.tool], budget=SAFETY).start("block")
    seen: list[str] = []
    async for event in run.events():
        seen.append(event.kind)
        if isinstance(event, StepStarted):
            run.cancel()
    result = await run.result()
    assert seen[-1] == "run_finished"
    assert seen == [e.kind for e in result.events]
    assert "step_cancelled" in seen


async def test_cancelling_the_caller_of_agent_run_cancels_the_run() -> None:
    blocker = Blocker()
    planner = ScriptedModel([{"steps": [tool_step("b", "block", {"label": "b"})]}])
    task = asyncio.create_task(Agent(planner, tools=[blocker.tool], budget=SAFETY).run("block"))
    await blocker.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert blocker.cancelled
    assert not blocker.completed


async def test_a_cancelled_result_keeps_the_outputs_of_finished_steps() -> None:
    blocker = Blocker()

    @tool
    async def quick() -> str:
        """Return at once."""
        return "done"

    planner = ScriptedModel(
        [{"steps": [tool_step("q", "quick", {}), tool_step("b", "block", {"label": "b"}, "q")]}],
    )
    run = Agent(planner, tools=[blocker.tool, quick], budget=SAFETY).start("partial")
    await blocker.started.wait()
    run.cancel()
    result = await run.result()
    assert result.stop.kind == "cancelled"
    assert result.outputs == {"q": "done"}
    assert result.steps["b"].status == "cancelled"
    assert_fold_matches(result)


async def test_a_run_cancelled_many_times_at_once_keeps_the_end_of_its_log(tmp_path: Any) -> None:
    from planexec.store import SQLiteStore

    @tool
    async def wait_forever() -> str:
        """Wait until cancelled."""
        await asyncio.Event().wait()
        return "never"

    store = SQLiteStore(tmp_path / "runs.db")
    try:
        for index in range(20):
            plan = {"steps": [tool_step("w", "wait_forever", {})]}
            agent = Agent(ScriptedModel([plan, {"answer": "waited"}]), tools=[wait_forever], store=store)
            run = agent.start("wait", run_id=f"many-cancels-{index}")
            await asyncio.sleep(0.02)
            for _ in range(4):  # as four requests to cancel it would, one after the other
                run.cancel()
                await asyncio.sleep(0.001 * (index % 4))
            result = await run.result()
            assert result.stop.kind == "cancelled"
            stored = [e.event for e in await store.read(run.run_id)]
            assert isinstance(stored[-1], RunFinished), [e.kind for e in stored]
            assert stored[-1].stop.kind == "cancelled"
    finally:
        await store.close()
