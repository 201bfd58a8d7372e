"""Telemetry: every run as OpenTelemetry traces and metrics (GenAI conventions) and as records
of the ``planexec`` logger, folded from its events as they are logged.

    Agent(..., telemetry=Telemetry())                      # the default: the global providers
    Agent(..., telemetry=Telemetry(capture_content=True))  # prompts, outputs, arguments too (redacted)
    configure_otlp("http://127.0.0.1:6006")                # the SDK + OTLP/HTTP export (the otel extra)

Only ``opentelemetry-api`` is a dependency of planexec: with no SDK configured a run does no
telemetry work. The spans a run makes, their attributes and events are listed in
:mod:`planexec.telemetry._run`; the metrics in :mod:`planexec.telemetry._metrics`; the log
records in :mod:`planexec.telemetry._logs`.
"""

from planexec.telemetry._export import OtlpExport, configure_otlp, flush_telemetry
from planexec.telemetry._logs import LOGGER_NAME, log_to_stream
from planexec.telemetry._run import LiveCall, RunTelemetry
from planexec.telemetry._settings import CAPTURE_VARIABLE, DEFAULT_CONTENT_CHARS, Telemetry
from planexec.telemetry._start import run_telemetry

__all__ = [
    "CAPTURE_VARIABLE",
    "DEFAULT_CONTENT_CHARS",
    "LOGGER_NAME",
    "LiveCall",
    "OtlpExport",
    "RunTelemetry",
    "Telemetry",
    "configure_otlp",
    "flush_telemetry",
    "log_to_stream",
    "run_telemetry",
]
