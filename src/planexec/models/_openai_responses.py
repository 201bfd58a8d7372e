"""OpenAI's Responses API (``POST /v1/responses``) through the official ``openai`` SDK.

:class:`OpenAIResponsesModel` is an :class:`~planexec.models._openai.OpenAIModel` that speaks the
Responses API instead of chat completions. Keys, one client per event loop, profiles, prices,
retries, limits, the reading of tool-call arguments and structured replies are the chat
adapter's own; the mapping of SDK errors to :class:`ModelCallError`, the reading of the SDK's
streams and the choice of structured output are shared with it
(:mod:`planexec.models._openai_common`); what differs is the wire format.

* Neutral → wire: system and user messages become input messages of those roles; an assistant's
  text an assistant message, and each of its tool calls a ``function_call`` item (``call_id``,
  name, arguments as JSON text); a tool result a ``function_call_output`` item for its
  ``call_id``. Tools are flat function tools, sent non-strict as chat completions sends them (the
  Responses API would otherwise make them strict, which forces a value for every optional
  argument). An :class:`OutputSpec` becomes ``text.format`` by the chat adapter's rules: strict JSON
  Schema where the profile allows and the schema can be made strict, else non-strict JSON Schema,
  else JSON mode with the schema in the system message, else the schema in the system message.
* Requests are stateless: the whole conversation goes with each one, no ``previous_response_id``
  is sent, and ``store`` is false (``extra={"store": True}`` turns storing on).
* Settings → wire: ``temperature`` and ``top_p`` go in the fields of the same names,
  ``max_tokens`` in ``max_output_tokens`` (which on reasoning models also bounds the reasoning),
  ``reasoning_effort`` in ``reasoning.effort``; ``extra`` is merged into the body last;
  ``timeout`` bounds the request. The Responses API has neither stop sequences nor a seed:
  ``stop`` and ``seed`` are never sent, and ``unsupported_settings`` says so, as it does for the
  settings the model's profile does not accept (reasoning models: ``temperature``, ``top_p``;
  other models: ``reasoning_effort``).
* Reasoning: what a reasoning model spends thinking is counted (``Usage.reasoning_tokens``, a part
  of ``output_tokens``), but its reasoning items are not carried into the next request: planexec's
  messages are provider-neutral, and ``function_call`` items are sent without the item ids that
  would tie them to the reasoning before them, which the API accepts. The model reasons afresh on
  each call.
* Wire → neutral: ``output_text`` parts make the text, ``refusal`` parts the refusal (finish reason
  ``refusal``, as in chat completions), ``function_call`` items the tool calls (arguments that are
  not a JSON object fail the call); reasoning items, hosted tools' items and item types newer than
  this adapter are skipped. An ``incomplete`` response stopped by ``max_output_tokens`` finishes
  with ``length``, one stopped by the content filter reads as a refusal; a ``failed`` response, or
  an ``error`` event in a stream, is a :class:`ModelCallError` (retryable for server errors and
  rate limits).
* Streaming uses ``responses.create(stream=True)`` and reads the events itself, tolerantly (the SDK's
  stream helper raises untyped errors on streams it finds inconsistent): text deltas are passed on
  as they arrive; function-call argument deltas are put together (an item's final arguments win
  where the stream repeats them); usage, model and status come from the last event
  (``response.completed`` or ``response.incomplete``), after which nothing more is read. A stream
  that ends before that event fails with a retryable :class:`ModelCallError`; as with chat
  completions a stream is retried only while nothing has been passed on, and holds the provider's
  concurrency slot from its request to its last event.
* A server that answers with something that is not a response, data that is not JSON, or fields of
  the wrong type fails the call with a non-retryable :class:`ModelCallError` naming what was wrong.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx2
import openai
from openai import AsyncOpenAI, AsyncStream, NotGiven, Omit, not_given, omit
from openai.types.chat.completion_create_params import ResponseFormat
from openai.types.completion_usage import CompletionTokensDetails, CompletionUsage, PromptTokensDetails
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseFormatTextConfigParam,
    ResponseInputParam,
    ResponseStreamEvent,
    ResponseTextConfigParam,
)
from openai.types.shared_params import Reasoning

from planexec._util.clip import clip
from planexec.errors import UsageError
from planexec.models._base import (
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    NotSupported,
    StreamDelta,
    ToolSpec,
)
from planexec.models._guard import check_model_requests_allowed
from planexec.models._openai import OpenAIModel
from planexec.models._openai_common import (
    PendingCall,
    PendingReply,
    SdkStreamReader,
    call_error,
    kept,
    response_format,
    sdk_errors,
    with_schema_instruction,
)
from planexec.models._resilience import call_with_retries
from planexec.models._settings import ReasoningEffort
from planexec.models._streams import open_stream, relay

__all__ = ["OpenAIResponsesModel"]


class OpenAIResponsesModel(OpenAIModel):
    """A model behind OpenAI's Responses API (or any server that serves ``/v1/responses``).

    Built like :class:`OpenAIModel` (``openai-responses:gpt-4.1-mini`` resolves to
    ``OpenAIResponsesModel("gpt-4.1-mini")``): the key from ``api_key`` or ``OPENAI_API_KEY``, the
    server from ``base_url`` or ``OPENAI_BASE_URL``, the profile, retry policy, timeout, client and
    price as there. Its calls count against the same limits as chat completions calls to the same
    provider (``openai``, or the base URL): an account's rate limits are shared by both APIs.
    """

    @property
    def name(self) -> str:
        return f"{self.provider}-responses:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self.name!r})"

    async def __aenter__(self) -> OpenAIResponsesModel:
        return self

    def unsupported_settings(self, settings: ModelSettings) -> dict[str, str]:
        """The settings this model does not send, each with why: those its profile does not accept,
        and ``stop`` and ``seed``, which the Responses API does not have."""
        dropped = super().unsupported_settings(settings)
        given = settings.as_dict()
        for name in ("stop", "seed"):
            if name in given:
                dropped[name] = f"{self.name} does not take {name} (the Responses API has no {name}); not sent"
        return dropped

    # -- the two calls ---------------------------------------------------------------------

    async def request(self, request: ModelRequest) -> ModelResponse:
        wire = self._responses_wire(request)
        client = await self._sdk()

        async def attempt() -> PendingReply:
            answer = await self._create(client, wire, stream=False)
            if not isinstance(answer, Response):
                raise self._malformed(f"a {type(answer).__name__} where a response belongs")
            return self._reply(answer, client)

        return self._response(await call_with_retries(self.limits_key, attempt, self.retry), request, wire.sent())

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Text deltas as they arrive, then the whole response (usage from the last event)."""
        wire = self._responses_wire(request)
        client = await self._sdk()

        async def start() -> SdkStreamReader[ResponseStreamEvent]:
            events = await self._create(client, wire, stream=True)
            if not isinstance(events, AsyncStream):
                raise self._malformed("a whole response where a stream of events was asked for")
            if events.response.headers.get("content-type", "").startswith("application/json"):
                await events.close()  # a server that does not stream answered with one JSON body
                raise self._malformed("a JSON body where a stream of events was asked for")
            return self._events(events, client)

        opened = await open_stream(self.limits_key, self.retry, start)
        async with aclosing(relay(opened)) as deltas:
            async for delta in deltas:
                yield delta
        yield self._response(opened.value[0].reply, request, wire.sent())

    async def _create(self, client: AsyncOpenAI, wire: _Wire, *, stream: bool) -> object:
        """What the SDK made of the answer: a response, a stream of events, or whatever the body held."""
        check_model_requests_allowed(self.name)
        try:
            with sdk_errors(self.provider, self.name, self.api_key_env):
                return await client.responses.create(
                    model=self.model,
                    input=wire.input,
                    tools=wire.tools,
                    text=wire.text,
                    reasoning=wire.reasoning,
                    prompt_cache_key=wire.prompt_cache_key,
                    temperature=wire.temperature,
                    top_p=wire.top_p,
                    max_output_tokens=wire.max_output_tokens,
                    store=False,
                    stream=stream,
                    timeout=wire.timeout,
                    extra_body=wire.extra_body,
                )
        except (ValueError, RecursionError) as e:  # a body the SDK cannot read (not JSON, nested too deep)
            raise self._malformed(f"a body that cannot be read ({clip(str(e), 200)})") from e

    def _events(
        self, events: AsyncStream[ResponseStreamEvent], client: AsyncOpenAI
    ) -> SdkStreamReader[ResponseStreamEvent]:
        state = _Events(model=self, client=client, reply=PendingReply(model=self.model))

        def at_end() -> list[StreamDelta]:  # the connection closed mid-reply: what came is not the whole answer
            raise ModelCallError(
                f"{self.name}: the stream ended before the reply was finished", provider=self.provider, retryable=True
            ) from None

        def unreadable(e: Exception) -> ModelCallError:
            return self._malformed(f"streamed data that cannot be read ({clip(str(e), 200)})")

        return SdkStreamReader(
            items=events,
            reply=state.reply,
            take=state.add,
            at_end=at_end,
            unreadable=unreadable,
            unreadable_types=(ValueError, RecursionError),
            who=(self.provider, self.name, self.api_key_env),
        )

    # -- neutral ↔ wire --------------------------------------------------------------------

    def _responses_wire(self, request: ModelRequest) -> _Wire:
        if request.tools and not self.profile.tools:
            raise NotSupported(f"tool calling is not supported by {self.name} (see its ModelProfile)")
        messages = list(request.messages)
        text: ResponseTextConfigParam | Omit = omit
        if request.output is not None:
            chat_format, in_prompt = response_format(self.profile, request.output)
            if in_prompt:
                messages = with_schema_instruction(messages, request.output)
            if not isinstance(chat_format, Omit):
                text = {"format": _text_format(chat_format)}
        settings = request.settings
        dropped = self.unsupported_settings(settings)
        effort: ReasoningEffort | Omit = kept(settings.reasoning_effort, "reasoning_effort", dropped)
        reasoning: Reasoning | Omit = omit
        if not isinstance(effort, Omit):
            reasoning = {"effort": effort}
        return _Wire(
            input=_wire_input(messages),
            tools=[_wire_tool(t) for t in request.tools] if request.tools else omit,
            text=text,
            reasoning=reasoning,
            prompt_cache_key=request.cache_key if request.cache_key and self.profile.prompt_cache_key else omit,
            temperature=kept(settings.temperature, "temperature", dropped),
            top_p=kept(settings.top_p, "top_p", dropped),
            max_output_tokens=settings.max_tokens if settings.max_tokens is not None else omit,
            timeout=settings.timeout if settings.timeout is not None else not_given,
            extra_body=dict(settings.extra) if settings.extra else None,
        )

    def _reply(self, response: Response, client: AsyncOpenAI) -> PendingReply:
        """A whole response, in the terms the chat adapter builds its :class:`ModelResponse` from."""
        status = getattr(response, "status", None)
        if status == "failed":
            self._raise_reported(getattr(response, "error", None), client, "the response failed")
        model = getattr(response, "model", None)
        reply = PendingReply(model=model if isinstance(model, str) and model else self.model)
        output = getattr(response, "output", None)
        if output is None:
            output = []
        if not isinstance(output, list):
            raise self._malformed("an output that is not a list")
        for index, item in enumerate(output):
            kind = getattr(item, "type", None)
            if kind == "message":
                parts = getattr(item, "content", None) or []
                if not isinstance(parts, list):
                    raise self._malformed("a message whose content is not a list")
                for part in parts:
                    part_kind = getattr(part, "type", None)
                    if part_kind == "output_text":
                        reply.text.append(self._text(part, "text", "output text"))
                    elif part_kind == "refusal":
                        reply.refusal.append(self._text(part, "refusal", "a refusal"))
            elif kind == "function_call":
                reply.calls[index] = self._call(item)
        if status == "incomplete":
            details = getattr(response, "incomplete_details", None)
            reply.finish = "content_filter" if getattr(details, "reason", None) == "content_filter" else "length"
        elif status in (None, "completed"):
            reply.finish = "stop"
        else:
            raise self._malformed(f"a response that is {clip(repr(status), 40)}, not completed")
        reply.usage = self._usage(getattr(response, "usage", None))
        reply.ended = True
        return reply

    def _call(self, item: object) -> PendingCall:
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not name:
            raise self._malformed("a function call without a name")
        call_id = getattr(item, "call_id", None)
        arguments = getattr(item, "arguments", None)
        if arguments is not None and not isinstance(arguments, str):
            raise self._malformed(f"arguments to {name!r} that are not JSON text")
        return PendingCall(id=call_id if isinstance(call_id, str) else "", name=name, arguments=[arguments or ""])

    def _usage(self, usage: object) -> CompletionUsage | None:
        """Responses usage in chat completions terms (None when the server reported none)."""
        if usage is None:
            return None
        spent = self._count(usage, "input_tokens", required=True), self._count(usage, "output_tokens", required=True)
        cached = self._count(getattr(usage, "input_tokens_details", None), "cached_tokens")
        thought = self._count(getattr(usage, "output_tokens_details", None), "reasoning_tokens")
        return CompletionUsage(
            prompt_tokens=spent[0],
            completion_tokens=spent[1],
            total_tokens=sum(spent),
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
            completion_tokens_details=CompletionTokensDetails(reasoning_tokens=thought),
        )

    def _count(self, holder: object, name: str, *, required: bool = False) -> int:
        """A token count the server reported; a detail it left out counts 0."""
        value = getattr(holder, name, None) if holder is not None else None
        if value is None and not required:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._malformed(f"usage whose {name} is {clip(repr(value), 40)}, not a count")
        return value

    def _text(self, holder: object, name: str, what: str) -> str:
        value = getattr(holder, name, None)
        if not isinstance(value, str):
            raise self._malformed(f"{what} that is not text ({clip(repr(value), 40)})")
        return value

    def _raise_reported(self, error: object, client: AsyncOpenAI, fallback: str) -> NoReturn:
        """Raise an error the server reported inside a response or a stream as the chat adapter
        raises one the SDK reports (retryable for server errors and rate limits)."""
        message = getattr(error, "message", None)
        body = {
            "message": message if isinstance(message, str) and message else fallback,
            "code": getattr(error, "code", None),
            "type": getattr(error, "type", None),
        }
        sent = httpx2.Request("POST", f"{client.base_url}responses")
        reported = openai.APIError(str(body["message"]), sent, body=body)
        raise call_error(reported, self.provider, self.name, self.api_key_env)

    def _malformed(self, what: str) -> ModelCallError:
        return ModelCallError(f"{self.name} answered with {what}", provider=self.provider, retryable=False)


# -- the stream as it arrives ------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Events:
    """A reply being put together from the events of a stream."""

    model: OpenAIResponsesModel
    client: AsyncOpenAI
    reply: PendingReply

    def add(self, event: object) -> list[StreamDelta]:
        """Take in one event; return the text deltas to pass on. Unknown event types are skipped."""
        model, reply = self.model, self.reply
        kind = getattr(event, "type", None)
        if not isinstance(kind, str):
            raise model._malformed(f"an event without a type ({clip(repr(event), 60)})")
        if kind == "response.output_text.delta":
            delta = model._text(event, "delta", "a text delta")
            reply.text.append(delta)
            return [StreamDelta(text=delta)] if delta else []
        if kind == "response.refusal.delta":
            reply.refusal.append(model._text(event, "delta", "a refusal delta"))
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = getattr(event, "item", None)
            if getattr(item, "type", None) == "function_call":
                index = self._index(event)
                call = model._call(item)
                pending = reply.calls.setdefault(index, PendingCall())
                pending.id, pending.name = call.id or pending.id, call.name
                if kind == "response.output_item.done" or call.arguments != [""]:
                    pending.arguments = call.arguments
        elif kind == "response.function_call_arguments.delta":
            pending = reply.calls.setdefault(self._index(event), PendingCall())
            pending.arguments.append(model._text(event, "delta", "an arguments delta"))
        elif kind == "response.function_call_arguments.done":
            pending = reply.calls.setdefault(self._index(event), PendingCall())
            pending.arguments = [model._text(event, "arguments", "arguments")]
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = getattr(event, "response", None)
            if not isinstance(response, Response):
                raise model._malformed(f"a {kind} event without a response")
            self._finish(model._reply(response, self.client))
        elif kind == "error":
            model._raise_reported(event, self.client, "the stream reported an error")
        return []

    def _index(self, event: object) -> int:
        index = getattr(event, "output_index", None)
        if isinstance(index, bool) or not isinstance(index, int):
            raise self.model._malformed(f"an output index of {clip(repr(index), 40)}")
        return index

    def _finish(self, final: PendingReply) -> None:
        """The last event's response: its status, usage and model; its content where none streamed."""
        reply = self.reply
        reply.model, reply.finish, reply.usage, reply.ended = final.model, final.finish, final.usage, True
        if not reply.text:
            reply.text = final.text
        if not reply.refusal:
            reply.refusal = final.refusal
        if not reply.calls:
            reply.calls = final.calls


@dataclass(frozen=True, kw_only=True, slots=True)
class _Wire:
    input: ResponseInputParam
    tools: list[FunctionToolParam] | Omit
    text: ResponseTextConfigParam | Omit
    reasoning: Reasoning | Omit
    prompt_cache_key: str | Omit
    temperature: float | Omit
    top_p: float | Omit
    max_output_tokens: int | Omit
    timeout: float | NotGiven
    extra_body: dict[str, Any] | None
    """Provider extras, merged into the request body last by the SDK."""

    def sent(self) -> list[Any]:
        """What costs input tokens: the input items, and the tools and text format when given."""
        return [self.input, *(p for p in (self.tools, self.text) if not isinstance(p, Omit))]


# -- conversions -----------------------------------------------------------------------------


def _wire_input(messages: list[Message]) -> ResponseInputParam:
    items: ResponseInputParam = []
    for message in messages:
        if message.role == "tool":
            if not message.tool_call_id:
                raise UsageError("a tool message needs the tool_call_id of the call it answers")
            items.append({"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content})
        elif message.role == "assistant":
            if message.content or not message.tool_calls:
                items.append({"role": "assistant", "content": message.content})
            items += [
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)}
                for c in message.tool_calls
            ]
        else:
            items.append({"role": message.role, "content": message.content})
    return items


def _wire_tool(tool: ToolSpec) -> FunctionToolParam:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "strict": False,
    }


def _text_format(chat: ResponseFormat) -> ResponseFormatTextConfigParam:
    """The chat adapter's ``response_format`` as the Responses API's ``text.format``."""
    if chat["type"] == "json_schema":
        spec = chat["json_schema"]
        return {
            "type": "json_schema",
            "name": spec["name"],
            "schema": dict(spec.get("schema") or {}),
            "strict": spec.get("strict"),
        }
    if chat["type"] == "json_object":
        return {"type": "json_object"}
    return {"type": "text"}
