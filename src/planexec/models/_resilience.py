"""Resilience for provider calls: retries with backoff and jitter that honour ``Retry-After``, the
concurrency and request-rate limits of the provider (see :mod:`planexec.models._limits`: the
limits of the :class:`~planexec.models.Providers` value in effect), and an ordered list of
fallback models.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from planexec.errors import Problem, UsageError
from planexec.models._base import Model, ModelCallError, ModelRequest, ModelResponse, StreamDelta, StreamingModel
from planexec.models._keys import missing_keys
from planexec.models._limits import acquire
from planexec.models._settings import ModelSettings, unsupported_settings

__all__ = [
    "FailedAttempt",
    "FallbackModel",
    "Held",
    "ModelRetryPolicy",
    "call_with_retries",
    "failed_attempts_to",
    "open_with_retries",
]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRetryPolicy:
    """How a failed provider call is tried again. Only ``ModelCallError(retryable=True)`` is
    retried; a ``retry_after`` from the provider replaces the computed delay when it is longer."""

    max_attempts: int = 4
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        problems = []
        if self.max_attempts < 1:
            problems.append(Problem(code="retry", where="max_attempts", message="must be at least 1"))
        if self.initial_delay < 0 or self.max_delay < 0:
            problems.append(Problem(code="retry", where="delay", message="must not be negative"))
        if not 0 <= self.jitter <= 1:
            problems.append(Problem(code="retry", where="jitter", message="must be from 0 to 1"))
        if problems:
            raise UsageError("invalid model retry policy", problems)

    def delay(self, attempt: int, error: ModelCallError, rng: random.Random) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        base *= 1 + rng.uniform(-self.jitter, self.jitter)
        if error.retry_after is not None:
            base = max(base, min(error.retry_after, self.max_delay))
        return max(0.0, base)


_before_attempt: ContextVar[Callable[[], None] | None] = ContextVar("planexec_before_attempt", default=None)


@contextmanager
def before_each_attempt(hook: Callable[[], None]) -> Iterator[None]:
    """Call ``hook`` before each attempt :func:`call_with_retries` makes in this block (in this
    task): a ``ModelCallError`` it raises fails that attempt as the provider's answer would, and is
    retried the same way. Fault injection uses it to send rate-limit storms through the retries."""
    token = _before_attempt.set(hook)
    try:
        yield
    finally:
        _before_attempt.reset(token)


@dataclass(frozen=True, kw_only=True, slots=True)
class FailedAttempt:
    """An attempt of a provider call that failed: ``retry_in`` seconds later the call is tried
    again (None: it is not, and the call fails with ``error``)."""

    provider: str
    attempt: int
    error: ModelCallError
    retry_in: float | None


_on_failed_attempt: ContextVar[Callable[[FailedAttempt], None] | None] = ContextVar(
    "planexec_on_failed_attempt", default=None
)


@contextmanager
def failed_attempts_to(report: Callable[[FailedAttempt], None]) -> Iterator[None]:
    """Tell ``report`` of every failed attempt :func:`call_with_retries` and
    :func:`open_with_retries` make in this block (in this task), retried or not: a run logs each."""
    token = _on_failed_attempt.set(report)
    try:
        yield
    finally:
        _on_failed_attempt.reset(token)


async def call_with_retries(
    provider: str,
    call: Callable[[], Awaitable[T]],
    policy: ModelRetryPolicy,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Make ``call`` within the limits of ``provider`` (a provider name, a base URL, a test double's
    name) that the :class:`~planexec.models.Providers` in effect sets (``use_providers``; an agent
    puts its own in effect for each call it makes), retrying retryable failures per ``policy``.

    Provider adapters and the shipped test doubles all call models through this function."""
    held = await _attempts(provider, call, policy, rng=rng, sleep=sleep, keep_slot=False)
    return held.value


@dataclass(slots=True)
class Held(Generic[T]):
    """What :func:`open_with_retries` opened, and the provider's concurrency slot it holds."""

    value: T
    _slot: asyncio.Semaphore | None = None

    def release(self) -> None:
        """Give the slot back (once; later calls do nothing). Call it when the stream has ended."""
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()


async def open_with_retries(
    provider: str,
    open_: Callable[[], Awaitable[T]],
    policy: ModelRetryPolicy,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Held[T]:
    """Open a stream as :func:`call_with_retries` makes a call, but keep the concurrency slot of the
    attempt that opened it: the caller releases it (``Held.release``) when the stream ends, so at
    most ``max_concurrency`` calls — streams included, from their first byte to their last — are
    under way at once."""
    return await _attempts(provider, open_, policy, rng=rng, sleep=sleep, keep_slot=True)


async def _attempts(
    provider: str,
    call: Callable[[], Awaitable[T]],
    policy: ModelRetryPolicy,
    *,
    rng: random.Random | None,
    sleep: Callable[[float], Awaitable[None]],
    keep_slot: bool,
) -> Held[T]:
    attempt = 0
    while True:
        attempt += 1
        slot = await acquire(provider)
        kept = False
        try:
            hook = _before_attempt.get()
            if hook is not None:
                hook()
            held = Held(await call(), slot if keep_slot else None)
            kept = keep_slot
            return held
        except ModelCallError as e:
            again = e.retryable and attempt < policy.max_attempts
            if again:
                rng = rng or random.Random()  # made only when needed: seeding is not free
                delay = policy.delay(attempt, e, rng)
            report = _on_failed_attempt.get()
            if report is not None:
                report(FailedAttempt(provider=provider, attempt=attempt, error=e, retry_in=delay if again else None))
            if not again:
                raise
        finally:
            if slot is not None and not kept:
                slot.release()
        await sleep(delay)


def retries(model: object) -> bool:
    """Whether ``model``'s requests go through :func:`call_with_retries` (it has a
    :class:`ModelRetryPolicy` ``retry``, or is a fallback list of models that do)."""
    if isinstance(getattr(model, "retry", None), ModelRetryPolicy):
        return True
    return isinstance(model, FallbackModel) and any(retries(m) for m in model.models)


class FallbackModel:
    """Tries ``models`` in order: when one fails (after its own retries), the next is asked.

    A circuit breaker spares the calls that follow a failure: a model that failed is skipped for
    ``cooldown`` seconds (then tried again), so a provider that is down does not cost every call
    its whole retry cycle. When every model is cooling down they are tried anyway, the one whose
    cool-down ends first first. The answer says which model gave it (``answered_by``: the name of
    a model of the list, or, for a list inside the list, of the model of that list that answered).
    """

    def __init__(
        self,
        models: Sequence[Model],
        *,
        name: str | None = None,
        cooldown: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        problems = []
        if not models:
            problems.append(
                Problem(code="fallback", where="models", message="a fallback list needs at least one model")
            )
        if isinstance(cooldown, bool) or not isinstance(cooldown, int | float) or not 0 <= cooldown < float("inf"):
            problems.append(
                Problem(code="fallback", where="cooldown", message=f"must be seconds >= 0, not {cooldown!r}")
            )
        if problems:
            raise UsageError("invalid fallback list", problems)
        self.models = tuple(models)
        self.cooldown = float(cooldown)
        self._clock = clock
        self._cool_until: dict[int, float] = {}
        self._name = name or " > ".join(m.name for m in self.models)

    @property
    def name(self) -> str:
        return self._name

    def unsupported_settings(self, settings: ModelSettings) -> dict[str, str]:
        """The settings one of the models would not send, with every such model's reason."""
        found: dict[str, list[str]] = {}
        for model in self.models:
            for setting, why in unsupported_settings(model, settings).items():
                found.setdefault(setting, []).append(why)
        return {setting: "; ".join(whys) for setting, whys in found.items()}

    def missing_keys(self) -> tuple[Problem, ...]:
        """The keys the models of the list need and have not got."""
        return tuple(missing_keys(self.models))

    def _order(self) -> list[int]:
        """The models to ask, in order: those not cooling down; or, when all are, every one."""
        now = self._clock()
        ready = [i for i in range(len(self.models)) if self._cool_until.get(i, 0.0) <= now]
        return ready or sorted(range(len(self.models)), key=lambda i: self._cool_until[i])

    def _failed(self, index: int) -> None:
        self._cool_until[index] = self._clock() + self.cooldown

    async def request(self, request: ModelRequest) -> ModelResponse:
        errors: list[str] = []
        for index in self._order():
            model = self.models[index]
            try:
                response = await model.request(request)
            except ModelCallError as e:
                self._failed(index)
                errors.append(f"{model.name}: {e}")
                continue
            self._cool_until.pop(index, None)
            return replace(response, answered_by=_answered_by(model, response))
        raise _all_failed(errors)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        errors: list[str] = []
        for index in self._order():
            model = self.models[index]
            started = False
            try:
                if isinstance(model, StreamingModel):
                    async for item in model.stream(request):
                        started = True
                        if isinstance(item, ModelResponse):
                            item = replace(item, answered_by=_answered_by(model, item))
                        yield item
                else:
                    response = await model.request(request)
                    yield replace(response, answered_by=_answered_by(model, response))
            except ModelCallError as e:
                self._failed(index)
                if started:
                    raise  # part of an answer was already passed on: another model cannot continue it
                errors.append(f"{model.name}: {e}")
                continue
            self._cool_until.pop(index, None)
            return
        raise _all_failed(errors)


def _answered_by(model: Model, response: ModelResponse) -> str:
    """The name of the model that gave ``response``, which ``model`` (one of a list) passed on."""
    if isinstance(model, FallbackModel) and isinstance(response.answered_by, str):
        return response.answered_by
    return model.name


def _all_failed(errors: list[str]) -> ModelCallError:
    message = "every model in the fallback list failed: " + "; ".join(errors)
    return ModelCallError(message, provider="fallback", retryable=False)
