"""Whole runs with Anthropic models: a planner and an executor speaking to scripted servers on
127.0.0.1 through the official SDK — a repair of a wrong plan, a refusal, and a model step with a tool call."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from planexec import Agent, Planner, tool
from planexec.log import ModelCalled, PlannerOutputRejected, StepStarted
from planexec.models import AnthropicModel, ModelRetryPolicy, allow_model_requests
from tests.http_fake import Event, FakeServer, Json, Sse, serve
from tests.support import SAFETY, add, events_of
from tests.test_model_anthropic import KEY, MODEL, answer_as_asked, cleared, message, text, tool_use

FAST = ModelRetryPolicy(initial_delay=0, max_delay=0.01)

planner_shared = pytest.fixture(serve, scope="module", name="planner_shared")
executor_shared = pytest.fixture(serve, scope="module", name="executor_shared")


@pytest.fixture
def planner_server(planner_shared: FakeServer) -> FakeServer:
    """Answers the planner as JSON or as a stream, whichever it asks for."""
    return answer_as_asked(cleared(planner_shared))


@pytest.fixture
def executor_server(executor_shared: FakeServer) -> FakeServer:
    return answer_as_asked(cleared(executor_shared))


@pytest.fixture(autouse=True)
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


def claude(server: FakeServer) -> AnthropicModel:
    return AnthropicModel(MODEL, base_url=server.url, api_key=KEY, retry=FAST)


def answer(tool: str, value: dict[str, Any]) -> Json:
    """The planner answering through its output tool."""
    return Json(
        message(tool_use(tool, value), stop_reason="tool_use", usage={"input_tokens": 400, "output_tokens": 60})
    )


def add_step(**fields: Any) -> dict[str, Any]:
    return {"id": "s1", "tool": "add", "args": {"a": 2, "b": 3}, **fields}


def user_texts(body: Any) -> list[str]:
    return [
        block["text"]
        for turn in body["messages"]
        if turn["role"] == "user"
        for block in turn["content"]
        if block["type"] == "text"
    ]


async def test_a_plan_with_problems_is_repaired(planner_server: FakeServer) -> None:
    wrong = {"steps": [add_step()]}  # a step without its required description
    right = {"steps": [add_step(description="add the numbers")]}
    planner_server.reply(answer("plan", wrong), answer("plan", right), answer("plan", {"answer": "5"}))

    async with claude(planner_server) as planner:
        result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    assert (result.answer, result.outputs) == ("5", {"s1": 5})
    (rejected,) = events_of(result, PlannerOutputRejected)
    assert [p.where for p in rejected.problems] == ["steps.0.description"]

    first, second, finish = (r.body for r in planner_server.requests)
    assert first["tool_choice"] == {"type": "tool", "name": "plan"}
    assert [t["name"] for t in first["tools"]] == ["plan"]
    assert "steps" in first["tools"][0]["input_schema"]["properties"]
    # The repair request carries the first answer and the list of its problems.
    assert second["messages"][-2] == {"role": "assistant", "content": [{"type": "text", "text": json.dumps(wrong)}]}
    problems = user_texts(second)[-1]
    assert "steps.0.description" in problems
    assert "Field required" in problems
    assert finish["tool_choice"] == {"type": "tool", "name": "plan"}
    # Every request starts the same: the output tool, the instructions, the tools, the goal — each
    # part ending at a cache breakpoint — and only then what changes.
    assert finish["tools"] == first["tools"]
    assert finish["system"] == first["system"]
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    [turn] = [m for m in first["messages"] if m["role"] == "user"]
    marked = [b["text"].split("\n")[0] for b in turn["content"] if "cache_control" in b]
    assert marked == ["Tools:", "Goal: What is 2 + 3?"]
    assert finish["messages"][0]["content"][:2] == turn["content"][:2]

    calls = events_of(result, ModelCalled)
    assert [c.model for c in calls] == [f"anthropic:{MODEL}"] * 3
    assert result.usage.input_tokens == 1200
    assert result.cost == pytest.approx(3 * (400 * 3.0 + 60 * 15.0) / 1e6)


async def test_a_refusal_goes_back_to_the_planner(planner_server: FakeServer) -> None:
    refusal = {"type": "refusal", "category": None, "explanation": "I will not plan that."}
    right = {"steps": [add_step(description="add the numbers")]}
    planner_server.reply(
        Json(message(stop_reason="refusal", stop_details=refusal)),
        answer("plan", right),
        answer("plan", {"answer": "5"}),
    )

    async with claude(planner_server) as planner:
        result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    (rejected,) = events_of(result, PlannerOutputRejected)
    assert [p.code for p in rejected.problems] == ["refusal"]
    second = planner_server.requests[1].body
    assert "I will not plan that." in user_texts(second)[-1]
    assert [turn["role"] for turn in second["messages"]] == ["user"]  # the empty refusal is not sent back


async def test_a_refusal_without_repairs_stops_the_run(planner_server: FakeServer) -> None:
    refusal = {"type": "refusal", "category": "cyber", "explanation": "I will not plan that."}
    planner_server.reply(Json(message(stop_reason="refusal", stop_details=refusal)))

    async with claude(planner_server) as model:
        planner = Planner(model=model, max_repairs=0)
        result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind != "goal_met"
    assert "I will not plan that." in result.stop.detail
    assert len(planner_server.requests) == 1


async def test_a_planner_and_an_executor_on_anthropic(planner_server: FakeServer, executor_server: FakeServer) -> None:
    plan = {"steps": [{"id": "m1", "description": "Add 2 and 3 with the add tool.", "allowed_tools": ["add"]}]}
    planner_server.reply(answer("plan", plan), answer("plan", {"answer": "2 + 3 = 5"}))
    executor_server.reply(
        Json(message(text("Adding."), tool_use("add", {"a": 2, "b": 3}, "toolu_add"), stop_reason="tool_use")),
        Json(message(text("The sum is 5."))),
    )

    async with claude(planner_server) as planner, claude(executor_server) as executor:
        result = await Agent(planner, tools=[add], executor=executor, budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    assert (result.answer, result.outputs) == ("2 + 3 = 5", {"m1": "The sum is 5."})
    (call,) = result.steps["m1"].tool_calls
    assert (call.call_id, call.tool, call.args, call.output) == ("toolu_add", "add", {"a": 2, "b": 3}, 5)

    first, second = (r.body for r in executor_server.requests)
    assert [t["name"] for t in first["tools"]] == ["add"]
    assert first["tools"][0]["input_schema"]["required"] == ["a", "b"]
    assert "tool_choice" not in first
    assert "Add 2 and 3" in user_texts(first)[0]
    assert second["messages"][-2:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Adding."},
                {"type": "tool_use", "id": "toolu_add", "name": "add", "input": {"a": 2, "b": 3}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_add", "content": "5"}]},
    ]
    executor_calls = [e for e in events_of(result, ModelCalled) if e.role == "executor"]
    assert [e.step_id for e in executor_calls] == ["m1", "m1"]
    assert all(e.usage is not None and e.usage.requests == 1 for e in executor_calls)


def streamed_answer(tool: str, fragments: list[tuple[str, threading.Event | None]]) -> Sse:
    """The planner's output tool input streamed in ``fragments``, each sent once its event (if any) is set."""
    start = {**message(usage={"input_tokens": 400, "output_tokens": 1}), "stop_reason": None}
    block = {"type": "tool_use", "id": "toolu_plan", "name": tool, "input": {}}
    return Sse(
        [
            Event({"type": "message_start", "message": start}, name="message_start"),
            Event({"type": "content_block_start", "index": 0, "content_block": block}, name="content_block_start"),
            *(
                Event(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": f},
                    },
                    name="content_block_delta",
                    wait=wait,
                )
                for f, wait in fragments
            ),
            Event({"type": "content_block_stop", "index": 0}, name="content_block_stop"),
            Event(
                {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 60}},
                name="message_delta",
            ),
            Event({"type": "message_stop"}, name="message_stop"),
        ]
    )


@pytest.mark.skipif(
    "stream" not in {f.name for f in dataclasses.fields(Planner)}, reason="the planner does not stream its answers"
)
async def test_a_step_starts_while_the_plan_still_streams(planner_shared: FakeServer) -> None:
    """The server holds back the rest of the plan until the first step has run: only a step
    started from the JSON pieces streamed so far lets the run go on."""
    server = cleared(planner_shared)
    first_ran = threading.Event()

    @tool
    async def note(text: str) -> str:
        """Note something down."""
        first_ran.set()
        return text

    first = {"id": "s1", "description": "note one", "tool": "note", "args": {"text": "one"}}
    second = {"id": "s2", "description": "note two", "tool": "note", "args": {"text": "two"}}
    server.reply(
        streamed_answer(
            "plan", [('{"steps": [' + json.dumps(first) + ", ", None), (json.dumps(second) + "]}", first_ran)]
        ),
        answer("plan", {"answer": "noted"}),
    )

    async with claude(server) as planner:
        result = await Agent(planner, tools=[note], budget=SAFETY).run("Note one and two.")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"s1": "one", "s2": "two"}
    assert server.requests[0].body["stream"] is True
    kinds = [(type(e).__name__, getattr(e, "step_id", None) or getattr(e, "purpose", None)) for e in result.events]
    assert kinds.index(("StepStarted", "s1")) < kinds.index(("ModelCalled", "planner.propose"))
    assert len(events_of(result, StepStarted)) == 2


async def test_a_planner_that_answers_in_text_instead_of_the_output_tool_is_told_so(
    planner_server: FakeServer,
) -> None:
    right = {"steps": [add_step(description="add the numbers")]}
    prose = Json(message(text("I would add 2 and 3 with the add tool."), stop_reason="end_turn"))
    planner_server.reply(prose, answer("plan", right), answer("plan", {"answer": "5"}))

    async with claude(planner_server) as planner:
        result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "goal_met"
    rejected = events_of(result, PlannerOutputRejected)
    assert len(rejected) == 1
    said = user_texts(planner_server.requests[1].body)[-1]
    assert "the model answered in text rather than with the structured output asked for" in said
    assert "I would add 2 and 3" in said
