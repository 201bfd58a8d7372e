"""The names telemetry uses: OpenTelemetry's GenAI attribute keys, planexec's own, and how a
model name says which provider and which model it is."""

from __future__ import annotations

from functools import lru_cache

__all__ = [
    "AGENT_NAME",
    "CONVERSATION_ID",
    "ERROR_TYPE",
    "INPUT_MESSAGES",
    "INPUT_TOKENS",
    "OPERATION",
    "OUTPUT_MESSAGES",
    "OUTPUT_TOKENS",
    "PROVIDER",
    "REQUEST_MODEL",
    "RESPONSE_MODEL",
    "SPAN_KIND_HINT",
    "TOOL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "TOOL_RESULT",
    "TRACER_NAME",
    "provider_and_model",
]

TRACER_NAME = "planexec"
"""The instrumentation scope of every span and instrument."""

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"

SPAN_KIND_HINT = "openinference.span.kind"
"""What Phoenix (and other OpenInference readers) draw a span as: AGENT, CHAIN, LLM, TOOL."""

_PROVIDERS = {
    "openai": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "scripted": "planexec.scripted",
}


@lru_cache(maxsize=256)
def provider_and_model(name: str) -> tuple[str, str]:
    """``("openai", "gpt-4o")`` from ``"openai:gpt-4o"``: the GenAI provider name and the model
    requested. A server's address after ``@`` is left out; a name without a provider prefix is
    its own model, of the provider ``planexec``."""
    prefix, sep, rest = name.partition(":")
    if not sep or not rest or " " in prefix:
        return "planexec", name
    model = rest.split("@", 1)[0] if prefix == "openai-compatible" else rest
    return _PROVIDERS.get(prefix, prefix), model
