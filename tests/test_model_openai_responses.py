"""The Responses API adapter on the wire: the official SDK inside it talks to a scripted server on
127.0.0.1, answering in the Responses API's formats (a response object as JSON, or server-sent
events ending with ``response.completed``), then whole runs through it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from planexec import Agent, ModelExecutor, Planner, UsageError, tool
from planexec.errors import ModelNotFound
from planexec.log import ModelAttemptFailed, PlannerOutputRejected, RunStarted, StepStreamed
from planexec.models import (
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    ModelSettings,
    NotSupported,
    OpenAIModel,
    OpenAIResponsesModel,
    OutputSpec,
    Providers,
    StreamDelta,
    StreamingModel,
    ToolCall,
    Usage,
    allow_model_requests,
    cost_of,
    estimate_tokens,
    price_for,
    resolve_model,
    unsupported_settings,
)
from planexec.models._profiles import ModelProfile
from tests.http_fake import Event, FakeServer, Json, Raw, Sse, serve
from tests.support import SAFETY, events_of
from tests.test_model_openai import ANSWER, EVERY_SETTING, FAST, SEARCH, ask, body, error, settled

server = pytest.fixture(serve)


@pytest.fixture(autouse=True)
def allow_requests() -> Iterator[None]:
    """Real model requests are blocked in the suite (conftest.py); these go to 127.0.0.1 only."""
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


Make = Callable[..., OpenAIResponsesModel]


@pytest.fixture
async def make(server: FakeServer) -> AsyncIterator[Make]:
    """Build models that talk to the fake server, and close their clients afterwards."""
    built: list[OpenAIResponsesModel] = []

    def build(model: str = "gpt-4.1-mini", **options: Any) -> OpenAIResponsesModel:
        options.setdefault("api_key", "sk-test")
        options.setdefault("base_url", server.url + "/v1")
        options.setdefault("retry", FAST)
        built.append(OpenAIResponsesModel(model, **options))
        return built[-1]

    yield build
    for model in built:
        await model.aclose()


# -- the provider's formats --------------------------------------------------------------------

UsageCounts = tuple[int, int, int, int]
"""Input, output, cached input and reasoning tokens."""


def usage_body(counts: UsageCounts) -> dict[str, Any]:
    prompt, completion, cached, reasoning = counts
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def response_body(
    *output: dict[str, Any],
    status: str = "completed",
    usage: UsageCounts | None = (12, 5, 0, 0),
    incomplete: str | None = None,
    model: str = "gpt-4.1-mini-2025-04-14",
) -> dict[str, Any]:
    """A response object: its output items, status and usage."""
    found: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": model,
        "status": status,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "error": None,
    }
    if usage is not None:
        found["usage"] = usage_body(usage)
    return found


def answer(*output: dict[str, Any], **fields: Any) -> Json:
    return Json(response_body(*output, **fields))


def message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": list(parts)}


def text(value: str) -> dict[str, Any]:
    return {"type": "output_text", "text": value, "annotations": []}


def refusal(value: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": value}


def said(value: str) -> Json:
    """A plain text answer."""
    return answer(message(text(value)))


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


REASONING: dict[str, Any] = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None}


def event(kind: str, *, wait: threading.Event | None = None, **fields: Any) -> Event:
    return Event({"type": kind, "sequence_number": 0, **fields}, wait=wait)


def delta(piece: str, *, index: int = 0, wait: threading.Event | None = None) -> Event:
    return event(
        "response.output_text.delta",
        wait=wait,
        delta=piece,
        item_id="msg_1",
        output_index=index,
        content_index=0,
        logprobs=[],
    )


def completed(*output: dict[str, Any], **fields: Any) -> Event:
    return event("response.completed", response=response_body(*output, **fields))


def created() -> Event:
    return event("response.created", response=response_body(status="in_progress", usage=None))


def text_stream(*pieces: str, usage: UsageCounts | None = (9, 4, 0, 0)) -> Sse:
    """A streamed text answer: a delta per piece, then the completed response (without its output,
    as some servers send it)."""
    return Sse([created(), *(delta(p) for p in pieces), completed(usage=usage)])


def plain(text: str = "hello") -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),))


async def collect(model: OpenAIResponsesModel, request: ModelRequest) -> list[StreamDelta | ModelResponse]:
    return [item async for item in model.stream(request)]


async def last_of(model: OpenAIResponsesModel, request: ModelRequest) -> ModelResponse:
    *_, last = await collect(model, request)
    assert isinstance(last, ModelResponse)
    return last


# -- model strings -----------------------------------------------------------------------------


async def test_openai_responses_model_strings_use_the_openai_key_and_base_url(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    assert "openai-responses" in Providers.default().known()
    model = resolve_model("openai-responses:gpt-4.1-mini")
    assert isinstance(model, OpenAIResponsesModel)
    assert isinstance(model, StreamingModel)
    assert (model.name, model.model, model.provider, model.limits_key) == (
        "openai-responses:gpt-4.1-mini",
        "gpt-4.1-mini",
        "openai",
        "openai",  # the same limits as chat completions calls to OpenAI
    )
    assert repr(model) == "OpenAIResponsesModel('openai-responses:gpt-4.1-mini')"
    server.reply(said("hi"))
    async with model:
        assert (await model.request(plain())).text == "hi"
    [sent] = server.requests
    assert (sent.path, sent.headers["authorization"]) == ("/v1/responses", "Bearer sk-from-env")


def test_the_key_is_missing_until_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = resolve_model("openai-responses:gpt-4.1")
    assert [(p.where, p.message) for p in model.missing_keys()] == [  # type: ignore[attr-defined]
        ("openai-responses:gpt-4.1", "OPENAI_API_KEY is not set: set it, or pass api_key=")
    ]


def test_without_the_sdk_the_model_string_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import planexec.models

    monkeypatch.setitem(sys.modules, "openai", None)  # importing the SDK now fails
    monkeypatch.delitem(sys.modules, "planexec.models._openai_responses")
    monkeypatch.delitem(sys.modules, "planexec.models._openai")
    with pytest.raises(ModelNotFound, match="needs the OpenAI SDK") as info:
        resolve_model("openai-responses:gpt-4.1-mini")
    assert "pip install" in info.value.problems[0].message
    with pytest.raises(ImportError, match="OpenAIResponsesModel needs the OpenAI SDK"):
        planexec.models.OpenAIResponsesModel  # noqa: B018


# -- requests and plain answers ----------------------------------------------------------------


async def test_input_tools_and_settings_on_the_wire(server: FakeServer, make: Make) -> None:
    server.reply(answer(REASONING, message(text("Paris has about 2 million people.")), usage=(120, 9, 64, 3)))
    model = make()
    request = ModelRequest(
        messages=(
            Message(role="system", content="You research."),
            Message(role="user", content="How many people live in Paris?"),
            Message(
                role="assistant",
                content="Looking it up.",
                tool_calls=(ToolCall(id="call_a", name="search", arguments={"q": "paris population"}),),
            ),
            Message(role="tool", content='["2.1 million"]', tool_call_id="call_a"),
            Message(role="assistant", tool_calls=(ToolCall(id="call_b", name="search", arguments={}),)),
            Message(role="tool", content="[]", tool_call_id="call_b"),
        ),
        tools=(SEARCH,),
        settings=ModelSettings(temperature=0.2, max_tokens=300, timeout=5.0),
    )
    response = await model.request(request)

    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-test"
    wire = body(sent)
    assert wire["model"] == "gpt-4.1-mini"
    assert wire["input"] == [
        {"role": "system", "content": "You research."},
        {"role": "user", "content": "How many people live in Paris?"},
        {"role": "assistant", "content": "Looking it up."},
        {"type": "function_call", "call_id": "call_a", "name": "search", "arguments": '{"q": "paris population"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": '["2.1 million"]'},
        {"type": "function_call", "call_id": "call_b", "name": "search", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_b", "output": "[]"},
    ]
    assert wire["tools"] == [
        {
            "type": "function",
            "name": "search",
            "description": "Search the web.",
            "parameters": dict(SEARCH.parameters),
            "strict": False,
        }
    ]
    assert wire["temperature"] == 0.2
    assert wire["max_output_tokens"] == 300
    assert wire["store"] is False  # stateless: the whole conversation goes each time
    assert wire.get("stream") is not True
    for absent in ("text", "reasoning", "previous_response_id", "messages", "max_tokens"):
        assert absent not in wire
    assert sent.headers["x-stainless-read-timeout"] == "5.0"

    assert response.text == "Paris has about 2 million people."
    assert response.tool_calls == ()
    assert response.parsed is None
    assert response.finish_reason == "stop"
    assert response.refusal is None
    assert response.model == "gpt-4.1-mini-2025-04-14"
    assert response.usage == Usage(
        input_tokens=120, output_tokens=9, cached_input_tokens=64, reasoning_tokens=3, requests=1
    )
    assert response.cost == cost_of(response.usage, price_for("gpt-4.1-mini"))
    assert response.cost == pytest.approx((56 * 0.40 + 64 * 0.10 + 9 * 1.60) / 1e6)


async def test_a_tool_message_must_name_its_call(server: FakeServer, make: Make) -> None:
    request = ModelRequest(messages=(Message(role="tool", content="x"),))
    with pytest.raises(UsageError, match="tool_call_id"):
        await make().request(request)
    assert server.requests == []


async def test_structured_output_is_strict_json_schema(server: FakeServer, make: Make) -> None:
    server.reply(said('{"answer": "42", "sources": []}'))
    response = await make().request(ask(output=ANSWER))

    assert body(server.requests[0])["text"] == {
        "format": {
            "type": "json_schema",
            "name": "final_answer",
            "strict": True,
            "schema": {
                "type": "object",
                "title": "FinalAnswer",
                "properties": {"answer": {"type": "string"}, "sources": {"type": "array", "items": {"type": "string"}}},
                "required": ["answer", "sources"],
                "additionalProperties": False,
            },
        }
    }
    assert body(server.requests[0])["input"][0] == {"role": "system", "content": "be brief"}
    assert response.parsed == {"answer": "42", "sources": []}


async def test_a_schema_strict_mode_cannot_take_is_sent_non_strict(server: FakeServer, make: Make) -> None:
    free_form = {"type": "object", "properties": {"args": {"type": "object", "additionalProperties": True}}}
    server.reply(said('{"args": {"x": 1}}'))
    response = await make().request(ask(output=OutputSpec(name="call", json_schema=free_form)))

    assert body(server.requests[0])["text"] == {
        "format": {"type": "json_schema", "name": "call", "schema": free_form, "strict": False}
    }
    assert response.parsed == {"args": {"x": 1}}


async def test_unparsable_structured_output_leaves_parsed_empty(server: FakeServer, make: Make) -> None:
    server.reply(said('{"answer": "4'), said('```json\n{"answer": "4"}\n```'))
    model = make()
    broken = await model.request(ask(output=ANSWER))
    assert (broken.text, broken.parsed) == ('{"answer": "4', None)
    fenced = await model.request(ask(output=ANSWER))
    assert fenced.parsed == {"answer": "4"}


async def test_older_models_get_json_mode_or_the_schema_in_the_prompt(server: FakeServer, make: Make) -> None:
    server.reply(said('{"answer": "hi"}'), said('{"answer": "hi"}'))
    json_mode = await make("gpt-4-turbo").request(ask(output=ANSWER))
    no_json = await make("gpt-4").request(ask(output=ANSWER))

    first, second = (body(r) for r in server.requests)
    assert first["text"] == {"format": {"type": "json_object"}}
    assert "text" not in second
    for sent in (first, second):
        system = sent["input"][0]
        assert system["role"] == "system"
        assert system["content"].startswith("be brief\n\nReply with one JSON object")
        assert json.dumps(ANSWER.json_schema, separators=(",", ":")) in system["content"]
    assert json_mode.parsed == no_json.parsed == {"answer": "hi"}


async def test_a_profile_without_tools_refuses_them_before_sending(server: FakeServer, make: Make) -> None:
    model = make("tiny", profile=ModelProfile(tools=False))
    with pytest.raises(NotSupported, match="tool calling is not supported by openai-responses:tiny"):
        await model.request(ask(tools=(SEARCH,)))
    assert server.requests == []


# -- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["request", "stream"])
async def test_every_setting_the_responses_api_takes_goes_on_the_wire(
    server: FakeServer, make: Make, streamed: bool
) -> None:
    server.reply(text_stream("ok") if streamed else said("ok"))
    model = make("gpt-4.1-mini")
    if streamed:
        await last_of(model, settled(EVERY_SETTING))
    else:
        await model.request(settled(EVERY_SETTING))

    wire = body(server.requests[0])
    assert wire["temperature"] == 0.4
    assert wire["top_p"] == 0.8
    assert wire["max_output_tokens"] == 321
    assert wire["service_tier"] == "flex"
    assert wire["metadata"] == {"team": "ops"}
    assert server.requests[0].headers["x-stainless-read-timeout"] == "7.5"
    # no stop sequences or seed in the Responses API; gpt-4.1 is no reasoning model
    for absent in ("stop", "seed", "reasoning", "reasoning_effort", "max_completion_tokens"):
        assert absent not in wire
    dropped = model.unsupported_settings(EVERY_SETTING)
    assert sorted(dropped) == ["reasoning_effort", "seed", "stop"]
    assert (
        dropped["stop"] == "openai-responses:gpt-4.1-mini does not take stop (the Responses API has no stop); not sent"
    )
    assert "ModelProfile.reasoning_effort is false" in dropped["reasoning_effort"]


async def test_a_reasoning_model_gets_its_effort_and_no_sampling_settings(server: FakeServer, make: Make) -> None:
    server.reply(answer(REASONING, message(text("ok")), usage=(40, 300, 0, 280)))
    model = make("o4-mini")
    response = await model.request(settled(EVERY_SETTING))

    wire = body(server.requests[0])
    assert wire["reasoning"] == {"effort": "low"}
    assert wire["max_output_tokens"] == 321
    for dropped in ("temperature", "top_p", "stop", "seed"):
        assert dropped not in wire
    assert sorted(model.unsupported_settings(EVERY_SETTING)) == ["seed", "stop", "temperature", "top_p"]
    assert response.text == "ok"  # the reasoning item is counted, not read
    assert (response.usage.output_tokens, response.usage.reasoning_tokens) == (300, 280)


async def test_extras_win_over_what_planexec_sends(server: FakeServer, make: Make) -> None:
    server.reply(said("ok"))
    await make().request(settled(ModelSettings(temperature=0.2, extra={"temperature": 1.0, "store": True})))
    wire = body(server.requests[0])
    assert (wire["temperature"], wire["store"]) == (1.0, True)


def test_unset_settings_are_never_reported_as_dropped() -> None:
    model = OpenAIResponsesModel("o3", api_key="sk-test")
    assert model.unsupported_settings(ModelSettings(max_tokens=10, reasoning_effort="high")) == {}


def test_a_fallback_list_names_what_the_responses_model_would_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    fallback = resolve_model("openai:gpt-4o | openai-responses:gpt-4o")
    dropped = unsupported_settings(fallback, ModelSettings(stop=("END",), seed=1))
    assert sorted(dropped) == ["seed", "stop"]
    assert dropped["stop"].startswith("openai-responses:gpt-4o does not take stop")


# -- tool calls --------------------------------------------------------------------------------


async def test_function_calls(server: FakeServer, make: Make) -> None:
    server.reply(
        answer(
            REASONING,
            function_call("call_1", "search", '{"q": "paris"}'),
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},  # a hosted tool's item: skipped
            function_call("call_2", "search", ""),
        )
    )
    response = await make().request(ask(tools=(SEARCH,)))
    assert response.tool_calls == (
        ToolCall(id="call_1", name="search", arguments={"q": "paris"}),
        ToolCall(id="call_2", name="search", arguments={}),
    )
    assert response.finish_reason == "tool_calls"
    assert response.text == ""


@pytest.mark.parametrize("arguments", ['{"q": "par', "[1, 2]", "[" * 100_000])
async def test_malformed_function_arguments_fail_the_call(server: FakeServer, make: Make, arguments: str) -> None:
    server.reply(answer(function_call("call_1", "search", arguments)))
    with pytest.raises(ModelCallError) as info:
        await make().request(ask(tools=(SEARCH,)))
    assert not info.value.retryable
    assert "tool 'search'" in str(info.value)
    assert arguments[:20] in str(info.value)
    assert len(server.requests) == 1


async def test_a_function_call_without_a_name_fails_the_call(server: FakeServer, make: Make) -> None:
    server.reply(answer({"type": "function_call", "call_id": "c", "arguments": "{}"}))
    with pytest.raises(ModelCallError, match="a function call without a name") as info:
        await make().request(ask(tools=(SEARCH,)))
    assert not info.value.retryable


# -- what else a response may hold -------------------------------------------------------------


async def test_unknown_items_and_parts_are_skipped(server: FakeServer, make: Make) -> None:
    server.reply(
        answer(
            {"type": "brand_new_item", "id": "x_1", "payload": {"anything": [1, 2]}},
            message(text("Hel"), {"type": "mystery_part", "blob": 3}, text("lo")),
            {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": None},
        )
    )
    response = await make().request(ask())
    assert (response.text, response.tool_calls, response.finish_reason) == ("Hello", (), "stop")


async def test_a_response_stopped_by_the_content_filter_reads_as_a_refusal(server: FakeServer, make: Make) -> None:
    server.reply(answer(status="incomplete", incomplete="content_filter"))
    filtered = await make().request(ask())
    assert filtered.finish_reason == "refusal"
    assert filtered.refusal is not None
    assert "content filter" in filtered.refusal


@pytest.mark.parametrize(
    ("code", "retryable"), [("server_error", True), ("rate_limit_exceeded", True), ("invalid_prompt", False)]
)
async def test_a_failed_response_is_an_error(server: FakeServer, make: Make, code: str, retryable: bool) -> None:
    failed = response_body(status="failed", usage=None)
    failed["error"] = {"code": code, "message": "it went wrong"}
    server.reply(Json(failed))
    with pytest.raises(ModelCallError, match="reported an error: it went wrong") as info:
        await make(retry=ModelRetryPolicy(max_attempts=1)).request(ask())
    assert info.value.retryable is retryable


async def test_a_failed_response_is_retried_when_it_may_pass(server: FakeServer, make: Make) -> None:
    failed = response_body(status="failed", usage=None)
    failed["error"] = {"code": "server_error", "message": "try again"}
    server.reply(Json(failed), said("recovered"))
    assert (await make().request(ask())).text == "recovered"
    assert len(server.requests) == 2


async def test_a_response_without_usage_is_estimated_from_all_that_was_sent(server: FakeServer, make: Make) -> None:
    server.reply(answer(message(text("hello there")), usage=None))
    response = await make().request(ask("say hello", output=ANSWER, tools=(SEARCH,)))
    wire = body(server.requests[0])
    sent = json.dumps([wire["input"], wire["tools"], wire["text"]], ensure_ascii=False)
    assert response.usage == Usage(input_tokens=estimate_tokens(sent), output_tokens=3, requests=1)


# -- bad and hostile answers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "what"),
    [
        (Raw(b"{this is not json"), "a body that cannot be read"),
        (Raw(b"[" * 200_000 + b"]" * 200_000), "a body that cannot be read"),
        (Json("a string"), "a str where a response belongs"),
        (Json(response_body(message(text("x")), status="queued")), "a response that is 'queued'"),
        (Json(response_body(message({"type": "output_text", "text": 7}))), "output text that is not text"),
        (Json({**response_body(), "output": {"not": "a list"}}), "an output that is not a list"),
        (
            Json({**response_body(), "usage": {"input_tokens": "12", "output_tokens": 1}}),
            "usage whose input_tokens is '12', not a count",
        ),
        (
            Json({**response_body(), "usage": {"input_tokens": -1, "output_tokens": 1}}),
            "usage whose input_tokens is -1",
        ),
        (Json({**response_body(), "usage": {"output_tokens": 1}}), "usage whose input_tokens is None"),
        (Json(response_body(function_call("c", "search", 42))), "arguments to 'search' that are not JSON text"),  # type: ignore[arg-type]
    ],
)
async def test_a_malformed_answer_is_a_typed_error(
    server: FakeServer, make: Make, reply: Json | Raw, what: str
) -> None:
    server.reply(reply)
    with pytest.raises(ModelCallError) as info:
        await make().request(ask(tools=(SEARCH,)))
    assert what in str(info.value)
    assert not info.value.retryable
    assert len(server.requests) == 1


async def test_a_huge_answer_is_read_whole(server: FakeServer, make: Make) -> None:
    big = "word " * 1_000_000
    server.reply(said(big))
    started = time.monotonic()
    response = await make().request(ask())
    assert response.text == big
    assert time.monotonic() - started < 20


# -- streaming ---------------------------------------------------------------------------------


async def test_streamed_structured_output_is_parsed_at_the_end(server: FakeServer, make: Make) -> None:
    server.reply(text_stream('{"answer": ', '"42", "sources": []}'))
    items = await collect(make(), ask(output=ANSWER))
    assert [i.text for i in items if isinstance(i, StreamDelta)] == ['{"answer": ', '"42", "sources": []}']
    last = items[-1]
    assert isinstance(last, ModelResponse)
    assert last.parsed == {"answer": "42", "sources": []}
    assert body(server.requests[0])["text"]["format"]["strict"] is True


async def test_streamed_function_calls_are_put_together_from_argument_deltas(server: FakeServer, make: Make) -> None:
    def arguments(index: int, piece: str) -> Event:
        return event("response.function_call_arguments.delta", output_index=index, item_id=f"fc_{index}", delta=piece)

    server.reply(
        Sse(
            [
                created(),
                event("response.output_item.added", output_index=0, item=REASONING),
                event("response.output_item.done", output_index=0, item=REASONING),
                event("response.output_item.added", output_index=1, item=function_call("call_p", "search", "")),
                arguments(1, '{"q": '),
                event("response.output_item.added", output_index=2, item=function_call("call_r", "search", "")),
                arguments(2, '{"q": "ro'),
                arguments(1, '"paris"}'),
                arguments(2, 'me"}'),
                event(
                    "response.function_call_arguments.done", output_index=2, item_id="fc_2", arguments='{"q": "rome"}'
                ),
                completed(usage=(50, 20, 0, 12)),
            ]
        )
    )
    [last] = await collect(make(), ask(tools=(SEARCH,)))  # no text: the whole response only
    assert isinstance(last, ModelResponse)
    assert last.tool_calls == (
        ToolCall(id="call_p", name="search", arguments={"q": "paris"}),
        ToolCall(id="call_r", name="search", arguments={"q": "rome"}),
    )
    assert last.finish_reason == "tool_calls"
    assert last.usage == Usage(input_tokens=50, output_tokens=20, reasoning_tokens=12, requests=1)


async def test_a_function_calls_final_arguments_win(server: FakeServer, make: Make) -> None:
    server.reply(
        Sse(
            [
                event("response.output_item.added", output_index=0, item=function_call("c", "search", "")),
                event("response.function_call_arguments.delta", output_index=0, item_id="fc_c", delta='{"q": "pa'),
                event("response.output_item.done", output_index=0, item=function_call("c", "search", '{"q": "paris"}')),
                completed(),
            ]
        )
    )
    last = await last_of(make(), ask(tools=(SEARCH,)))
    assert last.tool_calls == (ToolCall(id="c", name="search", arguments={"q": "paris"}),)


async def test_a_stream_without_deltas_takes_the_completed_responses_output(server: FakeServer, make: Make) -> None:
    server.reply(Sse([completed(function_call("c", "search", '{"q": "x"}'), message(text("also this")))]))
    last = await last_of(make(), ask(tools=(SEARCH,)))
    assert last.tool_calls == (ToolCall(id="c", name="search", arguments={"q": "x"}),)
    assert last.text == "also this"


async def test_a_streamed_malformed_function_argument_fails_the_call(server: FakeServer, make: Make) -> None:
    server.reply(
        Sse(
            [
                event("response.output_item.added", output_index=0, item=function_call("c", "search", "")),
                event("response.function_call_arguments.delta", output_index=0, item_id="fc_c", delta='{"q": '),
                completed(),
            ]
        )
    )
    with pytest.raises(ModelCallError, match="tool 'search' with arguments that are not valid JSON") as info:
        await collect(make(), ask(tools=(SEARCH,)))
    assert not info.value.retryable


async def test_a_stream_without_usage_is_estimated(server: FakeServer, make: Make) -> None:
    server.reply(text_stream("hi", usage=None))
    last = await last_of(make(), plain("hello"))
    sent = json.dumps([body(server.requests[0])["input"]], ensure_ascii=False)
    assert last.usage == Usage(input_tokens=estimate_tokens(sent), output_tokens=1, requests=1)


async def test_unknown_events_are_skipped(server: FakeServer, make: Make) -> None:
    server.reply(
        Sse(
            [
                created(),
                event("response.in_progress", response=response_body(status="in_progress", usage=None)),
                event("response.brand_new_event", payload=[1, 2, 3]),
                event("response.reasoning_summary_text.delta", output_index=0, summary_index=0, delta="hmm"),
                delta("ok"),
                event("response.output_text.done", output_index=0, content_index=0, item_id="m", text="ok"),
                completed(),
            ]
        )
    )
    assert [type(i).__name__ for i in await collect(make(), ask())] == ["StreamDelta", "ModelResponse"]


async def test_nothing_is_read_after_the_completed_event(server: FakeServer, make: Make) -> None:
    """A server that keeps the connection open after the last event does not hold the caller up."""
    never = threading.Event()
    server.reply(Sse([delta("done"), completed(), delta("late", wait=never)]))
    try:
        last = await asyncio.wait_for(last_of(make(), ask()), 10)
    finally:
        never.set()
    assert last.text == "done"


async def test_a_stream_whose_response_failed_midway_is_not_retried(server: FakeServer, make: Make) -> None:
    failed = response_body(status="failed", usage=None)
    failed["error"] = {"code": "server_error", "message": "the server fell over"}
    failure = event("response.failed", response=failed)
    server.reply(Sse([delta("Hel"), failure]), text_stream("never sent"))
    seen: list[StreamDelta | ModelResponse] = []

    async def consume() -> None:
        async for item in make().stream(ask()):
            seen.append(item)

    with pytest.raises(ModelCallError, match="the server fell over") as info:
        await consume()
    assert info.value.retryable  # a server error: the caller may ask again
    assert seen == [StreamDelta(text="Hel")]
    assert len(server.requests) == 1


async def test_a_stream_that_fails_before_its_text_is_retried(server: FakeServer, make: Make) -> None:
    server.reply(Sse([created(), event("error", code="rate_limit_exceeded", message="busy")]), text_stream("ok"))
    items = await collect(make(), ask())
    assert [type(i).__name__ for i in items] == ["StreamDelta", "ModelResponse"]
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("events", "what"),
    [
        ([Event("{not json")], "streamed data that cannot be read"),
        ([Event("[" * 200_000 + "]" * 200_000)], "streamed data that cannot be read"),
        ([Event("[1, 2]")], "an event without a type"),
        ([event("response.output_text.delta", output_index=0, delta=5)], "a text delta that is not text"),
        ([event("response.function_call_arguments.delta", output_index="x", delta="{")], "an output index of 'x'"),
        ([event("response.completed", response="done")], "a response.completed event without a response"),
        (
            [event("response.completed", response={**response_body(), "usage": {"input_tokens": 1.5}})],
            "usage whose input_tokens is 1.5",
        ),
    ],
)
async def test_a_malformed_stream_is_a_typed_error(
    server: FakeServer, make: Make, events: list[Event], what: str
) -> None:
    server.reply(Sse(events))
    with pytest.raises(ModelCallError) as info:
        await collect(make(), ask())
    assert what in str(info.value)
    assert not info.value.retryable
    assert len(server.requests) == 1


async def test_a_whole_response_where_a_stream_was_asked_for_is_a_typed_error(server: FakeServer, make: Make) -> None:
    server.reply(said("not streamed"))
    with pytest.raises(ModelCallError, match="a JSON body where a stream of events was asked for") as info:
        await collect(make(), ask())
    assert not info.value.retryable
    assert len(server.requests) == 1


async def test_a_long_stream_is_read_through(server: FakeServer, make: Make) -> None:
    pieces = [f"word{i} " for i in range(5_000)]
    server.reply(text_stream(*pieces))
    started = time.monotonic()
    items = await collect(make(), ask())
    assert len(items) == 5_001
    last = items[-1]
    assert isinstance(last, ModelResponse)
    assert last.text == "".join(pieces)
    assert time.monotonic() - started < 30


# -- failures and retries ----------------------------------------------------------------------


async def test_exhausted_quota_is_not_retried(server: FakeServer, make: Make) -> None:
    server.reply(error(429, "You exceeded your current quota", code="insufficient_quota"))
    with pytest.raises(ModelCallError) as info:
        await make().request(ask())
    assert not info.value.retryable
    assert len(server.requests) == 1


# -- keys, clients and the switch that blocks real requests ------------------------------------


async def test_a_missing_key_is_refused_before_sending(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIResponsesModel("gpt-4.1-mini", base_url=server.url + "/v1")
    with pytest.raises(UsageError, match="OPENAI_API_KEY is not set"):
        await model.request(ask())
    assert server.requests == []


def test_it_is_an_openai_model_that_speaks_another_api() -> None:
    model = OpenAIResponsesModel("gpt-5", api_key="sk-test")
    assert isinstance(model, OpenAIModel)
    assert model.profile.reasoning_effort  # the OpenAI family's profile
    with pytest.raises(UsageError, match="invalid OpenAI model settings"):
        OpenAIResponsesModel("", timeout=0)


# -- whole runs --------------------------------------------------------------------------------

POPULATIONS = {"paris": 2, "rome": 3}


@tool
async def population(city: str) -> int:
    """The population of a city, in millions."""
    return POPULATIONS[city]


@pytest.fixture
async def models(server: FakeServer) -> AsyncIterator[tuple[OpenAIResponsesModel, OpenAIResponsesModel]]:
    """A planner model and an executor model, both served by ``server``."""
    fast = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01)
    url = server.url + "/v1"
    planner = OpenAIResponsesModel("gpt-4.1", api_key="sk-test", base_url=url, retry=fast)
    executor = OpenAIResponsesModel("gpt-4.1-mini", api_key="sk-test", base_url=url, retry=fast)
    yield planner, executor
    await planner.aclose()
    await executor.aclose()


def streamed_json(value: Any, *, pieces: int = 3) -> Sse:
    """``value`` as JSON text streamed in a few deltas, then the completed response."""
    encoded = json.dumps(value)
    size = -(-len(encoded) // pieces)
    return text_stream(*(encoded[i : i + size] for i in range(0, len(encoded), size)), usage=(200, 40, 0, 0))


def tool_plan(*cities: str) -> dict[str, Any]:
    return {
        "reason": "look the cities up",
        "steps": [
            {"id": c, "description": f"population of {c}", "tool": "population", "args": {"city": c}} for c in cities
        ],
    }


async def test_planner_and_executor_on_the_responses_api(
    server: FakeServer, models: tuple[OpenAIResponsesModel, OpenAIResponsesModel]
) -> None:
    planner, executor = models
    step = {"id": "m1", "description": "find how many live in Paris", "allowed_tools": ["population"]}
    server.reply(
        streamed_json({"reason": "one research step", "steps": [step]}),
        answer(REASONING, function_call("call_9", "population", '{"city": "paris"}')),
        answer(message(text("About 2 million people live in Paris.")), usage=(80, 12, 0, 0)),
        answer(message(text('{"answer": "Paris: about 2 million"}')), usage=(300, 10, 128, 0)),
    )
    result = await Agent(planner, tools=[population], executor=executor, budget=SAFETY).run("How big is Paris?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "Paris: about 2 million"
    assert result.outputs == {"m1": "About 2 million people live in Paris."}
    [call] = result.steps["m1"].tool_calls
    assert (call.call_id, call.tool, call.args, call.output) == ("call_9", "population", {"city": "paris"}, 2)

    propose, first, second, finish = (body(r) for r in server.requests)
    assert {r.path for r in server.requests} == {"/v1/responses"}
    assert [propose["model"], first["model"], second["model"], finish["model"]] == [
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-mini",
        "gpt-4.1",
    ]
    # The plan streams, strict: arguments travel as JSON text, so every object can be closed.
    assert propose["stream"] is True
    assert propose["text"]["format"]["type"] == "json_schema"
    assert propose["text"]["format"]["strict"] is True
    assert propose["text"]["format"]["schema"]["$defs"]["step"]["additionalProperties"] is False
    # The executor is offered the tool, then sees its own call and the result.
    assert [t["name"] for t in first["tools"]] == ["population"]
    assert first["tools"][0]["parameters"]["properties"]["city"]["type"] == "string"
    assert "text" not in first
    own_call, result_item = second["input"][-2:]
    assert own_call["type"] == "function_call"
    assert (own_call["call_id"], own_call["name"]) == ("call_9", "population")
    assert json.loads(own_call["arguments"]) == {"city": "paris"}
    assert result_item == {"type": "function_call_output", "call_id": "call_9", "output": "2"}
    # The final answer is asked for with the plan's schema, and the run's cache key.
    assert finish.get("stream") is not True
    assert finish["text"] == propose["text"]
    assert finish["input"][:3] == propose["input"][:3]
    assert propose["prompt_cache_key"] == finish["prompt_cache_key"]
    assert propose["prompt_cache_key"].startswith("planexec/planner/")

    assert result.usage.requests == 4
    assert result.usage.input_tokens == 200 + 12 + 80 + 300
    assert result.cost > 0


async def test_malformed_plan_json_is_repaired(
    server: FakeServer, models: tuple[OpenAIResponsesModel, OpenAIResponsesModel]
) -> None:
    planner, _ = models
    server.reply(
        text_stream('{"reason": "look up", "steps": [{"id": "paris", "tool": ', '"population", '),
        streamed_json(tool_plan("paris", "rome")),
        said('{"answer": "5 million together"}'),
    )
    result = await Agent(planner, tools=[population], budget=SAFETY).run("Paris and Rome together?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "5 million together"
    assert result.outputs == {"paris": 2, "rome": 3}
    assert len(server.requests) == 3
    *_, sent_back, problems = body(server.requests[1])["input"]
    assert sent_back["role"] == "assistant"
    assert sent_back["content"].startswith('{"reason": "look up"')
    assert problems["role"] == "user"
    assert "not valid JSON" in problems["content"]
    [rejected] = events_of(result, PlannerOutputRejected)
    assert rejected.problems[0].code == "invalid_json"
    assert [e.step.id for e in events_of(result, StepStreamed)] == ["paris", "rome"]


async def test_a_streamed_plan_retried_after_a_rate_limit_logs_the_failed_attempt(
    server: FakeServer, models: tuple[OpenAIResponsesModel, OpenAIResponsesModel]
) -> None:
    planner, _ = models
    server.reply(
        error(429, "Rate limit reached", {"retry-after": "0"}),
        streamed_json(tool_plan("rome")),
        said('{"answer": "3 million"}'),
    )
    result = await Agent(planner, tools=[population], budget=SAFETY).run("How big is Rome?")

    assert result.stop.kind == "goal_met", result.stop
    [failed] = events_of(result, ModelAttemptFailed)
    assert (failed.attempt, failed.status, failed.purpose, failed.model) == (
        1,
        429,
        "planner.propose",
        "openai-responses:gpt-4.1",
    )
    assert result.usage.failed_requests == 1
    assert len(server.requests) == 3


async def test_a_refusal_goes_back_to_the_planner(
    server: FakeServer, models: tuple[OpenAIResponsesModel, OpenAIResponsesModel]
) -> None:
    planner, _ = models
    refused = Sse(
        [
            event("response.refusal.delta", output_index=0, content_index=0, item_id="m", delta="I can't help."),
            completed(message(refusal("I can't help."))),
        ]
    )
    server.reply(refused, streamed_json(tool_plan("rome")), said('{"answer": "3 million"}'))
    result = await Agent(planner, tools=[population], budget=SAFETY).run("How big is Rome?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "3 million"
    last = body(server.requests[1])["input"][-1]
    assert last["role"] == "user"
    assert "the model refused: I can't help." in last["content"]


async def test_step_one_runs_while_the_stream_is_still_sending_step_five(
    server: FakeServer, models: tuple[OpenAIResponsesModel, OpenAIResponsesModel]
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
    plan = json.dumps({"reason": "five steps", "steps": steps})
    cut = plan.index(json.dumps(steps[0])) + len(json.dumps(steps[0]))
    # the rest of the plan (steps 2 to 5) is sent only once step 1's tool has started
    server.reply(Sse([created(), delta(plan[:cut]), delta(plan[cut:], wait=first_started), completed()]))
    server.reply(said(json.dumps({"answer": "all five done"})))
    result = await Agent(Planner(model=planner), tools=[work], store=None, budget=SAFETY).run("do five things")

    assert result.stop.kind == "goal_met", result.stop
    assert events_of(result, StepStreamed)[0].step.id == "s1"
    kinds = [e.kind for e in result.events]
    assert kinds.index("step_started") < kinds.index("model_called")  # step 1 ran before the plan was complete
    assert sorted(seen) == ["s1", "s2", "s3", "s4", "s5"]


async def test_role_settings_on_the_wire_and_what_a_model_drops_in_the_log(server: FakeServer) -> None:
    fast = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01)
    url = server.url + "/v1"
    planner = OpenAIResponsesModel("o3", api_key="sk-test", base_url=url, retry=fast)
    executor = OpenAIResponsesModel("gpt-4.1-mini", api_key="sk-test", base_url=url, retry=fast)
    planning = ModelSettings(temperature=0.2, reasoning_effort="high", max_tokens=4000)
    executing = ModelSettings(temperature=0.7, stop=("END",), max_tokens=300)
    step = {"id": "m1", "description": "say how many live in Paris"}
    server.reply(
        streamed_json({"steps": [step]}),
        said("About 2 million."),
        answer(REASONING, message(text('{"answer": "about 2 million"}')), usage=(500, 900, 0, 850)),
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
        assert (sent["model"], sent["reasoning"], sent["max_output_tokens"]) == ("o3", {"effort": "high"}, 4000)
        assert "temperature" not in sent
    assert (execute["temperature"], execute["max_output_tokens"]) == (0.7, 300)
    assert "stop" not in execute
    assert "reasoning" not in execute
    assert result.usage.reasoning_tokens == 850

    [started] = events_of(result, RunStarted)
    assert list(started.config["planner"]["dropped_settings"]) == ["temperature"]
    assert list(started.config["model_executors"]["model"]["dropped_settings"]) == ["stop"]
