"""What a call to a fallback list costs: the price of the model of the list that answered it (the
``answered_by`` of its ``model_called`` event), never the price its joined name happens to match;
and, before the call, the most expensive model of the list, so that a cost cap holds whichever
model answers. The run's cost, its folded state and ``planexec show`` all agree with the calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from planexec import Agent, Budget, Planner
from planexec.log import BudgetExhaustedEvent, ModelCalled, RunResult, RunState
from planexec.models import (
    FallbackModel,
    Model,
    ModelCallError,
    ModelRequest,
    ModelRetryPolicy,
    OpenAIModel,
    Price,
    Providers,
    Usage,
    allow_model_requests,
    cost_of,
    price_for,
)
from planexec.runtime import replay_log
from planexec.store import open_store
from planexec.testing import ScriptedModel
from tests.cli_support import invoke
from tests.http_fake import FakeServer, serve
from tests.support import SAFETY, add, events_of
from tests.test_model_openai import completion, error
from tests.test_model_openai_runs import population, streamed_json, tool_plan

PLAN = {"steps": [{"id": "s1", "description": "add", "tool": "add", "args": {"a": 2, "b": 3}}]}
ANSWER = {"answer": "5"}
DOWN = ModelCallError("answered 503: down", provider="scripted", retryable=False, status=503)
USAGE = Usage(input_tokens=1000, output_tokens=100)
ALPHA = Price(input=10.0, output=40.0)
BETA = Price(input=1.0, output=2.0)


def priced(**prices: Price) -> Providers:
    """The default providers, with ``fake:NAME`` models priced as given, and ``fake:`` model strings
    resolved to the scripted models of :data:`MODELS`."""
    providers = Providers.default().with_provider("fake", lambda name: MODELS[name])
    for name, price in prices.items():
        providers = providers.with_price(f"fake:{name}", price)
    return providers


MODELS: dict[str, Model] = {}


@pytest.fixture(autouse=True)
def _forget_models() -> Iterator[None]:
    yield
    MODELS.clear()


def scripted(name: str, *replies: object) -> ScriptedModel:
    """A scripted model that ``fake:NAME`` model strings resolve to, reporting :data:`USAGE` per call."""
    model = ScriptedModel(list(replies), name=f"fake:{name}", usage=USAGE)  # type: ignore[arg-type]
    MODELS[name] = model
    return model


def calls(result: RunResult) -> list[ModelCalled]:
    return events_of(result, ModelCalled)


async def assert_totals_and_replay(result: RunResult) -> None:
    """The run's cost is the sum of its calls' costs, in the result and in the folded log, and a
    replay of the log matches it."""
    assert result.cost == pytest.approx(sum(c.cost for c in calls(result)))
    assert RunState.fold(result.events).cost == result.cost
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence


async def test_a_call_answered_by_the_second_model_is_charged_at_its_price() -> None:
    scripted("alpha", DOWN)
    scripted("beta", PLAN, ANSWER)
    agent = Agent("fake:alpha | fake:beta", tools=[add], budget=SAFETY, providers=priced(alpha=ALPHA, beta=BETA))
    result = await agent.run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    made = calls(result)
    assert [(c.model, c.answered_by) for c in made] == [("fake:alpha > fake:beta", "fake:beta")] * 2
    for call in made:
        assert call.usage.input_tokens == 1000
        assert call.cost == pytest.approx(cost_of(call.usage, BETA))  # not alpha's, which its name starts with
    assert result.cost == pytest.approx(2 * (1000 * 1.0 + 100 * 2.0) / 1e6)
    await assert_totals_and_replay(result)


async def test_an_unpriced_first_model_leaves_the_second_one_charged_at_its_price() -> None:
    scripted("alpha", DOWN)
    scripted("beta", PLAN, ANSWER)  # reports no cost of its own: only the providers price it
    agent = Agent("fake:alpha | fake:beta", tools=[add], budget=SAFETY, providers=priced(beta=BETA))
    result = await agent.run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    for call in calls(result):
        assert call.answered_by == "fake:beta"
        assert call.cost == pytest.approx(cost_of(call.usage, BETA))
    assert result.cost == pytest.approx(2 * (1000 * 1.0 + 100 * 2.0) / 1e6)
    await assert_totals_and_replay(result)


async def test_a_call_the_first_model_answers_is_charged_at_its_price() -> None:
    scripted("alpha", PLAN, ANSWER)
    beta = scripted("beta")
    agent = Agent("fake:alpha | fake:beta", tools=[add], budget=SAFETY, providers=priced(alpha=ALPHA, beta=BETA))
    result = await agent.run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    for call in calls(result):
        assert call.answered_by == "fake:alpha"
        assert call.cost == pytest.approx(cost_of(call.usage, ALPHA))
    assert beta.calls == []
    await assert_totals_and_replay(result)


async def test_a_model_with_a_price_of_its_own_in_a_list_is_charged_what_it_reports() -> None:
    first = ScriptedModel([DOWN], name="fake:alpha")
    second = ScriptedModel([PLAN, ANSWER], name="fake:beta", usage=USAGE, cost_per_million=(3.0, 7.0))
    agent = Agent(FallbackModel([first, second]), tools=[add], budget=SAFETY, providers=priced(alpha=ALPHA, beta=BETA))
    result = await agent.run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    for call in calls(result):
        assert call.cost == pytest.approx((1000 * 3.0 + 100 * 7.0) / 1e6)
    await assert_totals_and_replay(result)


async def test_a_list_inside_a_list_is_charged_at_the_price_of_the_model_that_answered() -> None:
    first = scripted("alpha", DOWN)
    second = scripted("beta", DOWN)
    third = scripted("gamma", PLAN, ANSWER)
    gamma = Price(input=5.0, output=6.0)
    planner = FallbackModel([first, FallbackModel([second, third])])
    agent = Agent(planner, tools=[add], budget=SAFETY, providers=priced(alpha=ALPHA, beta=BETA, gamma=gamma))
    result = await agent.run("What is 2 + 3?")

    assert result.stop.kind == "goal_met", result.stop
    for call in calls(result):
        assert call.answered_by == "fake:gamma"
        assert call.cost == pytest.approx(cost_of(call.usage, gamma))
    await assert_totals_and_replay(result)


async def test_a_cost_cap_is_checked_at_the_most_expensive_model_of_the_list() -> None:
    """The cheap first model would fit the cap; the second, which answers when the first fails,
    would not: the call is not made."""
    cheap = scripted("cheap", PLAN, ANSWER)
    dear = scripted("dear", PLAN, ANSWER)
    providers = priced(cheap=Price(input=0.0, output=0.0), dear=Price(input=1_000_000.0, output=0.0))  # $1/token
    agent = Agent("fake:cheap | fake:dear", tools=[add], budget=Budget(cost=0.5, wall_time=30), providers=providers)
    result = await agent.run("What is 2 + 3?")

    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "cost"), result.stop
    [hit] = events_of(result, BudgetExhaustedEvent)
    assert hit.used == 0
    assert hit.needed == pytest.approx(1000.0)  # the input the dear model would be sent, at its price
    assert cheap.calls == dear.calls == []


async def test_calls_in_flight_count_the_output_of_the_most_expensive_model_of_the_list() -> None:
    """Two model steps at once: while the first is in flight, the output it may still produce is
    counted at the dearest output price of the list, so the second call does not fit the cap."""
    held = asyncio.Event()  # never set: the first executor call stays in flight until the run stops

    async def hold(request: ModelRequest) -> str:
        await held.wait()
        return "never"

    plan = {"steps": [{"id": "m1", "description": "think"}, {"id": "m2", "description": "think more"}]}
    planner = ScriptedModel([plan, {"answer": "never asked"}])
    cheap = scripted("cheap", hold, hold)
    dear = scripted("dear")
    # 1,024 output tokens (the reserve of a call with no max_tokens) at $1,000 a million: $1.024
    providers = priced(cheap=Price(input=0.0, output=0.0), dear=Price(input=0.0, output=1000.0))
    agent = Agent(
        planner,
        executor=FallbackModel([cheap, dear]),
        budget=Budget(cost=1.0, wall_time=10),
        providers=providers,
    )
    result = await agent.run("think")

    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "cost"), result.stop
    [hit] = events_of(result, BudgetExhaustedEvent)
    assert hit.needed == pytest.approx(1.024)
    assert len(cheap.calls) == 1
    assert dear.calls == []


def test_planexec_show_agrees_with_the_charged_calls(tmp_path: Path) -> None:
    scripted("alpha", DOWN)
    scripted("beta", PLAN, ANSWER)
    store_url = f"sqlite:///{tmp_path}/runs.db"

    async def run() -> RunResult:
        store = open_store(store_url)
        try:
            agent = Agent(
                "fake:alpha | fake:beta",
                tools=[add],
                budget=SAFETY,
                providers=priced(alpha=ALPHA, beta=BETA),
                store=store,
            )
            return await agent.run("What is 2 + 3?")
        finally:
            await store.close()

    result = asyncio.run(run())
    assert result.stop.kind == "goal_met", result.stop
    expected = 2 * (1000 * 1.0 + 100 * 2.0) / 1e6

    shown = invoke(["--store", store_url, "show", result.run_id, "--json"])
    assert shown.exit_code == 0, shown.output
    usage = json.loads(shown.stdout)["usage"]
    assert usage["cost"] == pytest.approx(expected)
    assert usage["by_role"]["planner"]["cost"] == pytest.approx(expected)
    table = invoke(["--store", store_url, "show", result.run_id])
    assert table.exit_code == 0, table.output
    assert f"${expected:.4f}" in table.stdout


# -- on the wire: OpenAI models behind the official SDK, served from 127.0.0.1 ----------------

server = pytest.fixture(serve)
FAST = ModelRetryPolicy(max_attempts=2, initial_delay=0, max_delay=0.01, jitter=0)


@pytest.fixture
async def on_the_wire(server: FakeServer) -> AsyncIterator[list[OpenAIModel]]:
    allow_model_requests(True)
    built: list[OpenAIModel] = []
    try:
        yield built
    finally:
        allow_model_requests(False)
        for model in built:
            await model.aclose()


def openai(server: FakeServer, built: list[OpenAIModel], model: str, **options: object) -> OpenAIModel:
    made = OpenAIModel(model, api_key="sk-test", base_url=server.url + "/v1", retry=FAST, **options)  # type: ignore[arg-type]
    built.append(made)
    return made


def script_fallback_run(server: FakeServer) -> None:
    """The first model's two attempts fail; the second streams the plan, then gives the answer."""
    server.reply(
        error(500, "the first model is down"),
        error(500, "the first model is down"),
        streamed_json(tool_plan("paris")),
        completion('{"answer": "about 2 million"}', usage=(300, 10, 0)),
    )


async def test_openai_fallback_on_the_wire_is_charged_at_the_answering_models_price(
    server: FakeServer, on_the_wire: list[OpenAIModel]
) -> None:
    script_fallback_run(server)
    planner = FallbackModel([openai(server, on_the_wire, "gpt-4o"), openai(server, on_the_wire, "gpt-4o-mini")])
    result = await Agent(Planner(model=planner), tools=[population], budget=SAFETY).run("How big is Paris?")

    assert result.stop.kind == "goal_met", result.stop
    made = calls(result)
    assert [c.answered_by for c in made] == ["openai:gpt-4o-mini"] * 2
    assert [c.usage.input_tokens for c in made] == [200, 300]
    mini = price_for("gpt-4o-mini")
    for call in made:
        assert call.cost == pytest.approx(cost_of(call.usage, mini))  # not gpt-4o's, which the name starts with
    assert [json.loads(json.dumps(r.body))["model"] for r in server.requests] == [
        "gpt-4o",
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4o-mini",
    ]
    await assert_totals_and_replay(result)


async def test_openai_fallback_on_the_wire_after_an_unpriced_model_takes_the_providers_price(
    server: FakeServer, on_the_wire: list[OpenAIModel]
) -> None:
    script_fallback_run(server)
    local = openai(server, on_the_wire, "local-llm", provider="openai-compatible")
    mini = openai(server, on_the_wire, "gpt-4o-mini")
    ours = Price(input=7.0, output=9.0)  # not the built-in price the model reports its cost at
    providers = Providers.default().with_price("openai:gpt-4o-mini", ours)
    agent = Agent(Planner(model=FallbackModel([local, mini])), tools=[population], budget=SAFETY, providers=providers)
    result = await agent.run("How big is Paris?")

    assert result.stop.kind == "goal_met", result.stop
    for call in calls(result):
        assert call.answered_by == "openai:gpt-4o-mini"
        assert call.cost == pytest.approx(cost_of(call.usage, ours))
    assert result.cost == pytest.approx((200 * 7.0 + 40 * 9.0 + 300 * 7.0 + 10 * 9.0) / 1e6)
    await assert_totals_and_replay(result)


def test_a_fallback_list_has_no_price_of_its_own() -> None:
    providers = priced(alpha=ALPHA, beta=BETA)
    both = FallbackModel([scripted("alpha"), scripted("beta")])
    assert providers.price_for(both.name) == ALPHA  # what its joined name matches, by prefix
    assert providers.price_of(both) is None  # its calls are charged at the price of the model that answers
    assert [providers.price_of(m) for m in both.models] == [ALPHA, BETA]
