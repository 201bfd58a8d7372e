"""How a run shows itself to OpenTelemetry and to ``logging``: one typed value, passed to the agent."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planexec.errors import Problem, UsageError
from planexec.store import Redactor

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["CAPTURE_VARIABLE", "DEFAULT_CONTENT_CHARS", "Telemetry"]

CAPTURE_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""OpenTelemetry's environment switch for capturing GenAI content."""

DEFAULT_CONTENT_CHARS = 8_000
"""The most characters of one captured prompt, completion, argument set or result put on a span."""


@dataclass(frozen=True, kw_only=True)
class Telemetry:
    """What a run sends to OpenTelemetry and to the ``planexec`` logger.

    ``Telemetry()`` (every agent's default) uses the global tracer and meter providers: with no
    OpenTelemetry SDK configured in the process they are the API's no-ops, and a run does no
    telemetry work at all. Configure the SDK (or ``planexec run --otlp-endpoint``) and every run
    is traced and measured.

    ``tracer_provider`` and ``meter_provider``: providers to use instead of the global ones.
    ``traces``, ``metrics`` and ``logs`` turn each signal off (``False``) independently; logs go
    to the ``planexec`` logger, which has no handler of its own (the application's logging
    configuration decides where records go; ``planexec run --log-level`` prints them).

    ``capture_content`` (off by default; None: on when the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``, OpenTelemetry's switch for
    GenAI instrumentations): also put prompts, completions, tool arguments and tool results on the
    spans (``gen_ai.input.messages``, ``gen_ai.output.messages``,
    ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``; the goal and the answer on the
    run's span), each cut to ``max_content_chars``. Whatever is captured, and every error
    message or reason put on a span or a log record, passes through ``redactor`` first (by
    default the run store's, else ``Redactor()``: secrets hidden).
    """

    traces: bool = True
    metrics: bool = True
    logs: bool = True
    capture_content: bool | None = None
    max_content_chars: int = DEFAULT_CONTENT_CHARS
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    redactor: Redactor | None = None

    def __post_init__(self) -> None:
        problems: list[Problem] = []
        for name in ("traces", "metrics", "logs"):
            if not isinstance(getattr(self, name), bool):
                problems.append(Problem(code="telemetry", where=name, message="must be True or False"))
        if self.capture_content is not None and not isinstance(self.capture_content, bool):
            problems.append(Problem(code="telemetry", where="capture_content", message="must be True, False or None"))
        limit: Any = self.max_content_chars
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            problems.append(Problem(code="telemetry", where="max_content_chars", message="must be an integer >= 1"))
        if self.redactor is not None and not isinstance(self.redactor, Redactor):
            problems.append(Problem(code="telemetry", where="redactor", message="must be a Redactor"))
        for name, method in (("tracer_provider", "get_tracer"), ("meter_provider", "get_meter")):
            provider = getattr(self, name)
            if provider is not None and not callable(getattr(provider, method, None)):
                problems.append(
                    Problem(code="telemetry", where=name, message=f"must be an OpenTelemetry provider (has {method})")
                )
        if problems:
            raise UsageError("invalid telemetry settings", problems)

    @property
    def captures_content(self) -> bool:
        """Whether content is captured (``capture_content``, else the environment's switch)."""
        if self.capture_content is not None:
            return self.capture_content
        return os.environ.get(CAPTURE_VARIABLE, "").strip().lower() in ("true", "1", "yes")

    @classmethod
    def off(cls) -> Telemetry:
        """No traces, no metrics, no log records."""
        return cls(traces=False, metrics=False, logs=False)
