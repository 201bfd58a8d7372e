"""The Anthropic adapter on the wire: the official SDK inside it talks to a scripted server on 127.0.0.1
that answers in the Messages API's documented formats (message objects, and server-sent events)."""

from __future__ import annotations

import contextlib
import inspect
import json
import queue
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

from planexec import UsageError
from planexec.errors import ModelNotFound
from planexec.models import (
    AnthropicModel,
    Message,
    Model,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    ModelSettings,
    OutputSpec,
    StreamDelta,
    StreamingModel,
    ToolCall,
    ToolSpec,
    Usage,
    allow_model_requests,
    price_for,
    resolve_model,
)
from tests.http_fake import Event, FakeServer, Json, Raw, Reply, Sse, serve

MODEL = "claude-sonnet-4-6"
KEY = "sk-ant-test"
FAST = ModelRetryPolicy(initial_delay=0, max_delay=0.01)

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "object"}}},
    "required": ["steps"],
}
FIND = ToolSpec(
    name="find",
    description="Search the web.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


# -- the provider's formats ---------------------------------------------------------------------


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, value: dict[str, Any], call_id: str = "toolu_01") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}


def message(
    *content: dict[str, Any],
    stop_reason: str = "end_turn",
    usage: dict[str, int] | None = None,
    stop_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Messages API response object."""
    body: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 12, "output_tokens": 6},
    }
    if stop_details is not None:
        body["stop_details"] = stop_details
    return body


def pieces(value: str, size: int = 7) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)]


def stream_events(body: dict[str, Any], *, size: int = 7) -> list[Event]:
    """``body`` (a message object) as the documented event stream, text and tool input in pieces."""
    usage = body["usage"]
    start = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [Event({"type": "message_start", "message": start}, name="message_start")]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"], size)]
        else:
            first = {**block, "input": {}}
            raw = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(raw, size)]
        events.append(
            Event({"type": "content_block_start", "index": index, "content_block": first}, name="content_block_start")
        )
        events += [
            Event({"type": "content_block_delta", "index": index, "delta": d}, name="content_block_delta")
            for d in deltas
        ]
        events.append(Event({"type": "content_block_stop", "index": index}, name="content_block_stop"))
    delta: dict[str, Any] = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    if "stop_details" in body:
        delta["stop_details"] = body["stop_details"]
    events.append(
        Event(
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}},
            name="message_delta",
        )
    )
    events.append(Event({"type": "message_stop"}, name="message_stop"))
    return events


class _AnswerAsAsked(queue.Queue[Reply]):
    """Answers a streaming request's scripted message object with the same message as events."""

    def __init__(self, server: FakeServer) -> None:
        super().__init__()
        self._server = server

    def get_nowait(self) -> Reply:
        reply = super().get_nowait()
        asked = self._server.requests[-1].body
        if isinstance(reply, Json) and reply.status == 200 and isinstance(asked, dict) and asked.get("stream"):
            return Sse(stream_events(reply.body))
        return reply


def answer_as_asked(server: FakeServer) -> FakeServer:
    """Let ``server`` answer scripted message objects as JSON or as a stream, whichever was asked,
    as the real API does; the tests then hold whether or not the caller streams."""
    server._replies = _AnswerAsAsked(server)
    return server


# -- fixtures -----------------------------------------------------------------------------------

shared_server = pytest.fixture(serve, scope="module", name="shared_server")


@pytest.fixture
def server(shared_server: FakeServer) -> FakeServer:
    """The module's server (one for all its tests, as stopping one takes a while), cleared for this test."""
    return cleared(shared_server)


def cleared(server: FakeServer) -> FakeServer:
    """``server`` with no requests recorded and no scripted replies left over from an earlier test."""
    server.requests.clear()
    with contextlib.suppress(queue.Empty):
        while True:
            server._replies.get_nowait()
    return server


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Real requests allowed (to the local server only), with no Anthropic settings from outside."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


@pytest.fixture
async def model(server: FakeServer, live: None) -> AsyncIterator[AnthropicModel]:
    async with AnthropicModel(MODEL, base_url=server.url, api_key=KEY, retry=FAST) as m:
        yield m


def ask(*messages: Message, **options: Any) -> ModelRequest:
    if not messages:
        messages = (Message(role="system", content="Be brief."), Message(role="user", content="Plan it."))
    return ModelRequest(messages=messages, **options)


def system_text(body: dict[str, Any]) -> str:
    """The system text of a request: one block, marked as the end of the cacheable prefix."""
    (block,) = body["system"]
    assert block["cache_control"] == {"type": "ephemeral"}
    return str(block["text"])


def sent(server: FakeServer, index: int = -1) -> dict[str, Any]:
    body = server.requests[index].body
    assert isinstance(body, dict)
    return body


async def collect(stream: AsyncIterator[StreamDelta | ModelResponse], into: list[StreamDelta | ModelResponse]) -> None:
    async for item in stream:
        into.append(item)


# -- requests and answers -------------------------------------------------------------------------


async def test_text_answer_and_the_request_on_the_wire(server: FakeServer, model: AnthropicModel) -> None:
    assert isinstance(model, Model)
    assert isinstance(model, StreamingModel)
    assert model.name == f"anthropic:{MODEL}"
    server.reply(Json(message(text("Hello "), text("there."), usage={"input_tokens": 20, "output_tokens": 4})))

    response = await model.request(ask())

    assert response.text == "Hello there."
    assert (response.tool_calls, response.parsed, response.finish_reason, response.refusal) == ((), None, "stop", None)
    assert response.model == MODEL
    assert response.usage == Usage(input_tokens=20, output_tokens=4, requests=1)
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert "authorization" not in request.headers
    assert request.headers["anthropic-version"]
    assert request.headers["content-type"].startswith("application/json")
    assert request.body == {
        "model": MODEL,
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Plan it."}]}],
    }


async def test_messages_that_end_a_stable_prefix_get_cache_breakpoints(
    server: FakeServer, model: AnthropicModel
) -> None:
    # Adjacent user messages are one turn: the breakpoint sits on the block that ends the stable
    # part, not on the turn's last block. The API takes four breakpoints at most.
    server.reply(Json(message(text("ok"))))
    stable = [Message(role="user", content=f"stable {i}", cache_point=True) for i in range(5)]
    await model.request(
        ask(Message(role="system", content="Rules.", cache_point=True), *stable, Message(role="user", content="now"))
    )
    body = sent(server)
    assert system_text(body) == "Rules."
    [turn] = body["messages"]
    marked = [b["text"] for b in turn["content"] if "cache_control" in b]
    assert marked == ["stable 2", "stable 3", "stable 4"]
    assert turn["content"][-1] == {"type": "text", "text": "now"}


async def test_structured_output_is_a_forced_tool_whose_input_is_parsed(
    server: FakeServer, model: AnthropicModel
) -> None:
    plan = {"steps": [{"id": "s1", "tool": "add"}]}
    server.reply(Json(message(tool_use("plandraft", plan), stop_reason="tool_use")))

    response = await model.request(ask(output=OutputSpec(name="plandraft", json_schema=PLAN_SCHEMA)))

    assert response.parsed == plan
    assert json.loads(response.text) == plan
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    body = sent(server)
    assert body["tool_choice"] == {"type": "tool", "name": "plandraft"}
    (offered,) = body["tools"]
    assert offered["name"] == "plandraft"
    assert offered["input_schema"] == PLAN_SCHEMA
    assert offered["description"]


async def test_a_schema_that_is_not_an_object_travels_wrapped(server: FakeServer, model: AnthropicModel) -> None:
    schema = {"type": "array", "items": {"$ref": "#/$defs/City"}, "$defs": {"City": {"type": "string"}}}
    server.reply(Json(message(tool_use("cities", {"value": ["Paris", "Rome"]}), stop_reason="tool_use")))

    response = await model.request(ask(output=OutputSpec(name="cities", json_schema=schema)))

    assert response.parsed == ["Paris", "Rome"]
    assert json.loads(response.text) == ["Paris", "Rome"]
    (offered,) = sent(server)["tools"]
    assert offered["input_schema"] == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/City"}}},
        "required": ["value"],
        "$defs": {"City": {"type": "string"}},
    }


async def test_tool_calls_out_and_tool_results_back(server: FakeServer, model: AnthropicModel) -> None:
    server.reply(
        Json(
            message(
                text("Two searches."),
                tool_use("find", {"q": "paris"}, "toolu_a"),
                tool_use("find", {"q": "rome"}, "toolu_b"),
                stop_reason="tool_use",
            )
        ),
        Json(message(text("Both found."))),
    )
    first = await model.request(ask(tools=(FIND,)))
    assert first.finish_reason == "tool_calls"
    assert first.text == "Two searches."
    assert first.tool_calls == (
        ToolCall(id="toolu_a", name="find", arguments={"q": "paris"}),
        ToolCall(id="toolu_b", name="find", arguments={"q": "rome"}),
    )
    body = sent(server)
    assert body["tools"] == [{"name": "find", "description": "Search the web.", "input_schema": dict(FIND.parameters)}]
    assert "tool_choice" not in body

    history = (
        Message(role="system", content="Be brief."),
        Message(role="system", content="Use the tools."),
        Message(role="user", content="Plan it."),
        Message(role="assistant", content=first.text, tool_calls=first.tool_calls),
        Message(role="tool", content='["paris: 2M"]', tool_call_id="toolu_a"),
        Message(role="tool", content='["rome: 3M"]', tool_call_id="toolu_b"),
    )
    second = await model.request(ask(*history, tools=(FIND,)))

    assert second.text == "Both found."
    body = sent(server)
    assert body["system"] == [
        {"type": "text", "text": "Be brief.\n\nUse the tools.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Plan it."}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Two searches."},
                {"type": "tool_use", "id": "toolu_a", "name": "find", "input": {"q": "paris"}},
                {"type": "tool_use", "id": "toolu_b", "name": "find", "input": {"q": "rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": '["paris: 2M"]'},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": '["rome: 3M"]'},
            ],
        },
    ]


async def test_output_tool_offered_beside_other_tools(server: FakeServer, model: AnthropicModel) -> None:
    server.reply(Json(message(text("Done:"), tool_use("step_result", {"total": 5}), stop_reason="tool_use")))

    output = OutputSpec(
        name="step_result", json_schema={"type": "object", "properties": {"total": {"type": "integer"}}}
    )
    response = await model.request(ask(tools=(FIND,), output=output))

    assert response.parsed == {"total": 5}
    assert json.loads(response.text) == {"total": 5}
    assert (response.tool_calls, response.finish_reason) == ((), "stop")
    body = sent(server)
    assert [t["name"] for t in body["tools"]] == ["find", "step_result"]
    assert body["tool_choice"] == {"type": "auto"}
    assert "'step_result'" in system_text(body)


CREATE = inspect.signature(anthropic.resources.messages.AsyncMessages.create).parameters
"""What this SDK release's messages.create takes (recent releases have no temperature or top_p)."""

EVERY_SETTING = ModelSettings(
    temperature=0.5,
    top_p=0.9,
    max_tokens=777,
    stop=("END", "###"),
    seed=3,
    reasoning_effort="medium",
    extra={"metadata": {"user_id": "u-1"}, "service_tier": "standard_only"},
    timeout=4.0,
)


@pytest.mark.parametrize("streamed", [False, True], ids=["request", "stream"])
async def test_every_setting_on_the_wire(server: FakeServer, model: AnthropicModel, streamed: bool) -> None:
    server.reply(Sse(stream_events(message(text("ok")))) if streamed else Json(message(text("ok"))))
    request = ask(settings=EVERY_SETTING)
    if streamed:
        items: list[StreamDelta | ModelResponse] = []
        await collect(model.stream(request), items)
        assert isinstance(items[-1], ModelResponse)
    else:
        await model.request(request)

    body = sent(server)
    assert body["max_tokens"] == 777
    assert body["stop_sequences"] == ["END", "###"]
    assert body["output_config"] == {"effort": "medium"}
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["service_tier"] == "standard_only"
    assert server.requests[-1].headers["x-stainless-read-timeout"] == "4.0"
    assert "seed" not in body
    for name, value in (("temperature", 0.5), ("top_p", 0.9)):
        assert body.get(name) == (value if name in CREATE else None)
    dropped = model.unsupported_settings(EVERY_SETTING)
    assert set(dropped) == {"seed"} | {n for n in ("temperature", "top_p") if n not in CREATE}
    assert "the Messages API has no seed" in dropped["seed"]


async def test_unset_settings_send_the_models_own_cap_and_nothing_else(
    server: FakeServer, model: AnthropicModel
) -> None:
    server.reply(Json(message(text("ok"))))
    await model.request(ask())
    body = sent(server)
    assert body["max_tokens"] == 4096
    for name in ("temperature", "top_p", "stop_sequences", "output_config", "thinking"):
        assert name not in body
    assert model.unsupported_settings(ModelSettings(max_tokens=5, stop=("x",))) == {}


@pytest.mark.parametrize(
    ("effort", "wire"),
    [
        ("minimal", {"output_config": {"effort": "low"}}),
        ("max", {"output_config": {"effort": "max"}}),
        ("none", {"thinking": {"type": "disabled"}}),
    ],
)
async def test_reasoning_effort(server: FakeServer, model: AnthropicModel, effort: Any, wire: dict[str, Any]) -> None:
    server.reply(Json(message(text("ok"))))
    await model.request(ask(settings=ModelSettings(reasoning_effort=effort)))
    body = sent(server)
    assert {key: body[key] for key in wire} == wire
    assert not {"output_config", "thinking"} - wire.keys() & body.keys()


async def test_a_thinking_budget_in_the_extras_asks_for_structured_output_without_forcing_the_tool(
    server: FakeServer, model: AnthropicModel
) -> None:
    server.reply(Json(message(tool_use("plan", {"steps": []}), stop_reason="tool_use")))
    thinking = {"type": "enabled", "budget_tokens": 2048}
    settings = ModelSettings(max_tokens=8000, extra={"thinking": thinking})
    response = await model.request(ask(output=OutputSpec(name="plan", json_schema=PLAN_SCHEMA), settings=settings))

    assert response.parsed == {"steps": []}
    body = sent(server)
    assert body["thinking"] == thinking
    assert body["tool_choice"] == {"type": "auto"}
    assert "'plan'" in system_text(body)


async def test_extras_win_over_the_settings_planexec_sends(server: FakeServer, model: AnthropicModel) -> None:
    server.reply(Json(message(text("ok"))))
    await model.request(ask(settings=ModelSettings(max_tokens=100, extra={"max_tokens": 200})))
    assert sent(server)["max_tokens"] == 200


async def test_cache_writes_are_counted_and_priced_at_their_own_rate(server: FakeServer, model: AnthropicModel) -> None:
    usage = {"input_tokens": 40, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 2000, "output_tokens": 10}
    server.reply(Json(message(text("ok"), usage=usage)))

    response = await model.request(ask())

    assert response.usage == Usage(
        input_tokens=2040, output_tokens=10, cached_input_tokens=0, cache_write_tokens=2000, requests=1
    )
    price = price_for(MODEL)
    assert price is not None
    write = price.cache_write
    assert write is not None
    assert write == pytest.approx(1.25 * price.input)
    assert response.cost == pytest.approx((40 * price.input + 2000 * write + 10 * price.output) / 1e6)


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "stop")],
)
async def test_stop_reasons(server: FakeServer, model: AnthropicModel, stop_reason: str, finish: str) -> None:
    server.reply(Json(message(text("partial"), stop_reason=stop_reason)))
    response = await model.request(ask())
    assert (response.finish_reason, response.refusal) == (finish, None)


async def test_a_refusal_without_an_explanation_says_the_model_declined(
    server: FakeServer, model: AnthropicModel
) -> None:
    server.reply(Json(message(stop_reason="refusal")))
    response = await model.request(ask())
    assert (response.finish_reason, response.refusal) == ("refusal", "the model declined to answer")


# -- failures and retries ---------------------------------------------------------------------------


def api_error(kind: str, status: int, headers: dict[str, str] | None = None) -> Json:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} happened"}}
    return Json(body, status=status, headers=headers or {})


# -- keys, the request switch, model strings, the extra ---------------------------------------------


async def test_a_missing_api_key(server: FakeServer, live: None) -> None:
    async with AnthropicModel(MODEL, base_url=server.url) as model:
        with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
            await model.request(ask())
    async with AnthropicModel(MODEL, base_url=server.url, api_key_env="MY_CLAUDE_KEY") as model:
        with pytest.raises(UsageError, match="MY_CLAUDE_KEY"):
            await model.request(ask())
    assert server.requests == []


async def test_the_key_from_the_environment(server: FakeServer, live: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    server.reply(Json(message(text("ok"))))
    async with AnthropicModel(MODEL, base_url=server.url) as model:
        await model.request(ask())
    assert server.requests[0].headers["x-api-key"] == "sk-ant-from-env"


async def test_a_model_string(server: FakeServer, live: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    server.reply(Json(message(text("ok"))))
    model = resolve_model(f"anthropic:{MODEL}")
    assert isinstance(model, AnthropicModel)
    assert (model.name, model.base_url) == (f"anthropic:{MODEL}", server.url)
    async with model:
        assert (await model.request(ask())).text == "ok"
    assert server.requests[0].headers["x-api-key"] == "sk-ant-from-env"


def test_without_the_sdk_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(ModelNotFound, match=r"pip install -e '\.\[anthropic\]'"):
        resolve_model(f"anthropic:{MODEL}")


def test_settings_are_checked() -> None:
    with pytest.raises(UsageError) as info:
        AnthropicModel("", timeout=0, max_tokens=0)
    assert len(info.value.problems) == 3


# -- streaming ----------------------------------------------------------------------------------------


async def test_streamed_structured_output_arrives_as_json_pieces(server: FakeServer, model: AnthropicModel) -> None:
    plan = {"steps": [{"id": "s1", "tool": "add", "args": {"a": 1, "b": 2}}, {"id": "s2", "tool": "add"}]}
    body = message(tool_use("plandraft", plan), stop_reason="tool_use", usage={"input_tokens": 50, "output_tokens": 40})
    server.reply(Sse(stream_events(body, size=5)))

    items: list[StreamDelta | ModelResponse] = []
    await collect(model.stream(ask(output=OutputSpec(name="plandraft", json_schema=PLAN_SCHEMA))), items)

    *deltas, last = items
    assert deltas == [StreamDelta(text=p) for p in pieces(json.dumps(plan), 5)]
    assert isinstance(last, ModelResponse)
    assert last.parsed == plan
    assert last.text == "".join(d.text for d in deltas if isinstance(d, StreamDelta))
    assert (last.finish_reason, last.tool_calls) == ("stop", ())
    assert last.usage == Usage(input_tokens=50, output_tokens=40, requests=1)
    assert sent(server)["tool_choice"] == {"type": "tool", "name": "plandraft"}


async def test_broken_streamed_json_is_passed_on_for_a_repair(server: FakeServer, model: AnthropicModel) -> None:
    events = stream_events(message(tool_use("plandraft", {}), stop_reason="tool_use"))
    broken = {"type": "input_json_delta", "partial_json": '{"steps": [{"id": '}
    events[2] = Event({"type": "content_block_delta", "index": 0, "delta": broken}, name="content_block_delta")
    server.reply(Sse(events))

    items: list[StreamDelta | ModelResponse] = []
    await collect(model.stream(ask(output=OutputSpec(name="plandraft", json_schema=PLAN_SCHEMA))), items)

    last = items[-1]
    assert isinstance(last, ModelResponse)
    assert (last.parsed, last.text) == (None, '{"steps": [{"id": ')  # the planner reports it and asks again


async def test_tool_names_fit_the_api(server: FakeServer, model: AnthropicModel) -> None:
    taken = ToolSpec(name="final_answer", description="A tool that happens to have the name.", parameters={})
    server.reply(Json(message(tool_use("final_answer_answer", {"answer": "yes"}), stop_reason="tool_use")))

    output = OutputSpec(name="final answer", json_schema={"type": "object", "properties": {"answer": {}}})
    response = await model.request(ask(tools=(taken,), output=output))

    assert response.parsed == {"answer": "yes"}
    assert response.tool_calls == ()
    tools = sent(server)["tools"]
    assert [t["name"] for t in tools] == ["final_answer", "final_answer_answer"]
    assert tools[0]["input_schema"] == {"type": "object"}


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Json("just a string"), "a body that is not a Messages response"),
        (Json({"content": "none"}), "a body that is not a Messages response"),
        (Raw(b"{not json"), "a body that is not JSON"),
    ],
    ids=["string", "content-not-a-list", "not-json"],
)
async def test_a_body_that_is_not_a_message_is_a_typed_error(
    server: FakeServer, model: AnthropicModel, reply: Json | Raw, said: str
) -> None:
    server.reply(reply)
    with pytest.raises(ModelCallError) as info:
        await model.request(ask())
    assert said in str(info.value)
    assert not info.value.retryable
    assert len(server.requests) == 1
