"""Export over OTLP/HTTP: the OpenTelemetry SDK and its exporter, set up in one call (the ``otel``
extra: ``pip install 'planexec[otel]'``)."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planexec._util.extras import install_hint
from planexec.errors import Problem, UsageError
from planexec.store import safe_url

__all__ = ["OtlpExport", "configure_otlp", "flush_telemetry"]


@dataclass(frozen=True, kw_only=True)
class OtlpExport:
    """The providers :func:`configure_otlp` made; ``shutdown()`` sends what is left and stops."""

    tracer_provider: Any
    meter_provider: Any | None

    def shutdown(self) -> None:
        """Flush and stop the exporters (at most a few seconds each)."""
        try:
            self.tracer_provider.force_flush(5_000)
        finally:
            self.tracer_provider.shutdown()
            if self.meter_provider is not None:
                self.meter_provider.shutdown(timeout_millis=5_000)


def _endpoint_problems(endpoint: Any) -> list[Problem]:
    if not isinstance(endpoint, str) or not endpoint.strip():
        return [Problem(code="otlp", where="endpoint", message="must be a URL such as http://127.0.0.1:4318")]
    try:
        parsed = urllib.parse.urlsplit(endpoint)
        host = parsed.hostname
        _ = parsed.port
    except ValueError as e:
        return [Problem(code="otlp", where="endpoint", message=f"is not a URL: {e}")]
    problems = []
    if any(c.isspace() for c in endpoint.strip()):
        problems.append(Problem(code="otlp", where="endpoint", message="must not hold spaces"))
    if parsed.username or parsed.password:
        problems.append(
            Problem(
                code="otlp",
                where="endpoint",
                message="must not hold credentials: send them as headers (OTEL_EXPORTER_OTLP_HEADERS)",
            )
        )
    if parsed.scheme not in ("http", "https") or not host:
        shown = safe_url(endpoint)
        problems.append(
            Problem(code="otlp", where="endpoint", message=f"must be an http or https URL with a host, not {shown!r}")
        )
    return problems


def configure_otlp(
    endpoint: str,
    *,
    service_name: str = "planexec",
    metrics: bool = False,
    headers: Mapping[str, str] | None = None,
    resource: Mapping[str, str] | None = None,
    timeout: float = 5.0,
    set_global: bool = True,
) -> OtlpExport:
    """Send traces (and, with ``metrics``, metrics) over OTLP/HTTP to ``endpoint``: its base URL,
    to which ``/v1/traces`` and ``/v1/metrics`` are added (Phoenix ``http://127.0.0.1:6006``, an
    OpenTelemetry Collector or Jaeger ``http://127.0.0.1:4318``). ``headers`` go with every export
    (also read from ``OTEL_EXPORTER_OTLP_HEADERS``, e.g. a backend's key); ``resource`` adds
    resource attributes (Phoenix files traces under ``openinference.project.name``). ``timeout``
    bounds each export, retries included (a backend that is down delays the process's exit by at
    most about that much; runs are never slowed: spans are sent from a thread of their own).

    With ``set_global`` (the default) the providers become the process's global ones, so every
    run (and every other instrumented library) uses them."""
    problems = _endpoint_problems(endpoint)
    if headers is not None and not (
        isinstance(headers, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        problems.append(Problem(code="otlp", where="headers", message="must map header names to text"))
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
        problems.append(Problem(code="otlp", where="timeout", message="must be a number of seconds from 0 to 300"))
    if problems:
        raise UsageError("cannot export telemetry", problems)
    try:
        from opentelemetry import metrics as otel_metrics
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        raise UsageError(
            "exporting telemetry needs the OpenTelemetry SDK and its OTLP exporter",
            [Problem(code="otlp", where="opentelemetry-sdk", message=install_hint("otel"))],
        ) from e
    base = endpoint.rstrip("/")
    try:  # the SDK reads its OTEL_* environment variables here, and refuses some values
        made = Resource.create({"service.name": service_name, **dict(resource or {})})
        tracer_provider = TracerProvider(resource=made)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=dict(headers or {}) or None, timeout=timeout)
            )
        )
        meter_provider = None
        if metrics:
            reader = PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{base}/v1/metrics", headers=dict(headers or {}) or None, timeout=timeout)
            )
            meter_provider = MeterProvider(resource=made, metric_readers=[reader])
    except ValueError as e:
        raise UsageError(
            "cannot export telemetry",
            [Problem(code="otlp", where="environment", message=f"an OTEL_* variable is invalid: {e}")],
        ) from e
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        if meter_provider is not None:
            otel_metrics.set_meter_provider(meter_provider)
    return OtlpExport(tracer_provider=tracer_provider, meter_provider=meter_provider)


def flush_telemetry(timeout: float = 5.0) -> None:
    """Send what the global tracer and meter providers hold now (blocking, at most about
    ``timeout`` seconds each): for a process about to end by a signal, whose exit handlers will
    not run. Providers without ``force_flush`` (the API's no-ops) are left alone."""
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace

    millis = int(timeout * 1000)
    for provider in (trace.get_tracer_provider(), otel_metrics.get_meter_provider()):
        flush = getattr(provider, "force_flush", None)
        if callable(flush):
            with contextlib.suppress(Exception):  # a failing exporter says so itself; the process ends anyway
                flush(millis)
