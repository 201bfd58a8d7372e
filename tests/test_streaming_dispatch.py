"""Streaming dispatch: steps start while the planner is still writing the plan."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from planexec import Agent, Planner, tool
from planexec.log import PlanProposed, RunState, StepStarted, StepStreamed, StepSucceeded
from planexec.models import ModelRequest, ModelResponse, StreamDelta, StreamingScriptedModel, Usage
from planexec.runtime import replay_log
from planexec.store import MemoryStore
from planexec.tools import Tool

from .support import tool_step


class GatedStream:
    """A streaming model whose answer stops after the first step until ``release`` is set."""

    def __init__(self, answers: list[dict[str, Any]], release: asyncio.Event) -> None:
        self.answers = answers
        self.release = release
        self.stream_ended = False
        self.calls = 0

    @property
    def name(self) -> str:
        return "gated"

    async def request(self, request: ModelRequest) -> ModelResponse:
        assert request.purpose == "planner.finish", "plans should stream"
        answer = self.answers[self.calls]
        self.calls += 1
        return ModelResponse(text=json.dumps(answer), parsed=answer, usage=Usage(requests=1))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        answer = self.answers[self.calls]
        self.calls += 1
        text = json.dumps(answer)
        if "steps" in answer and len(answer["steps"]) > 1:
            first = json.dumps(answer["steps"][0])
            cut = text.index(first) + len(first)
            yield StreamDelta(text=text[:cut])
            await asyncio.wait_for(self.release.wait(), 10)
            yield StreamDelta(text=text[cut:])
        else:
            yield StreamDelta(text=text)
        self.stream_ended = True
        yield ModelResponse(text=text, parsed=answer, usage=Usage(input_tokens=10, output_tokens=10, requests=1))


def tools(started: asyncio.Event, order: list[str], stream: GatedStream | None = None) -> list[Tool]:
    @tool
    async def work(name: str) -> str:
        """Work on something."""
        order.append(f"{name}:{'streaming' if stream is not None and not stream.stream_ended else 'after'}")
        started.set()
        return f"done {name}"

    return [work]


PLAN = {
    "steps": [
        tool_step("s1", "work", {"name": "s1"}),
        tool_step("s2", "work", {"name": "s2"}),
        tool_step("s3", "work", {"name": "s3"}, "s1"),
        tool_step("s4", "work", {"name": "s4"}, "s2"),
        tool_step("s5", "work", {"name": "s5"}, "s3", "s4"),
    ]
}


async def test_the_first_step_starts_before_the_plan_has_finished_streaming() -> None:
    started = asyncio.Event()
    order: list[str] = []
    model = GatedStream([PLAN, {"answer": "all done"}], release=started)
    agent = Agent(model, tools=tools(started, order, model), store=None)
    result = await asyncio.wait_for(agent.run("work"), 30)
    assert result.stop.kind == "goal_met", result.stop
    assert order[0] == "s1:streaming"  # it ran while step 5 was still to come
    kinds = [e.kind for e in result.events]
    assert kinds.index("step_streamed") < kinds.index("model_called")
    started_s1 = next(i for i, e in enumerate(result.events) if isinstance(e, StepStarted) and e.step_id == "s1")
    assert started_s1 < kinds.index("model_called")
    plan = next(e for e in result.events if isinstance(e, PlanProposed))
    assert [s.id for s in plan.plan.steps] == ["s1", "s2", "s3", "s4", "s5"]
    assert result.steps["s1"].plan_version == 1
    assert sum(isinstance(e, StepStarted) for e in result.events) == 5  # nothing ran twice
    assert RunState.fold(result.events).outputs == result.outputs


async def test_a_step_by_step_turn_streams_its_step_too() -> None:
    started = asyncio.Event()
    order: list[str] = []
    turns = [
        {"thought": "start", "confidence": 0.9, "stop": False, "step": tool_step("a", "work", {"name": "a"})},
        {"thought": "done", "confidence": 0.9, "stop": True, "answer": "a is done"},
    ]
    model = StreamingScriptedModel(turns, chunks=5)
    agent = Agent(Planner(model=model, policy="step"), tools=tools(started, order), store=None)
    result = await agent.run("work")
    assert result.stop.kind == "goal_met"
    streamed = [e for e in result.events if isinstance(e, StepStreamed)]
    assert [e.step.id for e in streamed] == ["a"]
    assert streamed[0].step.confidence == 0.9


async def test_a_streamed_step_that_fails_its_checks_stops_early_starts_and_the_plan_is_checked_whole() -> None:
    started = asyncio.Event()
    order: list[str] = []
    bad_first = {
        "steps": [
            tool_step("x", "nope", {}),
            tool_step("y", "work", {"name": "y"}),
        ]
    }
    model = StreamingScriptedModel([bad_first, {"steps": [tool_step("y", "work", {"name": "y"})]}, {"answer": "ok"}])
    result = await Agent(model, tools=tools(started, order), store=None).run("work")
    assert result.stop.kind == "goal_met"
    assert not [e for e in result.events if isinstance(e, StepStreamed) and e.step.id == "x"]
    assert order == ["y:after"]


async def test_planner_streaming_can_be_turned_off() -> None:
    started = asyncio.Event()
    order: list[str] = []
    model = StreamingScriptedModel([PLAN, {"answer": "ok"}])
    result = await Agent(Planner(model=model, stream=False), tools=tools(started, order), store=None).run("work")
    assert result.stop.kind == "goal_met"
    assert not [e for e in result.events if isinstance(e, StepStreamed)]


async def test_a_run_with_streamed_steps_replays_exactly() -> None:
    started = asyncio.Event()
    order: list[str] = []
    store = MemoryStore()
    model = StreamingScriptedModel([PLAN, {"answer": "ok"}], chunks=12, latency=0.01)
    result = await Agent(model, tools=tools(started, order), store=store).run("work", run_id="s")
    assert result.stop.kind == "goal_met"
    assert [e for e in result.events if isinstance(e, StepStreamed)]
    log = [s.event for s in await store.read("s")]
    report = await replay_log(log)
    assert report.matched, report.divergence


async def test_a_step_that_ended_while_its_plan_was_being_checked_replays_in_the_same_order() -> None:
    # Live, a streamed step can end between the planner's answer (model_called) and the plan version
    # it makes (plan_proposed); which comes first depends on how the tasks woke. The replay takes
    # them in the recorded order whatever the order its own tasks wake in.
    started = asyncio.Event()
    store = MemoryStore()
    model = StreamingScriptedModel([PLAN, {"answer": "ok"}], chunks=12, latency=0.01)
    await Agent(model, tools=tools(started, []), store=store).run("work", run_id="s")
    log = [s.event for s in await store.read("s")]
    kinds = [e.kind for e in log]
    answered = kinds.index("model_called")
    ended = max(i for i, e in enumerate(log[:answered]) if isinstance(e, StepSucceeded))  # the last streamed step's end
    reordered = [*log[:ended], *log[ended + 1 : answered + 1], log[ended], *log[answered + 1 :]]
    assert [e.kind for e in reordered[answered - 1 : answered + 2]] == [
        "model_called",
        "step_succeeded",
        "plan_forecast",
    ]
    assert RunState.fold(reordered).finished
    report = await replay_log(reordered)
    assert report.matched, report.divergence
