"""Whole runs through the real OpenAI and Anthropic adapters against two mock servers from PyPI.

``fakellm`` answers from the rules in ``tests/fixtures/fakellm.yaml`` (the model name picks the
behaviour); ``llmock`` answers from the scenarios each test queues, with schema-shaped replies when
none is queued, and injects faults on demand or at random. Every run must end within its budget
with a typed stop reason and an intact log. Where a server departs from the real APIs, the test
says what was seen and that planexec carries on.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal, get_args

import pytest

from planexec import Agent, Budget, ModelExecutor, Planner, ToolError, tool
from planexec.log import (
    ModelCalled,
    PlannerOutputRejected,
    RunFinished,
    RunResult,
    RunStarted,
    RunState,
    StepStreamed,
    StopKind,
    ToolCalled,
    dump_event,
    load_event,
)
from planexec.models import (
    AnthropicModel,
    FallbackModel,
    Model,
    ModelRetryPolicy,
    OpenAIModel,
    allow_model_requests,
)
from tests.mock_servers import MockServer

Api = Literal["openai", "anthropic"]
APIS: tuple[Api, ...] = ("openai", "anthropic")

FAST = ModelRetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.5, jitter=0.0)
"""Quick retries that still honour a Retry-After of up to half a second."""
WALL = 20.0
"""Each run's wall-time budget: a hang becomes a stop, and the test asserts the run ended well before."""
GOAL = "How many people live in Paris and in Rome?"
PLAN = {
    "reason": "look both cities up",
    "steps": [
        {
            "id": "paris",
            "description": "Find how many people live in Paris, with the population tool",
            "allowed_tools": ["population"],
        },
        {"id": "rome", "description": "The population of Rome", "tool": "population", "args": {"city": "rome"}},
    ],
}
ANSWER = "Paris: about 2 million; Rome: 3 million"
EXECUTOR_ANSWER = "About 2 million people live in Paris."
POPULATIONS = {"paris": 2, "rome": 3}


@tool
async def population(city: str) -> int:
    """The population of a city, in millions."""
    if city not in POPULATIONS:
        raise ToolError(f"no city called {city!r}")
    return POPULATIONS[city]


@pytest.fixture(autouse=True)
def allow_requests() -> Iterator[None]:
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


ModelFactory = Callable[..., Model]


@pytest.fixture
async def opened() -> AsyncIterator[list[Model]]:
    """Models a test built; their HTTP clients are closed when it ends."""
    models: list[Model] = []
    yield models
    for model in models:
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()


def models_on(server: MockServer, api: Api, opened: list[Model], *, anthropic_path: str = "") -> ModelFactory:
    """Builds models of ``api`` that talk to ``server`` (OpenAI under ``/v1``)."""

    def make(name: str, *, timeout: float = 10.0, retry: ModelRetryPolicy = FAST) -> Model:
        model: Model
        if api == "openai":
            model = OpenAIModel(name, base_url=server.url + "/v1", api_key="sk-mock", retry=retry, timeout=timeout)
        else:
            url = server.url + anthropic_path
            model = AnthropicModel(name, base_url=url, api_key="sk-mock", retry=retry, timeout=timeout)
        opened.append(model)
        return model

    return make


async def run(agent: Agent, goal: str = GOAL) -> RunResult:
    """Run ``agent`` and check that the run ended in time, with a typed stop and an intact log."""
    started = time.monotonic()
    result = await asyncio.wait_for(agent.run(goal), timeout=WALL + 10)  # the budget ends it before this
    took = time.monotonic() - started
    assert took < WALL, f"the run took {took:.1f}s"
    assert result.stop.kind in get_args(StopKind), result.stop
    assert_log_intact(result)
    return result


def assert_log_intact(result: RunResult) -> None:
    """The log starts and ends the run once each, folds to the result, and survives JSON."""
    events = list(result.events)
    assert isinstance(events[0], RunStarted)
    assert isinstance(events[-1], RunFinished)
    assert sum(isinstance(e, RunFinished) for e in events) == 1
    assert events[-1].stop == result.stop
    folded = RunState.fold(events)
    assert folded.stop == result.stop
    assert folded.answer == result.answer
    assert folded.outputs == result.outputs
    assert [load_event(json.loads(json.dumps(dump_event(e)))) for e in events] == events


def agent(planner: Planner | Model | str, executor: Model | ModelExecutor | str | None = None) -> Agent:
    return Agent(planner, tools=[population], executor=executor, budget=Budget(wall_time=WALL), store=None)


def calls(result: RunResult, purpose: str) -> list[ModelCalled]:
    return [e for e in result.events if isinstance(e, ModelCalled) and e.purpose == purpose]


def assert_goal_met(result: RunResult) -> None:
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    assert result.outputs == {"paris": EXECUTOR_ANSWER, "rome": 3}
    [call] = [e for e in result.events if isinstance(e, ToolCalled) and e.step_id == "paris" and e.error is None]
    assert (call.tool, call.args, call.output) == ("population", {"city": "paris"}, 2)


# == fakellm ========================================================================================


def fakellm_models(fakellm: MockServer, api: Api, opened: list[Model]) -> ModelFactory:
    return models_on(fakellm, api, opened)  # fakellm serves both APIs under /v1


def fakellm_requests(fakellm: MockServer) -> int:
    total: int = fakellm.get("/_fakellm/stats")["total_requests"]
    return total


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed-plan", "whole-plan"])
async def test_fakellm_plans_and_a_model_step_calls_a_tool(
    fakellm: MockServer, opened: list[Model], api: Api, stream: bool
) -> None:
    make = fakellm_models(fakellm, api, opened)
    result = await run(agent(Planner(model=make("fk-plan"), stream=stream), make("fk-exec")))

    assert_goal_met(result)
    streamed = [e.step.id for e in result.events if isinstance(e, StepStreamed)]
    assert streamed == (["paris", "rome"] if stream else [])
    [propose] = calls(result, "planner.propose")
    first, _ = calls(result, "executor")
    assert first.response is not None
    assert first.response.tool_calls[0].name == "population"
    if api == "anthropic" and not stream:
        assert first.response.text.startswith("[mock response for fk-exec"), (
            "fakellm sends an echo text block before tool_use on Anthropic; the executor keeps it and goes on"
        )
    if api == "openai" and stream:
        # estimated from all that was sent: the messages, the schema in the prompt, the tools
        assert propose.usage.input_tokens > math.ceil(propose.request_chars / 4), (
            "fakellm ignores stream_options.include_usage (no usage chunk): planexec estimates the usage"
        )
    if api == "anthropic" and stream:
        assert propose.usage.input_tokens == 1, (
            "fakellm's Anthropic stream reports 1 input token in message_start: planexec logs what it was told"
        )
    assert result.usage.requests == 4


@pytest.mark.parametrize(
    "spec",
    ["openai-compatible:{model}@{url}/v1", "openai:{model}", "anthropic:{model}"],
    ids=["openai-compatible", "openai", "anthropic"],
)
async def test_fakellm_through_model_strings(fakellm: MockServer, monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fakellm.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mock")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fakellm.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-mock")
    runner = agent(spec.format(model="fk-plan", url=fakellm.url), spec.format(model="fk-exec", url=fakellm.url))
    executor = runner.executors["model"]
    assert isinstance(executor, ModelExecutor)
    try:
        result = await run(runner)
    finally:
        for resolved in (runner.planner.resolved_model(runner.providers), executor.resolved_model(runner.providers)):
            assert isinstance(resolved, OpenAIModel | AnthropicModel)
            await resolved.aclose()

    assert_goal_met(result)


@pytest.mark.parametrize("api", APIS)
async def test_fakellm_prose_instead_of_a_plan_stops_after_the_repairs(
    fakellm: MockServer, opened: list[Model], api: Api
) -> None:
    make = fakellm_models(fakellm, api, opened)
    result = await run(agent(Planner(model=make("fk-plan-junk"), max_repairs=1), make("fk-exec")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    assert len(calls(result, "planner.propose")) == 2
    rejected = [e for e in result.events if isinstance(e, PlannerOutputRejected)]
    assert [p.code for e in rejected for p in e.problems] == ["invalid_json", "invalid_json"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [429, 503])
async def test_fakellm_error_status_fails_the_planner_after_its_retries(
    fakellm: MockServer, opened: list[Model], api: Api, status: int
) -> None:
    make = fakellm_models(fakellm, api, opened)
    before = fakellm_requests(fakellm)
    result = await run(agent(Planner(model=make(f"fk-plan-{status}"), stream=False), make("fk-exec")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed"), result.stop
    assert str(status) in result.stop.detail
    assert fakellm_requests(fakellm) - before == FAST.max_attempts


@pytest.mark.parametrize("api", APIS)
async def test_fakellm_ignores_the_error_status_on_streams_so_the_echo_plan_is_refused(
    fakellm: MockServer, opened: list[Model], api: Api
) -> None:
    make = fakellm_models(fakellm, api, opened)
    result = await run(agent(Planner(model=make("fk-plan-429"), max_repairs=1), make("fk-exec")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    proposals = calls(result, "planner.propose")
    assert all(c.error is None and c.response is not None for c in proposals)
    assert all(c.response.text.startswith("[mock response for") for c in proposals if c.response), (
        "fakellm answers a streamed request with 200 and its echo text, whatever status the rule says"
    )


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("executor", "problem"),
    [
        ("fk-exec-bad-args", "not a JSON object"),
        ("fk-exec-unknown-tool", "gave no result within 2 turns"),
        ("fk-exec-503", "503"),
    ],
    ids=["arguments-not-an-object", "unknown-tool", "503"],
)
async def test_fakellm_executor_failures_fail_the_step(
    fakellm: MockServer, opened: list[Model], api: Api, executor: str, problem: str
) -> None:
    make = fakellm_models(fakellm, api, opened)
    model_executor = ModelExecutor(model=make(executor), max_turns=2)
    result = await run(agent(Planner(model=make("fk-plan"), replan="never", stream=False), model_executor))

    assert (result.stop.kind, result.stop.code) == ("error", "step_failed"), result.stop
    failure = result.steps["paris"].error
    assert failure is not None
    if api == "openai" and executor == "fk-exec-bad-args":
        problem = "a JSON str, not an object"
    assert problem in failure.message
    if executor == "fk-exec-unknown-tool":
        refused = [e for e in result.events if isinstance(e, ToolCalled) and e.step_id == "paris"]
        assert [(e.tool, e.error.kind if e.error else None) for e in refused] == [
            ("delete_everything", "unknown_tool")
        ] * 2


# == llmock =========================================================================================


def llmock_models(llmock: MockServer, api: Api, opened: list[Model]) -> ModelFactory:
    return models_on(llmock, api, opened, anthropic_path="/anthropic")


def queue(llmock: MockServer, *behaviors: dict[str, Any]) -> None:
    llmock.post("/_llmock/scenario", {"behaviors": list(behaviors)})


def plan_reply(api: Api, plan: dict[str, Any] = PLAN) -> dict[str, Any]:
    """The planner's plan: text on OpenAI, the output tool's input on Anthropic."""
    match = {"provider": api, "model": "planner", "stream": True}
    if api == "openai":
        return {"type": "reply", "text": json.dumps(plan), "match": match}
    return {"type": "reply", "tool_calls": [{"name": "plan", "arguments": plan}], "match": match}


def answer_reply(api: Api) -> dict[str, Any]:
    match = {"provider": api, "model": "planner", "stream": False}
    if api == "openai":
        return {"type": "reply", "text": json.dumps({"answer": ANSWER}), "match": match}
    return {"type": "reply", "tool_calls": [{"name": "plan", "arguments": {"answer": ANSWER}}], "match": match}


def script_run(llmock: MockServer, api: Api, *, plans: int = 1) -> None:
    """Queue a whole run's replies: the plan (``plans`` times, for attempts a fault uses up), the
    executor's tool call and answer, and the final answer."""
    executor = {"model": "executor"}
    queue(
        llmock,
        *[plan_reply(api)] * plans,
        {"type": "reply", "tool_calls": [{"name": "population", "arguments": {"city": "paris"}}], "match": executor},
        {"type": "reply", "text": EXECUTOR_ANSWER, "match": executor},
        answer_reply(api),
    )


def journal(llmock: MockServer) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = llmock.get("/_llmock/requests")["requests"]
    return requests


def verdict(llmock: MockServer) -> dict[str, Any]:
    judged: dict[str, Any] = llmock.get("/_llmock/verdict")
    return judged


@pytest.mark.parametrize("api", APIS)
async def test_llmock_scripted_run_with_a_streamed_plan(llmock: MockServer, opened: list[Model], api: Api) -> None:
    make = llmock_models(llmock, api, opened)
    script_run(llmock, api)
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert_goal_met(result)
    propose, *_ = journal(llmock)
    assert propose["stream"] is True
    if api == "openai":
        assert propose["body"]["stream_options"] == {"include_usage": True}
        [called] = calls(result, "planner.propose")
        assert called.usage.input_tokens != math.ceil(called.request_chars / 4)  # llmock's count, not an estimate
    assert verdict(llmock)["passed"] is True


@pytest.mark.parametrize("api", APIS)
async def test_llmock_schema_shaped_plan_is_refused_with_every_problem_listed(
    llmock: MockServer, opened: list[Model], api: Api
) -> None:
    # llmock invents a reply from the schema: an example in every member, the nullable ones too
    # (an answer while planning, "mock-args" where a JSON object's text belongs — a step's and a
    # hand-off's — and "mock-checks").
    make = llmock_models(llmock, api, opened)
    result = await run(agent(Planner(model=make("planner"), max_repairs=1), make("executor")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    [propose, *_] = calls(result, "planner.propose")
    assert propose.response is not None
    rejected = [e.problems for e in result.events if isinstance(e, PlannerOutputRejected)]
    assert len(rejected) == 2  # the first answer and the one repair allowed
    assert {(p.code, p.where) for p in rejected[0]} == {
        ("invalid_output", "answer"),
        ("invalid_output", "steps.0.args"),
        ("invalid_output", "steps.0.output_schema"),
        ("invalid_output", "steps.0.checks.0"),
        ("invalid_output", "handoff.args"),
    }
    assert result.outputs == {}, "nothing ran"


async def test_llmock_json_mode_reply_that_ignores_the_schema_in_the_prompt_is_refused(
    llmock: MockServer, opened: list[Model]
) -> None:
    planner = OpenAIModel("planner", provider="openai-compatible", base_url=llmock.url + "/v1", retry=FAST)
    opened.append(planner)
    result = await run(agent(Planner(model=planner, max_repairs=1)))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    [sent, *_] = journal(llmock)
    assert sent["body"]["response_format"] == {"type": "json_object"}
    rejected = [p for e in result.events if isinstance(e, PlannerOutputRejected) for p in e.problems]
    assert {p.where for p in rejected} >= {"message"}, 'llmock answers JSON mode with {"message": ...}'


@pytest.mark.parametrize("api", APIS)
async def test_llmock_invents_a_tool_call_from_the_tool_schema_and_the_tool_refuses_it(
    llmock: MockServer, opened: list[Model], api: Api
) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, plan_reply(api), answer_reply(api))
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert result.stop.kind == "goal_met", result.stop
    [invented] = [e for e in result.events if isinstance(e, ToolCalled) and e.step_id == "paris"]
    assert invented.args == {"city": "mock-city"}
    assert invented.error is not None
    assert "mock-city" in invented.error.message
    assert isinstance(result.outputs["paris"], str)  # llmock answers in text once a tool result is back


@pytest.mark.parametrize("api", APIS)
async def test_llmock_rate_limits_are_retried_after_the_wait_asked(
    llmock: MockServer, opened: list[Model], api: Api
) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "fail", "status": 429, "retry_after": 0.2, "times": 2})
    script_run(llmock, api)
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert_goal_met(result)
    statuses = [r["status"] for r in journal(llmock)]
    assert statuses[:3] == [429, 429, 200]
    judged = verdict(llmock)
    assert judged["passed"] is True, judged["findings"]
    assert judged["faults_injected"] == 2


@pytest.mark.parametrize("api", APIS)
async def test_llmock_outage_stops_the_run_after_the_retries(llmock: MockServer, opened: list[Model], api: Api) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "fail", "status": 503, "retry_after": 0.01, "times": None})
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed"), result.stop
    assert "503" in result.stop.detail
    assert [r["status"] for r in journal(llmock)] == [503] * FAST.max_attempts
    judged = verdict(llmock)
    assert judged["errors"] == 0, judged["findings"]


@pytest.mark.parametrize("api", APIS)
async def test_llmock_context_overflow_is_not_retried(llmock: MockServer, opened: list[Model], api: Api) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "fail", "status": 400, "code": "context_length_exceeded", "message": "prompt is too long"})
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed"), result.stop
    assert "prompt is too long" in result.stop.detail
    assert len(journal(llmock)) == 1
    assert verdict(llmock)["errors"] == 0


@pytest.mark.parametrize("api", APIS)
async def test_llmock_server_error_on_the_executor_is_retried(
    llmock: MockServer, opened: list[Model], api: Api
) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "fail", "status": 500, "match": {"model": "executor"}})
    script_run(llmock, api)
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert_goal_met(result)
    assert [r["status"] for r in journal(llmock) if r["model"] == "executor"] == [500, 200, 200]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", ["delay", "slow_first_token"])
async def test_llmock_slow_answers_time_out_and_are_retried(
    llmock: MockServer, opened: list[Model], api: Api, fault: str
) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": fault, "seconds": 3, "match": {"model": "planner", "stream": True}})
    script_run(llmock, api, plans=2)  # the attempt that times out takes the first
    result = await run(agent(Planner(model=make("planner", timeout=0.4)), make("executor")))

    assert_goal_met(result)
    assert result.duration < 3


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("kind", ["disconnect", "truncate", "stall", "malformed"])
async def test_llmock_broken_stream_before_any_text(
    llmock: MockServer, opened: list[Model], api: Api, kind: str
) -> None:
    """Nothing has been passed on yet: a dropped, cut or stalled stream is tried again; a chunk that is
    not JSON is a non-retryable ``ModelCallError`` on both APIs."""
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "stream_fault", "kind": kind, "after_chunks": 0, "stall_seconds": 5})
    script_run(llmock, api, plans=2)
    result = await run(agent(Planner(model=make("planner", timeout=0.5)), make("executor")))

    if kind == "malformed":
        assert (result.stop.kind, result.stop.code) == ("error", "planner_failed"), result.stop
        assert "ModelCallError" in result.stop.detail
        assert "malformed" in result.stop.detail
    else:
        assert_goal_met(result)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("kind", ["disconnect", "truncate", "stall", "malformed"])
async def test_llmock_broken_stream_after_steps_were_handed_on_stops_the_run(
    llmock: MockServer, opened: list[Model], api: Api, kind: str
) -> None:
    """Part of the plan was passed on: the stream is not tried again, and the run stops, typed."""
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "stream_fault", "kind": kind, "after_chunks": 3, "stall_seconds": 5})
    script_run(llmock, api)
    result = await run(agent(Planner(model=make("planner", timeout=0.5)), make("executor")))

    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed"), result.stop
    assert "ModelCallError" in result.stop.detail
    assert result.duration < 3


async def test_llmock_malformed_first_chunk_falls_back_to_the_next_model(
    llmock: MockServer, opened: list[Model]
) -> None:
    openai_planner = llmock_models(llmock, "openai", opened)("planner")
    make = llmock_models(llmock, "anthropic", opened)
    broken = {"provider": "openai", "stream": True}
    queue(llmock, {"type": "stream_fault", "kind": "malformed", "after_chunks": 0, "match": broken})
    script_run(llmock, "anthropic")
    fallback = FallbackModel([openai_planner, make("planner")])
    result = await run(agent(Planner(model=fallback), make("executor")))

    assert_goal_met(result)
    # The first model failed, so it cools down: the final answer is asked of the second one too.
    assert [(r["provider"], r["stream"]) for r in journal(llmock) if r["model"] == "planner"] == [
        ("openai", True),
        ("anthropic", True),
        ("anthropic", False),
    ]
    assert [c.answered_by for c in result.events if isinstance(c, ModelCalled) and c.role == "planner"] == [
        "anthropic:planner",
        "anthropic:planner",
    ]


async def test_llmock_tool_call_with_broken_arguments_fails_the_step_on_openai(
    llmock: MockServer, opened: list[Model]
) -> None:
    make = llmock_models(llmock, "openai", opened)
    queue(llmock, {"type": "tool_fault", "kind": "malformed_arguments", "match": {"model": "executor"}})
    script_run(llmock, "openai")
    result = await run(agent(Planner(model=make("planner"), replan="never"), make("executor")))

    assert (result.stop.kind, result.stop.code) == ("error", "step_failed"), result.stop
    failure = result.steps["paris"].error
    assert failure is not None
    assert "called tool 'population' with arguments that are not valid JSON" in failure.message


async def test_llmock_broken_tool_arguments_arrive_empty_on_anthropic_and_the_tool_refuses_them(
    llmock: MockServer, opened: list[Model]
) -> None:
    """llmock breaks the arguments' JSON text, but a whole Anthropic message carries the input as an
    object: it sends ``{}``. The arguments are checked against the tool's schema, refused, and the
    model is told; its next answer ends the step."""
    make = llmock_models(llmock, "anthropic", opened)
    queue(llmock, {"type": "tool_fault", "kind": "malformed_arguments", "match": {"model": "executor"}})
    script_run(llmock, "anthropic")
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert result.stop.kind == "goal_met", result.stop
    [refused] = [e for e in result.events if isinstance(e, ToolCalled) and e.step_id == "paris"]
    assert (refused.tool, refused.args) == ("population", {})
    assert refused.error is not None
    assert refused.error.kind == "invalid_arguments"
    assert result.outputs["paris"] == EXECUTOR_ANSWER


@pytest.mark.parametrize("api", APIS)
async def test_llmock_call_to_a_tool_never_offered_is_refused_and_the_step_goes_on(
    llmock: MockServer, opened: list[Model], api: Api
) -> None:
    make = llmock_models(llmock, api, opened)
    queue(llmock, {"type": "tool_fault", "kind": "unknown_tool", "match": {"model": "executor"}})
    script_run(llmock, api)
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"paris": EXECUTOR_ANSWER, "rome": 3}
    refused = [e for e in result.events if isinstance(e, ToolCalled) and e.error is not None]
    assert [(e.tool, e.error.kind if e.error else None) for e in refused] == [("llmock_unknown_tool", "unknown_tool")]


async def test_llmock_broken_plan_tool_call_on_anthropic_is_repaired(llmock: MockServer, opened: list[Model]) -> None:
    """Anthropic structured output travels as a tool call, so llmock's tool faults reach the planner too."""
    make = llmock_models(llmock, "anthropic", opened)
    queue(llmock, {"type": "tool_fault", "kind": "malformed_arguments", "match": {"model": "planner"}})
    script_run(llmock, "anthropic", plans=2)
    result = await run(agent(Planner(model=make("planner")), make("executor")))

    assert_goal_met(result)
    [rejected] = [e for e in result.events if isinstance(e, PlannerOutputRejected)]
    assert [p.code for p in rejected.problems] == ["invalid_json"]


@pytest.mark.parametrize("api", APIS)
async def test_llmock_chaos_mode_every_run_ends_typed_and_logged(
    llmock_chaos: MockServer, opened: list[Model], api: Api
) -> None:
    """Random 429s, 503s and broken streams: whatever happens, each run ends with a stop reason."""
    make = llmock_models(llmock_chaos, api, opened)
    chaotic = ModelRetryPolicy(max_attempts=3, initial_delay=0.01, max_delay=0.05, jitter=0.0)
    for _ in range(4):
        planner = Planner(model=make("planner", retry=chaotic), max_repairs=1)
        result = await run(agent(planner, make("executor", retry=chaotic)))
        assert result.stop.code not in ("internal", "model_crashed"), result.stop
        if result.stop.code == "planner_failed":
            assert "ModelCallError" in result.stop.detail, "every provider failure reaches the run as a ModelCallError"
    assert len(journal(llmock_chaos)) >= 4
