"""What goes on a span from the run: free text and captured content, redacted and cut to size."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from planexec._util.clip import clip
from planexec.store import Redactor
from planexec.telemetry._names import ERROR_TYPE

__all__ = ["NAME_CHARS", "Values", "failed"]

NAME_CHARS = 200
"""The most characters of a name on a span or a metric (a model's, a tool's, a call id): names a
model made up, or that a configuration holds, may be of any length."""


class Values:
    """Redacts and cuts what a run's spans and records carry."""

    __slots__ = ("_max", "redactor")

    def __init__(self, redactor: Redactor, max_chars: int) -> None:
        self.redactor = redactor
        self._max = max_chars

    def text(self, text: str) -> str:
        """Free text from the run (an error message, a reason), redacted and cut to size."""
        return clip(self.redactor.redact_text(text), self._max)

    def name(self, name: str) -> str:
        """A name from the run or its models (a model's name, a call id), redacted and cut to
        :data:`NAME_CHARS`."""
        return clip(self.redactor.redact_text(name), min(self._max, NAME_CHARS))

    def data(self, value: Any) -> Any:
        """JSON data (an event's fields), redacted, each text in it cut to size."""
        return _cut(self.redactor.redact(value), self._max)

    def content(self, value: Any) -> str:
        """Captured content as JSON text, redacted and cut to size."""
        data = self.redactor.redact(value)
        try:
            text = json.dumps(data, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = self.redactor.redact_text(repr(value))
        return clip(text, self._max)


def failed(span: Span, kind: str, message: str) -> None:
    """Mark ``span`` failed: ``error.type`` and an error status with ``message``."""
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, message))


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return clip(value, limit)
    if isinstance(value, dict):
        return {k: _cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, limit) for v in value]
    return value
