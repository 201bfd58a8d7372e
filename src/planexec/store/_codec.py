"""How events are written and read by every store: the versioned envelope, redacted, as JSON text.

Writing refuses what JSON cannot hold: a NaN or an infinite float anywhere in an event makes the
append fail with :class:`~planexec.StoreError` naming the event's kind and where the value is
(``budget.cost``, ``output.rows[3].total``), and nothing of the append is written. Strings are
written as they are, lone surrogates (from undecodable bytes) included: they are escaped as
``\\udcff`` and read back the same.

Reading is lenient where it can be and precise where it cannot: logs written by earlier versions
(``NaN`` and ``Infinity`` included) still read, and a log with events that cannot be read at all
raises :class:`~planexec.LogUnreadable` with every event that could be read and one problem per
event that could not (its sequence number and why: damaged text, an unknown event kind, a newer
event schema version).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from planexec.errors import LogUnreadable, Problem, StoreError
from planexec.log import READABLE_VERSIONS, Event, dump_event, load_event
from planexec.store._base import StoredEvent
from planexec.store._redact import Redactor

__all__ = ["EncodedEvent", "decode_event", "decode_log", "encode_events"]


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    kind: str
    at: float
    data: str
    """The event's envelope (``{"v": …, "event": …}``) after redaction, as compact JSON."""


def encode_events(events: Sequence[Event], redactor: Redactor, *, store: str = "") -> list[EncodedEvent]:
    """Serialize and redact ``events``; nothing unredacted leaves this function.

    Raises :class:`~planexec.StoreError` (its message starting with ``store`` when given) for an
    event holding a value JSON cannot represent.
    """
    out: list[EncodedEvent] = []
    for index, event in enumerate(events, start=1):
        data: Any = None
        try:
            data = redactor.redact(dump_event(event))
            text = _json(data)
        except (ValueError, TypeError, RecursionError) as e:  # PydanticSerializationError is a ValueError
            raise _refused(store, (index, len(events)), event, data, e) from None
        out.append(EncodedEvent(event.kind, event.at, text))
    return out


def _json(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from undecodable bytes): escape it, it reads back the same
            text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text


def _refused(store: str, position: tuple[int, int], event: Event, data: Any, error: BaseException) -> StoreError:
    index, count = position
    kind = getattr(event, "kind", type(event).__name__)
    which = f"event {index} of {count} ({kind})" if count > 1 else f"a {kind} event"
    found = _non_json_float(data["event"], "") if isinstance(data, dict) and "event" in data else None
    if found is not None:
        path, value = found
        shown = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        why = (
            f"the value at {path or '(the event)'} is {shown}, which JSON cannot represent "
            "(use null, a finite number or a string)"
        )
    elif isinstance(error, RecursionError):
        why = "it is nested too deeply to be written as JSON"
    else:
        why = " ".join(str(error).split()) or type(error).__name__
    prefix = f"{store}: " if store else ""
    return StoreError(f"{prefix}refused to write {which}: {why}; nothing of this append was written")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _non_json_float(value: Any, path: str) -> tuple[str, float] | None:
    """The path and value of the first NaN or infinite float in ``value``, if any."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _NAME.fullmatch(key):
                step = f"{path}.{key}" if path else key
            else:
                shown = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)
                step = f"{path}[{shown}]"
            found = _non_json_float(item, step)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _non_json_float(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def decode_event(data: str | bytes | dict[str, Any]) -> Event:
    """The event stored as ``data`` (JSON text, UTF-8 bytes, or already-parsed JSON).

    Raises ``_Unreadable`` (a ``ValueError``) saying why when it cannot be read.
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Unreadable("damaged", f"its text is not UTF-8 (byte {e.start})") from None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise _Unreadable("damaged", f"its JSON text is damaged: {e.msg} at character {e.pos}") from None
        except RecursionError:
            raise _Unreadable("damaged", "its JSON text is nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("event"), dict):
        raise _Unreadable("damaged", 'it is not an event envelope ({"v": …, "event": {…}})')
    version = data.get("v")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        newer = isinstance(version, int) and not isinstance(version, bool) and version > max(READABLE_VERSIONS)
        hint = ": it was written by a newer planexec; upgrade planexec to read it" if newer else ""
        raise _Unreadable(
            "unknown_version", f"event schema version {version!r} is not one this planexec reads ({readable}){hint}"
        )
    try:
        return load_event(data)
    except ValidationError as e:
        raise _invalid(data["event"], e) from None


def _invalid(event: dict[str, Any], error: ValidationError) -> _Unreadable:
    kind = event.get("kind")
    errors = error.errors(include_url=False, include_input=False)
    if errors and errors[0]["type"] == "union_tag_invalid":
        return _Unreadable("unknown_kind", f"unknown event kind {kind!r} (written by a newer planexec?)")
    if errors and errors[0]["type"] == "union_tag_not_found":
        return _Unreadable("damaged", "the event has no kind")
    first = errors[0] if errors else None
    where = ".".join(str(p) for p in first["loc"][1:]) if first else ""
    detail = f"{where}: {first['msg']}" if first and where else first["msg"] if first else str(error)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return _Unreadable("invalid_event", f"invalid {kind} event: {detail}{more}")


class _Unreadable(ValueError):
    """Why one stored event cannot be read: a stable code and a message."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def _missing(first: int, end: int) -> Problem:
    where = f"event {first}" if first == end else f"events {first}-{end}"
    return Problem(code="missing", where=where, message="missing from the store (deleted, or never written)")


def decode_log(
    run_id: str,
    rows: Iterable[tuple[int, str | bytes, bytes | None]],
    *,
    after: int = 0,
    last: int | None = None,
) -> list[StoredEvent]:
    """The events of ``rows`` (sequence number, stored data, own hash in the chain), in order: the
    log after event ``after``, up to event ``last`` when the store knows its last sequence number.

    Raises :class:`~planexec.LogUnreadable` when any of them cannot be read, or when events are
    missing (a gap in the sequence numbers, or fewer events than ``last``): it carries every one
    that could be read and, for each problem, where it is (``event <seq>``, ``events <a>-<b>``).
    """
    events: list[StoredEvent] = []
    problems: list[Problem] = []
    expected = after + 1
    for seq, data, own in rows:
        if seq > expected:
            problems.append(_missing(expected, seq - 1))
        expected = seq + 1
        try:
            event = decode_event(data)
        except _Unreadable as e:
            problems.append(Problem(code=e.code, where=f"event {seq}", message=e.message))
        else:
            events.append(StoredEvent(seq=seq, event=event, hash=_hex(own)))
    if last is not None and last >= expected:
        problems.append(_missing(expected, last))
    if problems:
        raise LogUnreadable(run_id, problems, events)
    return events


def _hex(own: object) -> str | None:
    """A stored hash as hex (whatever the driver returned it as); None when there is none."""
    if own is None:
        return None
    if isinstance(own, bytes | bytearray | memoryview):
        return bytes(own).hex()
    return str(own)
