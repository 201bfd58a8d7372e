"""Reading a request the way the demo's scripted models do: the execution record and step inputs.

The demo's models answer from what they are sent, not from a fixed list, so they parse the record
the planner prompt carries and the inputs an executor prompt carries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from planexec.errors import UnexpectedModelCall
from planexec.models import ModelRequest

__all__ = ["RecordEntry", "first_user_text", "parse_record", "step_inputs", "tool_results"]

_HEAD = re.compile(r"^- \[(?P<status>\w+)\] (?P<id>[A-Za-z0-9_-]+) \((?P<kind>tool|executor) (?P<what>[^)]*)\): ")
_DETAIL = re.compile(r"^  (?P<key>output|error|args|failed checks): (?P<value>.*)$")
_INPUTS = re.compile(r"^Inputs: (?P<json>.*)$", re.MULTILINE)


@dataclass(kw_only=True, slots=True)
class RecordEntry:
    """One step as the record shows it."""

    step_id: str
    status: str
    output: str | None = None
    error: str | None = None

    def output_json(self) -> Any:
        if self.output is None:
            raise UnexpectedModelCall(f"the record shows no output for step {self.step_id!r}")
        try:
            return json.loads(self.output)
        except ValueError:
            raise UnexpectedModelCall(f"the record's output of step {self.step_id!r} is not whole JSON") from None


def first_user_text(request: ModelRequest) -> str:
    for message in request.messages:
        if message.role == "user":
            return message.content
    return ""


def parse_record(text: str) -> dict[str, RecordEntry]:
    """Every step of the execution record in ``text``, by id (empty when there is no record)."""
    entries: dict[str, RecordEntry] = {}
    current: RecordEntry | None = None
    in_record = False
    for line in text.splitlines():
        if line.startswith("Execution record"):
            in_record = True
            continue
        if not in_record:
            continue
        head = _HEAD.match(line)
        if head:
            current = RecordEntry(step_id=head["id"], status=head["status"])
            entries[current.step_id] = current
            continue
        detail = _DETAIL.match(line)
        if detail and current is not None:
            if detail["key"] == "output":
                current.output = detail["value"]
            elif detail["key"] == "error":
                current.error = detail["value"]
            continue
        if not line.startswith(("- ", "  ")):
            in_record = False
            current = None
    return entries


def step_inputs(request: ModelRequest) -> dict[str, Any]:
    """The ``Inputs:`` an executor prompt gives for its step."""
    m = _INPUTS.search(first_user_text(request))
    if m is None:
        raise UnexpectedModelCall("the executor prompt has no Inputs line")
    inputs = json.loads(m["json"])
    if not isinstance(inputs, dict):
        raise UnexpectedModelCall("the executor prompt's Inputs are not an object")
    return inputs


def tool_results(request: ModelRequest) -> list[Any]:
    """The results of the tool calls answered so far in this conversation, as JSON where they are."""
    results: list[Any] = []
    for message in request.messages:
        if message.role != "tool":
            continue
        try:
            results.append(json.loads(message.content))
        except ValueError:
            results.append(message.content)
    return results
