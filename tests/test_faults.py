"""Seeded fault profiles: the decisions, the wrapped tools and models, and building profiles."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

import planexec.faults
from planexec import Tool, ToolContext, TransientToolError, UsageError, tool
from planexec.faults import MALFORMED, PROFILES, FaultProfile, FaultyModel, tool_fault_key, unknown_tool_name
from planexec.faults._draw import draw
from planexec.models import (
    FunctionModel,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelRetryPolicy,
    ScriptedModel,
    StreamDelta,
    StreamingModel,
    StreamingScriptedModel,
    Usage,
)

KEYS = [f"step{i}:v1" for i in range(1000)]


def ctx(key: str, attempt: int = 1, run_id: str = "run-a") -> ToolContext:
    return ToolContext(run_id=run_id, step_id="s", attempt=attempt, idempotency_key=f"{run_id}:{key}")


def planner_request(purpose: str = "planner.propose") -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content="goal"),), purpose=purpose)


PLAN: dict[str, Any] = {
    "reason": "two lookups",
    "steps": [
        {"id": "a", "description": "a", "tool": "search", "args": {"q": "x"}},
        {"id": "b", "description": "b", "executor": "writer"},
        {"id": "c", "description": "c", "tool": "fetch", "args": {"url": "u"}},
    ],
}
TURN: dict[str, Any] = {"thought": "t", "confidence": 0.9, "stop": False, "step": PLAN["steps"][0]}


# -- the decisions ---------------------------------------------------------------------------


def test_draws_are_stable_across_processes_and_versions() -> None:
    # A sha256 of the JSON of the inputs: pinned, so a change of the scheme is a visible change.
    digest = hashlib.sha256(b'[0,"tool.error","search","s1:v1",1]').digest()
    assert draw(0, "tool.error", "search", "s1:v1", 1) == int.from_bytes(digest[:8], "big") / 2**64
    assert draw(0, "tool.error", "search", "s1:v1", 1) == pytest.approx(0.0707239048, abs=1e-9)
    assert draw(0, "tool.error", "search", "s1:v1", 1) == draw(0, "tool.error", "search", "s1:v1", 1)
    assert draw(0, "tool.error", "search", "s1:v1", 2) != draw(0, "tool.error", "search", "s1:v1", 1)
    assert all(0 <= draw(s, "k", "x") < 1 for s in range(200))


@pytest.mark.parametrize(
    ("field", "fault", "expected_at_0_3"),
    [
        ("tool_error_rate", "error", 287),
        ("tool_timeout_rate", "timeout", 325),
        ("malformed_output_rate", "malformed", 290),
    ],
)
def test_each_tool_fault_is_injected_at_its_rate(field: str, fault: str, expected_at_0_3: int) -> None:
    def count(rate: float) -> int:
        profile = FaultProfile.from_mapping({"seed": 1, field: rate})
        return sum(profile.tool_fault("search", key, 1) == fault for key in KEYS)

    assert count(1.0) == len(KEYS)
    assert count(0.0) == 0
    assert count(0.3) == expected_at_0_3  # deterministic for the seed, and about 30%
    assert 250 < expected_at_0_3 < 350


def test_tool_faults_take_error_then_timeout_then_malformed_when_several_hit() -> None:
    every = FaultProfile(tool_error_rate=1, tool_timeout_rate=1, malformed_output_rate=1)
    assert {every.tool_fault("t", k, 1) for k in KEYS[:50]} == {"error"}
    no_error = FaultProfile(tool_timeout_rate=1, malformed_output_rate=1)
    assert {no_error.tool_fault("t", k, 1) for k in KEYS[:50]} == {"timeout"}


def test_the_same_seed_gives_the_same_decisions_and_another_seed_others() -> None:
    def decisions(seed: int) -> list[str | None]:
        profile = FaultProfile(seed=seed, tool_error_rate=0.2, tool_timeout_rate=0.1, malformed_output_rate=0.1)
        return [
            profile.tool_fault(tool_name, key, attempt)
            for tool_name in ("a", "b")
            for key in KEYS[:200]
            for attempt in (1, 2)
        ]

    assert decisions(7) == decisions(7)
    assert decisions(7) != decisions(8)
    # Every part of the key matters: the tool, the key and the attempt.
    profile = FaultProfile(seed=7, tool_error_rate=0.5)
    by_tool = [profile.tool_fault("a", k, 1) for k in KEYS[:100]]
    assert by_tool != [profile.tool_fault("b", k, 1) for k in KEYS[:100]]
    assert by_tool != [profile.tool_fault("a", k, 2) for k in KEYS[:100]]


def test_model_faults_hit_planner_answers_at_their_rates_and_nothing_else() -> None:
    def count(profile: FaultProfile, fault: str, purpose: str = "planner.propose") -> int:
        return sum(profile.model_fault("planner", purpose, n) == fault for n in range(1, 1001))

    bad_json = FaultProfile(seed=3, invalid_planner_json_rate=0.3)
    assert count(bad_json, "invalid_json") == 328
    assert count(FaultProfile(invalid_planner_json_rate=1), "invalid_json") == 1000
    assert count(FaultProfile(invalid_planner_json_rate=1), "invalid_json", "executor") == 0
    assert count(FaultProfile(invalid_planner_json_rate=1), "invalid_json", "judge") == 0
    unknown = FaultProfile(seed=3, unknown_tool_rate=0.3)
    assert count(unknown, "unknown_tool") == 307
    assert count(FaultProfile(unknown_tool_rate=1), "unknown_tool", "planner.turn") == 1000
    assert count(FaultProfile(), "invalid_json") + count(FaultProfile(), "unknown_tool") == 0
    both = FaultProfile(invalid_planner_json_rate=1, unknown_tool_rate=1)
    assert both.model_fault("planner", "planner.patch", 1) == "invalid_json"


def test_tool_fault_key_leaves_out_the_run_id() -> None:
    assert tool_fault_key(ctx("s1:v2")) == "s1:v2"
    assert tool_fault_key(ctx("s1:v2:call_1", run_id="other")) == "s1:v2:call_1"
    hand_made = ToolContext(run_id="r", step_id="s", attempt=1, idempotency_key="my-key")
    assert tool_fault_key(hand_made) == "my-key"


# -- wrapped tools ---------------------------------------------------------------------------


@tool(timeout=5, side_effect=True, idempotent=True, max_concurrency=2)
async def count_words(text: str) -> int:
    """Count words."""
    return len(text.split())


@tool
async def profile_of(name: str) -> dict[str, str]:
    """A profile."""
    return {"name": name}


@tool
async def shout(text: str) -> str:
    """Upper case."""
    return text.upper()


@tool
async def anything(x: int):  # type: ignore[no-untyped-def]  # no return annotation: no output schema
    """Whatever."""
    return [x]


def test_wrapped_tools_keep_their_schemas_and_flags() -> None:
    originals = [count_words, profile_of, shout]
    wrapped = FaultProfile(tool_error_rate=1).wrap_tools(originals)
    assert len(wrapped) == len(originals)
    for before, after in zip(originals, wrapped, strict=True):
        assert after is not before
        assert after.invoke is not before.invoke
        assert dataclasses.replace(after, invoke=before.invoke) == before  # name, schemas, timeout, retry, flags
        assert after.spec() == before.spec()
        assert after.validator is before.validator
        assert after.output_validator is before.output_validator
    assert (wrapped[0].side_effect, wrapped[0].idempotent, wrapped[0].max_concurrency, wrapped[0].timeout) == (
        True,
        True,
        2,
        5,
    )


def test_wrap_tools_says_what_is_wrong_with_its_input() -> None:
    with pytest.raises(UsageError, match=r"pass \[tool\]"):
        FaultProfile().wrap_tools(count_words)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not a Tool"):
        FaultProfile().wrap_tools(["count_words"])  # type: ignore[list-item]


async def test_a_wrapped_tool_fails_times_out_or_returns_garbage_as_decided() -> None:
    calls: list[str] = []

    @tool
    async def echo(text: str) -> dict[str, str]:
        """Echo."""
        calls.append(text)
        return {"text": text}

    [errors] = FaultProfile(tool_error_rate=1).wrap_tools([echo])
    with pytest.raises(TransientToolError, match=r"injected fault: echo failed \(attempt 2\)"):
        await errors.invoke({"text": "a"}, ctx("s1:v1", attempt=2))
    [timeouts] = FaultProfile(tool_timeout_rate=1).wrap_tools([echo])
    with pytest.raises(TimeoutError, match="injected timeout: echo did not answer"):
        await timeouts.invoke({"text": "a"}, ctx("s1:v1"))
    assert calls == []  # neither reached the tool

    [garbage] = FaultProfile(malformed_output_rate=1).wrap_tools([echo])
    assert await garbage.invoke({"text": "a"}, ctx("s1:v1")) == MALFORMED
    assert calls == ["a"]  # the tool ran; its answer was garbage
    [clean] = FaultProfile().wrap_tools([echo])
    assert await clean.invoke({"text": "b"}, ctx("s1:v1")) == {"text": "b"}


@pytest.mark.parametrize(
    ("original", "args"),
    [(count_words, {"text": "a b"}), (profile_of, {"name": "n"}), (shout, {"text": "hi"}), (anything, {"x": 1})],
)
async def test_malformed_output_does_not_fit_the_output_schema(original: Tool, args: dict[str, Any]) -> None:
    [wrapped] = FaultProfile(malformed_output_rate=1).wrap_tools([original])
    real = await original.invoke(args, ctx("s1:v1"))
    output = await wrapped.invoke(args, ctx("s1:v1"))
    assert type(output) is not type(real)
    if original.output_schema is not None:
        with pytest.raises(ValueError, match=r"."):
            wrapped.check_output(output)


async def test_wrapped_tools_decide_by_step_and_attempt_not_by_run_or_order() -> None:
    profile = FaultProfile(seed=11, tool_error_rate=0.5)
    [wrapped] = profile.wrap_tools([shout])

    async def outcomes(run_id: str, keys: list[str]) -> dict[tuple[str, int], str]:
        seen: dict[tuple[str, int], str] = {}
        for key in keys:
            for attempt in (1, 2, 3):
                try:
                    await wrapped.invoke({"text": "x"}, ctx(key, attempt, run_id=run_id))
                    seen[key, attempt] = "ok"
                except TransientToolError:
                    seen[key, attempt] = "error"
        return seen

    first = await outcomes("run-1", KEYS[:40])
    assert first == await outcomes("run-2", list(reversed(KEYS[:40])))
    assert set(first.values()) == {"ok", "error"}
    expected = {(k, a): "error" if profile.tool_fault("shout", k, a) else "ok" for k in KEYS[:40] for a in (1, 2, 3)}
    assert first == expected


# -- wrapped models --------------------------------------------------------------------------


def test_a_wrapped_model_streams_exactly_when_the_wrapped_one_does() -> None:
    profile = FaultProfile(invalid_planner_json_rate=1)
    plain = profile.wrap_model(ScriptedModel([], name="plain"))
    streaming = profile.wrap_model(StreamingScriptedModel([], name="streamer"))
    assert not isinstance(plain, StreamingModel)
    assert isinstance(streaming, StreamingModel)
    assert (plain.name, streaming.name) == ("plain", "streamer")
    assert isinstance(plain, FaultyModel)
    assert plain.inner.name == "plain"


async def test_an_invalid_json_fault_cuts_the_answer_in_half_and_drops_the_parsed_value() -> None:
    inner = ScriptedModel([PLAN, PLAN, {"result": 1}])
    model = FaultProfile(invalid_planner_json_rate=1).wrap_model(inner)
    response = await model.request(planner_request())
    whole = json.dumps(PLAN, ensure_ascii=False)
    assert response.parsed is None
    assert response.text == whole[: len(whole) // 2]
    with pytest.raises(ValueError, match=r"."):
        json.loads(response.text)
    assert (await model.request(planner_request("planner.patch"))).parsed is None
    untouched = await model.request(planner_request("executor"))
    assert untouched.parsed == {"result": 1}


async def test_an_unknown_tool_fault_renames_one_step_tool_in_a_plan_or_a_turn() -> None:
    inner = ScriptedModel([PLAN, TURN, {"answer": "42"}, json.dumps(PLAN)])
    model = FaultProfile(seed=5, unknown_tool_rate=1).wrap_model(inner)
    plan = (await model.request(planner_request())).parsed
    tools = [s.get("tool") for s in plan["steps"]]
    renamed = [t for t in tools if t is not None and t.startswith("no_such_tool_")]
    assert len(renamed) == 1
    assert renamed[0] in (unknown_tool_name("search"), unknown_tool_name("fetch"))
    assert PLAN["steps"][0]["tool"] == "search"  # the inner model's answer is not changed in place

    turn = await model.request(planner_request("planner.turn"))
    assert turn.parsed["step"]["tool"] == unknown_tool_name("search")
    assert json.loads(turn.text) == turn.parsed
    answer = await model.request(planner_request("planner.finish"))
    assert answer.parsed == {"answer": "42"}  # nothing to rename

    from_text = await model.request(planner_request())  # a text answer, parsed by the planner itself
    assert from_text.parsed is None
    assert sum(s.get("tool", "").startswith("no_such_tool_") for s in json.loads(from_text.text)["steps"]) == 1


async def test_model_faults_count_calls_per_purpose() -> None:
    profile = FaultProfile(seed=2, invalid_planner_json_rate=0.5)
    inner = FunctionModel(lambda r: PLAN)
    model = profile.wrap_model(inner)
    purposes = ["planner.propose", "planner.patch", "planner.propose", "planner.patch", "planner.propose"]
    got = [(await model.request(planner_request(p))).parsed is None for p in purposes]
    expected = [profile.model_fault("planner", "planner.propose", n) == "invalid_json" for n in (1, 2, 3)]
    expected_patch = [profile.model_fault("planner", "planner.patch", n) == "invalid_json" for n in (1, 2)]
    assert got == [expected[0], expected_patch[0], expected[1], expected_patch[1], expected[2]]
    # The role is part of the key: the same calls made to a judge's model meet other faults.
    assert [profile.model_fault("planner", "planner.propose", n) for n in range(1, 30)] != [
        profile.model_fault("judge", "planner.propose", n) for n in range(1, 30)
    ]


ONCE = ModelRetryPolicy(max_attempts=1)


async def test_a_rate_limit_storm_refuses_the_first_requests_of_each_wrapped_model() -> None:
    profile = FaultProfile(rate_limit_storm=2, invalid_planner_json_rate=0.5, seed=4)
    inner = FunctionModel(lambda r: PLAN, retry=ONCE)  # no retries: each refusal reaches the caller
    model = profile.wrap_model(inner)
    for n in (1, 2):
        with pytest.raises(ModelCallError, match=f"refused request {n} of a storm of 2") as caught:
            await model.request(planner_request())
        assert (caught.value.retryable, caught.value.status, caught.value.retry_after) == (True, 429, 0.0)
    assert inner.calls == []
    first = await model.request(planner_request())
    # Refused calls do not count: the first answer meets the fault of call 1, as without a storm.
    assert (first.parsed is None) == (profile.model_fault("planner", "planner.propose", 1) == "invalid_json")
    assert len(inner.calls) == 1
    other = profile.wrap_model(FunctionModel(lambda r: PLAN, retry=ONCE))
    with pytest.raises(ModelCallError):
        await other.request(planner_request())


async def test_a_storm_meets_the_retries_of_the_wrapped_model() -> None:
    """The shipped doubles retry as providers do, so a storm shorter than their attempts is absorbed."""
    profile = FaultProfile(rate_limit_storm=3)
    inner = FunctionModel(lambda r: PLAN)
    model = profile.wrap_model(inner)
    assert isinstance(model, FaultyModel)
    assert (await model.request(planner_request())).parsed == PLAN
    assert len(inner.calls) == 1  # the storm's requests never reached the model
    assert (model.refused, model.calls) == (3, 4)
    longer = FaultProfile(rate_limit_storm=5).wrap_model(FunctionModel(lambda r: PLAN))
    with pytest.raises(ModelCallError, match="refused request 4 of a storm of 5"):
        await longer.request(planner_request())  # four attempts, all refused
    assert (await longer.request(planner_request())).parsed == PLAN


async def collect(model: Any, request: ModelRequest) -> tuple[list[str], ModelResponse]:
    deltas: list[str] = []
    final: ModelResponse | None = None
    async for item in model.stream(request):
        if isinstance(item, StreamDelta):
            deltas.append(item.text)
        else:
            final = item
    assert final is not None
    return deltas, final


async def test_a_wrapped_streaming_model_streams_its_faults_consistently() -> None:
    script = [PLAN, PLAN, PLAN]
    clean = StreamingScriptedModel(script, chunks=5)
    clean_deltas, clean_final = await collect(clean, planner_request())

    profile = FaultProfile(invalid_planner_json_rate=1)
    model = profile.wrap_model(StreamingScriptedModel(script, chunks=5))
    deltas, final = await collect(model, planner_request())
    assert final.parsed is None
    assert "".join(deltas) == final.text == clean_final.text[: len(clean_final.text) // 2]
    assert len(deltas) == len(clean_deltas)

    renaming = FaultProfile(unknown_tool_rate=1).wrap_model(StreamingScriptedModel(script, chunks=5))
    deltas, final = await collect(renaming, planner_request())
    assert "".join(deltas) == final.text
    assert json.loads(final.text) == final.parsed
    assert final.parsed != PLAN

    untouched = FaultProfile(invalid_planner_json_rate=1).wrap_model(StreamingScriptedModel(script, chunks=5))
    deltas, final = await collect(untouched, planner_request("executor"))
    assert deltas == clean_deltas
    assert final == clean_final


async def test_a_storm_refuses_streamed_calls_too() -> None:
    model = FaultProfile(rate_limit_storm=1).wrap_model(StreamingScriptedModel([PLAN], retry=ONCE))
    with pytest.raises(ModelCallError, match="429"):
        await collect(model, planner_request())
    _, final = await collect(model, planner_request())
    assert final.parsed == PLAN
    retrying = FaultProfile(rate_limit_storm=2).wrap_model(StreamingScriptedModel([PLAN], chunks=3))
    deltas, final = await collect(retrying, planner_request())
    assert final.parsed == PLAN
    assert "".join(deltas) == final.text


def test_a_wrapped_model_passes_on_price_and_token_counting() -> None:
    scripted = ScriptedModel([], usage=Usage(input_tokens=42, output_tokens=1), cost_per_million=(1.0, 2.0))
    model = FaultProfile().wrap_model(scripted)
    assert isinstance(model, FaultyModel)
    assert model.price == scripted.price
    assert model.count_tokens(planner_request()) == 42

    class Bare:
        name = "bare"

        async def request(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(text="")

    bare = FaultProfile().wrap_model(Bare())
    assert isinstance(bare, FaultyModel)
    assert bare.price is None
    with pytest.raises(UsageError, match="not supported by bare"):
        bare.count_tokens(planner_request())


# -- building profiles -----------------------------------------------------------------------


def test_from_mapping_reads_yaml_or_json_data_and_round_trips() -> None:
    data = {"seed": 3, "tool_error_rate": 0.25, "rate_limit_storm": 2, "name": "mine", "unknown_tool_rate": 1}
    profile = FaultProfile.from_mapping(data)
    assert profile == FaultProfile(seed=3, tool_error_rate=0.25, rate_limit_storm=2, name="mine", unknown_tool_rate=1)
    assert FaultProfile.from_mapping(profile.to_mapping()) == profile
    assert FaultProfile.from_mapping({}) == FaultProfile()


def test_from_mapping_lists_every_problem_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        FaultProfile.from_mapping(
            {
                "seed": "seven",
                "tool_error_rate": 1.5,
                "tool_timeout_rate": -0.1,
                "malformed_output_rate": "often",
                "invalid_planner_json_rate": True,
                "rate_limit_storm": -1,
                "tool_eror_rate": 0.1,
                "colour": "red",
                "name": "",
            }
        )
    where = sorted(p.where for p in caught.value.problems)
    assert where == sorted(
        [
            "seed",
            "tool_error_rate",
            "tool_timeout_rate",
            "malformed_output_rate",
            "invalid_planner_json_rate",
            "rate_limit_storm",
            "tool_eror_rate",
            "colour",
            "name",
        ]
    )
    message = str(caught.value)
    assert "invalid fault profile (9 problems)" in message
    assert "must be from 0 to 1, got 1.5" in message
    assert "unknown key (known: seed, tool_error_rate" in message


def test_bad_values_are_refused_however_a_profile_is_built() -> None:
    with pytest.raises(UsageError, match="tool_error_rate: must be from 0 to 1, got nan"):
        FaultProfile(tool_error_rate=float("nan"))
    with pytest.raises(UsageError, match="expected a mapping, got list"):
        FaultProfile.from_mapping([("seed", 1)])  # type: ignore[arg-type]


def test_named_profiles_exist_and_take_a_seed() -> None:
    required = {
        "none",
        "flaky-tools",
        "slow-tools",
        "garbage-output",
        "bad-planner",
        "unknown-tools",
        "rate-limit-storm",
        "chaos",
    }
    assert required <= set(PROFILES)
    for name, profile in PROFILES.items():
        assert profile.name == name
        assert FaultProfile.named(name, seed=9) == FaultProfile.from_mapping({**profile.to_mapping(), "seed": 9})
    assert PROFILES["none"] == FaultProfile(name="none")
    assert not PROFILES["none"].injects_tool_faults
    assert not PROFILES["none"].injects_model_faults
    assert PROFILES["flaky-tools"].tool_error_rate > 0
    assert PROFILES["slow-tools"].tool_timeout_rate > 0
    assert PROFILES["garbage-output"].malformed_output_rate > 0
    assert PROFILES["bad-planner"].invalid_planner_json_rate > 0
    assert PROFILES["unknown-tools"].unknown_tool_rate > 0
    assert PROFILES["rate-limit-storm"].rate_limit_storm > 0
    chaos = PROFILES["chaos"]
    assert chaos.injects_tool_faults
    assert chaos.injects_model_faults
    with pytest.raises(UsageError, match="known profiles: none, flaky-tools"):
        FaultProfile.named("flakey-tools")
    with pytest.raises(TypeError):
        PROFILES["mine"] = FaultProfile()  # type: ignore[index]


def test_public_names() -> None:
    assert sorted(planexec.faults.__all__) == sorted(
        [
            "MALFORMED",
            "PROFILES",
            "FaultProfile",
            "FaultyModel",
            "FaultyStreamingModel",
            "ModelFault",
            "ToolFault",
            "tool_fault_key",
            "unknown_tool_name",
        ]
    )
    for name in planexec.faults.__all__:
        assert hasattr(planexec.faults, name)
