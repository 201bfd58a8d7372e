"""Model strings: ``provider:name`` resolved to a model object.

Built in:

* ``scripted:PATH`` — a ScriptedModel whose replies are read from a JSON file: a list of
  replies, or ``{"replies": [...], "latency": seconds}``. An object reply becomes structured
  output, a string reply text, and ``{"$tool_calls": [{"name": ..., "arguments": {...}}]}``
  a request to call tools.
* ``object:package.module:attribute`` — any model object importable from Python (or a
  function of no arguments that returns one).
* ``anthropic:MODEL`` — Claude on Anthropic's Messages API (the ``anthropic`` extra); the key from
  ``ANTHROPIC_API_KEY``, the base URL from ``ANTHROPIC_BASE_URL`` when set.

and ``openai:``, ``ollama:``, ``vllm:``, ``lmstudio:``, ``llamacpp:`` and ``openai-compatible:``
(see :mod:`planexec.models._openai`), and ``openai-responses:`` (OpenAI's Responses API, see
:mod:`planexec.models._openai_responses`). ``A | B`` is an ordered fallback list of any of these.

These are the factories of ``Providers.default()``; more are added to a
:class:`~planexec.models.Providers` value with ``with_provider``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from planexec._util.extras import install_hint
from planexec._util.strict_json import MAX_DEPTH
from planexec._util.strict_json import loads as strict_loads
from planexec.errors import ModelNotFound, Problem
from planexec.models._base import Model, ModelResponse
from planexec.models._scripted import Reply, ScriptedModel, tool_calls

__all__ = ["BUILT_IN_PROVIDERS", "ProviderFactory"]

ProviderFactory = Callable[[str], Model]
"""Makes the model a ``provider:name`` string names, from its ``name``."""


def _scripted_reply(item: Any) -> Reply:
    if isinstance(item, dict) and "$tool_calls" in item:
        return tool_calls(*((c["name"], c.get("arguments", {})) for c in item["$tool_calls"]))
    if isinstance(item, dict) and "$text" in item:
        return ModelResponse(text=str(item["$text"]))
    if isinstance(item, dict | list | str):
        return item
    raise ModelNotFound(f"a scripted reply must be an object, a list or a string, not {type(item).__name__}")


SCRIPT_BYTES = 16 * 1024 * 1024
"""The largest ``scripted:`` file read."""


def _scripted_from_file(path: str) -> Model:
    file = Path(path)
    try:
        with file.open("rb") as handle:
            raw = handle.read(SCRIPT_BYTES + 1)
        if len(raw) > SCRIPT_BYTES:
            raise ValueError(f"the file is larger than {SCRIPT_BYTES:,} bytes, the most a script may be")
        data = strict_loads(raw.decode("utf-8"), max_depth=MAX_DEPTH + 10)
    except (OSError, ValueError) as e:
        raise ModelNotFound(
            f"cannot read the script {path!r}", [Problem(code="script_file", where=path, message=str(e))]
        ) from e
    latency = 0.0
    if isinstance(data, dict):
        latency = float(data.get("latency", 0.0))
        data = data.get("replies")
    if not isinstance(data, list):
        raise ModelNotFound(f'the script {path!r} must be a list of replies or {{"replies": [...]}}')
    return ScriptedModel([_scripted_reply(x) for x in data], name=f"scripted:{file.name}", latency=latency)


def _import_object(ref: str) -> Model:
    module_name, sep, attr = ref.partition(":")
    if not sep:
        raise ModelNotFound(f"object model {ref!r} needs the form package.module:attribute")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ModelNotFound(f"cannot import {ref!r}", [Problem(code="import", where=ref, message=str(e))]) from e
    if not isinstance(obj, Model) and callable(obj):
        obj = obj()
    if not isinstance(obj, Model):
        raise ModelNotFound(f"{ref!r} is not a model: it needs a name and an async request() method")
    return obj


def _anthropic_model(name: str) -> Model:
    """``anthropic:claude-…``: the SDK is imported (and its absence reported) when the model is built."""
    from planexec.models._anthropic import AnthropicModel

    return AnthropicModel(name)


def _openai_family(provider: str) -> ProviderFactory:
    """A factory that imports the OpenAI adapter only when a model string asks for it."""

    def factory(rest: str) -> Model:
        try:
            if provider == "openai-responses":
                from planexec.models._openai_responses import OpenAIResponsesModel

                return OpenAIResponsesModel(rest)
            from planexec.models._openai import model_from_string
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in ("openai", "httpx2", "httpx"):
                raise
            raise ModelNotFound(
                f"{provider}:{rest} needs the OpenAI SDK",
                [Problem(code="missing_extra", where=provider, message=install_hint("openai"))],
            ) from e
        return model_from_string(provider, rest)

    return factory


_OPENAI_FAMILY = ("openai", "openai-responses", "ollama", "vllm", "lmstudio", "llamacpp", "openai-compatible")

BUILT_IN_PROVIDERS: Mapping[str, ProviderFactory] = MappingProxyType(
    {
        "scripted": _scripted_from_file,
        "object": _import_object,
        **{name: _openai_family(name) for name in _OPENAI_FAMILY},
        "anthropic": _anthropic_model,
    }
)
"""The providers every :class:`~planexec.models.Providers` value starts from."""
