"""Missing API keys: every provider reports one the same way, and a run with any model that lacks
its key is refused before it starts — every missing key listed at once, nothing logged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from planexec import Acceptance, Agent, Planner, Problem, UsageError
from planexec.faults import FaultProfile
from planexec.models import (
    AnthropicModel,
    FallbackModel,
    ModelRequest,
    OpenAIModel,
    allow_model_requests,
    resolve_model,
)
from planexec.models._base import Message
from planexec.react import ReactAgent
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel
from tests.cli_support import invoke

KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_COMPATIBLE_API_KEY", "VLLM_API_KEY")


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*KEYS, "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def missing(model: str, env: str) -> Problem:
    return Problem(code="api_key", where=model, message=f"{env} is not set: set it, or pass api_key=")


def ask() -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content="hi"),))


def test_every_provider_reports_a_missing_key_the_same_way() -> None:
    openai_model = resolve_model("openai:gpt-4o-mini")  # built without a key, as an Anthropic model is
    anthropic_model = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(openai_model, OpenAIModel)
    assert isinstance(anthropic_model, AnthropicModel)
    assert openai_model.missing_keys() == (missing("openai:gpt-4o-mini", "OPENAI_API_KEY"),)
    assert anthropic_model.missing_keys() == (missing("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),)
    gateway = OpenAIModel("m", provider="gw", base_url="http://127.0.0.1:9/v1", api_key_env="GW_KEY", require_key=True)
    assert gateway.missing_keys() == (missing("gw:m", "GW_KEY"),)
    local = resolve_model("ollama:qwen2.5 | vllm:m")  # servers that need no key
    assert isinstance(local, FallbackModel)
    assert local.missing_keys() == ()
    assert OpenAIModel("gpt-4o", api_key="sk-given").missing_keys() == ()
    assert AnthropicModel("claude-x", api_key="sk-ant-given").missing_keys() == ()


def test_a_key_set_later_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    model = OpenAIModel("gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-later")
    assert model.missing_keys() == ()


@pytest.fixture
def live() -> Iterator[None]:
    """Real requests allowed (none is sent: the servers named are not there)."""
    allow_model_requests(True)
    try:
        yield
    finally:
        allow_model_requests(False)


async def test_a_request_without_a_key_is_refused_the_same_way(live: None) -> None:
    models: dict[str, OpenAIModel | AnthropicModel] = {
        "OPENAI_API_KEY": OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1"),
        "ANTHROPIC_API_KEY": AnthropicModel("claude-sonnet-4-5", base_url="http://127.0.0.1:9"),
    }
    for env, model in models.items():
        with pytest.raises(UsageError) as caught:
            await model.request(ask())
        assert caught.value.summary == "a model has no API key"
        assert caught.value.problems == (missing(model.name, env),)


async def test_a_run_is_refused_before_it_starts_with_every_missing_key() -> None:
    store = MemoryStore()
    planner = Planner(model=FallbackModel([ScriptedModel([]), resolve_model("anthropic:claude-sonnet-4-5")]))
    agent = Agent(
        planner,
        executor=FaultProfile(rate_limit_storm=1).wrap_model(resolve_model("openai:gpt-4o-mini")),
        acceptance=Acceptance(judge="openai:gpt-4o"),
        store=store,
    )
    with pytest.raises(UsageError, match="the run cannot start") as caught:
        await agent.run("  ")
    assert caught.value.problems == (
        Problem(code="goal", where="goal", message="the goal is empty"),
        missing("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        missing("openai:gpt-4o-mini", "OPENAI_API_KEY"),
        missing("openai:gpt-4o", "OPENAI_API_KEY"),
    )
    assert await store.list_runs() == []  # nothing was logged
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        await agent.resume("any")
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        await agent.replay("any", fork_at=1)


async def test_the_react_baseline_is_refused_the_same_way() -> None:
    with pytest.raises(UsageError, match="the run cannot start") as caught:
        await ReactAgent("anthropic:claude-sonnet-4-5").run("go")
    assert caught.value.problems == (missing("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),)


def test_the_command_line_lists_every_missing_key_with_the_other_problems() -> None:
    result = invoke(
        [
            "--store",
            "memory://",
            "run",
            "go",
            "--planner",
            "anthropic:claude-sonnet-4-5",
            "--executor",
            "openai:gpt-4o-mini",
            "--tools",
            "no_such_module:TOOLS",
        ]
    )
    assert result.exit_code == 2
    assert "3 problems" in result.stderr
    assert "--planner: anthropic:claude-sonnet-4-5: ANTHROPIC_API_KEY is not set" in result.stderr
    assert "--executor: openai:gpt-4o-mini: OPENAI_API_KEY is not set" in result.stderr
    assert "no_such_module" in result.stderr
