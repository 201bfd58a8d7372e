"""``--otlp-endpoint``, ``--otlp-metrics``, ``--capture-content`` and ``--log-level``: where the
runs of one command send their traces, metrics and log records."""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import click

from planexec.cli._common import problem_exit, run_command
from planexec.cli._options import Problems

__all__ = ["TelemetryFlags", "exporting", "run_observed", "telemetry_options"]

F = TypeVar("F", bound=Callable[..., Any])

LEVELS = ("debug", "info", "warning", "error")


def telemetry_options(fn: F) -> F:
    fn = click.option(
        "--log-level",
        type=click.Choice(LEVELS, case_sensitive=False),
        default=None,
        help="Print the run's events as log records of this level and above on stderr (the planexec logger).",
    )(fn)
    fn = click.option(
        "--capture-content",
        is_flag=True,
        help="Put prompts, completions, tool arguments and results on the spans, redacted (off by default).",
    )(fn)
    fn = click.option(
        "--otlp-metrics",
        is_flag=True,
        help="Send metrics too, to the --otlp-endpoint's /v1/metrics.",
    )(fn)
    return click.option(
        "--otlp-endpoint",
        metavar="URL",
        envvar="PLANEXEC_OTLP_ENDPOINT",
        default=None,
        help="Send traces over OTLP/HTTP to URL/v1/traces (Phoenix http://127.0.0.1:6006, a collector "
        "http://127.0.0.1:4318). Needs the otel extra. Headers from OTEL_EXPORTER_OTLP_HEADERS.",
    )(fn)


@dataclass(frozen=True, slots=True)
class TelemetryFlags:
    otlp_endpoint: str | None = None
    otlp_metrics: bool = False
    capture_content: bool = False
    log_level: str | None = None

    @classmethod
    def take(cls, values: dict[str, Any]) -> TelemetryFlags:
        """The flags, taken out of a command's keyword arguments."""
        return cls(
            otlp_endpoint=values.pop("otlp_endpoint", None) or None,
            otlp_metrics=bool(values.pop("otlp_metrics", False)),
            capture_content=bool(values.pop("capture_content", False)),
            log_level=values.pop("log_level", None),
        )

    def check(self, problems: Problems) -> None:
        if self.otlp_metrics and not self.otlp_endpoint:
            problems.add("--otlp-metrics", "needs --otlp-endpoint")


@contextmanager
def exporting(flags: TelemetryFlags, problems: Problems) -> Iterator[None]:
    """While a command runs: its runs' telemetry goes where the flags say; on the way out, what is
    left is sent. Problems (a bad URL, the otel extra missing) are added to ``problems``."""
    from planexec.errors import UsageError
    from planexec.telemetry import CAPTURE_VARIABLE, configure_otlp, log_to_stream

    export = None
    if flags.otlp_endpoint:
        service = os.environ.get("OTEL_SERVICE_NAME") or "planexec"
        try:
            export = configure_otlp(flags.otlp_endpoint, metrics=flags.otlp_metrics, service_name=service)
        except UsageError as e:
            problems.add_usage_error("--otlp-endpoint", e)
    if problems:
        yield
        return
    if flags.capture_content:
        os.environ[CAPTURE_VARIABLE] = "true"
    stop_logging = log_to_stream(flags.log_level.upper()) if flags.log_level else None
    try:
        yield
    finally:
        if stop_logging is not None:
            stop_logging()
        if export is not None:
            export.shutdown()


def run_observed(ctx: click.Context, flags: TelemetryFlags, main: Coroutine[Any, Any, int]) -> NoReturn:
    """:func:`run_command`, with the runs' telemetry sent where ``flags`` say."""
    problems = Problems()
    flags.check(problems)
    with exporting(flags, problems):
        if problems:
            main.close()
            problem_exit(ctx, problems)
        run_command(ctx, main)
