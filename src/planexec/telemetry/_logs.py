"""Every event of a run as a ``logging`` record of the ``planexec`` logger.

A record's message is one readable line (``run 3f2a… step fetch succeeded``), redacted (it names
tools and models, which a model or a configuration chose); its structured form is in the record's
attributes: ``planexec_run_id``, ``planexec_event`` (the event's kind), ``planexec_seq`` (its place
in the log) and ``planexec`` (the event's fields as JSON data, redacted, each text cut to
``max_content_chars``; prompts, outputs, arguments and answers left out unless content capture is on), with
``otel_trace_id``/``otel_span_id`` when the run is traced, so a log line finds its span.

Levels: failures, refusals, budget stops and stalls are WARNING; a run that ends in error is
ERROR; a step's start and success, model and tool calls and progress are DEBUG; everything else
(the run's start and end, plans, questions and answers, new information) INFO. The logger has no handler of
its own (a ``NullHandler``): where records go is the application's choice.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from planexec._util.clip import clip
from planexec.log import (
    BudgetExhaustedEvent,
    Event,
    ModelAttemptFailed,
    ModelCalled,
    PlannerOutputRejected,
    PlanProposed,
    RunFinished,
    StallDetected,
    StepAttemptFailed,
    StepFailed,
    StepHeld,
    StepStarted,
    StepStreamed,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    dump_event,
)
from planexec.telemetry._values import Values

__all__ = ["LOGGER_NAME", "EventLogger", "log_to_stream"]

LOGGER_NAME = "planexec"

logging.getLogger(LOGGER_NAME).addHandler(logging.NullHandler())

_CONTENT_FIELDS = frozenset({"goal", "args", "output", "response", "answer", "text", "plan", "step", "tools"})
"""Fields of events that hold what the run was told and made: left out of records unless
content capture is on."""

_WARNING: frozenset[type] = frozenset(
    {
        StepFailed,
        StepAttemptFailed,
        ModelAttemptFailed,
        PlannerOutputRejected,
        BudgetExhaustedEvent,
        StallDetected,
        StepHeld,
    }
)
"""Failures, refusals, budget stops and stalls."""
_DEBUG: frozenset[type] = frozenset({StepStarted, StepSucceeded, ToolProgress, ModelCalled, ToolCalled, StepStreamed})
"""Every step's own events: at INFO a run says what it planned and how it ended, not each step."""


def level_of(event: Event) -> int:
    kind = type(event)
    if kind in _WARNING:
        return logging.WARNING
    if kind in _DEBUG:
        return logging.DEBUG
    if isinstance(event, RunFinished):
        return logging.ERROR if event.stop.kind == "error" else logging.INFO
    return logging.INFO


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters that would break a message's line (or forge another one), made spaces."""

_MESSAGE_CHARS = 500
"""The most characters of a record's message (its fields are cut to ``max_content_chars``)."""


def _message(event: Event) -> str:
    """One readable line about ``event`` (free text from the run is not in it: see the fields)."""
    match event:
        case StepStarted():
            return f"step {event.step_id} started" + (f" ({event.tool})" if event.tool else "")
        case StepSucceeded():
            return f"step {event.step_id} succeeded"
        case StepFailed():
            return f"step {event.step_id} failed: {event.error.kind}"
        case StepAttemptFailed():
            return f"step {event.step_id} attempt {event.attempt} failed: {event.error.kind}"
        case StepHeld():
            return f"step {event.step_id} held for a human"
        case ToolCalled():
            return f"step {event.step_id} called {event.tool}" + (" (failed)" if event.error else "")
        case ToolProgress():
            return f"step {event.step_id} progress {event.progress:g}"
        case ModelCalled():
            return f"{event.role} called {event.model}" + (" (failed)" if event.error else "")
        case ModelAttemptFailed():
            return f"{event.role} call to {event.model} attempt {event.attempt} failed"
        case PlanProposed():
            return f"plan version {event.plan.version} ({len(event.plan.steps)} steps, {event.trigger})"
        case PlannerOutputRejected():
            return f"planner output refused (attempt {event.attempt})"
        case RunFinished():
            return f"run finished: {event.stop.kind}"
    return event.kind.replace("_", " ")


class EventLogger:
    """Writes a run's events to the ``planexec`` logger (when it is enabled for their level)."""

    __slots__ = ("_capture", "_logger", "_run_id", "_span_ids", "_values")

    def __init__(
        self,
        run_id: str,
        values: Values,
        *,
        capture_content: bool,
        span_ids: Callable[[], tuple[str, str] | None],
    ) -> None:
        self._logger = logging.getLogger(LOGGER_NAME)
        self._run_id = run_id
        self._values = values
        self._capture = capture_content
        self._span_ids = span_ids

    def log(self, event: Event, seq: int) -> None:
        level = level_of(event)
        logger = self._logger
        if not logger.isEnabledFor(level):
            return
        data = dump_event(event)["event"]
        if not self._capture:
            data = {k: v for k, v in data.items() if k not in _CONTENT_FIELDS}
        extra: dict[str, Any] = {
            "planexec_run_id": self._run_id,
            "planexec_event": event.kind,
            "planexec_seq": seq,
            "planexec": self._values.data(data),
        }
        ids = self._span_ids()
        if ids is not None:
            extra["otel_trace_id"], extra["otel_span_id"] = ids
        logger.log(level, "run %s: %s", self._run_id, self._line(_message(event)), extra=extra)

    def _line(self, message: str) -> str:
        """``message`` as a record's one line: it names tools and models, which a model or a
        configuration chose (a key, a line break may be in them), so redacted, on one line, cut."""
        return clip(self._values.redactor.redact_text(_CONTROL.sub(" ", message)), _MESSAGE_CHARS)


class _Lines(logging.Formatter):
    """``LEVEL run …: message`` and, after it, the record's structured fields as one JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{record.levelname.lower()} {record.getMessage()}"
        fields = getattr(record, "planexec", None)
        if fields:
            shown = {k: v for k, v in fields.items() if k not in ("kind", "at")}
            if shown:
                line += " " + json.dumps(shown, ensure_ascii=False, default=str, separators=(",", ":"))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def log_to_stream(level: int | str, stream: TextIO | None = None) -> Callable[[], None]:
    """Print the ``planexec`` logger's records at ``level`` and above to ``stream`` (standard
    error by default), one line each; returns a function that stops it."""
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_Lines())
    handler.setLevel(level)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)

    def stop() -> None:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        handler.close()

    return stop
