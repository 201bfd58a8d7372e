"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp, LM Studio, …) through the official
``openai`` SDK's chat completions.

* Neutral → wire: messages keep their roles (an assistant's tool calls and the tool results that
  answer them included); tools become function tools; an :class:`OutputSpec` becomes the best
  structured output the :class:`ModelProfile` allows (strict JSON Schema, non-strict JSON Schema,
  JSON mode with the schema in the system message, or the schema in the system message alone).
* Settings → wire: ``temperature``, ``top_p``, ``stop``, ``seed`` and ``reasoning_effort`` go in
  the chat completions fields of the same names; ``max_tokens`` becomes ``max_completion_tokens``
  (OpenAI) or ``max_tokens`` (compatible servers), as the profile says; ``extra`` is merged into
  the request body last (the SDK's ``extra_body``); ``timeout`` bounds the request. A field the
  profile does not accept (reasoning models: ``temperature``, ``top_p``, ``stop``; other models:
  ``reasoning_effort``) is not sent, and ``unsupported_settings`` says so.
* Wire → neutral: text, tool calls, ``parsed`` (the reply as JSON when structured output was asked
  for, ``None`` when it does not parse: the planner then asks for a repair), usage (estimated from
  the text when a server reports none), the finish reason, a refusal and the cost.
* Tool-call arguments that are not a JSON object fail the call with a non-retryable
  :class:`ModelCallError` naming the tool and the parse error. Calling the tool with empty or
  guessed arguments instead could run a side-effecting tool with its defaults; the failure goes
  to the run's failure routing like any other executor failure. Empty arguments mean ``{}``.
  A streamed chunk that is not JSON fails the call the same way (non-retryable), as on Anthropic.
* Retries: the SDK's own are off; every request goes through :func:`call_with_retries` under the
  limits key (the base URL when one is given, else the provider), so rate limits (``retry-after``
  and ``retry-after-ms`` honoured), server errors, timeouts and dropped connections are retried
  with backoff and jitter within the limits of the ``Providers`` in effect. A stream is retried
  only while nothing has been passed on to the caller, and holds the provider's concurrency slot
  from its request to its last chunk (see :mod:`planexec.models._streams`). What this adapter
  shares with the Responses API's is in :mod:`planexec.models._openai_common`.
* Keys: ``api_key``, else the ``api_key_env`` variable, read when the first request is made. OpenAI
  itself needs one (``require_key``): ``missing_keys()`` names the variable, and a request without
  a key raises :class:`UsageError` (see :mod:`planexec.models._keys`); other servers get a
  placeholder key, since most run without authentication.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI, AsyncStream, NotGiven, Omit, not_given, omit
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionStreamOptionsParam,
)
from openai.types.chat.completion_create_params import ResponseFormat

from planexec._util.clip import clip
from planexec._util.strict_json import loads as strict_loads
from planexec.errors import ModelNotFound, Problem, UsageError
from planexec.models._base import (
    FinishReason,
    Message,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    NotSupported,
    StreamDelta,
    ToolCall,
    ToolSpec,
    Usage,
    estimate_tokens,
)
from planexec.models._guard import check_model_requests_allowed
from planexec.models._keys import missing_key, missing_keys_error
from planexec.models._loop_clients import LoopClients
from planexec.models._openai_common import (
    PendingCall,
    PendingReply,
    SdkStreamReader,
    kept,
    response_format,
    sdk_errors,
    with_schema_instruction,
)
from planexec.models._prices import Price, cost_of, price_for
from planexec.models._profiles import ModelProfile, local_server, profile_for
from planexec.models._resilience import ModelRetryPolicy, call_with_retries
from planexec.models._settings import ReasoningEffort
from planexec.models._streams import open_stream, relay

__all__ = ["OpenAIModel", "model_from_string"]

_NO_KEY = "unused"
"""Sent to servers that need no key: the SDK insists on one."""
_DEFAULT_RETRY = ModelRetryPolicy()


class OpenAIModel:
    """A chat model behind OpenAI's API or any server that speaks it.

    ``provider`` labels the model (``openai``, ``ollama``, ``vllm``, …) and picks its default
    ``profile``; ``base_url`` (with its API path, e.g. ``http://localhost:11434/v1``) points at a
    compatible server, and when it is None the SDK's default (or ``OPENAI_BASE_URL``) is used.
    ``require_key`` defaults to true for ``openai`` only. ``client`` replaces the SDK client this
    model would build (its retries are turned off; the caller closes it). ``price`` overrides the
    price table. The cost a response reports is at ``price``, else at the built-in table's price
    for ``openai`` models; an agent charges each call at ``price``, else at its ``Providers``'
    price for the model's name, before and after the call alike, whatever the provider.
    """

    def __init__(
        self,
        model: str,
        *,
        provider: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        require_key: bool | None = None,
        profile: ModelProfile | None = None,
        retry: ModelRetryPolicy = _DEFAULT_RETRY,
        timeout: float = 60.0,
        client: AsyncOpenAI | None = None,
        price: Price | None = None,
    ) -> None:
        problems = []
        if not model:
            problems.append(Problem(code="model", where="model", message="must not be empty"))
        if timeout <= 0:
            problems.append(Problem(code="timeout", where="timeout", message="must be positive"))
        if problems:
            raise UsageError("invalid OpenAI model settings", problems)
        self.model = model
        self.provider = provider
        self.base_url = base_url
        self.profile = profile or profile_for(provider, model)
        self.retry = retry
        self.timeout = timeout
        self.price = price
        self._given = client.with_options(max_retries=0) if client is not None else None
        self.api_key_env = api_key_env
        self.require_key = provider == "openai" if require_key is None else require_key
        self._api_key = api_key
        self._clients = LoopClients(self._new_client)

    @property
    def name(self) -> str:
        if self.provider == "openai-compatible" and self.base_url:
            return f"{self.provider}:{self.model}@{self.base_url}"
        return f"{self.provider}:{self.model}"

    @property
    def limits_key(self) -> str:
        """What this model's calls count against in the limits of a ``Providers`` value."""
        return self.base_url or self.provider

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this model built for the running event loop (a client passed in
        is left to its owner). Clients built in other loops close when those loops end."""
        await self._clients.aclose()

    def missing_keys(self) -> tuple[Problem, ...]:
        """The key this model needs and has not got (none when a client was given)."""
        if self._given is not None or self._api_key or not self.require_key:
            return ()
        if self.api_key_env and os.environ.get(self.api_key_env):
            return ()
        return (missing_key(self.name, self.api_key_env),)

    def _key(self) -> str:
        missing = self.missing_keys()
        if missing:
            raise missing_keys_error(missing)
        return self._api_key or (os.environ.get(self.api_key_env) if self.api_key_env else None) or _NO_KEY

    async def __aenter__(self) -> OpenAIModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _sdk(self) -> AsyncOpenAI:
        """The given client, or this model's own for the running event loop."""
        if self._given is not None:
            return self._given
        return await self._clients.get()

    def _new_client(self) -> AsyncOpenAI:
        return AsyncOpenAI(api_key=self._key(), base_url=self.base_url, timeout=self.timeout, max_retries=0)

    # -- the two calls ---------------------------------------------------------------------

    async def request(self, request: ModelRequest) -> ModelResponse:
        wire = self._wire(request)
        client = await self._sdk()

        async def attempt() -> ChatCompletion:
            check_model_requests_allowed(self.name)
            try:
                with sdk_errors(self.provider, self.name, self.api_key_env):
                    completion: ChatCompletion = await client.chat.completions.create(model=self.model, **wire.params())
                    return completion
            except ValueError as e:  # a body that is not JSON: the SDK lets json.loads' error through
                raise self._malformed(f"a body that is not JSON ({e})") from e

        completion = await call_with_retries(self.limits_key, attempt, self.retry)
        return self._response(self._read(completion), request, wire.sent())

    def _read(self, completion: ChatCompletion) -> PendingReply:
        """A whole completion, in the terms a response is built from."""
        try:
            choices = completion.choices
            if not choices:
                raise ModelCallError(f"{self.name} answered without a choice", provider=self.provider, retryable=False)
            choice = choices[0]
            message = choice.message
            reply = PendingReply(
                model=completion.model or self.model, finish=choice.finish_reason, usage=completion.usage
            )
            reply.text.append(message.content or "")
            if message.refusal:
                reply.refusal.append(message.refusal)
            for i, call in enumerate(message.tool_calls or ()):
                if call.type == "function":
                    pending = PendingCall(id=call.id, name=call.function.name, arguments=[call.function.arguments])
                    reply.calls[i] = pending
        except (AttributeError, TypeError, IndexError) as e:  # a body that is JSON, not a completion
            raise self._malformed(f"a body that is not a chat completion ({type(e).__name__}: {e})") from e
        return reply

    def _malformed(self, what: str) -> ModelCallError:
        return ModelCallError(f"{self.name} answered {what}", provider=self.provider, retryable=False)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Text deltas as they arrive, then the whole response (usage from the last chunk)."""
        wire = self._wire(request)
        client = await self._sdk()

        async def start() -> SdkStreamReader[ChatCompletionChunk]:
            check_model_requests_allowed(self.name)
            with sdk_errors(self.provider, self.name, self.api_key_env):
                chunks = await client.chat.completions.create(
                    model=self.model, **wire.params(), stream=True, stream_options=wire.stream_options
                )
            return self._chunks(chunks)

        opened = await open_stream(self.limits_key, self.retry, start)
        async with aclosing(relay(opened)) as deltas:
            async for delta in deltas:
                yield delta
        yield self._response(opened.value[0].reply, request, wire.sent())

    def _chunks(self, chunks: AsyncStream[ChatCompletionChunk]) -> SdkStreamReader[ChatCompletionChunk]:
        reply = PendingReply(model=self.model)

        def at_end() -> list[StreamDelta]:
            reply.ended = True
            if reply.finish is None:  # the connection closed mid-reply: what came is not the whole answer
                raise ModelCallError(
                    f"{self.name}: the stream ended before the reply was finished",
                    provider=self.provider,
                    retryable=True,
                ) from None
            return []

        def unreadable(e: Exception) -> ModelCallError:  # a chunk whose data is not JSON
            return ModelCallError(
                f"{self.name}: a malformed chunk in the response stream: {e}", provider=self.provider, retryable=False
            )

        who = (self.provider, self.name, self.api_key_env)
        return SdkStreamReader(items=chunks, reply=reply, take=reply.add, at_end=at_end, unreadable=unreadable, who=who)

    # -- neutral ↔ wire --------------------------------------------------------------------

    def _wire(self, request: ModelRequest) -> _Wire:
        profile = self.profile
        if request.tools and not profile.tools:
            raise NotSupported(f"tool calling is not supported by {self.name} (see its ModelProfile)")
        messages = list(request.messages)
        output_format: ResponseFormat | Omit = omit
        if request.output is not None:
            output_format, in_prompt = response_format(profile, request.output)
            if in_prompt:
                messages = with_schema_instruction(messages, request.output)
        settings = request.settings
        dropped = self.unsupported_settings(settings)
        cap = settings.max_tokens if settings.max_tokens is not None else omit
        usage_option: ChatCompletionStreamOptionsParam | Omit = (
            {"include_usage": True} if profile.streaming_usage else omit
        )
        return _Wire(
            messages=[_wire_message(m) for m in messages],
            tools=[_wire_tool(t) for t in request.tools] if request.tools else omit,
            response_format=output_format,
            temperature=kept(settings.temperature, "temperature", dropped),
            top_p=kept(settings.top_p, "top_p", dropped),
            stop=list(settings.stop) if settings.stop and "stop" not in dropped else omit,
            seed=kept(settings.seed, "seed", dropped),
            reasoning_effort=kept(settings.reasoning_effort, "reasoning_effort", dropped),
            prompt_cache_key=request.cache_key if request.cache_key and profile.prompt_cache_key else omit,
            max_completion_tokens=cap if profile.max_tokens_param == "max_completion_tokens" else omit,
            max_tokens=cap if profile.max_tokens_param == "max_tokens" else omit,
            timeout=settings.timeout if settings.timeout is not None else not_given,
            stream_options=usage_option,
            extra_body=dict(settings.extra) if settings.extra else None,
        )

    def unsupported_settings(self, settings: ModelSettings) -> dict[str, str]:
        """The settings this model's profile does not accept, each with why: they are not sent."""
        profile = self.profile
        accepted = {
            "temperature": profile.temperature,
            "top_p": profile.top_p,
            "stop": profile.stop,
            "seed": profile.seed,
            "reasoning_effort": profile.reasoning_effort,
        }
        given = settings.as_dict()
        return {
            name: f"{self.name} does not take {name} (ModelProfile.{name} is false); not sent"
            for name, ok in accepted.items()
            if name in given and not ok
        }

    def _response(self, state: PendingReply, request: ModelRequest, sent: list[Any]) -> ModelResponse:
        text = "".join(state.text)
        calls = tuple(_tool_call(i, pending, self) for i, pending in sorted(state.calls.items()))
        refusal = "".join(state.refusal) or None
        if refusal is None and state.finish == "content_filter":
            refusal = "the provider's content filter stopped the reply"
        if state.usage is not None:
            details = state.usage.prompt_tokens_details
            thought = state.usage.completion_tokens_details
            usage = Usage(
                input_tokens=state.usage.prompt_tokens,
                output_tokens=state.usage.completion_tokens,
                cached_input_tokens=(details.cached_tokens or 0) if details is not None else 0,
                reasoning_tokens=(thought.reasoning_tokens or 0) if thought is not None else 0,
                requests=1,
            )
        else:  # a server that reports no usage: estimated from all that was sent, schemas included
            said = text + "".join(json.dumps(c.arguments) for c in calls)
            sent_text = json.dumps(sent, ensure_ascii=False)
            usage = Usage(input_tokens=estimate_tokens(sent_text), output_tokens=estimate_tokens(said), requests=1)
        price = self.price or (price_for(self.model) if self.provider == "openai" else None)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            parsed=_parse_json(text) if request.output is not None and refusal is None else None,
            usage=usage,
            cost=cost_of(usage, price),
            model=state.model,
            finish_reason=_finish_reason(state.finish, bool(calls), refusal),
            refusal=refusal,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class _Wire:
    messages: list[ChatCompletionMessageParam]
    tools: list[ChatCompletionFunctionToolParam] | Omit
    response_format: ResponseFormat | Omit
    temperature: float | Omit
    top_p: float | Omit
    stop: list[str] | Omit
    seed: int | Omit
    reasoning_effort: ReasoningEffort | Omit
    prompt_cache_key: str | Omit
    max_completion_tokens: int | Omit
    max_tokens: int | Omit
    timeout: float | NotGiven
    stream_options: ChatCompletionStreamOptionsParam | Omit
    extra_body: dict[str, Any] | None
    """Provider extras, merged into the request body last by the SDK."""

    def params(self) -> dict[str, Any]:
        """The fields a request and a stream both send (the model aside)."""
        return {
            "messages": self.messages,
            "tools": self.tools,
            "response_format": self.response_format,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stop": self.stop,
            "seed": self.seed,
            "reasoning_effort": self.reasoning_effort,
            "prompt_cache_key": self.prompt_cache_key,
            "max_completion_tokens": self.max_completion_tokens,
            "max_tokens": self.max_tokens,
            "timeout": self.timeout,
            "extra_body": self.extra_body,
        }

    def sent(self) -> list[Any]:
        """What costs input tokens: the messages, and the tools and response format when given."""
        return [self.messages, *(p for p in (self.tools, self.response_format) if not isinstance(p, Omit))]


# -- conversions -----------------------------------------------------------------------------


def _wire_message(message: Message) -> ChatCompletionMessageParam:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "tool":
        if not message.tool_call_id:
            raise UsageError("a tool message needs the tool_call_id of the call it answers")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if not message.tool_calls:
        return {"role": "assistant", "content": message.content}
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in message.tool_calls
    ]
    return {"role": "assistant", "content": message.content or None, "tool_calls": calls}


def _wire_tool(tool: ToolSpec) -> ChatCompletionFunctionToolParam:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)},
    }


def _tool_call(index: int, pending: PendingCall, model: OpenAIModel) -> ToolCall:
    raw = "".join(pending.arguments).strip()
    try:
        arguments = strict_loads(raw) if raw else {}
        problem = None if isinstance(arguments, dict) else f"a JSON {type(arguments).__name__}, not an object"
    except ValueError as e:
        problem = f"not valid JSON ({e})"
    if problem is not None:
        raise ModelCallError(
            f"{model.name} called tool {pending.name!r} with arguments that are {problem}: {clip(repr(raw), 200)}",
            provider=model.provider,
            retryable=False,
        )
    return ToolCall(id=pending.id or f"call_{index + 1}", name=pending.name, arguments=arguments)


def _unfenced(text: str) -> str:
    """``text`` without a Markdown code fence around it (string operations: no regex to backtrack)."""
    stripped = text.strip()
    if len(stripped) < 6 or not stripped.startswith("```") or not stripped.endswith("```"):
        return text
    inner = stripped[3:-3]
    return (inner[4:] if inner.startswith("json") else inner).strip()


def _parse_json(text: str) -> Any:
    """Strict JSON (no NaN, bounded depth), or None: the caller then reads the text itself."""
    try:
        return strict_loads(_unfenced(text))
    except ValueError:
        return None


def _finish_reason(reason: str | None, has_calls: bool, refusal: str | None) -> FinishReason:
    if refusal is not None:
        return "refusal"
    if has_calls:
        return "tool_calls"  # some compatible servers say "stop" after tool calls
    return "length" if reason == "length" else "stop"


# -- model strings -----------------------------------------------------------------------------

_AT_URL = re.compile(r"^(?P<model>.+)@(?P<url>https?://\S+)$")


def model_from_string(provider: str, rest: str) -> OpenAIModel:
    """The model a ``provider:rest`` string names (see :mod:`planexec.models._registry`)."""
    if provider == "openai":
        return OpenAIModel(rest)
    if provider == "openai-compatible":
        m = _AT_URL.match(rest)
        if m is None:
            raise ModelNotFound(
                f"openai-compatible:{rest} names no server",
                [Problem(code="model_string", where=rest, message="use openai-compatible:MODEL@http://host:port/v1")],
            )
        return OpenAIModel(
            m["model"],
            provider=provider,
            base_url=m["url"].rstrip("/"),
            api_key_env="OPENAI_COMPATIBLE_API_KEY",
        )
    server = local_server(provider)
    if server is None:
        raise ModelNotFound(f"{provider!r} is not an OpenAI-compatible provider")
    return OpenAIModel(rest, provider=provider, base_url=server.base_url(), api_key_env=server.api_key_env)
