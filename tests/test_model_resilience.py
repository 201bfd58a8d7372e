"""Resilience for provider calls: retries, Retry-After, per-provider limits, fallbacks; prices."""

from __future__ import annotations

import asyncio
import random

import pytest

from planexec import UsageError
from planexec.models import (
    FallbackModel,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    Price,
    ProviderLimits,
    Providers,
    StreamDelta,
    StreamingScriptedModel,
    Usage,
    call_with_retries,
    cost_of,
    price_for,
    resolve_model,
    use_providers,
)
from planexec.testing import ScriptedModel

REQUEST = ModelRequest(messages=(Message(role="user", content="hi"),))


def failing(n: int, **error: object) -> tuple[list[int], object]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= n:
            raise ModelCallError("busy", provider="p", **error)  # type: ignore[arg-type]
        return "ok"

    return calls, call


async def test_retryable_errors_are_retried_with_the_delays_the_policy_and_the_provider_ask_for() -> None:
    calls, call = failing(2, retryable=True, retry_after=3.0)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    policy = ModelRetryPolicy(max_attempts=4, initial_delay=0.5, jitter=0, max_delay=10)
    assert await call_with_retries("p", call, policy, sleep=sleep, rng=random.Random(1)) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 3
    assert waits == [3.0, 3.0]  # Retry-After (3 s) is longer than the backoff (0.5, 1.0)


async def test_backoff_grows_and_is_capped_and_attempts_run_out() -> None:
    calls, call = failing(10, retryable=True)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    policy = ModelRetryPolicy(max_attempts=4, initial_delay=1, multiplier=3, max_delay=5, jitter=0)
    with pytest.raises(ModelCallError):
        await call_with_retries("p", call, policy, sleep=sleep)  # type: ignore[arg-type]
    assert len(calls) == 4
    assert waits == [1, 3, 5]


async def test_errors_that_will_not_go_away_are_not_retried() -> None:
    calls, call = failing(1, retryable=False, status=401)
    with pytest.raises(ModelCallError) as caught:
        await call_with_retries("p", call, ModelRetryPolicy())  # type: ignore[arg-type]
    assert caught.value.status == 401
    assert len(calls) == 1


async def test_a_provider_concurrency_limit_is_shared_by_every_caller() -> None:
    providers = Providers.default().with_limits("limited-provider", ProviderLimits(max_concurrency=2))
    running = 0
    peak = 0
    release = asyncio.Event()

    async def call() -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return 1

    with use_providers(providers):  # the tasks made here keep to these providers' limits
        tasks = [asyncio.create_task(call_with_retries("limited-provider", call, ModelRetryPolicy())) for _ in range(5)]
    for _ in range(20):  # let every task get as far as it can
        await asyncio.sleep(0)
    assert running == 2
    release.set()
    assert sum(await asyncio.gather(*tasks)) == 5
    assert peak == 2
    assert providers.limits_for("limited-provider").max_concurrency == 2


async def test_a_fallback_list_asks_the_next_model_when_one_fails() -> None:
    down = ScriptedModel([ModelCallError("down", provider="a", retryable=False)], name="a")
    up = ScriptedModel(["fine"], name="b")
    model = FallbackModel([down, up])
    response = await model.request(REQUEST)
    assert response.text == "fine"
    assert model.name == "a > b"
    busy = ModelCallError("x", provider="a", retryable=True)
    both_down = FallbackModel([ScriptedModel([busy] * 4, name="a")])  # retried as a provider's 429: 4 attempts
    with pytest.raises(ModelCallError, match="every model in the fallback list failed"):
        await both_down.request(REQUEST)


async def test_a_fallback_list_streams_from_the_first_model_that_answers() -> None:
    down = ScriptedModel([ModelCallError("down", provider="a", retryable=False)], name="a")
    up = StreamingScriptedModel(['{"x": 1}'], chunks=2, name="b")
    items = [item async for item in FallbackModel([down, up]).stream(REQUEST)]
    assert "".join(i.text for i in items if isinstance(i, StreamDelta)) == '{"x": 1}'
    assert isinstance(items[-1], ModelResponse)


def test_model_strings_joined_by_a_bar_are_a_fallback_list() -> None:
    model = resolve_model("ollama:qwen2.5 | vllm:llama-3")
    assert isinstance(model, FallbackModel)
    assert len(model.models) == 2
    with pytest.raises(UsageError, match="fallback list"):
        resolve_model("ollama:qwen2.5 | nope:x")


def test_prices_match_model_families_and_can_be_overridden() -> None:
    assert price_for("gpt-4o-mini") == price_for("openai:gpt-4o-mini-2024-07-18")
    assert price_for("claude-sonnet-4-20250514") == price_for("claude-sonnet-4")
    assert price_for("some-local-model") is None
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cached_input_tokens=500_000)
    assert cost_of(usage, Price(input=2.0, output=8.0, cached_input=0.5)) == pytest.approx(1.0 + 0.25 + 8.0)
    assert cost_of(usage, None) is None
    priced = Providers.default().with_price("some-local-model", Price(input=0.1, output=0.2))
    assert priced.price_for("some-local-model-7b") == Price(input=0.1, output=0.2)
    assert price_for("some-local-model-7b") is None  # the built-in table is as it was
    with pytest.raises(UsageError):
        Price(input=-1, output=0)
