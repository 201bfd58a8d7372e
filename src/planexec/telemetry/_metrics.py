"""Metrics of runs, steps, model calls and tool calls, in OpenTelemetry's GenAI conventions where
they name one (token usage, operation duration, tool duration) and under ``planexec.`` otherwise.

Instrument                          Kind       Unit     Attributes (besides ``gen_ai.agent.name``)
``planexec.runs``                   counter    {run}    ``planexec.stop_reason``, ``planexec.stop_code``
``planexec.run.duration``           histogram  s        ``planexec.stop_reason``
``planexec.steps``                  counter    {step}   ``planexec.step.status``, ``planexec.executor``
``planexec.step.duration``          histogram  s        ``planexec.step.status``, ``planexec.executor``
``planexec.model.calls``            counter    {call}   ``planexec.role``, ``gen_ai.request.model``, ``error.type``
``gen_ai.client.operation.duration`` histogram s        ``gen_ai.operation.name``, ``gen_ai.provider.name``,
                                                        ``gen_ai.request.model``, ``planexec.role``, ``error.type``
``gen_ai.client.token.usage``       histogram  {token}  as above, and ``gen_ai.token.type`` (input, output)
``planexec.cost``                   counter    USD      ``planexec.role``, ``gen_ai.request.model``
``planexec.tool.calls``             counter    {call}   ``gen_ai.tool.name``, ``error.type``
``gen_ai.execute_tool.duration``    histogram  s        ``gen_ai.tool.name``, ``error.type``
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from planexec.telemetry._names import AGENT_NAME, ERROR_TYPE, OPERATION, PROVIDER, REQUEST_MODEL, TOOL_NAME

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, MeterProvider

__all__ = ["FLUSH_SECONDS", "Instruments", "RunMeters", "instruments_of"]

_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


class Instruments:
    """The instruments of one meter provider (made once per provider and shared by its runs)."""

    def __init__(self, provider: MeterProvider) -> None:
        from planexec import __version__

        meter = provider.get_meter("planexec", __version__)
        self.runs: Counter = meter.create_counter("planexec.runs", unit="{run}", description="Runs that finished")
        self.run_duration: Histogram = meter.create_histogram(
            "planexec.run.duration",
            unit="s",
            description="From a run's start to its end",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.steps: Counter = meter.create_counter("planexec.steps", unit="{step}", description="Steps that ended")
        self.step_duration: Histogram = meter.create_histogram(
            "planexec.step.duration",
            unit="s",
            description="From a step's start to its end",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.model_calls: Counter = meter.create_counter(
            "planexec.model.calls", unit="{call}", description="Model calls made"
        )
        self.operation_duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.cost: Counter = meter.create_counter("planexec.cost", unit="USD", description="What model calls cost")
        self.tool_calls: Counter = meter.create_counter(
            "planexec.tool.calls", unit="{call}", description="Tool calls made"
        )
        self.tool_duration: Histogram = meter.create_histogram(
            "gen_ai.execute_tool.duration",
            unit="s",
            description="Tool execution duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )


FLUSH_SECONDS = 1.0
"""How long a run keeps its counters' increments before handing them to the SDK (at most; and at
once when the run ends, is suspended or is left): one call per counter and attribute set instead of
one per step. Histograms get each value as it comes."""


class RunMeters:
    """One run's measurements, into a provider's :class:`Instruments`."""

    __slots__ = ("_flushed", "_i", "_pending")

    def __init__(self, instruments: Instruments) -> None:
        self._i = instruments
        self._pending: dict[tuple[int, tuple[tuple[str, Any], ...]], tuple[Counter, float]] = {}
        self._flushed = time.monotonic()

    def _add(self, counter: Counter, amount: float, attrs: dict[str, Any]) -> None:
        key = (id(counter), tuple(attrs.items()))
        held = self._pending.get(key)
        self._pending[key] = (counter, amount if held is None else held[1] + amount)
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Hand the counters' increments held so far to the SDK."""
        pending, self._pending = self._pending, {}
        self._flushed = time.monotonic()
        for (_, attrs), (counter, amount) in pending.items():
            counter.add(amount, dict(attrs))

    def model_call(
        self,
        agent: str,
        role: str,
        provider: str,
        model: str,
        duration: float,
        error: str | None,
        input_tokens: int,
        output_tokens: int,
        cost: float,
    ) -> None:
        attrs: dict[str, Any] = {
            AGENT_NAME: agent,
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: model,
            "planexec.role": role,
        }
        if error is not None:
            attrs[ERROR_TYPE] = error
        self._add(self._i.model_calls, 1, attrs)
        self._i.operation_duration.record(duration, attrs)
        if error is None:
            self._i.token_usage.record(input_tokens, {**attrs, "gen_ai.token.type": "input"})
            self._i.token_usage.record(output_tokens, {**attrs, "gen_ai.token.type": "output"})
        if cost:
            self._add(self._i.cost, cost, {AGENT_NAME: agent, "planexec.role": role, REQUEST_MODEL: model})

    def tool_call(self, agent: str, tool: str, duration: float, error: str | None) -> None:
        attrs: dict[str, Any] = {AGENT_NAME: agent, TOOL_NAME: tool}
        if error is not None:
            attrs[ERROR_TYPE] = error
        self._add(self._i.tool_calls, 1, attrs)
        self._i.tool_duration.record(duration, attrs)

    def step(self, agent: str, executor: str, status: str, duration: float | None) -> None:
        attrs = {AGENT_NAME: agent, "planexec.executor": executor, "planexec.step.status": status}
        self._add(self._i.steps, 1, attrs)
        if duration is not None:
            self._i.step_duration.record(duration, attrs)

    def run(self, agent: str, stop: str, code: str | None, duration: float) -> None:
        attrs: dict[str, Any] = {AGENT_NAME: agent, "planexec.stop_reason": stop}
        if code is not None:
            attrs["planexec.stop_code"] = code
        self._add(self._i.runs, 1, attrs)
        self.flush()
        self._i.run_duration.record(duration, {AGENT_NAME: agent, "planexec.stop_reason": stop})


_made: dict[int, tuple[MeterProvider, Instruments]] = {}


def instruments_of(provider: MeterProvider) -> Instruments:
    """The instruments of ``provider``, made on first use."""
    held = _made.get(id(provider))
    if held is None or held[0] is not provider:
        if len(_made) >= 64:  # providers made and dropped (tests): let them go
            _made.clear()
        held = (provider, Instruments(provider))
        _made[id(provider)] = held
    return held[1]
