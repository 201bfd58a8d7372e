"""What an OpenAI-style chat server can do, per provider and model family, and JSON Schemas made
fit for OpenAI's strict structured output.

A :class:`ModelProfile` holds the capability flags the OpenAI adapter reads to shape a request:
which kind of structured output to ask for, whether tools and streamed usage are available, the
name of the output-token cap, and which :class:`ModelSettings` fields the model accepts (a field it
does not accept is dropped, and a run records that it was). :func:`profile_for` picks a
default by provider and model name; pass ``profile=`` to ``OpenAIModel`` to override it.

:func:`strict_json_schema` rewrites a JSON Schema (a pydantic or planexec one, ``$defs``
included) into the subset that strict mode accepts, or returns ``None`` when that cannot be
done without changing what the schema means; the adapter then sends the schema non-strict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

__all__ = ["LocalServer", "ModelProfile", "local_server", "profile_for", "strict_json_schema"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelProfile:
    """Capabilities of one model behind an OpenAI-style chat completions endpoint.

    For a request that asks for structured output the adapter uses, in this order: strict JSON
    Schema (``strict_json_schema``, when the schema can be made strict), non-strict JSON Schema
    (``json_schema``), JSON mode plus the schema in the system message (``json_mode``), and
    finally the schema in the system message alone. The planner validates whatever comes back
    and sends any problems to the model for repair.
    """

    strict_json_schema: bool = True
    """``response_format={"type": "json_schema", ..., "strict": true}`` is honoured."""
    json_schema: bool = True
    """``response_format={"type": "json_schema", ...}`` is accepted (without ``strict``)."""
    json_mode: bool = True
    """``response_format={"type": "json_object"}`` is accepted."""
    tools: bool = True
    """Function tools can be offered."""
    streaming_usage: bool = True
    """``stream_options={"include_usage": true}`` is accepted (usage then arrives in the last chunk)."""
    max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens"
    """The request field that caps output tokens."""
    temperature: bool = True
    """A temperature may be sent (OpenAI's reasoning models reject one)."""
    top_p: bool = True
    """``top_p`` may be sent (OpenAI's reasoning models reject it)."""
    stop: bool = True
    """Stop sequences may be sent (OpenAI's reasoning models reject them)."""
    seed: bool = True
    """A ``seed`` may be sent."""
    reasoning_effort: bool = False
    """``reasoning_effort`` may be sent (OpenAI's reasoning models; others answer 400)."""
    prompt_cache_key: bool = False
    """``prompt_cache_key`` may be sent (OpenAI's own API: requests with one key are routed to the
    same prompt cache); a request's ``cache_key`` is sent only then."""


OPENAI = ModelProfile(prompt_cache_key=True)
"""OpenAI's current chat models: everything."""

_OPENAI_REASONING = replace(OPENAI, temperature=False, top_p=False, stop=False, reasoning_effort=True)
_OPENAI_JSON_MODE_ONLY = replace(OPENAI, strict_json_schema=False, json_schema=False)
_OPENAI_NO_JSON = replace(_OPENAI_JSON_MODE_ONLY, json_mode=False)

_OPENAI_FAMILIES: dict[str, ModelProfile] = {
    "gpt-4o": OPENAI,
    "gpt-4.1": OPENAI,
    "gpt-5": _OPENAI_REASONING,
    "o1": _OPENAI_REASONING,
    "o3": _OPENAI_REASONING,
    "o4": _OPENAI_REASONING,
    "gpt-4-turbo": _OPENAI_JSON_MODE_ONLY,
    "gpt-3.5-turbo": _OPENAI_JSON_MODE_ONLY,
    "gpt-4": _OPENAI_NO_JSON,
}

COMPATIBLE = ModelProfile(
    strict_json_schema=False,
    json_schema=False,
    json_mode=True,
    tools=True,
    streaming_usage=True,
    max_tokens_param="max_tokens",
)
"""Servers that speak OpenAI's protocol for other models (vLLM, Ollama, llama.cpp, …).

JSON mode rather than JSON Schema: these servers turn a schema into a decoding grammar, and
which schema features survive (``$ref``/``$defs``, ``anyOf``, ``pattern``, formats, …) depends
on the server, its version and its decoding backend; an unsupported feature either fails the
request or is silently dropped. Plan schemas use several of those features. JSON mode always
yields well-formed JSON, the schema travels in the system message, and the planner validates
the reply and asks for repairs, so the outcome does not depend on the server's grammar support.
"""

_LMSTUDIO = replace(COMPATIBLE, json_schema=True, json_mode=False)
"""LM Studio answers ``json_object`` with 400 ("'response_format.type' must be 'json_schema' or
'text'"), so it gets a non-strict JSON Schema instead of JSON mode."""

_PROVIDERS: dict[str, ModelProfile] = {
    "ollama": COMPATIBLE,
    "vllm": COMPATIBLE,
    "llamacpp": COMPATIBLE,
    "lmstudio": _LMSTUDIO,
    "openai-compatible": COMPATIBLE,
}


def profile_for(provider: str, model: str) -> ModelProfile:
    """The default profile of ``model`` served by ``provider``.

    OpenAI models take their family's profile (the longest family name the model name starts
    with; unknown names get full support); other providers take their server's profile, and an
    unknown provider the conservative profile of an OpenAI-compatible server.
    """
    if provider == "openai":
        family = max((f for f in _OPENAI_FAMILIES if model.startswith(f)), key=len, default=None)
        return _OPENAI_FAMILIES[family] if family is not None else OPENAI
    return _PROVIDERS.get(provider, COMPATIBLE)


# -- local servers ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalServer:
    """Where a named OpenAI-compatible server listens by default, and where to override that."""

    base_url_env: str
    default_base_url: str
    api_key_env: str | None = None

    def base_url(self) -> str:
        url = os.environ.get(self.base_url_env) or self.default_base_url
        return _with_api_path(url)


_LOCAL_SERVERS: dict[str, LocalServer] = {
    "ollama": LocalServer(base_url_env="OLLAMA_BASE_URL", default_base_url="http://localhost:11434/v1"),
    "vllm": LocalServer(
        base_url_env="VLLM_BASE_URL", default_base_url="http://localhost:8000/v1", api_key_env="VLLM_API_KEY"
    ),
    "lmstudio": LocalServer(base_url_env="LMSTUDIO_BASE_URL", default_base_url="http://localhost:1234/v1"),
    "llamacpp": LocalServer(base_url_env="LLAMACPP_BASE_URL", default_base_url="http://localhost:8080/v1"),
}


def local_server(provider: str) -> LocalServer | None:
    """The defaults of a named local server (``ollama``, ``vllm``, ``lmstudio``, ``llamacpp``)."""
    return _LOCAL_SERVERS.get(provider)


def _with_api_path(url: str) -> str:
    """``http://host:port`` → ``http://host:port/v1``: the SDK needs the API path in the base URL."""
    url = url.rstrip("/")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


# -- strict JSON Schema ----------------------------------------------------------------------

_STRUCTURE = {"type", "properties", "required", "additionalProperties", "items", "anyOf", "$ref", "$defs"}
_KEPT = {"description", "title", "enum", "const", "pattern", "minimum", "maximum"} | {
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
}
_DROPPED = {"default", "examples", "discriminator", "$schema", "$id", "$comment", "deprecated", "readOnly"} | {
    "writeOnly",
    # Validation keywords strict mode does not take; the reply is validated against the full
    # schema afterwards, so dropping them loosens the grammar without losing a check.
    "minLength",
    "maxLength",
    "uniqueItems",
    "minProperties",
    "maxProperties",
}
_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}


class _NotStrict(Exception):
    """Internal: a schema uses something strict mode cannot express."""


def strict_json_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` rewritten for OpenAI's strict mode, or ``None`` when it cannot be.

    Every object gets ``additionalProperties: false`` and lists all its properties as required
    (a reply that fits the result also fits the original: optional fields are simply always
    given); ``oneOf`` becomes ``anyOf``; a one-element ``allOf`` is unwrapped; annotations such
    as ``default`` and ``discriminator``, and the few validation keywords strict mode rejects,
    are dropped. It cannot be done for a root that is not an object, free-form objects
    (``additionalProperties`` true or a schema, or no ``properties``), arrays without
    ``items``, and keywords such as ``not``, ``if``, ``patternProperties`` or a many-element
    ``allOf``. The provider's own size and depth limits are not checked here.
    """
    try:
        defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
        strict_defs = {name: _strict(sub, f"#/$defs/{name}") for name, sub in defs.items()}
        root = _strict(schema, "#")
        ref = root.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in strict_defs:
            root = dict(strict_defs[ref[8:]])  # a model that refers to itself: its definition is the root
        if not _is_object(root):
            raise _NotStrict("#: the root must be an object")
    except _NotStrict:
        return None
    if strict_defs:
        root["$defs"] = strict_defs
    return root


def _is_object(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _strict(node: Any, where: str) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        raise _NotStrict(f"{where}: not a schema object")
    node = _unwrap(node, where)
    if "$ref" in node:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _NotStrict(f"{where}: only local references can be strict")
        return {"$ref": ref.replace("#/definitions/", "#/$defs/")}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$defs", "definitions"):
            continue  # collected once, at the root
        if key in _DROPPED or (key == "format" and value not in _FORMATS):
            continue
        if key in _KEPT or key == "format":
            out[key] = value
        elif key == "anyOf":
            out["anyOf"] = [_strict(sub, f"{where}/anyOf/{i}") for i, sub in enumerate(value)]
        elif key == "items":
            out["items"] = _strict(value, f"{where}/items")
        elif key not in _STRUCTURE:
            raise _NotStrict(f"{where}: {key!r} has no strict form")
    if "type" in node:
        out["type"] = node["type"]
    if _is_object(node) or "properties" in node:
        out.setdefault("type", "object")
        out.update(_strict_object(node, where))
    if not {"type", "anyOf", "enum", "const"} & out.keys():
        raise _NotStrict(f"{where}: a schema that allows any value cannot be strict")
    kinds = node.get("type")
    if (kinds == "array" or (isinstance(kinds, list) and "array" in kinds)) and "items" not in node:
        raise _NotStrict(f"{where}: an array needs items")
    return out


def _unwrap(node: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``oneOf`` → ``anyOf``; a one-element ``allOf`` → its element (annotations beside it dropped)."""
    if "oneOf" in node:
        if "anyOf" in node:
            raise _NotStrict(f"{where}: oneOf beside anyOf")
        node = {("anyOf" if k == "oneOf" else k): v for k, v in node.items()}
    if "allOf" in node:
        parts = node["allOf"]
        if not isinstance(parts, list) or len(parts) != 1:
            raise _NotStrict(f"{where}: allOf of several schemas")
        rest = {k: v for k, v in node.items() if k != "allOf" and k not in _KEPT and k not in _DROPPED}
        if rest:
            raise _NotStrict(f"{where}: allOf beside {sorted(rest)}")
        inner = parts[0]
        if not isinstance(inner, Mapping):
            raise _NotStrict(f"{where}: allOf element is not a schema")
        return inner
    return node


def _strict_object(node: Mapping[str, Any], where: str) -> dict[str, Any]:
    properties = node.get("properties")
    extra = node.get("additionalProperties", False)
    if not isinstance(properties, Mapping) or extra is not False:
        raise _NotStrict(f"{where}: a free-form object cannot be strict")
    return {
        "properties": {name: _strict(sub, f"{where}/properties/{name}") for name, sub in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }
