"""Per-model profiles, JSON Schemas made strict, and the model strings of OpenAI-style providers."""

from __future__ import annotations

import copy
import sys
from datetime import date
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from planexec.errors import ModelNotFound
from planexec.models import ModelProfile, OpenAIModel, known_providers, profile_for, resolve_model, strict_json_schema
from planexec.models._profiles import COMPATIBLE, OPENAI
from planexec.plan._plan import FinalAnswer, PlanDraft, Turn

# -- strict JSON Schema ------------------------------------------------------------------------


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    name: str = Field(min_length=1, description="Its name.")


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"
    name: str
    good: bool = True


class Owner(BaseModel):
    name: str
    born: date | None = None
    pets: list[Annotated[Cat | Dog, Field(discriminator="kind")]] = []
    best_friend: Dog | None = None
    homepage: str = Field(default="", json_schema_extra={"format": "uri"})


class Node(BaseModel):
    label: str
    children: list[Node] = []


def objects(schema: Any) -> list[dict[str, Any]]:
    """Every object schema inside ``schema``."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found += objects(value)
    elif isinstance(schema, list):
        for value in schema:
            found += objects(value)
    return found


def keys(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        return set(schema) | {k for v in schema.values() for k in keys(v)}
    if isinstance(schema, list):
        return {k for v in schema for k in keys(v)}
    return set()


def test_a_pydantic_schema_made_strict() -> None:
    original = Owner.model_json_schema()
    before = copy.deepcopy(original)
    strict = strict_json_schema(original)
    assert strict is not None
    assert original == before  # not changed in place

    assert set(strict["$defs"]) == {"Cat", "Dog"}
    for obj in objects(strict):
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    assert not keys(strict) & {"default", "discriminator", "oneOf", "minLength"}
    pets = strict["properties"]["pets"]["items"]
    assert pets == {"anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}
    assert strict["properties"]["born"]["anyOf"][0] == {"type": "string", "format": "date"}
    assert "format" not in strict["properties"]["homepage"]  # not a format strict mode knows

    # A reply that fits the strict schema fits the original, and the model reads it back.
    reply = {
        "name": "Ada",
        "born": "1815-12-10",
        "pets": [{"kind": "cat", "name": "Tom"}, {"kind": "dog", "name": "Rex", "good": True}],
        "best_friend": None,
        "homepage": "",
    }
    jsonschema.validate(reply, strict)
    jsonschema.validate(reply, original)
    assert Owner.model_validate(reply).pets[1] == Dog(name="Rex")


def test_a_model_that_refers_to_itself() -> None:
    strict = strict_json_schema(Node.model_json_schema())
    assert strict is not None
    assert strict["type"] == "object"
    assert strict["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    jsonschema.validate({"label": "a", "children": [{"label": "b", "children": []}]}, strict)


def test_planexec_schemas() -> None:
    answer = strict_json_schema(FinalAnswer.model_json_schema())
    assert answer is not None
    assert answer["required"] == ["answer"]
    # Plans carry free-form tool arguments: no strict form, so they are sent non-strict.
    assert strict_json_schema(PlanDraft.model_json_schema()) is None
    assert strict_json_schema(Turn.model_json_schema()) is None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}},
        {"type": "object"},
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
        {"type": "object", "additionalProperties": {"type": "integer"}, "properties": {}},
        {"type": "object", "properties": {"a": {}}},
        {"type": "object", "properties": {"a": {"type": "array"}}},
        {"type": "object", "properties": {"a": {"not": {"type": "string"}}}},
        {"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"^x": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"minLength": 2}]}}},
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}},
    ],
)
def test_schemas_without_a_strict_form(schema: dict[str, Any]) -> None:
    assert strict_json_schema(schema) is None


def test_small_rewrites() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"allOf": [{"$ref": "#/definitions/A"}], "description": "an A"},
            "b": {"type": "string", "maxLength": 5, "pattern": "^x"},
            "c": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
        },
        "definitions": {"A": {"properties": {"x": {"type": "number"}}}},
    }
    assert strict_json_schema(schema) == {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "b": {"type": "string", "pattern": "^x"},
            "c": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
        },
        "required": ["a", "b", "c"],
        "additionalProperties": False,
        "$defs": {
            "A": {
                "type": "object",
                "properties": {"x": {"type": "number"}},
                "required": ["x"],
                "additionalProperties": False,
            }
        },
    }


# -- profiles ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "strict", "json_mode", "temperature", "cap"),
    [
        ("openai", "gpt-4o-mini", True, True, True, "max_completion_tokens"),
        ("openai", "gpt-4.1-2025-04-14", True, True, True, "max_completion_tokens"),
        ("openai", "o3-mini", True, True, False, "max_completion_tokens"),
        ("openai", "gpt-5-nano", True, True, False, "max_completion_tokens"),
        ("openai", "gpt-4-turbo", False, True, True, "max_completion_tokens"),
        ("openai", "gpt-4-0613", False, False, True, "max_completion_tokens"),
        ("openai", "some-future-model", True, True, True, "max_completion_tokens"),
        ("ollama", "qwen2.5", False, True, True, "max_tokens"),
        ("vllm", "meta-llama/Llama-3.1-8B-Instruct", False, True, True, "max_tokens"),
        ("llamacpp", "any", False, True, True, "max_tokens"),
        ("lmstudio", "any", False, False, True, "max_tokens"),
        ("my-gateway", "any", False, True, True, "max_tokens"),
    ],
)
def test_default_profiles(
    provider: str, model: str, strict: bool, json_mode: bool, temperature: bool, cap: str
) -> None:
    profile = profile_for(provider, model)
    assert isinstance(profile, ModelProfile)
    assert (profile.strict_json_schema, profile.json_mode, profile.temperature) == (strict, json_mode, temperature)
    assert profile.max_tokens_param == cap
    assert profile.tools


def test_a_profile_can_be_given() -> None:
    mine = ModelProfile(strict_json_schema=False, tools=False)
    assert OpenAIModel("gpt-4o", api_key="k", profile=mine).profile is mine
    assert OpenAIModel("gpt-4o", api_key="k").profile == OPENAI


# -- model strings -----------------------------------------------------------------------------


def test_the_providers_are_registered() -> None:
    assert {"openai", "ollama", "vllm", "lmstudio", "llamacpp", "openai-compatible"} <= set(known_providers())


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ("OLLAMA_BASE_URL", "VLLM_BASE_URL", "VLLM_API_KEY", "LMSTUDIO_BASE_URL", "LLAMACPP_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("spec", "name", "base_url", "profile"),
    [
        ("ollama:qwen2.5", "ollama:qwen2.5", "http://localhost:11434/v1", COMPATIBLE),
        ("vllm:Qwen/Qwen2.5-7B-Instruct", "vllm:Qwen/Qwen2.5-7B-Instruct", "http://localhost:8000/v1", COMPATIBLE),
        ("lmstudio:qwen2.5-7b", "lmstudio:qwen2.5-7b", "http://localhost:1234/v1", profile_for("lmstudio", "")),
        ("llamacpp:local", "llamacpp:local", "http://localhost:8080/v1", COMPATIBLE),
        (
            "openai-compatible:mistral@http://127.0.0.1:9000/v1",
            "openai-compatible:mistral@http://127.0.0.1:9000/v1",
            "http://127.0.0.1:9000/v1",
            COMPATIBLE,
        ),
    ],
)
def test_compatible_model_strings(
    clean_env: pytest.MonkeyPatch, spec: str, name: str, base_url: str, profile: ModelProfile
) -> None:
    model = resolve_model(spec)
    assert isinstance(model, OpenAIModel)
    assert (model.name, model.base_url, model.profile, model.limits_key) == (name, base_url, profile, base_url)
    assert resolve_model(model.name).name == model.name  # the name resolves back to the same model


def test_base_urls_and_keys_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OLLAMA_BASE_URL", "http://127.0.0.1:11500")
    clean_env.setenv("VLLM_BASE_URL", "http://127.0.0.1:8001/v1/")
    clean_env.setenv("OPENAI_API_KEY", "sk-env")
    ollama = resolve_model("ollama:llama3.1")
    vllm = resolve_model("vllm:m")
    openai_model = resolve_model("openai:gpt-4o-mini")
    assert isinstance(ollama, OpenAIModel)
    assert isinstance(vllm, OpenAIModel)
    assert isinstance(openai_model, OpenAIModel)
    assert ollama.base_url == "http://127.0.0.1:11500/v1"  # the API path is added
    assert vllm.base_url == "http://127.0.0.1:8001/v1"
    assert (openai_model.name, openai_model.base_url, openai_model.limits_key) == ("openai:gpt-4o-mini", None, "openai")


@pytest.mark.parametrize("spec", ["openai-compatible:mistral", "openai-compatible:@http://127.0.0.1:9/v1"])
def test_a_compatible_string_needs_a_server(spec: str) -> None:
    with pytest.raises(ModelNotFound, match="openai-compatible"):
        resolve_model(spec)


def test_without_the_sdk_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # importing it now fails as if not installed
    monkeypatch.delitem(sys.modules, "planexec.models._openai")
    with pytest.raises(ModelNotFound) as info:
        resolve_model("ollama:qwen2.5")
    assert "pip install -e '.[openai]' in a clone of planexec" in str(info.value)
    import planexec.models

    with pytest.raises(ImportError, match=r"pip install -e '\.\[openai\]'"):
        planexec.models.__getattr__("OpenAIModel")
