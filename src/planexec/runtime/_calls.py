"""Model calls on a run's behalf: budgets checked before each, the answer (or the failure)
logged after, calls in flight counted against the caps, streamed answers passed on as they come,
and, in a replay, the recorded answers served instead."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from planexec._errors import UsageError
from planexec.executor._base import StepFailure
from planexec.executor._outcome import StepError
from planexec.models._base import (
    Model,
    ModelCallError,
    ModelRequest,
    ModelResponse,
    StreamingModel,
    estimate_tokens,
)
from planexec.models._prices import Price, price_for
from planexec.plan._step import Step
from planexec.runtime._events import ModelCalled
from planexec.runtime._replay import RecordedError

if TYPE_CHECKING:
    from planexec.runtime._engine import Engine

__all__ = ["ModelCalls"]


class ModelCalls:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._model_calls_in_flight = 0
        self._model_tokens_in_flight = 0
        self._model_cost_in_flight = 0.0

    async def call_streaming(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        on_text: Callable[[str], None],
        on_step: Callable[[Step], None],
    ) -> ModelResponse:
        """A model call whose answer streams: each piece of text goes to ``on_text`` as it comes (in
        a replay, the recorded early steps go to ``on_step`` where the log has them)."""
        assert isinstance(model, StreamingModel)

        async def streamed(request: ModelRequest) -> ModelResponse:
            response: ModelResponse | None = None
            async for item in model.stream(request):
                if isinstance(item, ModelResponse):
                    response = item
                else:
                    on_text(item.text)
            if response is None:
                raise ModelCallError(
                    f"{model.name} ended its stream without a response", provider=model.name, retryable=False
                )
            return response

        return await self.call(role, model, request, step_id, send=streamed, on_step=on_step)

    async def call(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        send: Callable[[ModelRequest], Awaitable[ModelResponse]] | None = None,
        on_step: Callable[[Step], None] | None = None,
    ) -> ModelResponse:
        """One model call on the run's behalf: budgets checked before it, the answer logged after.

        Calls in flight count against the budgets, so calls made at once cannot overrun a cap.
        """
        engine = self._engine
        estimate = _input_tokens(model, request)
        price = getattr(model, "price", None)
        price = price if isinstance(price, Price) else price_for(model.name)
        estimated_cost = estimate * price.input / 1e6 if price is not None else 0.0
        engine.budget.check_model_call(
            engine.state,
            engine.now(),
            estimate,
            in_flight=self._model_calls_in_flight,
            in_flight_tokens=self._model_tokens_in_flight,
            estimated_cost=estimated_cost,
            in_flight_cost=self._model_cost_in_flight,
        )
        replay = engine.replay
        if replay is not None and not replay.live and not replay.goes_live_for_model(role, request.purpose):
            try:
                return await replay.model_call(engine, role, request.purpose, step_id, on_step=on_step)
            except RecordedError as e:
                if role != "executor":
                    raise
                raise StepFailure(StepError(kind="executor", message=f"the model failed: {e}")) from None
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._model_calls_in_flight += 1
        self._model_tokens_in_flight += estimate
        self._model_cost_in_flight += estimated_cost
        error: Exception | None = None
        try:
            response = await (send or model.request)(request)
        except Exception as e:
            error = e
        finally:
            self._model_calls_in_flight -= 1
            self._model_tokens_in_flight -= estimate
            self._model_cost_in_flight -= estimated_cost
        record = ModelCalled(
            at=engine.now(),
            role=role,
            purpose=request.purpose,
            model=model.name,
            step_id=step_id,
            request_chars=request.chars,
            duration=loop.time() - t0,
        )
        if error is not None:
            engine.emit(replace(record, error=f"{type(error).__name__}: {error}"))
            if isinstance(error, UsageError) or role != "executor":
                raise error
            raise StepFailure(
                StepError(kind="executor", message=f"the model failed: {type(error).__name__}: {error}")
            ) from error
        engine.emit(replace(record, response=response, usage=response.usage, cost=response.cost or 0.0))
        return response


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
