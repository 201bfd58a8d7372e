"""Model faults: a wrapped model that meets a rate-limit storm and spoils planner answers.

A storm is sent through the wrapped model's retry layer (:func:`call_with_retries`, which the
provider adapters and the shipped test doubles use): each of its first attempts fails there with a
429, as a provider's would, and the model's own retries absorb what they can. A model without
that layer gets the storm's errors from the wrapper itself.

A spoiled answer is spoiled the same way in its stream and in its final response: when a fault
hits a streamed call, the wrapper waits for the whole answer, changes it, and streams the changed
text in as many pieces as the original came in. Answers without a fault stream through untouched.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from planexec.errors import Problem
from planexec.faults._decisions import Decider, ModelFault
from planexec.faults._draw import draw
from planexec.models import (
    Model,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    StreamDelta,
    StreamingModel,
    before_each_attempt,
    count_tokens,
    missing_keys,
    resolve_model,
    retries,
    unsupported_settings,
)

__all__ = ["FaultyModel", "FaultyStreamingModel", "unknown_tool_name", "wrap_model"]

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def unknown_tool_name(tool: str) -> str:
    """The name an unknown-tool fault gives a step's tool."""
    return f"no_such_tool_{tool}"


def wrap_model(profile: Decider, model: Model | str, *, role: str = "planner") -> Model:
    inner = resolve_model(model) if isinstance(model, str) else model
    if isinstance(inner, StreamingModel):
        return FaultyStreamingModel(profile, inner, role=role)
    return FaultyModel(profile, inner, role=role)


class FaultyModel:
    """``inner`` with a profile's model faults. ``inner`` stays reachable, e.g. for its record of calls."""

    def __init__(self, profile: Decider, inner: Model, *, role: str) -> None:
        self.profile = profile
        self.inner = inner
        self.role = role
        self.calls = 0
        """Calls asked of this wrapper, plus the attempts the storm refused."""
        self.refused = 0
        """Attempts the storm refused so far."""
        self._answered: dict[str, int] = {}
        self._through_retries = retries(inner)

    @property
    def name(self) -> str:
        return self.inner.name

    def continue_from(self, answered: Mapping[str, int], *, calls: int) -> None:
        """Count on from a run replayed up to here: ``answered`` calls per purpose, ``calls`` in all
        (a replay that goes on live meets the faults the live run would have met)."""
        self._answered = dict(answered)
        self.calls = calls
        self.refused = max(0, calls - sum(answered.values()))

    def missing_keys(self) -> tuple[Problem, ...]:
        """The keys the wrapped model needs and has not got."""
        return tuple(missing_keys([self.inner]))

    @property
    def price(self) -> object:
        """The inner model's price, where it declares one."""
        return getattr(self.inner, "price", None)

    def count_tokens(self, request: ModelRequest) -> int:
        return count_tokens(self.inner, request)

    def unsupported_settings(self, settings: ModelSettings) -> dict[str, str]:
        """What the inner model would not send."""
        return unsupported_settings(self.inner, settings)

    async def request(self, request: ModelRequest) -> ModelResponse:
        fault, call = self._admit(request)
        with before_each_attempt(self._storm):
            response = await self.inner.request(request)
        return self._spoil(fault, request, call, response)

    def _storm(self) -> None:
        """Refuse this attempt when the storm is not over."""
        storm = self.profile.rate_limit_storm
        if self.refused >= storm:
            return
        self.refused += 1
        self.calls += 1
        raise ModelCallError(
            f"injected rate limit: {self.name} refused request {self.refused} of a storm of {storm} (429)",
            provider=self.name,
            retryable=True,
            status=429,
            retry_after=0.0,
        )

    def _admit(self, request: ModelRequest) -> tuple[ModelFault | None, int]:
        """Count the call (a model without a retry layer meets the storm here); the fault its
        answer gets, and its number among the answered calls with its purpose."""
        if not self._through_retries:
            self._storm()
        self.calls += 1
        call = self._answered.get(request.purpose, 0) + 1
        self._answered[request.purpose] = call
        return self.profile.model_fault(self.role, request.purpose, call), call

    def _spoil(
        self, fault: ModelFault | None, request: ModelRequest, call: int, response: ModelResponse
    ) -> ModelResponse:
        if fault == "invalid_json":
            return _cut_in_half(response)
        if fault == "unknown_tool":
            pick = draw(self.profile.seed, "model.unknown_tool.pick", self.role, request.purpose, call)
            return _rename_a_tool(response, pick)
        return response


class FaultyStreamingModel(FaultyModel):
    """A :class:`FaultyModel` around a model that streams; it streams too."""

    def __init__(self, profile: Decider, inner: StreamingModel, *, role: str) -> None:
        super().__init__(profile, inner, role=role)
        self._streaming = inner

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        fault, call = self._admit(request)
        if fault is None:
            async for item in self._stream(request):
                yield item
            return
        pieces = 0
        original: ModelResponse | None = None
        async for item in self._stream(request):
            if isinstance(item, ModelResponse):
                original = item
            else:
                pieces += 1
        if original is None:
            return  # the caller reports a stream that ended without a response
        spoiled = self._spoil(fault, request, call, original)
        for piece in _split(spoiled.text, max(1, pieces)):
            yield StreamDelta(text=piece)
        yield spoiled

    async def _stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """The inner model's stream. A stream is retried only until its first item, so the storm
        is in force while that first item is awaited (and no longer: the block never spans a
        ``yield``)."""
        items = self._streaming.stream(request)
        try:
            with before_each_attempt(self._storm):
                first = await anext(items, None)
            if first is None:
                return
            yield first
            async for item in items:
                yield item
        finally:
            await _close(items)


async def _close(items: AsyncIterator[Any]) -> None:
    close = getattr(items, "aclose", None)
    if close is not None:
        await close()


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _cut_in_half(response: ModelResponse) -> ModelResponse:
    text = response.text.strip()
    if not text and response.parsed is not None:
        text = json.dumps(response.parsed, ensure_ascii=False)
    return dataclasses.replace(response, text=text[: len(text) // 2], parsed=None)


def _rename_a_tool(response: ModelResponse, pick: float) -> ModelResponse:
    data = response.parsed if response.parsed is not None else _json_of(response.text)
    if not isinstance(data, dict):
        return response
    data = copy.deepcopy(data)
    steps = data.get("steps")
    if isinstance(steps, list):
        candidates = [s for s in steps if isinstance(s, dict) and isinstance(s.get("tool"), str)]
    else:
        step = data.get("step")
        candidates = [step] if isinstance(step, dict) and isinstance(step.get("tool"), str) else []
    if not candidates:
        return response
    victim = candidates[int(pick * len(candidates))]
    victim["tool"] = unknown_tool_name(victim["tool"])
    return dataclasses.replace(
        response,
        text=json.dumps(data, ensure_ascii=False),
        parsed=data if response.parsed is not None else None,
    )


def _json_of(text: str) -> Any:
    m = _FENCE.match(text)
    try:
        return json.loads(m.group(1) if m else text)
    except ValueError:
        return None
