"""How each provider's wire looks, for the provider conformance suite.

An :class:`Answer` says what a model replies in neutral terms (text in the pieces a stream sends,
tool calls whose arguments arrive in pieces, a refusal, why it stopped, the tokens it used); each
:class:`Wire` renders it in its provider's format, as one JSON body or as a stream of server-sent
events, and renders that provider's errors. The suite scripts a :class:`~tests.http_fake.FakeServer`
with what a wire renders and checks that every adapter reads it the same way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anthropic
import openai

from planexec.models import (
    AnthropicModel,
    ModelRetryPolicy,
    OpenAIModel,
    OpenAIResponsesModel,
    ToolCall,
    Usage,
)
from tests.http_fake import Event, Json, Sse

__all__ = ["WIRES", "Answer", "Call", "Wire"]

FAST = ModelRetryPolicy(max_attempts=3, initial_delay=0, max_delay=0.01, jitter=0)

Stop = Literal["stop", "length", "tool_calls", "refusal"]
Adapter = OpenAIModel | OpenAIResponsesModel | AnthropicModel


@dataclass(frozen=True)
class Call:
    """A tool call; its arguments' JSON text arrives in ``pieces`` when streamed."""

    id: str
    name: str
    pieces: tuple[str, ...]

    @property
    def arguments(self) -> str:
        return "".join(self.pieces)

    def neutral(self) -> ToolCall:
        return ToolCall(id=self.id, name=self.name, arguments=json.loads(self.arguments))


@dataclass(frozen=True)
class Answer:
    """What a model replies. ``usage``: input tokens (cached ones included), output tokens, cached
    input tokens."""

    text: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()
    refusal: str | None = None
    stop: Stop = "stop"
    usage: tuple[int, int, int] = (20, 7, 5)

    @property
    def whole_text(self) -> str:
        return "".join(self.text)

    def neutral_usage(self) -> Usage:
        used, said, cached = self.usage
        return Usage(input_tokens=used, output_tokens=said, cached_input_tokens=cached, requests=1)


@dataclass(frozen=True)
class Wire:
    """One provider's wire format, and how to build its adapter against a server."""

    id: str
    provider: str
    key_env: str
    model_id: str
    max_tokens_field: str
    """Where ``ModelSettings.max_tokens`` goes in the request body."""
    path: str
    """The API path the SDK appends to the server's URL (``/v1`` included where it belongs)."""
    llmock_prefix: str
    """Where llmock serves this API: the path before ``path``."""

    def model(self, url: str, **options: Any) -> Adapter:
        """The adapter, talking to the server at ``url`` (its root)."""
        options.setdefault("api_key", "sk-test")
        options.setdefault("retry", FAST)
        return self._build(url, options)

    def _build(self, url: str, options: dict[str, Any]) -> Adapter:
        raise NotImplementedError

    def client(self, url: str, key: str) -> Any:
        """The provider's own SDK client for the server at ``url``, with retries of its own."""
        raise NotImplementedError

    def whole(self, answer: Answer) -> Json:
        raise NotImplementedError

    def events(self, answer: Answer, *, gate: threading.Event | None = None) -> list[Event]:
        """``answer`` as a stream; ``gate``: the second text piece waits for it."""
        raise NotImplementedError

    def stream(self, answer: Answer, *, gate: threading.Event | None = None) -> Sse:
        return Sse(self.events(answer, gate=gate))

    def cut(self, answer: Answer) -> Sse:
        """``answer``'s stream up to its text, then the connection closes: its end never comes."""
        raise NotImplementedError

    def before_output(self) -> Sse:
        """A stream that ends before anything could be passed on."""
        raise NotImplementedError

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Json:
        raise NotImplementedError

    def broken(self, message: str) -> Event:
        """An event that reports a server error in the middle of a stream."""
        raise NotImplementedError

    def context_too_long(self) -> Json:
        raise NotImplementedError


def _gated(index: int, gate: threading.Event | None) -> threading.Event | None:
    return gate if index == 1 else None


def _interleaved(calls: Sequence[Call]) -> list[tuple[int, str]]:
    """The argument pieces after each call's first, round robin over the calls: (call, piece)."""
    order: list[tuple[int, str]] = []
    longest = max((len(c.pieces) for c in calls), default=0)
    for n in range(1, longest):
        order += [(i, c.pieces[n]) for i, c in enumerate(calls) if n < len(c.pieces)]
    return order


# -- OpenAI chat completions --------------------------------------------------------------------


def _chat_usage(answer: Answer) -> dict[str, Any]:
    used, said, cached = answer.usage
    return {
        "prompt_tokens": used,
        "completion_tokens": said,
        "total_tokens": used + said,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


_CHAT_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "refusal": "stop"}


@dataclass(frozen=True)
class ChatWire(Wire):
    def _build(self, url: str, options: dict[str, Any]) -> Adapter:
        return OpenAIModel(self.model_id, base_url=url + self.path, **options)

    def client(self, url: str, key: str) -> Any:
        return openai.AsyncOpenAI(api_key=key, base_url=url + self.path, max_retries=5)

    def whole(self, answer: Answer) -> Json:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": answer.whole_text or (None if answer.calls or answer.refusal else ""),
            "refusal": answer.refusal,
        }
        if answer.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in answer.calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": _CHAT_FINISH[answer.stop], "logprobs": None}
        return Json({**self._envelope("chat.completion"), "choices": [choice], "usage": _chat_usage(answer)})

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": kind, "created": 1_700_000_000, "model": f"{self.model_id}-2024-07-18"}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, wait: threading.Event | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return Event({**self._envelope("chat.completion.chunk"), "choices": [choice]}, wait=wait)

    def _opening(self, answer: Answer, gate: threading.Event | None) -> list[Event]:
        events = [self._chunk({"role": "assistant", "content": ""})]
        events += [self._chunk({"content": p}, wait=_gated(i, gate)) for i, p in enumerate(answer.text)]
        if answer.refusal:
            half = len(answer.refusal) // 2
            events += [self._chunk({"refusal": r}) for r in (answer.refusal[:half], answer.refusal[half:])]
        return events

    def events(self, answer: Answer, *, gate: threading.Event | None = None) -> list[Event]:
        events = self._opening(answer, gate)
        for i, c in enumerate(answer.calls):
            first = {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.pieces[0]}}
            events.append(self._chunk({"tool_calls": [first]}))
        for i, piece in _interleaved(answer.calls):
            events.append(self._chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
        events.append(self._chunk({}, _CHAT_FINISH[answer.stop]))
        usage = {**self._envelope("chat.completion.chunk"), "choices": [], "usage": _chat_usage(answer)}
        return [*events, Event(usage), Event("[DONE]")]

    def cut(self, answer: Answer) -> Sse:
        return Sse(self._opening(answer, None))

    def before_output(self) -> Sse:
        return Sse([])

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Json:
        return Json({"error": {"message": message, "type": "test", "code": None}}, status=status, headers=headers or {})

    def broken(self, message: str) -> Event:
        return Event({"error": {"message": message, "type": "server_error", "code": None}})

    def context_too_long(self) -> Json:
        body = {
            "message": "This model's maximum context length is 128000 tokens; your messages resulted in 130000",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
        return Json({"error": body}, status=400)


# -- OpenAI Responses ---------------------------------------------------------------------------


def _responses_usage(answer: Answer) -> dict[str, Any]:
    used, said, cached = answer.usage
    return {
        "input_tokens": used,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": said,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": used + said,
    }


@dataclass(frozen=True)
class ResponsesWire(ChatWire):
    def _build(self, url: str, options: dict[str, Any]) -> Adapter:
        return OpenAIResponsesModel(self.model_id, base_url=url + self.path, **options)

    def _response(self, answer: Answer, output: list[dict[str, Any]], status: str | None = None) -> dict[str, Any]:
        length = answer.stop == "length"
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_700_000_000,
            "model": f"{self.model_id}-2025-04-14",
            "status": status or ("incomplete" if length else "completed"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "incomplete_details": {"reason": "max_output_tokens"} if length else None,
            "error": None,
            "usage": _responses_usage(answer),
        }

    def _message(self, answer: Answer) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if answer.text:
            parts.append({"type": "output_text", "text": answer.whole_text, "annotations": []})
        if answer.refusal:
            parts.append({"type": "refusal", "refusal": answer.refusal})
        return {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": parts}

    def _call(self, call: Call, arguments: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{call.id}",
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments,
            "status": "completed",
        }

    def whole(self, answer: Answer) -> Json:
        output = [self._message(answer)] if answer.text or answer.refusal else []
        output += [self._call(c, c.arguments) for c in answer.calls]
        return Json(self._response(answer, output))

    def _event(self, kind: str, wait: threading.Event | None = None, **fields: Any) -> Event:
        return Event({"type": kind, "sequence_number": 0, **fields}, wait=wait)

    def _opening(self, answer: Answer, gate: threading.Event | None) -> list[Event]:
        created = {**self._response(answer, [], status="in_progress"), "usage": None}
        events = [self._event("response.created", response=created)]
        if answer.text or answer.refusal:
            empty = {**self._message(answer), "content": []}
            events.append(self._event("response.output_item.added", output_index=0, item=empty))
        for i, piece in enumerate(answer.text):
            fields: dict[str, Any] = {"item_id": "msg_1", "output_index": 0, "content_index": 0, "logprobs": []}
            events.append(self._event("response.output_text.delta", wait=_gated(i, gate), delta=piece, **fields))
        if answer.refusal:
            fields = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
            events.append(self._event("response.refusal.delta", delta=answer.refusal, **fields))
        return events

    def events(self, answer: Answer, *, gate: threading.Event | None = None) -> list[Event]:
        events = self._opening(answer, gate)
        first = 1 if answer.text or answer.refusal else 0
        for i, c in enumerate(answer.calls):
            events.append(self._event("response.output_item.added", output_index=first + i, item=self._call(c, "")))
            events.append(self._arguments(first + i, c, c.pieces[0]))
        events += [self._arguments(first + i, answer.calls[i], piece) for i, piece in _interleaved(answer.calls)]
        kind = "response.incomplete" if answer.stop == "length" else "response.completed"
        return [*events, self._event(kind, response=self._response(answer, []))]

    def _arguments(self, index: int, call: Call, piece: str) -> Event:
        return self._event(
            "response.function_call_arguments.delta", output_index=index, item_id=f"fc_{call.id}", delta=piece
        )

    def broken(self, message: str) -> Event:
        return self._event("error", code="server_error", message=message, param=None)


# -- Anthropic Messages -------------------------------------------------------------------------

_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "refusal": "refusal"}
_ANTHROPIC_KIND = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class AnthropicWire(Wire):
    def _build(self, url: str, options: dict[str, Any]) -> Adapter:
        return AnthropicModel(self.model_id, base_url=url + self.path, **options)

    def client(self, url: str, key: str) -> Any:
        return anthropic.AsyncAnthropic(api_key=key, base_url=url + self.path, max_retries=5)

    def _usage(self, answer: Answer) -> dict[str, int]:
        used, said, cached = answer.usage
        return {
            "input_tokens": used - cached,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": said,
        }

    def _stop_details(self, answer: Answer) -> dict[str, Any]:
        if answer.refusal is None:
            return {}
        return {"stop_details": {"type": "refusal", "category": None, "explanation": answer.refusal}}

    def _message(self, answer: Answer, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": self.model_id,
            "content": content,
            "stop_reason": _ANTHROPIC_STOP[answer.stop],
            "stop_sequence": None,
            "usage": self._usage(answer),
            **self._stop_details(answer),
        }

    def whole(self, answer: Answer) -> Json:
        content = [{"type": "text", "text": answer.whole_text}] if answer.text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)} for c in answer.calls
        ]
        return Json(self._message(answer, content))

    def _opening(self, answer: Answer, gate: threading.Event | None) -> list[Event]:
        start = {**self._message(answer, []), "stop_reason": None, "usage": {**self._usage(answer), "output_tokens": 1}}
        start.pop("stop_details", None)
        events = [Event({"type": "message_start", "message": start}, name="message_start"), self._event("ping")]
        if answer.text:
            block = {"type": "text", "text": ""}
            events.append(self._event("content_block_start", index=0, content_block=block))
            for i, piece in enumerate(answer.text):
                delta = {"type": "text_delta", "text": piece}
                events.append(self._event("content_block_delta", wait=_gated(i, gate), index=0, delta=delta))
        return events

    def _event(self, kind: str, wait: threading.Event | None = None, **fields: Any) -> Event:
        return Event({"type": kind, **fields}, name=kind, wait=wait)

    def events(self, answer: Answer, *, gate: threading.Event | None = None) -> list[Event]:
        events = self._opening(answer, gate)
        if answer.text:
            events.append(self._event("content_block_stop", index=0))
        first = 1 if answer.text else 0
        for i, c in enumerate(answer.calls, start=first):
            block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
            events.append(self._event("content_block_start", index=i, content_block=block))
            for piece in c.pieces:
                piece_delta = {"type": "input_json_delta", "partial_json": piece}
                events.append(self._event("content_block_delta", index=i, delta=piece_delta))
            events.append(self._event("content_block_stop", index=i))
        delta: dict[str, Any] = {"stop_reason": _ANTHROPIC_STOP[answer.stop], "stop_sequence": None}
        delta |= self._stop_details(answer)
        events.append(self._event("message_delta", delta=delta, usage={"output_tokens": answer.usage[1]}))
        return [*events, self._event("message_stop")]

    def cut(self, answer: Answer) -> Sse:
        return Sse(self._opening(answer, None))

    def before_output(self) -> Sse:
        return Sse(self._opening(Answer(), None))

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Json:
        kind = _ANTHROPIC_KIND.get(status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return Json(body, status=status, headers=headers or {})

    def broken(self, message: str) -> Event:
        return self._event("error", error={"type": "api_error", "message": message})

    def context_too_long(self) -> Json:
        return self.error(400, "prompt is too long: 210000 tokens > 200000 maximum")


WIRES: tuple[Wire, ...] = (
    ChatWire(
        id="openai-chat",
        provider="openai",
        key_env="OPENAI_API_KEY",
        model_id="gpt-4o-mini",
        max_tokens_field="max_completion_tokens",
        path="/v1",
        llmock_prefix="",
    ),
    ResponsesWire(
        id="openai-responses",
        provider="openai",
        key_env="OPENAI_API_KEY",
        model_id="gpt-4.1-mini",
        max_tokens_field="max_output_tokens",
        path="/v1",
        llmock_prefix="",
    ),
    AnthropicWire(
        id="anthropic",
        provider="anthropic",
        key_env="ANTHROPIC_API_KEY",
        model_id="claude-sonnet-4-6",
        max_tokens_field="max_tokens",
        path="",
        llmock_prefix="/anthropic",
    ),
)
"""Every adapter in ``planexec.models``, by its wire format."""
