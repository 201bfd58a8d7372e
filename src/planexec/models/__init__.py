"""Models: the neutral interface, ``provider:name`` strings, provider adapters, and the shipped
test doubles. ``OpenAIModel`` is imported on first use: it needs the ``openai`` extra."""

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
from planexec.models._prices import Price, cost_of, price_for, set_price
from planexec.models._profiles import ModelProfile, profile_for, strict_json_schema
from planexec.models._registry import known_providers, register_provider, resolve_model
from planexec.models._resilience import (
    FallbackModel,
    ModelRetryPolicy,
    ProviderLimits,
    call_with_retries,
    configure_provider,
    provider_limits,
)
from planexec.models._scripted import FunctionModel, Reply, ScriptedModel, StreamingScriptedModel, tool_calls
from planexec.models._settings import REASONING_EFFORTS, ReasoningEffort, unsupported_settings

if TYPE_CHECKING:
    from planexec.models._openai import OpenAIModel

from planexec.models._base import FinishReason, ModelCrashed, cancelled_for_real
from planexec.models._keys import missing_keys
from planexec.models._resilience import before_each_attempt, retries

__all__ = [
    "REASONING_EFFORTS",
    "AnthropicModel",
    "FallbackModel",
    "FinishReason",
    "FunctionModel",
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
    "OutputSpec",
    "Price",
    "ProviderLimits",
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
    "configure_provider",
    "cost_of",
    "count_tokens",
    "estimate_tokens",
    "known_providers",
    "missing_keys",
    "price_for",
    "profile_for",
    "provider_limits",
    "register_provider",
    "resolve_model",
    "retries",
    "set_price",
    "stream_request",
    "strict_json_schema",
    "tool_calls",
    "unsupported_settings",
]


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":
        try:
            from planexec.models._openai import OpenAIModel
        except ModuleNotFoundError as e:
            from planexec._util.extras import install_hint

            raise ImportError(f"OpenAIModel needs the OpenAI SDK: {install_hint('openai')} ({e})") from e
        return OpenAIModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
