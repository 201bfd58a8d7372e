"""Telemetry against hostile input and broken dependencies, through the public API: names a model
or a configuration chose (call ids, tool names, model names) redacted and cut on spans, metrics
and log records; providers that fail to make a tracer or instruments; a telemetry failure during
a call; OpenTelemetry environment variables the SDK refuses."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from planexec import Agent, UsageError, tool
from planexec.models import FunctionModel
from planexec.telemetry import LOGGER_NAME, Telemetry, configure_otlp
from planexec.testing import ScriptedModel
from tests.telemetry_support import Captured


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
