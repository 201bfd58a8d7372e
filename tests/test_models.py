"""The shipped test doubles, model strings, and the switch that blocks real model requests."""

from __future__ import annotations

import json
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from planexec import Model, UsageError
from planexec.errors import ModelNotFound, UnexpectedModelCall
from planexec.models import (
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    OutputSpec,
    ToolCall,
    Usage,
    allow_model_requests,
    check_model_requests_allowed,
    known_providers,
    resolve_model,
)
from planexec.testing import FunctionModel, ScriptedModel, tool_calls


def ask(text: str = "hello there", *, structured: bool = False, purpose: str = "test") -> ModelRequest:
    output = OutputSpec(name="answer", json_schema={"type": "object"}) if structured else None
    return ModelRequest(
        messages=(Message(role="system", content="be brief"), Message(role="user", content=text)),
        output=output,
        purpose=purpose,
    )


# -- ScriptedModel ------------------------------------------------------------------------------


async def test_scripted_answers_in_order_and_records_calls() -> None:
    model = ScriptedModel(["first", "second", "third"])
    assert isinstance(model, Model)
    assert model.name == "scripted"
    requests = [ask("one"), ask("two"), ask("three")]
    texts = [(await model.request(r)).text for r in requests]
    assert texts == ["first", "second", "third"]
    assert model.calls == requests
    assert model.remaining == 0
    model.assert_consumed()


async def test_the_doubles_retry_a_retryable_error_as_a_provider_would() -> None:
    busy = ModelCallError("busy", provider="p", retryable=True, status=429)
    model = ScriptedModel([busy, "fine"])
    assert (await model.request(ask())).text == "fine"  # the next reply answers the retry
    assert len(model.calls) == 2
    counted: list[ModelRequest] = []

    def flaky(request: ModelRequest) -> str:
        counted.append(request)
        if len(counted) < 3:
            raise busy
        return "third time"

    assert (await FunctionModel(flaky).request(ask())).text == "third time"
    once = ScriptedModel([busy, "fine"], retry=ModelRetryPolicy(max_attempts=1))
    with pytest.raises(ModelCallError, match="busy"):
        await once.request(ask())
    final = ScriptedModel([ModelCallError("no", provider="p", retryable=False), "never"])
    with pytest.raises(ModelCallError, match="no"):
        await final.request(ask())
    assert final.remaining == 1


async def test_scripted_extra_call_raises() -> None:
    model = ScriptedModel(["only"], name="planner-double")
    await model.request(ask())
    with pytest.raises(UnexpectedModelCall) as info:
        await model.request(ask("what now?", purpose="planner.patch"))
    error = info.value
    assert isinstance(error, UsageError)
    assert "call #2" in str(error)
    assert "planner-double" in str(error)
    [problem] = error.problems
    assert problem.where == "planner.patch"
    assert "what now?" in problem.message
    assert len(model.calls) == 2  # the unexpected call is recorded too


async def test_assert_consumed() -> None:
    model = ScriptedModel(["a", "b"])
    with pytest.raises(UnexpectedModelCall, match="2 scripted repl"):
        model.assert_consumed()
    await model.request(ask())
    with pytest.raises(UnexpectedModelCall, match="1 scripted repl"):
        model.assert_consumed()
    await model.request(ask())
    model.assert_consumed()
    ScriptedModel([]).assert_consumed()


async def test_json_replies_become_parsed() -> None:
    model = ScriptedModel([{"steps": [], "reason": "é"}, [1, 2]])
    first = await model.request(ask())
    assert first.parsed == {"steps": [], "reason": "é"}
    assert json.loads(first.text) == first.parsed
    assert "é" in first.text
    second = await model.request(ask())
    assert second.parsed == [1, 2]


async def test_text_replies_are_parsed_only_for_structured_requests() -> None:
    model = ScriptedModel(['{"answer": "42"}', '{"answer": "42"}', "not json"])
    plain = await model.request(ask())
    assert plain.text == '{"answer": "42"}'
    assert plain.parsed is None
    structured = await model.request(ask(structured=True))
    assert structured.parsed == {"answer": "42"}
    unparsable = await model.request(ask(structured=True))
    assert unparsable.text == "not json"
    assert unparsable.parsed is None


async def test_responses_pass_through() -> None:
    response = ModelResponse(text="hi", finish_reason="length", refusal=None, model="custom")
    model = ScriptedModel([response, tool_calls(("search", {"q": "x"}), ("fetch", {}))])
    got = await model.request(ask())
    assert (got.text, got.finish_reason, got.model) == ("hi", "length", "custom")
    calls = await model.request(ask())
    assert calls.finish_reason == "tool_calls"
    assert calls.tool_calls == (
        ToolCall(id="call_1", name="search", arguments={"q": "x"}),
        ToolCall(id="call_2", name="fetch", arguments={}),
    )


async def test_exceptions_in_the_script_are_raised() -> None:
    model = ScriptedModel([ConnectionError("connection reset"), "after"])
    with pytest.raises(ConnectionError, match="connection reset"):
        await model.request(ask())
    assert (await model.request(ask())).text == "after"
    model.assert_consumed()


async def test_callable_replies_see_the_request() -> None:
    async def later(request: ModelRequest) -> str:
        return f"async:{request.purpose}"

    model = ScriptedModel(
        [
            lambda request: {"echo": request.last_user_text},
            later,
            lambda request: lambda inner: f"nested:{inner.last_user_text}",
            lambda request: ValueError(f"bad {request.purpose}"),
        ]
    )
    assert (await model.request(ask("ping"))).parsed == {"echo": "ping"}
    assert (await model.request(ask(purpose="executor"))).text == "async:executor"
    assert (await model.request(ask("deep"))).text == "nested:deep"
    with pytest.raises(ValueError, match="bad judge"):
        await model.request(ask(purpose="judge"))


async def test_unsupported_reply_type() -> None:
    model = ScriptedModel([42])  # type: ignore[list-item]
    with pytest.raises(UnexpectedModelCall) as info:
        await model.request(ask())
    assert info.value.problems[0].code == "scripted_reply"


async def test_estimated_usage() -> None:
    model = ScriptedModel(["hello"])  # five characters: two tokens
    response = await model.request(ask("12345678"))  # "be brief" + "12345678": 16 characters
    assert response.usage == Usage(input_tokens=4, output_tokens=2, requests=1)
    assert response.cost is None
    assert response.model == "scripted"


async def test_estimated_usage_counts_at_least_one_output_token() -> None:
    model = ScriptedModel([""])
    response = await model.request(ask(""))
    assert response.usage.output_tokens == 1
    assert response.usage.requests == 1


async def test_fixed_usage_and_cost() -> None:
    model = ScriptedModel(
        ["a", "b"], usage=Usage(input_tokens=1_000, output_tokens=500), cost_per_million=(3.0, 15.0), name="priced"
    )
    response = await model.request(ask())
    assert response.usage == Usage(input_tokens=1_000, output_tokens=500, requests=1)
    assert response.cost == pytest.approx((1_000 * 3.0 + 500 * 15.0) / 1e6)
    assert response.model == "priced"
    total = response.usage + (await model.request(ask())).usage
    assert total == Usage(input_tokens=2_000, output_tokens=1_000, requests=2)
    assert total.total_tokens == 3_000


async def test_a_replys_own_usage_and_cost_are_kept() -> None:
    own = Usage(input_tokens=7, output_tokens=3, cached_input_tokens=2, requests=1)
    model = ScriptedModel(
        [ModelResponse(text="x", usage=own, cost=0.5), ModelResponse(text="y", usage=own)],
        cost_per_million=(1.0, 1.0),
    )
    first = await model.request(ask())
    assert first.usage == own
    assert first.cost == 0.5
    second = await model.request(ask())
    assert second.cost == pytest.approx(10 / 1e6)


# -- FunctionModel ------------------------------------------------------------------------------


async def test_function_model_sync() -> None:
    def answer(request: ModelRequest) -> str:
        return request.last_user_text.upper()

    model = FunctionModel(answer, name="upper")
    assert isinstance(model, Model)
    assert model.name == "upper"
    assert (await model.request(ask("abc"))).text == "ABC"
    assert (await model.request(ask("xyz"))).text == "XYZ"
    assert [r.last_user_text for r in model.calls] == ["abc", "xyz"]


async def test_function_model_async_with_usage() -> None:
    async def answer(request: ModelRequest) -> dict[str, int]:
        return {"chars": request.chars}

    model = FunctionModel(answer, usage=Usage(input_tokens=10, output_tokens=1), cost_per_million=(1.0, 2.0))
    response = await model.request(ask("abcd"))
    assert response.parsed == {"chars": len("be brief") + 4}
    assert response.usage.requests == 1
    assert response.cost == pytest.approx(12 / 1e6)


async def test_function_model_raises_what_the_function_raises() -> None:
    def broken(request: ModelRequest) -> str:
        raise RuntimeError("no")

    model = FunctionModel(broken)
    with pytest.raises(RuntimeError, match="no"):
        await model.request(ask())
    assert len(model.calls) == 1


# -- resolve_model ------------------------------------------------------------------------------


def test_resolve_model_passes_models_through() -> None:
    model = ScriptedModel([])
    assert resolve_model(model) is model
    with pytest.raises(ModelNotFound):
        resolve_model(object())  # type: ignore[arg-type]
    assert {"object", "scripted"} <= set(known_providers())


async def test_resolve_scripted_file(tmp_path: Path) -> None:
    script = tmp_path / "planner.json"
    script.write_text(
        json.dumps(
            [
                {"steps": [{"id": "s1", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]},
                {"$tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "ping"}]},
                {"$text": "plain text"},
                "a string",
                [1, 2],
            ]
        ),
        encoding="utf-8",
    )
    model = resolve_model(f"scripted:{script}")
    assert isinstance(model, ScriptedModel)
    assert model.name == "scripted:planner.json"
    assert model.remaining == 5
    first = await model.request(ask())
    assert first.parsed["steps"][0]["id"] == "s1"
    calls = await model.request(ask())
    assert calls.finish_reason == "tool_calls"
    assert calls.tool_calls == (
        ToolCall(id="call_1", name="add", arguments={"a": 1, "b": 2}),
        ToolCall(id="call_2", name="ping", arguments={}),
    )
    assert (await model.request(ask())).text == "plain text"
    assert (await model.request(ask())).text == "a string"
    assert (await model.request(ask())).parsed == [1, 2]
    model.assert_consumed()


async def test_resolve_scripted_file_with_envelope(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"replies": [{"answer": "x"}], "latency": 0}), encoding="utf-8")
    model = resolve_model(f"scripted:{script}")
    assert (await model.request(ask())).parsed == {"answer": "x"}


@pytest.mark.parametrize("content", ["not json", "42", '{"replies": 3}', "[1]"])
def test_resolve_scripted_bad_file(tmp_path: Path, content: str) -> None:
    script = tmp_path / "bad.json"
    script.write_text(content, encoding="utf-8")
    with pytest.raises(ModelNotFound):
        resolve_model(f"scripted:{script}")


def test_resolve_scripted_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound) as info:
        resolve_model(f"scripted:{tmp_path / 'nowhere.json'}")
    assert info.value.problems[0].code == "script_file"


@pytest.fixture
def models_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module on sys.path that holds model objects, under a name no other test uses."""
    name = f"planexec_test_models_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from planexec.testing import ScriptedModel

            MODEL = ScriptedModel(["from object"], name="object-model")
            NOT_A_MODEL = 42


            def make():
                return ScriptedModel(["made"], name="made")


            def make_nothing():
                return None


            class Holder:
                inner = ScriptedModel(["inner"], name="inner")
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    monkeypatch.delitem(__import__("sys").modules, name, raising=False)


async def test_resolve_object(models_module: str) -> None:
    model = resolve_model(f"object:{models_module}:MODEL")
    assert model.name == "object-model"
    assert (await model.request(ask())).text == "from object"
    assert resolve_model(f"object:{models_module}:MODEL") is model
    assert resolve_model(f"object:{models_module}:make").name == "made"
    assert resolve_model(f"object:{models_module}:Holder.inner").name == "inner"


@pytest.mark.parametrize(
    "attr",
    ["NOT_A_MODEL", "make_nothing", "MISSING", "Holder.missing"],
)
def test_resolve_object_failures(models_module: str, attr: str) -> None:
    with pytest.raises(ModelNotFound):
        resolve_model(f"object:{models_module}:{attr}")


@pytest.mark.parametrize(
    "spec",
    ["object:no_such_module_for_planexec_tests:MODEL", "object:json", "object:"],
)
def test_resolve_object_bad_references(spec: str) -> None:
    with pytest.raises(ModelNotFound):
        resolve_model(spec)


def test_resolve_unknown_provider() -> None:
    with pytest.raises(ModelNotFound) as info:
        resolve_model("nosuchprovider:big-model")
    [problem] = info.value.problems
    assert problem.code == "unknown_provider"
    assert "scripted" in problem.message
    assert "nosuchprovider" in str(info.value)


@pytest.mark.parametrize("spec", ["gpt", "", "scripted:", ":name"])
def test_resolve_malformed_strings(spec: str) -> None:
    with pytest.raises(ModelNotFound):
        resolve_model(spec)


# -- blocking real model requests -----------------------------------------------------------------


@pytest.fixture
def restore_block() -> Iterator[None]:
    try:
        yield
    finally:
        allow_model_requests(False)  # the suite's setting (see conftest.py)


def test_model_requests_are_blocked_in_the_suite() -> None:
    with pytest.raises(UsageError, match="blocked"):
        check_model_requests_allowed("openai:gpt-x")


@pytest.mark.usefixtures("restore_block")
def test_allow_model_requests_switch() -> None:
    allow_model_requests(True)
    check_model_requests_allowed("openai:gpt-x")  # does not raise
    allow_model_requests(False)
    with pytest.raises(UsageError) as info:
        check_model_requests_allowed("openai:gpt-x")
    assert "openai:gpt-x" in str(info.value)


async def test_test_doubles_work_while_blocked() -> None:
    with pytest.raises(UsageError):
        check_model_requests_allowed("anything")
    assert (await ScriptedModel(["fine"]).request(ask())).text == "fine"
