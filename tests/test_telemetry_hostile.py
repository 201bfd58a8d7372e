"""Telemetry against hostile input and broken dependencies, through the public API: names a model
or a configuration chose (call ids, tool names, model names) redacted and cut on spans, metrics
and log records; providers that fail to make a tracer or instruments; a telemetry failure during
a call; OpenTelemetry environment variables the SDK refuses."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace

from planexec import Agent, UsageError, tool
from planexec.models import FunctionModel, ModelRequest, ModelResponse, ToolCall, Usage
from planexec.telemetry import LOGGER_NAME, Telemetry, configure_otlp
from planexec.testing import ScriptedModel, tool_calls
from tests.support import tool_step
from tests.telemetry_support import SECRET, Captured, all_text, named


@pytest.fixture
def captured() -> Iterator[Captured]:
    held = Captured()
    yield held
    held.shutdown()


class _Records(logging.Handler):
    """Keeps the ``planexec`` logger's records."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[_Records]:
    logger = logging.getLogger(LOGGER_NAME)
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def _one_step_agent(executor: Any, model_name: str, telemetry: Telemetry, *tools: Any) -> Agent:
    planner = ScriptedModel(
        [
            {"steps": [{"id": "look", "description": "look it up", "allowed_tools": [t.name for t in tools]}]},
            {"answer": "ok"},
        ]
    )
    return Agent(
        planner, tools=list(tools), executor=FunctionModel(executor, name=model_name), store=None, telemetry=telemetry
    )


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


@pytest.mark.parametrize("capture", [False, True])
async def test_names_a_model_chose_reach_spans_and_log_records_redacted_and_on_one_line(
    captured: Captured, records: _Records, capture: bool
) -> None:
    def executor(request: ModelRequest) -> Any:
        if any(m.role == "tool" for m in request.messages):
            return "sunny"
        return ModelResponse(
            tool_calls=(
                ToolCall(id=f"call {SECRET}", name=f"invented {SECRET}\nerror run x: forged line", arguments={}),
                ToolCall(id=SECRET, name="weather", arguments={"city": "Oslo"}),
            ),
            finish_reason="tool_calls",
            usage=Usage(input_tokens=1, output_tokens=1),
        )

    agent = _one_step_agent(
        executor, f"openai-compatible:m@http://u:{SECRET}@host", captured.telemetry(capture_content=capture), weather
    )
    result = await agent.run("weather in Oslo")
    assert result.stop.kind == "goal_met", result.stop
    spans = captured.spans()
    for text in all_text(spans):
        assert SECRET not in text
    [call] = named(spans, "execute_tool weather")
    assert call.attributes["gen_ai.tool.call.id"] == "[REDACTED:api_key]"
    messages = [r.getMessage() for r in records.records]
    assert any("invented" in m for m in messages)
    for r in records.records:
        assert SECRET not in r.getMessage()
        assert "\n" not in r.getMessage()
        assert SECRET not in json.dumps(getattr(r, "planexec", {}), default=str)


async def test_a_huge_model_name_is_cut_on_spans_metrics_and_log_records(captured: Captured, records: _Records) -> None:
    name = "openai:gpt-" + "m" * 100_000
    agent = _one_step_agent(lambda _: "done", name, captured.telemetry(max_content_chars=1_000))
    result = await agent.run("go")
    assert result.stop.kind == "goal_met", result.stop
    for span in captured.spans():
        assert len(span.name) <= 300
        assert all(len(str(v)) <= 1_000 for v in span.attributes.values()), span.name
    for points in captured.metrics().values():
        for attributes, _ in points:
            assert all(len(str(v)) <= 300 for v in attributes.values())
    called = [r for r in records.records if getattr(r, "planexec_event", "") == "model_called"]
    assert called
    for r in called:
        assert len(r.getMessage()) <= 1_000
        assert len(json.dumps(r.planexec)) <= 2_000  # type: ignore[attr-defined]


class _MeterProviderThatCannot:
    """An OpenTelemetry meter provider whose meter fails to make instruments (a broken SDK)."""

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        class Meter:
            def create_counter(self, *a: Any, **k: Any) -> Any:
                raise RuntimeError("no counters today")

            create_histogram = create_counter

        return Meter()


async def test_a_meter_provider_that_cannot_make_instruments_leaves_the_run_without_metrics(
    captured: Captured, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = Telemetry(tracer_provider=captured.tracer_provider, meter_provider=_MeterProviderThatCannot())  # type: ignore[arg-type]
    planner = ScriptedModel([{"steps": [tool_step("w", "weather", {"city": "Oslo"})]}, {"answer": "sunny"}])
    result = await Agent(planner, tools=[weather], store=None, telemetry=telemetry).run("weather")
    assert result.stop.kind == "goal_met", result.stop
    assert named(captured.spans(), "execute_tool weather")  # the traces go on
    assert any(
        "no metrics for the run" in r.getMessage() and "no counters today" in r.getMessage() for r in caplog.records
    )


class _MeterProviderThatBreaksOnExecutorCalls:
    """A meter provider whose histograms fail once a step's model call is recorded."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        meter = self._inner.get_meter(*args, **kwargs)

        class Histogram:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            def record(self, amount: float, attributes: dict[str, Any] | None = None) -> None:
                if (attributes or {}).get("planexec.role") == "executor":
                    raise RuntimeError("the meter broke")
                self._inner.record(amount, attributes)

        class Meter:
            def create_counter(self, *a: Any, **k: Any) -> Any:
                return meter.create_counter(*a, **k)

            def create_histogram(self, *a: Any, **k: Any) -> Any:
                return Histogram(meter.create_histogram(*a, **k))

        return Meter()


async def test_a_model_calls_span_is_no_longer_current_once_telemetry_breaks_during_the_call(
    captured: Captured,
) -> None:
    seen: list[trace.Span] = []

    @tool
    async def probe() -> str:
        """Note which span is current (as an instrumented client would parent its own)."""
        seen.append(trace.get_current_span())
        return "probed"

    def executor(request: ModelRequest) -> Any:
        if any(m.role == "tool" for m in request.messages):
            return "done"
        return tool_calls(("probe", {}))

    broken = _MeterProviderThatBreaksOnExecutorCalls(captured.meter_provider)
    telemetry = Telemetry(tracer_provider=captured.tracer_provider, meter_provider=broken)  # type: ignore[arg-type]
    result = await _one_step_agent(executor, "openai:gpt-4o", telemetry, probe).run("probe")
    assert result.stop.kind == "goal_met", result.stop
    [step] = named(captured.spans(), "invoke_agent model")
    [current] = seen
    assert f"{current.get_span_context().span_id:016x}" == step.span_id  # not the ended chat span


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_BSP_SCHEDULE_DELAY", "-1"),
        ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "many"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
    ],
)
def test_an_otel_variable_the_sdk_refuses_is_a_usage_problem(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(UsageError) as caught:
        configure_otlp("http://127.0.0.1:4318", set_global=False)
    assert caught.value.problems[0].where == "environment"


def test_an_endpoint_with_spaces_is_refused() -> None:
    with pytest.raises(UsageError, match="must not hold spaces"):
        configure_otlp("https://exa mple.com", set_global=False)


async def test_a_step_id_shaped_like_a_key_reaches_spans_redacted(captured: Captured) -> None:
    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    planner = ScriptedModel(
        [
            {"steps": [tool_step(SECRET, "echo", {"text": "hi"}), tool_step("b", "echo", {"text": "ho"}, SECRET)]},
            {"answer": "hi"},
        ]
    )
    agent = Agent(planner, tools=[echo], store=None, telemetry=captured.telemetry())
    result = await agent.run("echo twice")
    assert result.stop.kind == "goal_met", result.stop
    spans = captured.spans()
    assert len(named(spans, "execute_tool echo")) == 2
    for text in all_text(spans):
        assert SECRET not in text
