"""The OpenAI adapter on the wire: the official SDK inside it talks to a scripted server on 127.0.0.1.

Each test checks the request the SDK sent (path, model, messages, tools, response format, streaming
options) and answers in the chat completions formats (JSON, or server-sent ``data:`` chunks ending
with ``data: [DONE]``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from planexec import UsageError
from planexec.models import (
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    ModelSettings,
    NotSupported,
    OpenAIModel,
    OutputSpec,
    StreamDelta,
    StreamingModel,
    ToolCall,
    ToolSpec,
    Usage,
    allow_model_requests,
    cost_of,
    estimate_tokens,
    price_for,
    resolve_model,
    unsupported_settings,
)
from planexec.models._profiles import COMPATIBLE, ModelProfile
from tests.http_fake import Event, FakeServer, Json, Raw, Recorded, Sse, serve

FAST = ModelRetryPolicy(max_attempts=3, initial_delay=0, max_delay=0.01, jitter=0)

server = pytest.fixture(serve)


@pytest.fixture(autouse=True)
def allow_requests() -> Iterator[None]:
    """Real model requests are blocked in the suite (conftest.py); these go to 127.0.0.1 only."""
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


Make = Callable[..., OpenAIModel]


@pytest.fixture
async def make(server: FakeServer) -> AsyncIterator[Make]:
    """Build models that talk to the fake server, and close their clients afterwards."""
    built: list[OpenAIModel] = []

    def build(model: str = "gpt-4o-mini", **options: Any) -> OpenAIModel:
        options.setdefault("api_key", "sk-test")
        options.setdefault("base_url", server.url + "/v1")
        options.setdefault("retry", FAST)
        built.append(OpenAIModel(model, **options))
        return built[-1]

    yield build
    for model in built:
        await model.aclose()


# -- the provider's formats --------------------------------------------------------------------


def completion(
    content: str | None = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    refusal: str | None = None,
    finish: str = "stop",
    usage: tuple[int, int, int] | None = (12, 5, 0),
    model: str = "gpt-4o-mini-2024-07-18",
) -> Json:
    """A chat completion: one choice, and usage as (prompt, completion, cached prompt) tokens."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if usage is not None:
        body["usage"] = usage_body(*usage)
    return Json(body)


def usage_body(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chunk(delta: dict[str, Any], finish: str | None = None, *, wait: threading.Event | None = None) -> Event:
    body = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return Event(body, wait=wait)


def usage_chunk(prompt: int, completion: int, cached: int = 0) -> Event:
    body = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [],
        "usage": usage_body(prompt, completion, cached),
    }
    return Event(body)


DONE = Event("[DONE]")


def text_stream(*pieces: str, usage: tuple[int, int] = (9, 4)) -> Sse:
    """A streamed text answer: one chunk per piece, then usage, then [DONE]."""
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": p}) for p in pieces]
    return Sse([*events, chunk({}, "stop"), usage_chunk(*usage), DONE])


def error(status: int, message: str, headers: dict[str, str] | None = None, code: str | None = None) -> Json:
    return Json({"error": {"message": message, "type": "test", "code": code}}, status=status, headers=headers or {})


def ask(text: str = "hello", *, output: OutputSpec | None = None, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="system", content="be brief"), Message(role="user", content=text)),
        output=output,
        tools=tools,
    )


ANSWER = OutputSpec(
    name="final answer",
    json_schema={
        "type": "object",
        "title": "FinalAnswer",
        "properties": {"answer": {"type": "string"}, "sources": {"type": "array", "items": {"type": "string"}}},
        "required": ["answer"],
    },
)
SEARCH = ToolSpec(
    name="search",
    description="Search the web.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


def body(recorded: Recorded) -> dict[str, Any]:
    assert isinstance(recorded.body, dict)
    return recorded.body


# -- requests and plain answers ----------------------------------------------------------------


async def test_messages_tools_and_settings_on_the_wire(server: FakeServer, make: Make) -> None:
    server.reply(completion("Paris has about 2 million people.", usage=(120, 9, 64)))
    model = make()
    assert isinstance(model, StreamingModel)
    assert model.name == "openai:gpt-4o-mini"
    request = ModelRequest(
        messages=(
            Message(role="system", content="You research."),
            Message(role="user", content="How many people live in Paris?"),
            Message(
                role="assistant",
                content="",
                tool_calls=(ToolCall(id="call_a", name="search", arguments={"q": "paris population"}),),
            ),
            Message(role="tool", content='["2.1 million"]', tool_call_id="call_a"),
        ),
        tools=(SEARCH,),
        settings=ModelSettings(temperature=0.2, max_tokens=300, timeout=5.0),
    )
    response = await model.request(request)

    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    wire = body(sent)
    assert wire["model"] == "gpt-4o-mini"
    assert wire["messages"] == [
        {"role": "system", "content": "You research."},
        {"role": "user", "content": "How many people live in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "paris population"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '["2.1 million"]'},
    ]
    assert wire["tools"] == [
        {
            "type": "function",
            "function": {"name": "search", "description": "Search the web.", "parameters": dict(SEARCH.parameters)},
        }
    ]
    assert wire["temperature"] == 0.2
    assert wire["max_completion_tokens"] == 300
    assert "max_tokens" not in wire
    assert "stream" not in wire
    assert "response_format" not in wire

    assert response.text == "Paris has about 2 million people."
    assert response.tool_calls == ()
    assert response.parsed is None
    assert response.finish_reason == "stop"
    assert response.refusal is None
    assert response.model == "gpt-4o-mini-2024-07-18"
    assert response.usage == Usage(input_tokens=120, output_tokens=9, cached_input_tokens=64, requests=1)
    assert response.cost == cost_of(response.usage, price_for("gpt-4o-mini"))
    assert response.cost == pytest.approx((56 * 0.15 + 64 * 0.075 + 9 * 0.60) / 1e6)


async def test_structured_output_is_strict_json_schema(server: FakeServer, make: Make) -> None:
    server.reply(completion('{"answer": "42", "sources": []}'))
    response = await make().request(ask(output=ANSWER))

    assert body(server.requests[0])["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "final_answer",
            "strict": True,
            "schema": {
                "type": "object",
                "title": "FinalAnswer",
                "properties": {"answer": {"type": "string"}, "sources": {"type": "array", "items": {"type": "string"}}},
                "required": ["answer", "sources"],
                "additionalProperties": False,
            },
        },
    }
    assert response.parsed == {"answer": "42", "sources": []}


async def test_a_schema_strict_mode_cannot_take_is_sent_non_strict(server: FakeServer, make: Make) -> None:
    free_form = {"type": "object", "properties": {"args": {"type": "object", "additionalProperties": True}}}
    server.reply(completion('{"args": {"x": 1}}'))
    response = await make().request(ask(output=OutputSpec(name="call", json_schema=free_form)))

    fmt = body(server.requests[0])["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "call", "schema": free_form, "strict": False}}
    assert response.parsed == {"args": {"x": 1}}


async def test_unparsable_structured_output_leaves_parsed_empty(server: FakeServer, make: Make) -> None:
    server.reply(completion('{"answer": "4'), completion('```json\n{"answer": "4"}\n```'))
    model = make()
    broken = await model.request(ask(output=ANSWER))
    assert (broken.text, broken.parsed) == ('{"answer": "4', None)
    fenced = await model.request(ask(output=ANSWER))
    assert fenced.parsed == {"answer": "4"}


async def test_a_compatible_server_gets_json_mode_and_max_tokens(server: FakeServer, make: Make) -> None:
    server.reply(completion('{"answer": "hi"}', usage=None, model="qwen2.5"))
    model = make("qwen2.5", provider="ollama", api_key=None, api_key_env=None)
    assert model.profile == COMPATIBLE
    request = ModelRequest(
        messages=(Message(role="system", content="be brief"), Message(role="user", content="hello")),
        output=ANSWER,
        settings=ModelSettings(max_tokens=50),
    )
    response = await model.request(request)

    sent = server.requests[0]
    wire = body(sent)
    assert sent.headers["authorization"] == "Bearer unused"
    assert wire["response_format"] == {"type": "json_object"}
    assert wire["max_tokens"] == 50
    assert "max_completion_tokens" not in wire
    system = wire["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("be brief\n\nReply with one JSON object")
    assert json.dumps(ANSWER.json_schema, separators=(",", ":")) in system["content"]
    assert wire["messages"][1] == {"role": "user", "content": "hello"}

    assert response.parsed == {"answer": "hi"}
    assert response.cost is None  # local models are not priced
    assert response.usage.requests == 1
    assert response.usage.input_tokens > 0  # estimated: the server reported none
    assert response.usage.output_tokens > 0


async def test_lm_studio_gets_a_non_strict_schema_not_json_mode(server: FakeServer, make: Make) -> None:
    server.reply(completion('{"answer": "hi"}'))
    await make("qwen2.5-7b-instruct", provider="lmstudio", api_key_env=None).request(ask(output=ANSWER))
    fmt = body(server.requests[0])["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is False


async def test_a_profile_without_tools_refuses_them_before_sending(server: FakeServer, make: Make) -> None:
    model = make("tiny", provider="vllm", profile=ModelProfile(tools=False, max_tokens_param="max_tokens"))
    with pytest.raises(NotSupported, match="tool calling is not supported by vllm:tiny"):
        await model.request(ask(tools=(SEARCH,)))
    assert server.requests == []


# -- settings ----------------------------------------------------------------------------------

EVERY_SETTING = ModelSettings(
    temperature=0.4,
    max_tokens=321,
    top_p=0.8,
    stop=("END", "STOP"),
    seed=42,
    reasoning_effort="low",
    extra={"service_tier": "flex", "metadata": {"team": "ops"}},
    timeout=7.5,
)


def settled(settings: ModelSettings) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content="hi"),), settings=settings)


@pytest.mark.parametrize("streamed", [False, True], ids=["request", "stream"])
async def test_every_setting_a_chat_model_takes_goes_on_the_wire(
    server: FakeServer, make: Make, streamed: bool
) -> None:
    server.reply(text_stream("ok") if streamed else completion("ok"))
    model = make("gpt-4o-mini")
    if streamed:
        [*_, last] = [item async for item in model.stream(settled(EVERY_SETTING))]
        assert isinstance(last, ModelResponse)
    else:
        await model.request(settled(EVERY_SETTING))

    wire = body(server.requests[0])
    assert wire["temperature"] == 0.4
    assert wire["top_p"] == 0.8
    assert wire["stop"] == ["END", "STOP"]
    assert wire["seed"] == 42
    assert wire["max_completion_tokens"] == 321
    assert "max_tokens" not in wire
    assert wire["service_tier"] == "flex"
    assert wire["metadata"] == {"team": "ops"}
    assert server.requests[0].headers["x-stainless-read-timeout"] == "7.5"
    # gpt-4o is no reasoning model: the effort is not sent, and the model says so
    assert "reasoning_effort" not in wire
    assert list(model.unsupported_settings(EVERY_SETTING)) == ["reasoning_effort"]


@pytest.mark.parametrize("streamed", [False, True], ids=["request", "stream"])
async def test_the_cache_key_goes_to_openai_and_not_to_a_compatible_server(
    server: FakeServer, make: Make, streamed: bool
) -> None:
    keyed = ModelRequest(messages=(Message(role="user", content="hi"),), cache_key="planexec/r1/planner")
    for model in (make("gpt-4o"), make("llama3", provider="vllm")):
        server.reply(text_stream("ok") if streamed else completion("ok"))
        if streamed:
            _ = [item async for item in model.stream(keyed)]
        else:
            await model.request(keyed)
    openai_body, vllm_body = (body(r) for r in server.requests)
    assert openai_body["prompt_cache_key"] == "planexec/r1/planner"
    assert "prompt_cache_key" not in vllm_body  # an unknown field some servers refuse


async def test_a_reasoning_model_gets_its_effort_and_no_sampling_settings(server: FakeServer, make: Make) -> None:
    server.reply(completion("ok"))
    model = make("o4-mini")
    await model.request(settled(EVERY_SETTING))

    wire = body(server.requests[0])
    assert wire["reasoning_effort"] == "low"
    assert wire["max_completion_tokens"] == 321
    assert wire["seed"] == 42
    for dropped in ("temperature", "top_p", "stop"):
        assert dropped not in wire
    unsupported = model.unsupported_settings(EVERY_SETTING)
    assert sorted(unsupported) == ["stop", "temperature", "top_p"]
    assert "openai:o4-mini does not take temperature" in unsupported["temperature"]


async def test_a_compatible_server_gets_max_tokens_and_extras_force_what_the_profile_drops(
    server: FakeServer, make: Make
) -> None:
    server.reply(completion("ok", usage=None))
    model = make("qwen3", provider="vllm", api_key=None)
    settings = ModelSettings(max_tokens=64, seed=1, stop=("\n\n",), reasoning_effort="high", extra={"top_k": 20})
    assert list(model.unsupported_settings(settings)) == ["reasoning_effort"]
    await model.request(settled(settings))

    wire = body(server.requests[0])
    assert (wire["max_tokens"], wire["seed"], wire["stop"], wire["top_k"]) == (64, 1, ["\n\n"], 20)
    assert "max_completion_tokens" not in wire
    assert "reasoning_effort" not in wire

    server.reply(completion("ok", usage=None))
    await model.request(settled(ModelSettings(extra={"reasoning_effort": "high"})))
    assert body(server.requests[1])["reasoning_effort"] == "high"


async def test_extras_win_over_the_settings_planexec_sends(server: FakeServer, make: Make) -> None:
    server.reply(completion("ok"))
    await make().request(settled(ModelSettings(temperature=0.2, extra={"temperature": 1.0})))
    assert body(server.requests[0])["temperature"] == 1.0


async def test_a_profile_that_takes_no_seed_drops_it(server: FakeServer, make: Make) -> None:
    server.reply(completion("ok"))
    model = make("tiny", provider="llamacpp", profile=ModelProfile(seed=False, max_tokens_param="max_tokens"))
    await model.request(settled(ModelSettings(seed=3, temperature=0.0)))
    wire = body(server.requests[0])
    assert "seed" not in wire
    assert wire["temperature"] == 0.0
    assert list(model.unsupported_settings(ModelSettings(seed=3))) == ["seed"]


def test_a_fallback_list_names_what_any_of_its_models_would_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    fallback = resolve_model("openai:gpt-4o | openai:o3")
    dropped = unsupported_settings(fallback, ModelSettings(temperature=0.1, reasoning_effort="high"))
    assert dropped["temperature"].startswith("openai:o3 does not take temperature")
    assert dropped["reasoning_effort"].startswith("openai:gpt-4o does not take reasoning_effort")


def test_unset_settings_are_never_reported_as_dropped() -> None:
    model = OpenAIModel("o3", api_key="sk-test")
    assert model.unsupported_settings(ModelSettings(max_tokens=10, reasoning_effort="high")) == {}


# -- tool calls --------------------------------------------------------------------------------


async def test_empty_tool_arguments_mean_an_empty_object(server: FakeServer, make: Make) -> None:
    server.reply(completion(None, tool_calls=[function_call("call_2", "search", "")], finish="tool_calls"))
    response = await make().request(ask(tools=(SEARCH,)))
    assert response.tool_calls == (ToolCall(id="call_2", name="search", arguments={}),)


async def test_tool_calls_after_a_stop_finish_still_count_as_tool_calls(server: FakeServer, make: Make) -> None:
    server.reply(completion("", tool_calls=[function_call("c", "search", '{"q": "x"}')], finish="stop"))
    response = await make("llama3.1", provider="ollama", api_key_env=None).request(ask(tools=(SEARCH,)))
    assert response.finish_reason == "tool_calls"


# -- streaming ---------------------------------------------------------------------------------


async def test_streamed_structured_output_is_parsed_at_the_end(server: FakeServer, make: Make) -> None:
    server.reply(text_stream('{"answer": ', '"42", "sources": []}'))
    items = [item async for item in make().stream(ask(output=ANSWER))]
    assert [i.text for i in items if isinstance(i, StreamDelta)] == ['{"answer": ', '"42", "sources": []}']
    last = items[-1]
    assert isinstance(last, ModelResponse)
    assert last.parsed == {"answer": "42", "sources": []}
    assert body(server.requests[0])["response_format"]["json_schema"]["strict"] is True


async def test_a_compatible_server_without_streamed_usage(server: FakeServer, make: Make) -> None:
    server.reply(Sse([chunk({"content": "hi"}), chunk({}, "stop"), DONE]))
    model = make("m", provider="llamacpp", profile=ModelProfile(streaming_usage=False, max_tokens_param="max_tokens"))
    items = [item async for item in model.stream(ask())]
    assert "stream_options" not in body(server.requests[0])
    last = items[-1]
    assert isinstance(last, ModelResponse)
    sent = json.dumps([body(server.requests[0])["messages"]], ensure_ascii=False)
    assert last.usage == Usage(input_tokens=estimate_tokens(sent), output_tokens=1, requests=1)  # none was streamed


# -- failures and retries ----------------------------------------------------------------------


async def test_exhausted_quota_is_not_retried(server: FakeServer, make: Make) -> None:
    server.reply(error(429, "You exceeded your current quota", code="insufficient_quota"))
    with pytest.raises(ModelCallError) as info:
        await make().request(ask())
    assert not info.value.retryable
    assert len(server.requests) == 1


# -- refusals ----------------------------------------------------------------------------------


async def test_a_content_filter_stop_reads_as_a_refusal(server: FakeServer, make: Make) -> None:
    server.reply(completion("", finish="content_filter"))
    response = await make().request(ask())
    assert response.finish_reason == "refusal"
    assert response.refusal is not None
    assert "content filter" in response.refusal


# -- keys and the switch that blocks real requests ----------------------------------------------


async def test_a_missing_key_names_the_variable(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model is built without its key (as an Anthropic model is); a request without one is refused."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIModel("gpt-4o-mini", base_url=server.url + "/v1")
    assert [p.message for p in model.missing_keys()] == ["OPENAI_API_KEY is not set: set it, or pass api_key="]
    with pytest.raises(UsageError, match="OPENAI_API_KEY is not set"):
        await model.request(ask())
    gateway = OpenAIModel(
        "m", provider="gateway", base_url=server.url + "/v1", api_key_env="MY_GATEWAY_KEY", require_key=True
    )
    with pytest.raises(UsageError, match="MY_GATEWAY_KEY is not set"):
        await gateway.request(ask())
    assert server.requests == []


async def test_the_key_comes_from_the_environment(
    server: FakeServer, make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.reply(completion("ok"))
    await make(api_key=None).request(ask())
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (Json("just a string"), "a body that is not a chat completion"),
        (Json({"choices": "none"}), "a body that is not a chat completion"),
        (Json({"choices": [{"index": 0}]}), "a body that is not a chat completion"),
        (Raw(b"{not json"), "a body that is not JSON"),
    ],
    ids=["string", "choices-not-a-list", "choice-without-message", "not-json"],
)
async def test_a_body_that_is_not_a_completion_is_a_typed_error(
    server: FakeServer, make: Make, reply: Json | Raw, said: str
) -> None:
    server.reply(reply)
    with pytest.raises(ModelCallError) as info:
        await make().request(ask())
    assert said in str(info.value)
    assert not info.value.retryable
    assert len(server.requests) == 1
