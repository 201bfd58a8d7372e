"""What OpenAI's two APIs share in planexec: chat completions (:mod:`planexec.models._openai`) and
the Responses API (:mod:`planexec.models._openai_responses`).

* :func:`call_error` and :func:`sdk_errors`: the SDK's errors as :class:`ModelCallError` (timeouts,
  dropped connections, rate limits and server errors retryable; an exhausted quota not, since
  waiting adds no credit; see :func:`~planexec.models._http_status.status_error`).
* :class:`SdkStreamReader`: a :class:`~planexec.models._streams.StreamReader` over the SDK's
  stream of chunks or events, its errors translated.
* :func:`response_format` and :func:`with_schema_instruction`: the structured output a profile
  allows, and the schema in the system message where the API cannot enforce it.
* :func:`kept`: a setting to send, or ``omit``.
* :class:`PendingReply` and :class:`PendingCall`: a reply as it is put together, from one answer
  or from a stream, in the terms :class:`~planexec.models.OpenAIModel` builds its response from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import openai
from openai import AsyncStream, Omit, omit
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.completion_create_params import ResponseFormat
from openai.types.completion_usage import CompletionUsage

from planexec.models._base import Message, ModelCallError, OutputSpec, StreamDelta
from planexec.models._http_status import status_error
from planexec.models._profiles import ModelProfile, strict_json_schema

__all__ = [
    "PendingCall",
    "PendingReply",
    "SdkStreamReader",
    "call_error",
    "kept",
    "response_format",
    "sdk_errors",
    "with_schema_instruction",
]

T = TypeVar("T")


# -- errors ------------------------------------------------------------------------------------


def call_error(error: openai.APIError, provider: str, name: str, key_env: str | None = None) -> ModelCallError:
    """``error``, raised by the SDK for model ``name``, as planexec raises it."""
    if isinstance(error, openai.APITimeoutError):
        return ModelCallError(f"{name}: the request timed out", provider=provider, retryable=True)
    if isinstance(error, openai.APIConnectionError):
        return ModelCallError(f"{name}: cannot connect ({error.message})", provider=provider, retryable=True)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        return status_error(
            name,
            provider=provider,
            status=status,
            detail=error.message,
            key_env=key_env,
            headers=error.response.headers,
            # waiting does not add credit
            retryable=False if status == 429 and error.code == "insufficient_quota" else None,
        )
    retryable = error.type == "server_error" or error.code in ("server_error", "rate_limit_exceeded")
    return ModelCallError(f"{name} reported an error: {error.message}", provider=provider, retryable=retryable)


@contextmanager
def sdk_errors(provider: str, name: str, key_env: str | None) -> Iterator[None]:
    """The SDK's errors raised in this block as :func:`call_error` makes them; others unchanged."""
    try:
        yield
    except openai.APIError as e:
        raise call_error(e, provider, name, key_env) from e


# -- streams -----------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class SdkStreamReader(Generic[T]):
    """Reads the SDK's stream of ``items`` for :func:`~planexec.models._streams.relay`.

    ``take`` takes in one item and returns the deltas to pass on; ``at_end`` says what the end of
    the items means (the deltas left, or an error when the reply was not finished); ``unreadable``
    is the error for an item the SDK could not read (it lets ``unreadable_types`` through).
    Nothing is read once ``reply`` has ended."""

    items: AsyncStream[T]
    reply: PendingReply
    take: Callable[[T], list[StreamDelta]]
    at_end: Callable[[], list[StreamDelta]]
    unreadable: Callable[[Exception], ModelCallError]
    unreadable_types: tuple[type[Exception], ...] = (ValueError,)
    who: tuple[str, str, str | None]
    """The provider, the model's name and the variable its key is read from: for errors."""

    async def next(self) -> list[StreamDelta] | None:
        if self.reply.ended:
            return None
        try:
            item = await self.items.__anext__()
        except StopAsyncIteration:
            return self.at_end()
        except openai.APIError as e:
            raise call_error(e, *self.who) from e
        except self.unreadable_types as e:
            raise self.unreadable(e) from e
        return self.take(item)

    async def aclose(self) -> None:
        await self.items.close()


# -- structured output -------------------------------------------------------------------------


def response_format(profile: ModelProfile, spec: OutputSpec) -> tuple[ResponseFormat | Omit, bool]:
    """The chat completions ``response_format`` for ``spec``, and whether the schema must also go
    in the prompt."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", spec.name)[:64] or "output"
    if profile.strict_json_schema and spec.strict:
        strict = strict_json_schema(spec.json_schema)
        if strict is not None:
            return {"type": "json_schema", "json_schema": {"name": name, "schema": strict, "strict": True}}, False
    if profile.json_schema:
        schema = dict(spec.json_schema)
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}, False
    if profile.json_mode:
        return {"type": "json_object"}, True
    return omit, True


def with_schema_instruction(messages: list[Message], spec: OutputSpec) -> list[Message]:
    """``messages`` with the schema of ``spec`` in the system message (one is added if none)."""
    instruction = "Reply with one JSON object and nothing else. It must fit this JSON Schema:\n" + json.dumps(
        spec.json_schema, separators=(",", ":"), ensure_ascii=False
    )
    if messages and messages[0].role == "system":
        first = messages[0]
        return [Message(role="system", content=f"{first.content}\n\n{instruction}"), *messages[1:]]
    return [Message(role="system", content=instruction), *messages]


def kept(value: T | None, name: str, dropped: Mapping[str, str]) -> T | Omit:
    """``value`` to send, or omit it when it is unset or the model does not take it."""
    return omit if value is None or name in dropped else value


# -- the reply as it accumulates ---------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class PendingReply:
    """A reply being put together, from one answer or from a stream's chunks or events."""

    model: str
    finish: str | None = None
    usage: CompletionUsage | None = None
    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, PendingCall] = field(default_factory=dict)
    ended: bool = False

    def add(self, chunk: ChatCompletionChunk) -> list[StreamDelta]:
        """Take in one chat completions chunk; return the text deltas to pass on."""
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        deltas: list[StreamDelta] = []
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                deltas.append(StreamDelta(text=delta.content))
            if delta.refusal:
                self.refusal.append(delta.refusal)
            for piece in delta.tool_calls or ():
                pending = self.calls.setdefault(piece.index, PendingCall())
                pending.id = pending.id or (piece.id or "")
                if piece.function is not None:
                    pending.name += piece.function.name or ""
                    pending.arguments.append(piece.function.arguments or "")
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason
        return deltas
