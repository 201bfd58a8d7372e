"""Anthropic's Messages API as a planexec model, through the official ``anthropic`` SDK.

Neutral → wire: system messages become the ``system`` parameter; assistant tool calls become
``tool_use`` blocks; tool results become ``tool_result`` blocks of the next user turn (results in a
row share one turn). Structured output travels through tool use: the output spec is offered as a
tool whose ``input_schema`` is the JSON Schema, forced with ``tool_choice`` when no other tool is
offered; its input comes back as ``parsed`` and its JSON as ``text``. The request is built in
:mod:`planexec.models._anthropic_wire`.

Settings → wire: ``max_tokens`` (the model's own default when unset), ``temperature`` and
``top_p`` where this SDK release's ``messages.create`` has them (the API takes temperatures from
0 to 1), ``stop`` as ``stop_sequences``, ``reasoning_effort`` as ``output_config={"effort": …}``
(``minimal`` is sent as ``low``; ``none`` turns thinking off: ``thinking={"type": "disabled"}``),
``extra`` merged into the request body last (the SDK's ``extra_body``; a thinking budget goes
there: ``{"thinking": {"type": "enabled", "budget_tokens": 2048}}``, and structured output is then
asked for with ``tool_choice`` auto, since thinking cannot be combined with a forced tool), and
``timeout`` per request. The Messages API has no ``seed``. What is not sent is named by
``unsupported_settings``.

The SDK is imported when a model is built, so ``planexec.models`` imports without it. Its own
retries are off: every call goes through :func:`call_with_retries` under the provider name
``anthropic`` (rate limits with ``retry-after``, 5xx and 529 overloaded, timeouts and dropped
connections are retryable ``ModelCallError``\\ s; other 4xx are not). A stream is retried only when
it fails before its first delta (see :mod:`planexec.models._streams`).

Token counts: Anthropic reports ``input_tokens`` without cache reads and cache writes; the neutral
``input_tokens`` is the sum of all three, and ``cached_input_tokens`` the cache reads.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from planexec._util.clip import clip
from planexec._util.extras import install_hint
from planexec._util.strict_json import loads as strict_loads
from planexec.errors import ModelNotFound, Problem, UsageError
from planexec.models._anthropic_wire import AnthropicRequest, OutputTool, sdk_takes
from planexec.models._base import (
    FinishReason,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    StreamDelta,
    ToolCall,
    Usage,
)
from planexec.models._guard import check_model_requests_allowed
from planexec.models._http_status import retry_after, status_error
from planexec.models._keys import missing_key, missing_keys_error
from planexec.models._loop_clients import LoopClients
from planexec.models._prices import Price, cost_of, price_for
from planexec.models._resilience import ModelRetryPolicy, call_with_retries
from planexec.models._streams import open_stream, relay

if TYPE_CHECKING:
    import anthropic
    from anthropic import AsyncStream
    from anthropic.types import RawMessageStreamEvent

__all__ = ["AnthropicModel"]

PROVIDER = "anthropic"
INSTALL_HINT = install_hint("anthropic")

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
_RETRYABLE_ERROR_TYPES = frozenset({"overloaded_error", "rate_limit_error", "api_error", "timeout_error"})
_DEFAULT_RETRY = ModelRetryPolicy()


class AnthropicModel:
    """A Claude model on Anthropic's Messages API; implements ``request`` and ``stream``.

    ``api_key`` (else the environment variable ``api_key_env``) is read when the first request is
    made, so a model can be built, and a run replayed, without one. ``base_url`` defaults to
    ``ANTHROPIC_BASE_URL`` when set. ``timeout`` and ``max_tokens`` apply unless a request's
    settings say otherwise. ``price`` overrides the price table (the built-in one for the cost a
    response reports; an agent's ``Providers`` for what the agent charges). A ``client`` (an
    ``anthropic.AsyncAnthropic``) is used with its own settings but without its retries, and
    never closed here.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        retry: ModelRetryPolicy = _DEFAULT_RETRY,
        timeout: float = 60.0,
        max_tokens: int = 4096,
        client: anthropic.AsyncAnthropic | None = None,
        price: Price | None = None,
    ) -> None:
        _require_sdk()
        problems = []
        if not model:
            problems.append(Problem(code="model", where="model", message="name a model, e.g. 'claude-sonnet-4-6'"))
        if timeout <= 0:
            problems.append(Problem(code="model", where="timeout", message="must be positive"))
        if max_tokens < 1:
            problems.append(Problem(code="model", where="max_tokens", message="must be at least 1"))
        if problems:
            raise UsageError("invalid Anthropic model settings", problems)
        self.model = model
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self.api_key_env = api_key_env
        self.retry = retry
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.price = price
        self._api_key = api_key
        self._given_client = client.with_options(max_retries=0) if client is not None else None  # retries are ours
        self._clients = LoopClients(self._new_client)

    @property
    def name(self) -> str:
        return f"{PROVIDER}:{self.model}"

    @property
    def limits_key(self) -> str:
        """What this model's calls count against in the limits of a ``Providers`` value: the base
        URL when one is set (another server has limits of its own), else the provider."""
        return self.base_url or PROVIDER

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, base_url={self.base_url!r})"

    def unsupported_settings(self, settings: ModelSettings) -> dict[str, str]:
        """The settings this model does not send, each with why."""
        given = settings.as_dict()
        found: dict[str, str] = {}
        for name in ("temperature", "top_p"):
            if name in given and not sdk_takes(name):
                found[name] = (
                    f"{self.name}: this anthropic SDK release's messages.create has no {name}; not sent "
                    f"(extra={{{name!r}: ...}} sends it anyway)"
                )
        if "seed" in given:
            found["seed"] = f"{self.name}: the Messages API has no seed; not sent"
        effort = settings.reasoning_effort
        if effort is not None:
            parameter = "thinking" if effort == "none" else "output_config"
            if not sdk_takes(parameter):
                found["reasoning_effort"] = (
                    f"{self.name}: this anthropic SDK release's messages.create has no {parameter}; not sent"
                )
        return found

    async def request(self, request: ModelRequest) -> ModelResponse:
        check_model_requests_allowed(self.name)
        client = await self._client()
        wire = self._wire(request)
        timeout = request.settings.timeout or self.timeout

        async def attempt() -> ModelResponse:
            try:
                with _translated_errors(self.name, self.api_key_env):
                    message = await client.messages.create(
                        model=self.model, **wire.params, extra_body=wire.extra_body, timeout=timeout
                    )
            except json.JSONDecodeError as e:  # the whole answer's body was not JSON
                said = f"{self.name}: a body that is not JSON ({e})"
                raise ModelCallError(said, provider=PROVIDER, retryable=False) from None
            return _read_message(self.name, message, wire.output, self._price())

        return await call_with_retries(self.limits_key, attempt, self.retry)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Text deltas (and the output tool's JSON as it is written), then the whole response."""
        check_model_requests_allowed(self.name)
        client = await self._client()
        wire = self._wire(request)
        timeout = request.settings.timeout or self.timeout

        async def open_() -> _StreamReader:
            with _translated_errors(self.name, self.api_key_env):
                events = await client.messages.create(
                    model=self.model, **wire.params, extra_body=wire.extra_body, stream=True, timeout=timeout
                )
            return _StreamReader(events, wire.output)

        opened = await open_stream(self.limits_key, self.retry, open_)
        async with aclosing(relay(opened)) as deltas:
            async for delta in deltas:
                yield delta
        yield opened.value[0].response(self._price())

    async def aclose(self) -> None:
        """Close the HTTP client this model opened for the running event loop (a client passed in
        is left to its owner). Clients opened in other loops close when those loops end."""
        await self._clients.aclose()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def missing_keys(self) -> tuple[Problem, ...]:
        """The key this model needs and has not got (none when a client was given)."""
        if self._given_client is not None or self._api_key or os.environ.get(self.api_key_env):
            return ()
        return (missing_key(self.name, self.api_key_env),)

    def _wire(self, request: ModelRequest) -> AnthropicRequest:
        dropped = self.unsupported_settings(request.settings)
        return AnthropicRequest.build(request, max_tokens=self.max_tokens, dropped=dropped)

    def _price(self) -> Price | None:
        return self.price or price_for(self.model)

    async def _client(self) -> anthropic.AsyncAnthropic:
        """The given client, or this model's own for the running event loop (made on first use)."""
        if self._given_client is not None:
            return self._given_client
        return await self._clients.get()

    def _new_client(self) -> anthropic.AsyncAnthropic:
        missing = self.missing_keys()
        if missing:
            raise missing_keys_error(missing)
        key = self._api_key or os.environ.get(self.api_key_env, "")
        import anthropic

        # The key goes in x-api-key, where the API documents it (some SDK releases send ``api_key``
        # as a bearer token, which the API reserves for OAuth tokens).
        headers = cast("dict[str, str]", {"X-Api-Key": key, "Authorization": anthropic.Omit()})
        return anthropic.AsyncAnthropic(
            api_key=key, base_url=self.base_url, timeout=self.timeout, max_retries=0, default_headers=headers
        )


def _require_sdk() -> None:
    try:
        import anthropic  # noqa: F401
    except ImportError as e:
        raise ModelNotFound(f"Anthropic models need the anthropic package: {INSTALL_HINT}") from e


# -- wire → neutral ---------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Reply:
    """A reply in the making: what both the whole-message and the streamed paths collect."""

    model: str = ""
    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    answer_json: str | None = None
    answer: Any = None
    stop_reason: str | None = None
    explanation: str | None = None
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 0

    def add_tool_use(self, *, call_id: str, name: str, arguments: Any, output: OutputTool | None) -> None:
        if output is not None and name == output.name:
            value = arguments
            if output.wrapped:
                value = arguments.get("value") if isinstance(arguments, dict) else None
            self.answer = value
            if self.answer_json is None:
                self.answer_json = json.dumps(value, ensure_ascii=False)
            return
        if not isinstance(arguments, dict):
            raise ModelCallError(
                f"the model called {name!r} with arguments that are not a JSON object",
                provider=PROVIDER,
                retryable=False,
            )
        self.calls.append(ToolCall(id=call_id, name=name, arguments=arguments))

    def response(self, price: Price | None) -> ModelResponse:
        usage = Usage(
            input_tokens=self.input_tokens + self.cache_read + self.cache_write,
            output_tokens=self.output_tokens,
            cached_input_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
            requests=1,
        )
        text = "".join(self.texts)
        finish = _FINISH.get(self.stop_reason or "end_turn", "stop")
        if finish == "tool_calls" and not self.calls:
            finish = "stop"  # only the output tool was called: the answer is in ``parsed``
        refusal = None
        if finish == "refusal":
            refusal = self.explanation or text or "the model declined to answer"
        return ModelResponse(
            text=self.answer_json if self.answer_json is not None else text,
            tool_calls=tuple(self.calls),
            parsed=self.answer,
            usage=usage,
            cost=cost_of(usage, price),
            model=self.model,
            finish_reason=finish,
            refusal=refusal,
        )


def _read_message(name: str, message: Any, output: OutputTool | None, price: Price | None) -> ModelResponse:
    """The response a Messages body holds; a body that is not one is a typed error, not retried
    (the SDK hands over whatever JSON came back, a string or an object missing its parts)."""
    try:
        return _from_message(message, output, price)
    except (AttributeError, TypeError, KeyError) as e:
        raise ModelCallError(
            f"{name}: a body that is not a Messages response ({type(e).__name__}: {e})",
            provider=PROVIDER,
            retryable=False,
        ) from None


def _from_message(message: anthropic.types.Message, output: OutputTool | None, price: Price | None) -> ModelResponse:
    u = message.usage
    reply = _Reply(
        model=message.model,
        stop_reason=message.stop_reason,
        explanation=_explanation(getattr(message, "stop_details", None)),
        input_tokens=u.input_tokens,
        cache_read=u.cache_read_input_tokens or 0,
        cache_write=u.cache_creation_input_tokens or 0,
        output_tokens=u.output_tokens,
    )
    for block in message.content:
        if block.type == "text":
            reply.texts.append(block.text)
        elif block.type == "tool_use":
            reply.add_tool_use(call_id=block.id, name=block.name, arguments=block.input, output=output)
    return reply.response(price)


def _explanation(details: Any) -> str | None:
    """Why the model refused, from ``stop_details`` (SDK releases before it have none)."""
    explanation = getattr(details, "explanation", None)
    return explanation if isinstance(explanation, str) and explanation else None


@dataclass(kw_only=True, slots=True)
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


class _StreamReader:
    """Folds the stream's events into a reply; ``feed`` returns the deltas to pass on. As a
    :class:`~planexec.models._streams.StreamReader`, it reads the events itself."""

    def __init__(self, events: AsyncStream[RawMessageStreamEvent], output: OutputTool | None) -> None:
        self._events = events
        self._ended = False
        self._output = output
        self._blocks: dict[int, _Block] = {}
        self._reply = _Reply()
        self._stopped = False

    async def next(self) -> list[StreamDelta] | None:
        if self._ended:
            return None
        event = await _next_event(self._events)
        if event is None:
            self.check_complete()
            self._ended = True
            return None
        return self.feed(event)

    async def aclose(self) -> None:
        await self._events.close()

    def feed(self, event: RawMessageStreamEvent) -> list[StreamDelta]:
        reply = self._reply
        if event.type == "message_start":
            m = event.message
            reply.model = m.model
            reply.input_tokens = m.usage.input_tokens
            reply.cache_read = m.usage.cache_read_input_tokens or 0
            reply.cache_write = m.usage.cache_creation_input_tokens or 0
            reply.output_tokens = m.usage.output_tokens
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text":
                self._blocks[event.index] = _Block(kind="text", parts=[block.text] if block.text else [])
                return [StreamDelta(text=block.text)] if block.text else []
            if block.type == "tool_use":
                self._blocks[event.index] = _Block(kind="tool_use", id=block.id, name=block.name)
        elif event.type == "content_block_delta":
            return self._delta(event.index, event.delta)
        elif event.type == "message_delta":
            reply.stop_reason = event.delta.stop_reason or reply.stop_reason
            reply.explanation = _explanation(getattr(event.delta, "stop_details", None)) or reply.explanation
            u = event.usage  # cumulative counts
            reply.output_tokens = u.output_tokens
            reply.input_tokens = u.input_tokens if u.input_tokens is not None else reply.input_tokens
            reply.cache_read = u.cache_read_input_tokens if u.cache_read_input_tokens is not None else reply.cache_read
            if u.cache_creation_input_tokens is not None:
                reply.cache_write = u.cache_creation_input_tokens
        elif event.type == "message_stop":
            self._stopped = True
        return []

    def _delta(self, index: int, delta: Any) -> list[StreamDelta]:
        block = self._blocks.get(index)
        if block is None:
            return []
        if delta.type == "text_delta" and block.kind == "text":
            block.parts.append(delta.text)
            return [StreamDelta(text=delta.text)] if delta.text else []
        if delta.type == "input_json_delta" and block.kind == "tool_use":
            block.parts.append(delta.partial_json)
            output = self._output
            streams = output is not None and block.name == output.name and not output.wrapped
            return [StreamDelta(text=delta.partial_json)] if streams and delta.partial_json else []
        return []

    def check_complete(self) -> None:
        if not self._stopped:
            raise ModelCallError("the response stream ended before message_stop", provider=PROVIDER, retryable=True)

    def response(self, price: Price | None) -> ModelResponse:
        reply = self._reply
        for _index, block in sorted(self._blocks.items()):
            if block.kind == "text":
                reply.texts.append("".join(block.parts))
                continue
            raw = "".join(block.parts)
            is_answer = self._output is not None and block.name == self._output.name
            try:
                arguments = strict_loads(raw) if raw.strip() else {}
            except ValueError:
                if not is_answer:
                    raise ModelCallError(
                        f"the model's arguments for {block.name!r} are not valid JSON: {clip(repr(raw), 200)}",
                        provider=PROVIDER,
                        retryable=False,
                    ) from None
                reply.answer_json = raw  # the caller sees the broken JSON, and can ask for a repair
                continue
            if is_answer and not (self._output and self._output.wrapped):
                reply.answer_json = raw or "{}"  # the very text that was streamed
            reply.add_tool_use(call_id=block.id, name=block.name, arguments=arguments, output=self._output)
        return reply.response(price)


async def _next_event(events: AsyncStream[RawMessageStreamEvent]) -> RawMessageStreamEvent | None:
    try:
        with _translated_errors():
            return await anext(events)
    except StopAsyncIteration:
        return None
    except ValueError as e:  # an event whose data is not JSON
        raise ModelCallError(
            f"a malformed event in the response stream: {e}", provider=PROVIDER, retryable=False
        ) from e


# -- errors -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _translated_errors(name: str = PROVIDER, key_env: str | None = None) -> Iterator[None]:
    """SDK and transport failures of model ``name`` become ``ModelCallError``; anything else passes
    unchanged."""
    try:
        yield
    except Exception as e:
        error = _call_error(e, name, key_env)
        if error is None:
            raise
        raise error from e


def _call_error(e: Exception, name: str = PROVIDER, key_env: str | None = None) -> ModelCallError | None:
    import anthropic

    timeout, transport = _transport_errors()
    if isinstance(e, anthropic.APITimeoutError | timeout):
        return ModelCallError(f"{name}: the request timed out", provider=PROVIDER, retryable=True)
    if isinstance(e, anthropic.APIConnectionError | transport):
        return ModelCallError(f"{name}: cannot reach the Anthropic API ({e})", provider=PROVIDER, retryable=True)
    if isinstance(e, anthropic.APIStatusError):
        error = e.body.get("error") if isinstance(e.body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        status = e.status_code
        if status < 400:  # an error event in the middle of a stream
            named = f" ({kind})" if kind else ""
            return ModelCallError(
                f"{name}: the response stream broke off{named}: {detail or e.message}",
                provider=PROVIDER,
                retryable=kind in _RETRYABLE_ERROR_TYPES,
                retry_after=retry_after(e.response.headers),
            )
        return status_error(
            name,
            provider=PROVIDER,
            status=status,
            detail=detail or e.message,
            kind=kind,
            key_env=key_env,
            headers=e.response.headers,
        )
    if isinstance(e, anthropic.AnthropicError):
        return ModelCallError(f"the Anthropic API call failed: {e}", provider=PROVIDER, retryable=False)
    return None


def _transport_errors() -> tuple[type[Exception], type[Exception]]:
    """Timeouts and other transport failures of the HTTP library under the SDK, raised as they are
    when a stream breaks off (SDK 2 is built on httpx2, earlier releases on httpx)."""
    try:
        import httpx2 as http
    except ImportError:  # pragma: no cover - an SDK release built on httpx
        import httpx as http  # type: ignore[no-redef, import-not-found, unused-ignore]
    return http.TimeoutException, http.TransportError
