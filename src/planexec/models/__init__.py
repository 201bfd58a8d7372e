"""Models: the neutral interface, ``provider:name`` strings, and the shipped test doubles."""

from planexec.models._base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    NotSupported,
    OutputSpec,
    ToolCall,
    ToolSpec,
    Usage,
    count_tokens,
    estimate_tokens,
    stream_request,
)
from planexec.models._guard import allow_model_requests, check_model_requests_allowed
from planexec.models._registry import known_providers, register_provider, resolve_model
from planexec.models._scripted import FunctionModel, Reply, ScriptedModel, tool_calls

__all__ = [
    "FunctionModel",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "NotSupported",
    "OutputSpec",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "allow_model_requests",
    "check_model_requests_allowed",
    "count_tokens",
    "estimate_tokens",
    "known_providers",
    "register_provider",
    "resolve_model",
    "stream_request",
    "tool_calls",
]
