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

__all__ = ["RecordEntry", "parse_record", "step_inputs", "tool_results", "user_text"]

_DONE = re.compile(
    r"^- (?P<id>[A-Za-z0-9_-]+) .*?(?: → (?P<output>.*)| ✗ (?P<status>failed|cancelled)(?:: (?P<error>.*))?)$"
)
_WAITING = re.compile(r"^- (?P<id>[A-Za-z0-9_-]+) .* (?P<status>pending|running|held)(?: \(after [^)]*\))?$")
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


def user_text(request: ModelRequest) -> str:
    """Every user message of the request, joined by blank lines."""
    return "\n\n".join(m.content for m in request.messages if m.role == "user")


def parse_record(text: str) -> dict[str, RecordEntry]:
    """Every step of the execution record in ``text``, by id, as it stands last (empty when there
    is no record)."""
    entries: dict[str, RecordEntry] = {}
    in_record = False
    for line in text.splitlines():
        if line == "Record:":
            in_record = True
            continue
        if not in_record or line == "Not finished:":
            continue
        if not line.startswith("- "):
            if not line.startswith("  "):
                in_record = False
            continue
        waiting = _WAITING.match(line)
        if waiting:
            entries[waiting["id"]] = RecordEntry(step_id=waiting["id"], status=waiting["status"])
            continue
        done = _DONE.match(line)
        if done:
            status = done["status"] or "succeeded"
            entries[done["id"]] = RecordEntry(
                step_id=done["id"], status=status, output=done["output"], error=done["error"]
            )
    return entries


def step_inputs(request: ModelRequest) -> dict[str, Any]:
    """The ``Inputs:`` an executor prompt gives for its step."""
    m = _INPUTS.search(user_text(request))
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
