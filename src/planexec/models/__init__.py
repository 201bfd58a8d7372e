"""Models: the neutral interface, ``provider:name`` strings, provider adapters, and the shipped
test doubles. ``OpenAIModel`` and ``OpenAIResponsesModel`` are imported on first use: they need the
``openai`` extra.

Which providers model strings resolve through, what calls cost and how many calls each provider
takes at once is one immutable value, :class:`Providers`, passed explicitly (``Agent(...,
providers=...)``, ``resolve_model(spec, providers=...)``); ``Providers.default()`` is the built-in
set. Nothing here is configured process-wide."""

import importlib
from typing import TYPE_CHECKING, Any

from planexec.models._anthropic import AnthropicModel
from planexec.models._base import (
    Message,
    Model,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    NotSupported,
    OutputSpec,
    StreamDelta,
    StreamingModel,
    ToolCall,
    ToolSpec,
    Usage,
    count_tokens,
    estimate_tokens,
    stream_request,
)
from planexec.models._guard import allow_model_requests, check_model_requests_allowed
from planexec.models._limits import ProviderLimits
from planexec.models._prices import Price, cost_of, price_for
from planexec.models._profiles import ModelProfile, profile_for, strict_json_schema
from planexec.models._providers import Providers, known_providers, resolve_model, use_providers
from planexec.models._resilience import (
    FailedAttempt,
    FallbackModel,
    Held,
    ModelRetryPolicy,
    call_with_retries,
    failed_attempts_to,
    open_with_retries,
)
from planexec.models._scripted import FunctionModel, Reply, ScriptedModel, StreamingScriptedModel, tool_calls
from planexec.models._settings import REASONING_EFFORTS, ReasoningEffort, unsupported_settings

if TYPE_CHECKING:
    from planexec.models._openai import OpenAIModel
    from planexec.models._openai_responses import OpenAIResponsesModel

from planexec.models._base import FinishReason, ModelCrashed, cancelled_for_real
from planexec.models._keys import missing_keys
from planexec.models._resilience import before_each_attempt, retries

__all__ = [
    "REASONING_EFFORTS",
    "AnthropicModel",
    "FailedAttempt",
    "FallbackModel",
    "FinishReason",
    "FunctionModel",
    "Held",
    "Message",
    "Model",
    "ModelCallError",
    "ModelCrashed",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "ModelRetryPolicy",
    "ModelSettings",
    "NotSupported",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "OutputSpec",
    "Price",
    "ProviderLimits",
    "Providers",
    "ReasoningEffort",
    "Reply",
    "ScriptedModel",
    "StreamDelta",
    "StreamingModel",
    "StreamingScriptedModel",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "allow_model_requests",
    "before_each_attempt",
    "call_with_retries",
    "cancelled_for_real",
    "check_model_requests_allowed",
    "cost_of",
    "count_tokens",
    "estimate_tokens",
    "failed_attempts_to",
    "known_providers",
    "missing_keys",
    "open_with_retries",
    "price_for",
    "profile_for",
    "resolve_model",
    "retries",
    "stream_request",
    "strict_json_schema",
    "tool_calls",
    "unsupported_settings",
    "use_providers",
]


_NEED_THE_OPENAI_SDK = {
    "OpenAIModel": "planexec.models._openai",
    "OpenAIResponsesModel": "planexec.models._openai_responses",
}


def __getattr__(name: str) -> Any:
    module = _NEED_THE_OPENAI_SDK.get(name)
    if module is not None:
        try:
            return getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as e:
            from planexec._util.extras import install_hint

            raise ImportError(f"{name} needs the OpenAI SDK: {install_hint('openai')} ({e})") from e
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
