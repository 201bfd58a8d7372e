"""Provider limits on the wire: a stream holds its provider's concurrency slot from its request to
its last chunk, for every adapter, so that a server never sees more streams at once than the limit
says (a local GPU server depends on it)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from planexec.models import (
    AnthropicModel,
    Message,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    OpenAIModel,
    ProviderLimits,
    Providers,
    StreamingModel,
    allow_model_requests,
    use_providers,
)
from tests.http_fake import Event, FakeServer, Sse, serve
from tests.test_model_anthropic import stream_events
from tests.test_model_openai import DONE, chunk, usage_chunk

FAST = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01, jitter=0)
server = pytest.fixture(serve)
STREAMS = 7
LIMIT = 3


@pytest.fixture(autouse=True)
def live(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


def _openai_stream(gate: threading.Event) -> Sse:
    """A text answer whose first piece comes at once and whose rest waits for ``gate``."""
    return Sse(
        [
            chunk({"role": "assistant", "content": "first "}),
            chunk({"content": "rest"}, wait=gate),
            chunk({}, "stop"),
            usage_chunk(9, 4),
            DONE,
        ]
    )


def _anthropic_stream(gate: threading.Event) -> Sse:
    body: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "first rest"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 9, "output_tokens": 4},
    }
    events = stream_events(body, size=6)
    first_delta = next(
        i for i, e in enumerate(events) if isinstance(e.data, dict) and e.data["type"] == "content_block_delta"
    )
    held = events[first_delta + 1]
    events[first_delta + 1] = Event(held.data, name=held.name, wait=gate)
    return Sse(events)


def _model(adapter: str, server: FakeServer) -> StreamingModel:
    if adapter == "openai":
        return OpenAIModel("gpt-4o-mini", base_url=server.url + "/v1", api_key="sk-test", retry=FAST)
    return AnthropicModel("claude-test", base_url=server.url, api_key="k-test", retry=FAST)


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_a_stream_holds_its_slot_until_its_last_chunk(server: FakeServer, adapter: str) -> None:
    gate = threading.Event()
    server.reply(*[(_openai_stream if adapter == "openai" else _anthropic_stream)(gate) for _ in range(STREAMS)])
    model = _model(adapter, server)
    key: str = model.limits_key  # type: ignore[attr-defined]
    providers = Providers.default().with_limits(key, ProviderLimits(max_concurrency=LIMIT))
    request = ModelRequest(messages=(Message(role="user", content="go"),))
    texts: list[str] = []

    async def one() -> None:
        with use_providers(providers):
            async for item in model.stream(request):
                if isinstance(item, ModelResponse):
                    texts.append(item.text)

    tasks = [asyncio.create_task(one()) for _ in range(STREAMS)]
    try:
        for _ in range(500):  # until the first streams are open (5 s at most)
            if len(server.requests) >= LIMIT:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # time enough for more requests, were the slots given back early
        assert len(server.requests) == LIMIT, "more streams were opened than the limit allows"
        assert server.open_streams == LIMIT
    finally:
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
        await model.aclose()  # type: ignore[attr-defined]
    assert len(server.requests) == STREAMS
    assert server.most_open_streams == LIMIT
    assert texts == ["first rest"] * STREAMS


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_a_stream_given_up_early_gives_its_slot_back(server: FakeServer, adapter: str) -> None:
    """A caller that stops reading after the first piece closes the stream: the next call starts."""
    gate = threading.Event()
    server.reply(*[(_openai_stream if adapter == "openai" else _anthropic_stream)(gate) for _ in range(2)])
    model = _model(adapter, server)
    key: str = model.limits_key  # type: ignore[attr-defined]
    providers = Providers.default().with_limits(key, ProviderLimits(max_concurrency=1))
    request = ModelRequest(messages=(Message(role="user", content="go"),))
    try:
        with use_providers(providers):
            for _ in range(2):
                stream = model.stream(request)
                async for _item in stream:
                    break
                await stream.aclose()  # type: ignore[attr-defined]
        assert len(server.requests) == 2
    finally:
        gate.set()
        await model.aclose()  # type: ignore[attr-defined]
