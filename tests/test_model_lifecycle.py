"""A model's HTTP clients over its life: one per event loop, closed inside that loop when the loop
ends or when the model is closed (``aclose`` or ``async with``), for every adapter — no transport
left unclosed, no "Event loop is closed" when a program calls ``asyncio.run`` more than once."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator

import pytest

from planexec.models import AnthropicModel, Message, ModelRequest, ModelRetryPolicy, OpenAIModel, allow_model_requests
from tests.http_fake import FakeServer, Json, serve
from tests.test_model_openai import completion

FAST = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01, jitter=0)
server = pytest.fixture(serve)
REQUEST = ModelRequest(messages=(Message(role="user", content="hi"),))


@pytest.fixture(autouse=True)
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


def _anthropic_reply(text: str) -> Json:
    return Json(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    )


def _model(adapter: str, server: FakeServer) -> AnthropicModel | OpenAIModel:
    if adapter == "openai":
        return OpenAIModel("gpt-4o-mini", base_url=server.url + "/v1", api_key="sk-test", retry=FAST)
    return AnthropicModel("claude-test", base_url=server.url, api_key="k-test", retry=FAST)


def _reply(adapter: str, text: str) -> Json:
    return completion(text) if adapter == "openai" else _anthropic_reply(text)


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
def test_one_model_in_several_event_loops_leaves_nothing_open(server: FakeServer, adapter: str) -> None:
    model = _model(adapter, server)
    server.reply(*(_reply(adapter, f"answer {n}") for n in range(3)))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        answers = [asyncio.run(model.request(REQUEST)).text for _ in range(3)]
        gc.collect()
    assert answers == ["answer 0", "answer 1", "answer 2"]
    leaks = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert leaks == []


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
def test_closing_a_model_closes_its_client_and_it_opens_a_new_one_when_asked_again(
    server: FakeServer, adapter: str
) -> None:
    server.reply(_reply(adapter, "one"), _reply(adapter, "two"))

    async def main() -> list[str]:
        async with _model(adapter, server) as model:
            first = (await model.request(REQUEST)).text
            client = await model._sdk() if isinstance(model, OpenAIModel) else await model._client()
        assert client.is_closed()
        second = (await model.request(REQUEST)).text  # a closed model opens a fresh client
        await model.aclose()
        return [first, second]

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert asyncio.run(main()) == ["one", "two"]
        gc.collect()
    assert [w for w in seen if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize(
    ("adapter", "body", "key_env"),
    [
        (
            "openai",
            {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
            "OPENAI_API_KEY",
        ),
        (
            "anthropic",
            {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
            "ANTHROPIC_API_KEY",
        ),
    ],
)
@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_says_the_same_for_every_provider(
    server: FakeServer, adapter: str, body: dict[str, object], key_env: str, status: int
) -> None:
    from planexec.models import ModelCallError

    server.reply(Json(body, status=status))
    model = _model(adapter, server)
    try:
        with pytest.raises(ModelCallError) as info:
            await model.request(REQUEST)
    finally:
        await model.aclose()
    message = str(info.value)
    assert message.startswith(f"{model.name} answered {status}")
    assert message.endswith(f"the server refused the API key: check the API key in {key_env}")
    assert (info.value.status, info.value.retryable) == (status, False)
    assert len(server.requests) == 1
