"""What the offline models read in a request: whether an injection is in it (however the text was
written into it — as it is, inside JSON, inside JSON inside JSON), and which of their own steps
the execution record shows finished or failed."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from planexec.models import ModelRequest

__all__ = ["literal", "plain", "reads", "record_outcomes"]

_ESCAPED_SPACE = re.compile(r"\\+[nrt]")


def plain(text: str) -> str:
    """``text`` with JSON's escapes undone as far as matching goes (escaped line breaks and tabs
    read as spaces, backslashes dropped) and every run of white space made one space."""
    return " ".join(_ESCAPED_SPACE.sub(" ", text).replace("\\", "").split())


def reads(request: ModelRequest, needle: str | None) -> bool:
    """Whether ``needle`` (already :func:`plain`) is in any message of ``request``."""
    if not needle:
        return False
    return any(needle in plain(m.content) for m in request.messages)


_RECORD_ENTRY = re.compile(r"^- (\S+) ")


def record_outcomes(request: ModelRequest, ids: Iterable[str]) -> dict[str, str]:
    """Of the steps ``ids``, those the request's execution record shows ended: id → ``succeeded``
    or ``failed`` (cancelled steps read as failed). Only entries that name one of ``ids`` are
    read: a tool's output that imitates the record cannot name steps the reader did not issue
    without also guessing their ids."""
    wanted = set(ids)
    found: dict[str, str] = {}
    for message in request.messages:
        if message.role != "user" or "Record:" not in message.content:
            continue
        text = message.content.split("Record:", 1)[1].split("\nNot finished:", 1)[0]
        for line in text.splitlines():
            match = _RECORD_ENTRY.match(line)
            if match is None or match.group(1) not in wanted:
                continue
            if " ✗ " in line:
                found[match.group(1)] = "failed"
            elif " → " in line:
                found[match.group(1)] = "succeeded"
    return found


def literal(value: Any) -> Any:
    """``value`` as a plan's literal argument: ``${`` in any string is escaped (``$${``), so that
    text taken from a task is never read as a binding."""
    if isinstance(value, str):
        return value.replace("${", "$${")
    if isinstance(value, list | tuple):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    return value
