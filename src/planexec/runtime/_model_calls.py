"""Model calls on a run's behalf: budgets checked before each, the answer (or the failure)
logged after, calls in flight counted against the caps, streamed answers passed on as they come,
and, where the world already knows an answer (a recorded run), that answer instead (see
:mod:`planexec.runtime._world`).

Each call is charged at the price of the model that answered it: the model's own ``price``, else the
price the agent's :class:`~planexec.models.Providers` has for the model's name. A call to a model
with neither is charged what the model reports. A call to a fallback list is charged at the price
of the model of the list that answered it (its ``answered_by``); before the call, the budgets count
it at the most the list could cost (the highest input and output prices of its models), since any
of them may answer. The call keeps to the limits of the agent's providers."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, NoReturn, Protocol, get_args

from pydantic_core import to_json

from planexec._util.clip import clip
from planexec._util.strict_json import MAX_DEPTH, json_problem
from planexec._util.values import replaced
from planexec.errors import UsageError
from planexec.executor import StepError, StepFailure
from planexec.log import ModelAttemptFailed, ModelCalled
from planexec.models import (
    FailedAttempt,
    FallbackModel,
    FinishReason,
    Model,
    ModelCallError,
    ModelCrashed,
    ModelRequest,
    ModelResponse,
    Price,
    Providers,
    StreamingModel,
    ToolCall,
    Usage,
    cancelled_for_real,
    cost_of,
    estimate_tokens,
    failed_attempts_to,
    use_providers,
)
from planexec.plan import Step
from planexec.runtime._core import Core
from planexec.trust import Source

__all__ = ["ModelCaller", "ModelCalls", "accepted_reply", "answerers"]


ATTEMPT_ERROR_CHARS = 2000
"""The most of a failed attempt's error a run logs."""

OUTPUT_RESERVE = 1024
"""Output tokens a call in flight is counted for, against the output-token and cost caps, when its
request sets no ``max_tokens``."""


class ModelCaller(Protocol):
    """The loop's way to call a model on the run's behalf (see :class:`ModelCalls`)."""

    async def call_model(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        on_step: Callable[[Step], None] | None = None,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse: ...

    async def call_model_streaming(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        on_text: Callable[[str], None],
        on_step: Callable[[Step], None],
        *,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse: ...


class ModelCalls:
    def __init__(self, engine: Core) -> None:
        self._engine = engine
        self._model_calls_in_flight = 0
        self._model_tokens_in_flight = 0
        self._model_cost_in_flight = 0.0
        self._model_output_in_flight = 0

    async def call_streaming(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        on_text: Callable[[str], None],
        on_step: Callable[[Step], None],
        *,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse:
        """A model call whose answer streams: each piece of text goes to ``on_text`` as it comes (in
        a replay, the recorded early steps go to ``on_step`` where the log has them)."""
        assert isinstance(model, StreamingModel)

        limit = self._engine.config.limits.max_reply_chars

        async def streamed(request: ModelRequest) -> ModelResponse:
            response: ModelResponse | None = None
            received = 0
            async for item in model.stream(request):
                if isinstance(item, ModelResponse):
                    response = item
                else:
                    received += len(item.text)
                    if received > limit:  # stop reading: the reply is refused whatever comes next
                        raise ModelCallError(
                            f"{model.name} streamed more than {limit:,} characters (Limits.max_reply_chars)",
                            provider=model.name,
                            retryable=False,
                        )
                    on_text(item.text)
            if response is None:
                raise ModelCallError(
                    f"{model.name} ended its stream without a response", provider=model.name, retryable=False
                )
            return response

        return await self.call(role, model, request, step_id, send=streamed, on_step=on_step, read=read)

    async def call(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        send: Callable[[ModelRequest], Awaitable[ModelResponse]] | None = None,
        on_step: Callable[[Step], None] | None = None,
        read: tuple[Source, ...] = (),
    ) -> ModelResponse:
        """One model call on the run's behalf: budgets checked before it, the answer logged after.
        ``read``: for a planner's request, the untrusted sources it carries (logged with it).

        Calls in flight count against the budgets, so calls made at once cannot overrun a cap.
        """
        engine = self._engine
        if request.cache_key is None:  # one prompt cache per run and role, where a provider routes by key
            request = replace(request, cache_key=f"planexec/{engine.run_id}/{role}"[:64])
        charge = self._admit(model, request)
        call = _Call(role=role, model=model, request=request, step_id=step_id, read=read)
        return await engine.world.model_answer(
            role, request.purpose, step_id, on_step, lambda: self._live(call, charge, send)
        )

    async def _live(
        self, call: _Call, charge: _Charge, send: Callable[[ModelRequest], Awaitable[ModelResponse]] | None
    ) -> ModelResponse:
        """Call the model (``send``: the way to, else its ``request``), counted as in flight
        meanwhile; log its answer or its failure."""
        engine = self._engine
        model, request = call.model, call.request
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        telemetry = engine.telemetry
        live = None if telemetry is None else telemetry.model_call(call.role, model.name, request)
        self._count(charge, +1)
        error: Exception | None = None
        try:
            with use_providers(engine.config.providers), failed_attempts_to(self._attempt_failed_to(call)):
                answer = await (send or model.request)(request)
            response = accepted_reply(answer, engine.config.limits.max_reply_chars, model)
        except Exception as e:
            error = e
        except BaseException as e:  # a real cancellation goes on; anything else a model raises is a crash
            if cancelled_for_real(e):
                if telemetry is not None:
                    telemetry.model_abandoned(live)
                raise
            error = ModelCrashed(model.name, e)
        finally:
            self._count(charge, -1)
        at, duration = engine.now(), loop.time() - t0
        if error is not None:
            self._failed(call, at, duration, error, live)
        return self._answered(call, at, duration, response, live)

    def _admit(self, model: Model, request: ModelRequest) -> _Charge:
        """Check the call against the budgets, counting every call in flight; what it is counted for."""
        engine = self._engine
        output = request.settings.max_tokens or OUTPUT_RESERVE
        estimate, estimated_cost, output_cost = _most_a_call_costs(engine.config.providers, model, request, output)
        engine.budget.check_model_call(
            engine.state,
            engine.now(),
            estimate,
            in_flight=self._model_calls_in_flight,
            in_flight_tokens=self._model_tokens_in_flight,
            estimated_cost=estimated_cost,
            in_flight_cost=self._model_cost_in_flight,
            in_flight_output=self._model_output_in_flight,
        )
        return _Charge(tokens=estimate, cost=estimated_cost + output_cost, output=output)

    def _count(self, charge: _Charge, sign: int) -> None:
        """Count a call as in flight (``+1``), or no longer (``-1``)."""
        self._model_calls_in_flight += sign
        self._model_tokens_in_flight += sign * charge.tokens
        self._model_cost_in_flight += sign * charge.cost
        self._model_output_in_flight += sign * charge.output

    def _attempt_failed_to(self, call: _Call) -> Callable[[FailedAttempt], None]:
        """Where a failed attempt of ``call`` is logged (``model_attempt_failed``)."""
        engine = self._engine

        def attempt_failed(failed: FailedAttempt) -> None:
            engine.emit(
                ModelAttemptFailed(
                    at=engine.now(),
                    role=call.role,
                    purpose=call.request.purpose,
                    model=call.model.name,
                    step_id=call.step_id,
                    attempt=failed.attempt,
                    status=failed.error.status,
                    error=clip(str(failed.error), ATTEMPT_ERROR_CHARS),
                    retry_in=failed.retry_in,
                    retry_after=failed.error.retry_after,
                )
            )

        return attempt_failed

    def _failed(self, call: _Call, at: float, duration: float, error: Exception, live: Any) -> NoReturn:
        """Log the failed call, then raise: a model step fails, anything else is the caller's."""
        engine = self._engine
        request = call.request
        failed = ModelCalled(
            at=at,
            role=call.role,
            purpose=request.purpose,
            model=call.model.name,
            step_id=call.step_id,
            request_chars=request.chars,
            duration=duration,
            error=f"{type(error).__name__}: {error}",
            read=call.read,
        )
        engine.emit(failed)
        if engine.telemetry is not None:
            engine.telemetry.model_done(live, failed, None)
        if isinstance(error, UsageError | ModelCrashed) or call.role != "executor":
            raise error
        raise StepFailure(
            StepError(kind="executor", message=f"the model failed: {type(error).__name__}: {error}")
        ) from error

    def _answered(self, call: _Call, at: float, duration: float, response: ModelResponse, live: Any) -> ModelResponse:
        """Charge the answer at the price of the model that gave it, and log it."""
        engine = self._engine
        request = call.request
        cost = _charge(engine.config.providers, call.model, response)
        if cost != response.cost:
            response = replaced(response, cost=cost)
        called = ModelCalled(
            at=at,
            role=call.role,
            purpose=request.purpose,
            model=call.model.name,
            step_id=call.step_id,
            request_chars=request.chars,
            duration=duration,
            response=response,
            usage=response.usage,
            cost=cost,
            answered_by=response.answered_by,
            read=call.read,
        )
        engine.emit(called)
        if engine.telemetry is not None:
            engine.telemetry.model_done(live, called, response)
        return response


@dataclass(frozen=True, slots=True)
class _Call:
    """One model call the run makes."""

    role: str
    model: Model
    request: ModelRequest
    step_id: str | None
    read: tuple[Source, ...]


@dataclass(frozen=True, slots=True)
class _Charge:
    """What a call in flight is counted for against the caps."""

    tokens: int
    cost: float
    output: int


def answerers(model: Model) -> tuple[Model, ...]:
    """The models that may answer a call to ``model``: those of a fallback list (lists in it opened
    up), else ``model`` itself."""
    if isinstance(model, FallbackModel):
        return tuple(answerer for member in model.models for answerer in answerers(member))
    return (model,)


def _most_a_call_costs(
    providers: Providers, model: Model, request: ModelRequest, output: int
) -> tuple[int, float, float]:
    """What a call to ``model`` is counted for before it is made: its input tokens, what they cost
    and what ``output`` tokens cost — for a fallback list, the most of each that any of its models
    would take (a model that is not priced counts nothing but its tokens)."""
    tokens, input_cost, output_cost = 0, 0.0, 0.0
    for answerer in answerers(model):
        counted = _input_tokens(answerer, request)
        tokens = max(tokens, counted)
        price = providers.price_of(answerer)
        if price is not None:
            input_cost = max(input_cost, counted * price.input / 1e6)
            output_cost = max(output_cost, output * price.output / 1e6)
    return tokens, input_cost, output_cost


def _charge(providers: Providers, model: Model, response: ModelResponse) -> float:
    """What a call to ``model`` is charged: at the price of the model that answered (for a fallback
    list, the one its ``answered_by`` names; when none of the list has that name, the most any of
    them would charge)."""
    candidates = answerers(model)
    if isinstance(model, FallbackModel):
        candidates = tuple(m for m in candidates if m.name == response.answered_by) or candidates
    return max(_charged(answerer, response, providers.price_of(answerer)) for answerer in candidates)


def _charged(model: Model, response: ModelResponse, price: Price | None) -> float:
    """What a call answered by ``model`` is charged: at ``price``, unless that is the model's own
    price, with which the model has costed its answer itself; at what the model reports when no
    price is known."""
    if price is None or isinstance(getattr(model, "price", None), Price):
        return response.cost or 0.0
    return cost_of(response.usage, price) or 0.0


def accepted_reply(response: ModelResponse, max_chars: int, model: Model) -> ModelResponse:
    """``response`` as the run can keep it, or a :class:`ModelCallError` saying why it cannot.

    Refused: a reply longer than ``max_chars`` (``Limits.max_reply_chars``), tool calls whose
    arguments are not JSON data, usage or cost that are not finite non-negative numbers (they would
    defeat the budgets). Structured output that is not strict JSON (NaN, too deep) is dropped, so
    the text is parsed strictly instead, and refused there with a reason the model is told.
    """
    if not isinstance(response, ModelResponse):
        raise ModelCallError(
            f"{model.name} answered with a {type(response).__name__}, not a ModelResponse",
            provider=model.name,
            retryable=False,
        )
    shape = _shape_problem(response)
    if shape is not None:
        raise ModelCallError(f"{model.name} answered with {shape}", provider=model.name, retryable=False)
    size = len(response.text) + sum(len(c.name) + len(c.id) for c in response.tool_calls)
    for call in response.tool_calls:
        problem = json_problem(call.arguments, max_chars=max_chars, where=f"tool call {call.name!r} arguments")
        if problem is not None:
            raise ModelCallError(
                f"{model.name}: {problem.where}: {problem.message}", provider=model.name, retryable=False
            )
        size += len(json.dumps(call.arguments, default=str)) if call.arguments else 0
    if size > max_chars:
        raise ModelCallError(
            f"{model.name} replied with {size:,} characters, "
            f"more than the limit of {max_chars:,} (Limits.max_reply_chars)",
            provider=model.name,
            retryable=False,
        )
    usage = response.usage
    counts = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        usage.reasoning_tokens,
        usage.requests,
    )
    cost = response.cost
    if any(type(n) is not int or n < 0 for n in counts) or (
        cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf)
    ):
        raise ModelCallError(
            f"{model.name} reported usage or cost that is not a finite number >= 0: {usage}, cost {cost!r}",
            provider=model.name,
            retryable=False,
        )
    if response.parsed is not None and not _storable(response.parsed):
        response = replace(response, parsed=None)
    return response


_FINISH_REASONS = frozenset(get_args(FinishReason))


def _shape_problem(response: ModelResponse) -> str | None:
    """What makes ``response`` unfit to be logged and read back, if anything (a model built by hand
    can put anything in a dataclass)."""
    for name in ("text", "model"):
        if not isinstance(getattr(response, name), str):
            return f"a {name} that is not text"
    if response.refusal is not None and not isinstance(response.refusal, str):
        return "a refusal that is not text"
    if response.finish_reason not in _FINISH_REASONS:
        return f"the finish reason {response.finish_reason!r} (not one of {', '.join(sorted(_FINISH_REASONS))})"
    if not isinstance(response.usage, Usage):
        return "usage that is not a Usage"
    if not isinstance(response.tool_calls, tuple | list):
        return "tool calls that are not a sequence"
    for call in response.tool_calls:
        if not isinstance(call, ToolCall):
            return f"a tool call that is a {type(call).__name__}, not a ToolCall"
        if not isinstance(call.id, str) or not isinstance(call.name, str):
            return "a tool call whose id or name is not text"
        if not isinstance(call.arguments, dict):
            return f"tool call {call.name!r} with arguments that are a {type(call.arguments).__name__}, not an object"
    return None


def _storable(value: Any) -> bool:
    """Whether ``value`` can go into the log as it is: no NaN or infinity, nothing nested too deep
    to write, nothing JSON has no form for. Serializing it (in Rust) answers for most values at a
    fraction of the cost of a walk; text that holds ``NaN`` or ``Infinity`` is walked to be sure.
    What the value means (its depth, its types) is checked by whoever reads it: the planner's
    checks, a step's output check."""
    try:
        text = to_json(value, inf_nan_mode="constants", serialize_unknown=False)
    except Exception:  # too deep, or a value with no JSON form
        return False
    if b"NaN" in text or b"Infinity" in text:
        return json_problem(value, max_depth=MAX_DEPTH + 5, max_chars=None) is None
    return True


def _input_tokens(model: Model, request: ModelRequest) -> int:
    """The request's input tokens as the model counts them, where it can; else an estimate."""
    counter = getattr(model, "count_tokens", None)
    if callable(counter):
        try:
            counted = counter(request)
        except Exception:  # counting is optional: fall back to the estimate
            counted = None
        if isinstance(counted, int) and not isinstance(counted, bool) and counted >= 0:
            return counted
    return estimate_tokens("".join(m.content for m in request.messages))
