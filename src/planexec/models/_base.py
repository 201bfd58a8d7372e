"""The neutral model interface: one required async method, and the values it speaks.

A model is anything with a ``name`` and ``async request(ModelRequest) -> ModelResponse``.
Streaming and token counting are optional capabilities; ``stream_request`` and
``count_tokens`` fail with a clear "not supported by X" where a model has neither.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from planexec.errors import ModelCrashed, PlanexecError, UsageError
from planexec.models._settings import ModelSettings

__all__ = [
    "Message",
    "Model",
    "ModelCallError",
    "ModelCrashed",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "NotSupported",
    "OutputSpec",
    "StreamDelta",
    "StreamingModel",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "estimate_tokens",
]

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "tool_calls", "length", "refusal", "error"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """A model's request to call a tool."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One message in a conversation with a model, in planexec's own neutral form."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    """For ``role="tool"``: which call this message answers."""
    cache_point: bool = False
    """Everything up to the end of this message is the same in every request of its kind within a
    run: a provider that takes cache breakpoints (Anthropic) is told to cache up to here; one that
    caches prefixes by itself (OpenAI) needs no mark."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """A tool as offered to a model."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputSpec:
    """Ask for structured output: JSON that fits ``json_schema``."""

    name: str
    json_schema: Mapping[str, Any]
    strict: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """Everything a model is asked in one call."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    output: OutputSpec | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    """How the model is asked (sampling, output cap, stop sequences, …): the settings of the role asking."""
    purpose: str = ""
    """Who is asking and why (``planner.propose``, ``executor``, ``judge`` …); for logs and test doubles."""
    cache_key: str | None = None
    """Requests with one key share a stable prefix (a run sets one per run and role): a provider
    that routes requests to its prompt cache by key (OpenAI's ``prompt_cache_key``) is given it."""

    @property
    def chars(self) -> int:
        """Characters of message text sent, the measure the economy benchmarks report."""
        return sum(len(m.content) for m in self.messages)

    @property
    def last_user_text(self) -> str:
        """The text of the last user turn: the user messages after the last message of another
        role, joined by blank lines."""
        texts: list[str] = []
        for m in reversed(self.messages):
            if m.role != "user":
                if texts:
                    break
                continue
            texts.append(m.content)
        return "\n\n".join(reversed(texts))


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Tokens used by one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    requests: int = 0
    """Requests sent, the failed ones among them."""
    failed_requests: int = 0
    """Requests that failed (and were tried again, or failed the call)."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache (part of ``input_tokens``)."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those a reasoning model spent thinking (where the provider reports them)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            requests=self.requests + other.requests,
            failed_requests=self.failed_requests + other.failed_requests,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelResponse:
    """What a model answered: text, tool calls, parsed structured output, usage and cost."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    parsed: Any = None
    """The structured output as JSON data, when the request asked for it and the model parsed it."""
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    """Cost in US dollars, when known."""
    model: str = ""
    finish_reason: FinishReason = "stop"
    refusal: str | None = None
    answered_by: str | None = None
    """For a fallback list: the name of the model of the list that answered."""


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a :class:`ModelRequest`."""

    @property
    def name(self) -> str: ...

    async def request(self, request: ModelRequest) -> ModelResponse: ...


class NotSupported(UsageError):
    """An optional model capability was asked of a model that does not have it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamDelta:
    """A piece of a response as it streams: text (structured output arrives as its JSON text)."""

    text: str


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream: ``stream`` yields deltas, then the whole response, last."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]: ...


class ModelCallError(PlanexecError):
    """A provider call failed. ``retryable``: the same call may succeed later (rate limits, server
    errors, timeouts, dropped connections); ``retry_after``: seconds the provider asked to wait."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.provider = provider
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        super().__init__(message)


def cancelled_for_real(error: BaseException) -> bool:
    """Whether ``error`` is the cancellation of the running task (not one a callee raised itself)."""
    if not isinstance(error, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stream_request(model: Model, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
    """Stream a response where the model supports streaming: deltas, then the whole response."""
    if not isinstance(model, StreamingModel):
        raise NotSupported(f"streaming is not supported by {model.name}")
    async for item in model.stream(request):
        yield item


def count_tokens(model: Model, request: ModelRequest) -> int:
    """Count a request's input tokens, where the model can."""
    counter = getattr(model, "count_tokens", None)
    if counter is None:
        raise NotSupported(f"token counting is not supported by {model.name}")
    return int(counter(request))


def estimate_tokens(text: str) -> int:
    """A provider-free estimate: about four characters a token."""
    return math.ceil(len(text) / 4)
