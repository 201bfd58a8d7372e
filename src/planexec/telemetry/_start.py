"""Whether a run has telemetry to do, and its :class:`RunTelemetry` when it has."""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import metrics, trace

from planexec.store import Redactor
from planexec.telemetry._logs import LOGGER_NAME
from planexec.telemetry._metrics import RunMeters, instruments_of
from planexec.telemetry._names import TRACER_NAME
from planexec.telemetry._run import RunTelemetry
from planexec.telemetry._settings import Telemetry

if TYPE_CHECKING:
    from planexec.log import RunState

__all__ = ["run_telemetry"]


def _proxy_meter_provider() -> tuple[type, ...]:
    try:  # the API's stand-in until an SDK is set: not public, so looked up with care
        module = importlib.import_module("opentelemetry.metrics._internal")
        proxy = getattr(module, "_ProxyMeterProvider", None)
    except ImportError:
        proxy = None
    return (metrics.NoOpMeterProvider, proxy) if isinstance(proxy, type) else (metrics.NoOpMeterProvider,)


_NO_METERS = _proxy_meter_provider()
_NO_TRACERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _logged(logger: logging.Logger) -> bool:
    """Whether records of ``logger`` would reach a handler that does something with them (its
    own ``NullHandler`` does nothing; Python's last-resort handler is not counted)."""
    if not logger.isEnabledFor(logging.CRITICAL):
        return False
    current: logging.Logger | None = logger
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) for h in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


T = TypeVar("T")


def _made(run_id: str, signal: str, make: Callable[[], T]) -> T | None:
    """What ``make`` makes (a tracer, instruments), or None when the provider fails to make it:
    the run goes without that signal, which the ``planexec`` logger says."""
    try:
        return make()
    except Exception as e:
        with contextlib.suppress(Exception):
            logging.getLogger(LOGGER_NAME).warning(
                "run %s: no %s for the run: the provider failed: %s: %s", run_id, signal, type(e).__name__, e
            )
        return None


def run_telemetry(
    settings: Telemetry,
    *,
    run_id: str,
    agent: str,
    state: RunState,
    store_redactor: Redactor | None,
) -> RunTelemetry | None:
    """The telemetry of one run, or None when it has none to do: no tracer or meter provider
    configured (the API's no-ops) and the ``planexec`` logger not enabled for any record."""
    tracer: Any = None
    if settings.traces:
        provider: Any = settings.tracer_provider or trace.get_tracer_provider()
        if not isinstance(provider, _NO_TRACERS):
            from planexec import __version__

            tracer = _made(run_id, "traces", lambda: provider.get_tracer(TRACER_NAME, __version__))
    instruments = None
    if settings.metrics:
        meters: Any = settings.meter_provider or metrics.get_meter_provider()
        if not isinstance(meters, _NO_METERS):
            instruments = _made(run_id, "metrics", lambda: RunMeters(instruments_of(meters)))
    logs = settings.logs and _logged(logging.getLogger(LOGGER_NAME))
    if tracer is None and instruments is None and not logs:
        return None
    redactor = settings.redactor or store_redactor or Redactor()
    return RunTelemetry(
        run_id=run_id,
        agent=agent,
        state=state,
        tracer=tracer,
        instruments=instruments,
        logs=logs,
        capture_content=settings.captures_content,
        max_content_chars=settings.max_content_chars,
        redactor=redactor,
    )
