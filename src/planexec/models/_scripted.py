"""Deterministic test doubles that ship with planexec: no network, no real model.

``ScriptedModel`` answers from a list, in order, records every request (with the settings it
came with), fails loudly on a call its script does not cover, and can assert that it was fully
used. ``FunctionModel`` answers every request with a function of it. Both can simulate latency,
token usage and cost.

Their requests go through the same retry layer as the providers' (:func:`call_with_retries`), so
a retryable ``ModelCallError`` — scripted, or a fault profile's rate-limit storm — is retried as
a provider's 429 would be: each attempt takes the next reply. ``retry=`` sets the policy; by
default up to 4 attempts with no wait (as their latency defaults to none).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeAlias

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec._util.strict_json import loads as strict_loads
from planexec._util.values import replaced
from planexec.errors import Problem, UnexpectedModelCall
from planexec.models._base import ModelRequest, ModelResponse, StreamDelta, ToolCall, Usage, estimate_tokens
from planexec.models._prices import Price
from planexec.models._resilience import ModelRetryPolicy, call_with_retries
from planexec.models._settings import ModelSettings

__all__ = ["FunctionModel", "Reply", "ScriptedModel", "StreamingScriptedModel", "tool_calls"]

Reply: TypeAlias = (
    "ModelResponse | dict[str, Any] | list[Any] | str | BaseException"
    " | Callable[[ModelRequest], Reply | Awaitable[Reply]]"
)
"""One scripted answer: a response; JSON data (becomes ``parsed`` and ``text``); text; an exception
to raise; or a function of the request returning any of these."""


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    """A response that asks for tool calls: ``tool_calls(("search", {"q": "x"}), ...)``."""
    return ModelResponse(
        tool_calls=tuple(ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls, 1)),
        finish_reason="tool_calls",
    )


NO_WAIT = ModelRetryPolicy(initial_delay=0.0, max_delay=0.0, jitter=0.0)
"""The doubles' default retry policy: a provider's number of attempts, and no waiting."""


class _Simulated:
    """Shared by the doubles: simulated latency, usage and cost, retries, and the record of calls."""

    def __init__(
        self,
        *,
        name: str,
        latency: float | Callable[[ModelRequest], float],
        usage: Usage | None,
        cost_per_million: tuple[float, float] | None,
        retry: ModelRetryPolicy,
    ) -> None:
        self._name = name
        self._latency = latency
        self._usage = usage
        self._prices = cost_per_million
        self.retry = retry
        """How a retryable failure is retried (the same layer as a provider's: ``call_with_retries``)."""
        self.calls: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return self._name

    @property
    def settings(self) -> list[ModelSettings]:
        """The settings each request came with, in call order (``calls[i].settings``): which role
        asked with what shows in ``[(c.purpose, c.settings) for c in model.calls]``."""
        return [request.settings for request in self.calls]

    @property
    def price(self) -> Price | None:
        """The simulated price, from ``cost_per_million``: budgets check calls against it before they
        are made, as they do for real models."""
        if self._prices is None:
            return None
        return Price(input=self._prices[0], output=self._prices[1])

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens this double will report for ``request``."""
        if self._usage is not None:
            return self._usage.input_tokens
        return estimate_tokens("".join(m.content for m in request.messages))

    def latency_of(self, request: ModelRequest) -> float:
        return self._latency(request) if callable(self._latency) else self._latency

    async def _answer(self, request: ModelRequest, reply: Any, *, wait: bool = True) -> ModelResponse:
        latency = self.latency_of(request)
        if wait and latency > 0:
            await asyncio.sleep(latency)
        while callable(reply) and not isinstance(reply, ModelResponse):
            reply = reply(request)
            if inspect.isawaitable(reply):
                reply = await reply
        if isinstance(reply, BaseException):
            raise reply
        response = self._to_response(request, reply)
        usage = response.usage
        if usage.requests == 0:
            if self._usage is None:
                usage = Usage(
                    input_tokens=estimate_tokens("".join(m.content for m in request.messages)),
                    output_tokens=max(1, estimate_tokens(response.text)),
                    requests=1,
                )
            else:
                usage = replace(self._usage, requests=1)
        cost = response.cost
        if cost is None and self._prices is not None:
            cost = (usage.input_tokens * self._prices[0] + usage.output_tokens * self._prices[1]) / 1e6
        return replaced(response, usage=usage, cost=cost, model=response.model or self._name)

    @staticmethod
    def _to_response(request: ModelRequest, reply: Any) -> ModelResponse:
        if isinstance(reply, ModelResponse):
            return reply
        if isinstance(reply, dict | list):
            return ModelResponse(text=json.dumps(reply, ensure_ascii=False), parsed=reply)
        if isinstance(reply, str):
            parsed = None
            if request.output is not None:
                try:
                    parsed = strict_loads(reply)
                except ValueError:
                    parsed = None
            return ModelResponse(text=reply, parsed=parsed)
        raise UnexpectedModelCall(
            "a scripted reply has an unsupported type",
            [
                Problem(
                    code="scripted_reply", where=type(reply).__name__, message="use a ModelResponse, JSON data or text"
                )
            ],
        )


class ScriptedModel(_Simulated):
    """Answers from ``script`` in order; an extra call raises ``UnexpectedModelCall``.

    ``latency`` (seconds, or a function of the request) is awaited before each answer; usage is
    the reply's own, else ``usage`` when given, else estimated from the characters; cost comes
    from ``cost_per_million=(input_price, output_price)`` when given. A retryable
    ``ModelCallError`` reply is retried per ``retry`` (the next reply answers the retry), as a
    provider's would be; ``retry=ModelRetryPolicy(max_attempts=1)`` passes it on instead.
    """

    def __init__(
        self,
        script: Sequence[Reply],
        *,
        name: str = "scripted",
        latency: float | Callable[[ModelRequest], float] = 0.0,
        usage: Usage | None = None,
        cost_per_million: tuple[float, float] | None = None,
        retry: ModelRetryPolicy = NO_WAIT,
    ) -> None:
        super().__init__(name=name, latency=latency, usage=usage, cost_per_million=cost_per_million, retry=retry)
        self._script = list(script)

    @property
    def remaining(self) -> int:
        return len(self._script) - len(self.calls)

    def after(self, used: int) -> ScriptedModel:
        """A fresh model (same name, latency, usage, prices and retries) with the script after its
        first ``used`` replies: how a run picked up in a new process goes on with its script."""
        return ScriptedModel(
            self._script[max(used, 0) :],
            name=self._name,
            latency=self._latency,
            usage=self._usage,
            cost_per_million=self._prices,
            retry=self.retry,
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        async def attempt() -> ModelResponse:
            return await self._answer(request, self._next(request))

        return await call_with_retries(self._name, attempt, self.retry)

    def _next(self, request: ModelRequest) -> Reply:
        index = len(self.calls)
        self.calls.append(request)
        if index >= len(self._script):
            raise UnexpectedModelCall(
                f"scripted model {self._name!r} got call #{index + 1}, but its script has {len(self._script)}",
                [
                    Problem(
                        code="unexpected_call",
                        where=request.purpose or "request",
                        message=f"last user message: {clip(repr(request.last_user_text), 300)}",
                    )
                ],
            )
        return self._script[index]

    def assert_consumed(self) -> None:
        """Raise ``UnexpectedModelCall`` unless every scripted reply was used."""
        if self.remaining:
            raise UnexpectedModelCall(
                f"scripted model {self._name!r} was called {counted(len(self.calls), 'time')}; "
                f"{counted(self.remaining, 'scripted reply', 'scripted replies')} "
                f"{'was' if self.remaining == 1 else 'were'} never used"
            )


class StreamingScriptedModel(ScriptedModel):
    """A ScriptedModel that also streams, as real providers do: each reply's text arrives in
    pieces spread evenly over its latency, then the whole response.

    ``pieces`` splits a reply's text (default: ``chunks`` pieces of about equal size).
    """

    def __init__(
        self,
        script: Sequence[Reply],
        *,
        chunks: int = 8,
        pieces: Callable[[str], list[str]] | None = None,
        name: str = "scripted-stream",
        latency: float | Callable[[ModelRequest], float] = 0.0,
        usage: Usage | None = None,
        cost_per_million: tuple[float, float] | None = None,
        retry: ModelRetryPolicy = NO_WAIT,
    ) -> None:
        super().__init__(
            script, name=name, latency=latency, usage=usage, cost_per_million=cost_per_million, retry=retry
        )
        self._pieces = pieces or (lambda text: _even_pieces(text, chunks))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        async def attempt() -> ModelResponse:  # a stream is retried until its first piece, as a provider's
            return await self._answer(request, self._next(request), wait=False)

        response = await call_with_retries(self._name, attempt, self.retry)
        pieces = [p for p in self._pieces(response.text) if p]
        pause = self.latency_of(request) / (len(pieces) + 1)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k, piece in enumerate(pieces, 1):
            await _until(loop, start + k * pause)  # on a fixed schedule: sleeps do not add up their delays
            yield StreamDelta(text=piece)
        await _until(loop, start + (len(pieces) + 1) * pause)
        yield response


async def _until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _even_pieces(text: str, chunks: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, chunks)))
    return [text[i : i + size] for i in range(0, len(text), size)]


class FunctionModel(_Simulated):
    """Answers every request with ``function(request)`` (sync or async); a retryable
    ``ModelCallError`` it raises is retried per ``retry``, as a provider's would be."""

    def __init__(
        self,
        function: Callable[[ModelRequest], Reply | Awaitable[Reply]],
        *,
        name: str = "function",
        latency: float | Callable[[ModelRequest], float] = 0.0,
        usage: Usage | None = None,
        cost_per_million: tuple[float, float] | None = None,
        retry: ModelRetryPolicy = NO_WAIT,
    ) -> None:
        super().__init__(name=name, latency=latency, usage=usage, cost_per_million=cost_per_million, retry=retry)
        self._function = function

    async def request(self, request: ModelRequest) -> ModelResponse:
        async def attempt() -> ModelResponse:
            self.calls.append(request)
            return await self._answer(request, self._function)

        return await call_with_retries(self._name, attempt, self.retry)
