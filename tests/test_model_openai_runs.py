"""Whole runs with OpenAI models as planner and executor, against a scripted server on 127.0.0.1.

Plans stream (the planner streams proposals so that steps can start early); final answers do not.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from planexec import Agent, ModelExecutor, ModelSettings, Planner, tool
from planexec.log import PlannerOutputRejected, RunStarted, StepStreamed
from planexec.models import ModelRetryPolicy, OpenAIModel, allow_model_requests
from planexec.plan import Contains, NonEmpty
from tests.http_fake import Event, FakeServer, Sse, serve
from tests.support import SAFETY, events_of
from tests.test_model_openai import DONE, body, chunk, completion, function_call, usage_chunk

server = pytest.fixture(serve)


@pytest.fixture(autouse=True)
def allow_requests() -> Iterator[None]:
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


@pytest.fixture
async def models(server: FakeServer) -> AsyncIterator[tuple[OpenAIModel, OpenAIModel]]:
    """A planner model and an executor model, both served by ``server``."""
    fast = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01)
    url = server.url + "/v1"
    planner = OpenAIModel("gpt-4o", api_key="sk-test", base_url=url, retry=fast)
    executor = OpenAIModel("gpt-4o-mini", api_key="sk-test", base_url=url, retry=fast)
    yield planner, executor
    await planner.aclose()
    await executor.aclose()


POPULATIONS = {"paris": 2, "rome": 3}


@tool
async def population(city: str) -> int:
    """The population of a city, in millions."""
    return POPULATIONS[city]


def streamed_json(value: Any, *, pieces: int = 3) -> Sse:
    """``value`` as JSON text streamed in a few chunks, then usage and [DONE]."""
    text = json.dumps(value)
    size = -(-len(text) // pieces)
    return streamed_text(*(text[i : i + size] for i in range(0, len(text), size)))


def streamed_text(*pieces: str) -> Sse:
    events: list[Event] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    return Sse([*events, chunk({}, "stop"), usage_chunk(200, 40), DONE])


def tool_plan(*cities: str) -> dict[str, Any]:
    return {
        "reason": "look the cities up",
        "steps": [
            {"id": c, "description": f"population of {c}", "tool": "population", "args": {"city": c}} for c in cities
        ],
    }


def messages(i: int, server: FakeServer) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = body(server.requests[i])["messages"]
    return result


async def test_planner_and_executor_on_openai(server: FakeServer, models: tuple[OpenAIModel, OpenAIModel]) -> None:
    planner, executor = models
    # The planner answers as strict structured output does: every member given, null where a
    # step has none, arguments and checks as text.
    step = {
        **dict.fromkeys(["tool", "executor", "expected", "output_schema", "on_fail", "confidence"]),
        "id": "m1",
        "description": "find how many live in Paris",
        "args": "{}",
        "depends_on": [],
        "allowed_tools": ["population"],
        "checks": ["non_empty", "contains:Paris"],
        "effect": "read",
        "approval": "auto",
    }
    empty = dict.fromkeys(["confidence", "question", "give_up", "answer"])
    plan = {**empty, "reason": "one research step", "steps": [step]}
    server.reply(
        streamed_json(plan),
        completion(None, tool_calls=[function_call("call_9", "population", '{"city": "paris"}')], finish="tool_calls"),
        completion("About 2 million people live in Paris.", usage=(80, 12, 0)),
        completion(
            json.dumps({**empty, "reason": "", "steps": [], "answer": "Paris: about 2 million"}), usage=(300, 10, 128)
        ),
    )
    result = await Agent(planner, tools=[population], executor=executor, budget=SAFETY).run("How big is Paris?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "Paris: about 2 million"
    assert result.outputs == {"m1": "About 2 million people live in Paris."}
    [call] = result.steps["m1"].tool_calls
    assert (call.call_id, call.tool, call.args, call.output) == ("call_9", "population", {"city": "paris"}, 2)

    propose, first, second, finish = (body(r) for r in server.requests)
    assert [propose["model"], first["model"], second["model"], finish["model"]] == [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4o-mini",
        "gpt-4o",
    ]
    assert result.plans[0].steps[0].checks == (NonEmpty(), Contains(text="Paris"))
    # The plan streams, strict: arguments travel as JSON text, so every object can be closed.
    assert propose["stream"] is True
    assert propose["stream_options"] == {"include_usage": True}
    assert propose["response_format"]["type"] == "json_schema"
    plan_format = propose["response_format"]["json_schema"]
    assert plan_format["strict"] is True
    sent_step = plan_format["schema"]["$defs"]["step"]
    assert sent_step["additionalProperties"] is False
    assert sent_step["required"] == list(sent_step["properties"])
    assert sent_step["properties"]["args"] == {"type": "string"}
    # The executor is offered the tool, then sees its own call and the result.
    assert [t["function"]["name"] for t in first["tools"]] == ["population"]
    assert first["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert "response_format" not in first
    assistant, answer = second["messages"][-2:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_9"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "paris"}
    assert answer == {"role": "tool", "tool_call_id": "call_9", "content": "2"}
    # The final answer is asked for with the plan's schema: every planner request of the run starts
    # the same (schema, instructions, goal and tools), and all carry the run's cache key.
    assert "stream" not in finish
    assert finish["response_format"] == propose["response_format"]
    assert finish["messages"][:3] == propose["messages"][:3]
    assert propose["messages"][3]["content"].startswith("Budget left:")
    assert finish["messages"][3]["content"].startswith("Record:\n- m1 model: find how many live in Paris → About")
    assert propose["prompt_cache_key"] == finish["prompt_cache_key"]
    assert propose["prompt_cache_key"].startswith("planexec/planner/")
    assert first["prompt_cache_key"] == f"planexec/{result.run_id}/executor"

    assert result.usage.requests == 4
    assert result.usage.input_tokens == 200 + 12 + 80 + 300
    assert result.cost > 0


async def test_malformed_plan_json_is_repaired(server: FakeServer, models: tuple[OpenAIModel, OpenAIModel]) -> None:
    planner, _ = models
    server.reply(
        streamed_text('{"reason": "look up", "steps": [{"id": "paris", "tool": ', '"population", '),
        streamed_json(tool_plan("paris", "rome")),
        completion('{"answer": "5 million together"}'),
    )
    result = await Agent(planner, tools=[population], budget=SAFETY).run("Paris and Rome together?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "5 million together"
    assert result.outputs == {"paris": 2, "rome": 3}
    assert len(server.requests) == 3
    *_, sent_back, problems = messages(1, server)
    assert sent_back["role"] == "assistant"
    assert sent_back["content"].startswith('{"reason": "look up"')
    assert problems["role"] == "user"
    assert "not valid JSON" in problems["content"]
    [rejected] = events_of(result, PlannerOutputRejected)
    assert rejected.problems[0].code == "invalid_json"
    # The repaired plan's steps were handed on while it streamed.
    assert [e.step.id for e in events_of(result, StepStreamed)] == ["paris", "rome"]


async def test_a_refusal_goes_back_to_the_planner(server: FakeServer, models: tuple[OpenAIModel, OpenAIModel]) -> None:
    planner, _ = models
    refusal = Sse([chunk({"role": "assistant", "refusal": "I can't help with that."}), chunk({}, "stop"), DONE])
    server.reply(refusal, streamed_json(tool_plan("rome")), completion('{"answer": "3 million"}'))
    result = await Agent(planner, tools=[population], budget=SAFETY).run("How big is Rome?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3 million"
    last = messages(1, server)[-1]
    assert last["role"] == "user"
    assert "the model refused: I can't help with that." in last["content"]


async def test_a_planner_that_keeps_refusing_stops_the_run(
    server: FakeServer, models: tuple[OpenAIModel, OpenAIModel]
) -> None:
    planner, _ = models
    server.reply(*(completion(None, refusal="No.") for _ in range(2)))
    agent = Agent(Planner(model=planner, max_repairs=1, stream=False), tools=[population], budget=SAFETY)
    result = await agent.run("How big is Rome?")

    assert not result.ok
    assert "refused" in result.stop.detail
    assert len(server.requests) == 2


async def test_step_one_runs_while_the_openai_stream_is_still_sending_step_five(
    server: FakeServer, models: tuple[OpenAIModel, OpenAIModel]
) -> None:
    planner, _ = models
    first_started = threading.Event()
    seen: list[str] = []

    @tool
    async def work(name: str) -> str:
        """Work on one item."""
        seen.append(name)
        first_started.set()
        return f"did {name}"

    steps = [
        {"id": f"s{i}", "description": f"step {i}", "tool": "work", "args": {"name": f"s{i}"}} for i in range(1, 6)
    ]
    text = json.dumps({"reason": "five steps", "steps": steps})
    cut = text.index(json.dumps(steps[0])) + len(json.dumps(steps[0]))
    early, late = text[:cut], text[cut:]
    events: list[Event] = [chunk({"role": "assistant", "content": ""}), chunk({"content": early})]
    # the rest of the plan (steps 2 to 5) is sent only once step 1's tool has started
    events.append(chunk({"content": late}, wait=first_started))
    server.reply(Sse([*events, chunk({}, "stop"), usage_chunk(100, 50), DONE]))
    server.reply(completion(json.dumps({"answer": "all five done"})))
    result = await Agent(Planner(model=planner), tools=[work], store=None, budget=SAFETY).run("do five things")
    assert result.stop.kind == "goal_met", result.stop
    streamed = events_of(result, StepStreamed)
    assert streamed[0].step.id == "s1"
    kinds = [e.kind for e in result.events]
    assert kinds.index("step_started") < kinds.index("model_called")  # step 1 ran before the plan was complete
    assert sorted(seen) == ["s1", "s2", "s3", "s4", "s5"]


async def test_role_settings_on_the_wire_and_what_a_model_drops_in_the_log(server: FakeServer) -> None:
    fast = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01)
    url = server.url + "/v1"
    planner = OpenAIModel("o3", api_key="sk-test", base_url=url, retry=fast)
    executor = OpenAIModel("gpt-4o-mini", api_key="sk-test", base_url=url, retry=fast)
    planning = ModelSettings(temperature=0.2, reasoning_effort="high", max_tokens=4000)
    executing = ModelSettings(temperature=0.7, stop=("END",), max_tokens=300)
    step = {"id": "m1", "description": "say how many live in Paris"}
    server.reply(
        streamed_json({"steps": [step]}),
        completion("About 2 million."),
        completion('{"answer": "about 2 million"}'),
    )
    agent = Agent(
        Planner(model=planner, settings=planning),
        tools=[population],
        executor=ModelExecutor(model=executor, settings=executing),
        budget=SAFETY,
    )
    try:
        result = await agent.run("How big is Paris?")
    finally:
        await planner.aclose()
        await executor.aclose()

    assert result.stop.kind == "goal_met", result.stop
    propose, execute, finish = (body(r) for r in server.requests)
    for sent in (propose, finish):
        assert (sent["model"], sent["reasoning_effort"], sent["max_completion_tokens"]) == ("o3", "high", 4000)
        assert "temperature" not in sent
    assert (execute["temperature"], execute["stop"], execute["max_completion_tokens"]) == (0.7, ["END"], 300)
    assert "reasoning_effort" not in execute

    [started] = events_of(result, RunStarted)
    planner_record = started.config["planner"]
    assert planner_record["settings"] == planning.as_dict()
    assert list(planner_record["dropped_settings"]) == ["temperature"]
    assert "dropped_settings" not in started.config["model_executors"]["model"]
