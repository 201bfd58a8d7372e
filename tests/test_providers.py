"""Providers: one immutable value for model strings, prices and provider limits, passed explicitly.

Nothing here is process-wide: agents with different values in one process keep to their own, the
default value never changes, and limits hold across event loops.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from planexec import Agent, Budget, Planner, UsageError
from planexec.errors import ModelNotFound
from planexec.log import ModelCalled
from planexec.models import (
    Model,
    ModelRequest,
    ModelRetryPolicy,
    OpenAIModel,
    Price,
    ProviderLimits,
    Providers,
    Usage,
    allow_model_requests,
    call_with_retries,
    cost_of,
    price_for,
    resolve_model,
    use_providers,
)
from planexec.testing import FunctionModel, ScriptedModel
from tests.http_fake import FakeServer, serve
from tests.support import SAFETY, add, events_of, tool_step
from tests.test_model_openai import completion

server = pytest.fixture(serve)

ONE_STEP = {"steps": [tool_step("s1", "add", {"a": 1, "b": 2})]}
DOLLAR_A_TOKEN = Price(input=1_000_000.0, output=1_000_000.0)


def planner_named(name: str) -> ScriptedModel:
    """A planner with no price of its own: what it costs is for the agent's providers to say."""
    return ScriptedModel([ONE_STEP, {"answer": "3"}], name=name)


# -- the value -----------------------------------------------------------------------------------


def test_the_default_holds_the_built_in_providers_prices_and_no_limits() -> None:
    default = Providers.default()
    assert default is Providers.default()
    assert default == Providers()
    assert {"scripted", "object", "openai", "ollama", "vllm", "openai-compatible", "anthropic"} <= set(default.known())
    assert default.price_for("openai:gpt-4o-mini-2024-07-18") == price_for("gpt-4o-mini")
    assert default.limits_for("openai") == ProviderLimits()


def test_with_returns_a_new_value_and_leaves_the_default_as_it_was() -> None:
    default = Providers.default()
    before = (default.known(), default.price_for("house-model"), default.limits_for("house"), hash(default))

    def factory(name: str) -> Model:
        return ScriptedModel(["hi"], name=f"house:{name}")

    changed = (
        default.with_provider("house", factory)
        .with_price("house-model", Price(input=1.0, output=2.0))
        .with_limits("house", ProviderLimits(max_concurrency=3))
    )
    assert changed != default
    assert "house" in changed.known()
    assert changed.price_for("house-model-v2") == Price(input=1.0, output=2.0)
    assert changed.limits_for("house") == ProviderLimits(max_concurrency=3)
    assert (default.known(), default.price_for("house-model"), default.limits_for("house"), hash(default)) == before
    assert Providers.default() == Providers()
    assert "house" not in Providers.default().known()
    with pytest.raises(ModelNotFound, match="unknown model provider 'house'"):
        resolve_model("house:x")
    assert resolve_model("house:x", providers=changed).name == "house:x"


def test_a_price_replaces_a_built_in_one_only_in_the_new_value() -> None:
    cheaper = Providers.default().with_price("gpt-4o", Price(input=0.0, output=0.0))
    assert cheaper.price_for("openai:gpt-4o") == Price(input=0.0, output=0.0)
    assert Providers.default().price_for("openai:gpt-4o") == Price(input=2.50, output=10.0, cached_input=1.25)
    own_server = Providers.default().with_price("ollama:qwen2.5", Price(input=0.1, output=0.2))
    assert own_server.price_for("ollama:qwen2.5") == Price(input=0.1, output=0.2)
    assert own_server.price_for("vllm:qwen2.5") is None  # a key with a provider prices that provider's only


def test_a_providers_value_cannot_be_changed() -> None:
    value = Providers.default().with_limits("p", ProviderLimits(max_concurrency=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        value._limits = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        value._limits["p"] = ProviderLimits()  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProviderLimits(max_concurrency=1).max_concurrency = 2  # type: ignore[misc]
    assert value.limits_for("p") == ProviderLimits(max_concurrency=1)
    assert {value, Providers.default().with_limits("p", ProviderLimits(max_concurrency=1))} == {value}


def test_wrong_input_lists_every_problem_at_once() -> None:
    default = Providers.default()
    with pytest.raises(UsageError) as provider:
        default.with_provider("", "not a function")  # type: ignore[arg-type]
    assert [p.where for p in provider.value.problems] == ["name", "factory"]
    with pytest.raises(UsageError) as separated:
        default.with_provider("a:b", lambda name: ScriptedModel([]))
    assert "':' or '|'" in str(separated.value)
    with pytest.raises(UsageError) as price:
        default.with_price(" m ", {"input": 1})  # type: ignore[arg-type]
    assert [p.where for p in price.value.problems] == ["model", "price"]
    with pytest.raises(UsageError) as limits:
        default.with_limits("", 4)  # type: ignore[arg-type]
    assert [p.where for p in limits.value.problems] == ["provider", "limits"]
    with pytest.raises(UsageError) as negative:
        Price(input=-1.0, output=float("nan"))
    assert [p.where for p in negative.value.problems] == ["input", "output"]
    with pytest.raises(UsageError) as bad_limits:
        ProviderLimits(max_concurrency=0, requests_per_minute=-5)
    assert [p.where for p in bad_limits.value.problems] == ["max_concurrency", "requests_per_minute"]
    with pytest.raises(UsageError, match="providers"):
        Agent(ScriptedModel([]), providers="openai")  # type: ignore[arg-type]
    with pytest.raises(UsageError), use_providers("default"):  # type: ignore[arg-type]
        pass


# -- agents --------------------------------------------------------------------------------------


async def test_two_agents_charge_each_by_its_own_prices() -> None:
    priced = Providers.default().with_price("house-planner", DOLLAR_A_TOKEN)
    paid = await Agent(planner_named("house-planner"), tools=[add], budget=SAFETY, providers=priced, store=None).run(
        "1+2"
    )
    free = await Agent(planner_named("house-planner"), tools=[add], budget=SAFETY, store=None).run("1+2")
    assert paid.stop.kind == free.stop.kind == "goal_met"
    calls = events_of(paid, ModelCalled)
    assert [c.cost for c in calls] == [cost_of(c.usage, DOLLAR_A_TOKEN) for c in calls]
    assert paid.cost == pytest.approx(sum(c.cost for c in calls))
    assert paid.cost > 0
    assert [c.cost for c in events_of(free, ModelCalled)] == [0.0, 0.0]


async def test_the_price_a_call_is_refused_at_is_the_price_it_is_charged_at() -> None:
    """The cost budget is checked before a call at the agent's price, and the call is charged the
    same price after it. Priced by input alone, what a call is charged is what it was checked for:
    a cap between the first call's cost and both calls' lets the first one through, not the second."""
    providers = Providers.default().with_price("house-planner", Price(input=1.0, output=0.0))
    unlimited = Budget(wall_time=30)
    full = await Agent(
        planner_named("house-planner"), tools=[add], budget=unlimited, providers=providers, store=None
    ).run("1+2")
    first, second = (c.cost for c in events_of(full, ModelCalled))
    assert first > 0
    assert second > 0

    planner = planner_named("house-planner")
    cap = Budget(cost=first + second / 2, wall_time=30)
    result = await Agent(planner, tools=[add], budget=cap, providers=providers, store=None).run("1+2")
    assert result.stop.kind == "budget_exhausted", result.stop
    [call] = events_of(result, ModelCalled)
    assert call.cost == call.usage.input_tokens / 1e6  # charged what it was checked for: its input
    assert call.cost == pytest.approx(first, rel=0.05)
    assert len(planner.calls) == 1

    exact = Budget(cost=(first + second) * 1.05, wall_time=30)
    enough = await Agent(
        planner_named("house-planner"), tools=[add], budget=exact, providers=providers, store=None
    ).run("1+2")
    assert enough.stop.kind == "goal_met", enough.stop


async def test_each_agent_resolves_model_strings_through_its_own_providers() -> None:
    made: list[str] = []

    def house(name: str) -> Model:
        made.append(name)
        return ScriptedModel([ONE_STEP, {"answer": "3"}], name=f"house:{name}")

    mine = Providers.default().with_provider("house", house)
    result = await Agent("house:planner", tools=[add], budget=SAFETY, providers=mine, store=None).run("1+2")
    assert result.stop.kind == "goal_met"
    assert made == ["planner"]
    assert events_of(result, ModelCalled)[0].model == "house:planner"
    with pytest.raises(ModelNotFound, match="unknown model provider 'house'"):
        await Agent("house:planner", tools=[add], budget=SAFETY, store=None).run("1+2")
    shared = Planner(model="house:planner")  # one planner, two agents: each run uses its agent's providers
    other = Providers.default().with_provider("house", lambda name: ScriptedModel([], name="other"))
    assert (await Agent(shared, tools=[add], budget=SAFETY, providers=mine, store=None).run("1+2")).answer == "3"
    assert Agent(shared, tools=[add], providers=other, store=None).planner is shared
    assert shared.resolved_model(other).name == "other"
    assert shared.resolved_model(mine).name == "house:planner"


class Counted:
    """A model double whose calls wait for ``gate``: how many are in at once is counted."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.gate = asyncio.Event()

    async def answer(self, request: ModelRequest) -> str:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        return "done"

    async def settle(self, expected: int) -> None:
        """Let every call that can start do so; it must be ``expected`` of them."""
        for _ in range(200):
            await asyncio.sleep(0)
            if self.running >= expected:
                break
        for _ in range(50):  # and no more get in, however long they are given
            await asyncio.sleep(0)
        assert self.running == expected


PARALLEL = {"steps": [{"id": f"m{i}", "description": f"part {i}"} for i in range(5)]}


@pytest.mark.parametrize(("limit", "expected"), [(2, 2), (None, 5)])
async def test_a_provider_limit_holds_an_agents_calls(limit: int | None, expected: int) -> None:
    counted = Counted()
    executor = FunctionModel(counted.answer, name="counted-executor")
    providers = Providers.default()
    if limit is not None:
        providers = providers.with_limits("counted-executor", ProviderLimits(max_concurrency=limit))
    planner = ScriptedModel([PARALLEL, {"answer": "five parts"}])
    agent = Agent(planner, executor=executor, budget=SAFETY, providers=providers, store=None)
    run = agent.start("five parts at once")
    await counted.settle(expected)
    counted.gate.set()
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert counted.peak == expected
    assert len(executor.calls) == 5


async def test_agents_with_different_limits_do_not_share_them() -> None:
    counted = Counted()
    executor = FunctionModel(counted.answer, name="counted-executor")
    one = Providers.default().with_limits("counted-executor", ProviderLimits(max_concurrency=1))
    three = Providers.default().with_limits("counted-executor", ProviderLimits(max_concurrency=3))
    runs = [
        Agent(ScriptedModel([PARALLEL, {"answer": "a"}]), executor=executor, providers=one, store=None).start("a"),
        Agent(ScriptedModel([PARALLEL, {"answer": "b"}]), executor=executor, providers=three, store=None).start("b"),
    ]
    await counted.settle(1 + 3)
    counted.gate.set()
    assert [(await r.result()).stop.kind for r in runs] == ["goal_met", "goal_met"]


def test_limits_hold_across_event_loops() -> None:
    """A limiter is not tied to the loop that first used it: a second ``asyncio.run`` works, and is
    held to the same limit."""
    providers = Providers.default().with_limits("two-loops", ProviderLimits(max_concurrency=1))

    async def burst() -> int:
        counted = Counted()

        async def call() -> str:
            return await counted.answer(ModelRequest(messages=()))

        with use_providers(providers):
            tasks = [asyncio.create_task(call_with_retries("two-loops", call, ModelRetryPolicy())) for _ in range(3)]
        await counted.settle(1)
        counted.gate.set()
        assert await asyncio.gather(*tasks) == ["done"] * 3
        return counted.peak

    assert asyncio.run(burst()) == 1
    assert asyncio.run(burst()) == 1

    counted = Counted()
    counted.gate.set()
    executor = FunctionModel(counted.answer, name="counted-executor")
    limited = providers.with_limits("counted-executor", ProviderLimits(max_concurrency=2))
    for _ in range(2):  # run_sync makes a new loop each time
        planner = ScriptedModel([PARALLEL, {"answer": "five parts"}])
        result = Agent(planner, executor=executor, budget=SAFETY, providers=limited, store=None).run_sync("parts")
        assert result.stop.kind == "goal_met", result.stop
    assert counted.peak <= 2


# -- an OpenAI-compatible server: priced by the agent, before and after each call --------------------


@pytest.fixture
def allow_requests() -> Iterator[None]:
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


@pytest.mark.usefixtures("allow_requests")
async def test_an_openai_compatible_model_is_charged_the_agents_price(server: FakeServer) -> None:
    price = Price(input=2.0, output=8.0)
    spec = f"openai-compatible:house-llm@{server.url}/v1"
    providers = Providers.default().with_price("house-llm", price)
    server.reply(
        completion('{"steps": [{"id": "s1", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}'),
        completion('{"answer": "3"}', usage=(300, 10, 0)),
    )
    planner = Planner(model=spec, stream=False)
    result = await Agent(planner, tools=[add], budget=SAFETY, providers=providers, store=None).run("1+2")
    assert result.stop.kind == "goal_met", result.stop
    calls = events_of(result, ModelCalled)
    assert [c.usage for c in calls] == [
        Usage(input_tokens=12, output_tokens=5, requests=1),
        Usage(input_tokens=300, output_tokens=10, requests=1),
    ]
    assert [c.cost for c in calls] == [cost_of(c.usage, price) for c in calls]
    assert result.cost == pytest.approx(sum(c.cost for c in calls))
    model: Any = planner.resolved_model(providers)
    assert isinstance(model, OpenAIModel)
    await model.aclose()

    # The same price refuses a call before it is made when its input alone would go over the cap.
    refused = Planner(model=spec, stream=False)
    tiny = Budget(cost=1e-9, wall_time=30)
    stopped = await Agent(refused, tools=[add], budget=tiny, providers=providers, store=None).run("1+2")
    assert stopped.stop.kind == "budget_exhausted"
    assert len(server.requests) == 2  # nothing more was sent
