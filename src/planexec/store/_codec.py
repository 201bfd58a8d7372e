"""How events are written and read by every store: the versioned envelope, redacted, as JSON text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planexec.runtime._events import Event, dump_event, load_event
from planexec.store._redact import Redactor

__all__ = ["EncodedEvent", "decode_event", "encode_events"]


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    kind: str
    at: float
    data: str
    """The event's envelope (``{"v": …, "event": …}``) after redaction, as compact JSON."""


def encode_events(events: Sequence[Event], redactor: Redactor) -> list[EncodedEvent]:
    """Serialize and redact ``events``; nothing unredacted leaves this function."""
    out: list[EncodedEvent] = []
    for event in events:
        data = redactor.redact(dump_event(event))
        out.append(EncodedEvent(event.kind, event.at, _json(data)))
    return out


def _json(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from undecodable bytes): escape it, it reads back the same
            text = json.dumps(data, separators=(",", ":"))
    return text


def decode_event(data: str | dict[str, Any]) -> Event:
    """The event stored as ``data`` (JSON text or already-parsed JSON)."""
    return load_event(json.loads(data) if isinstance(data, str) else data)
