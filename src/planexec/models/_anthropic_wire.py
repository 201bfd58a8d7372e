"""Anthropic's Messages API, neutral → wire: the parameters of ``messages.create`` for a request.

System messages become the ``system`` parameter; assistant tool calls become ``tool_use`` blocks;
tool results become ``tool_result`` blocks of the next user turn (results in a row share one
turn). Structured output travels through tool use: the output spec is offered as a tool whose
``input_schema`` is the JSON Schema (:class:`OutputTool`), forced with ``tool_choice`` when no
other tool is offered and thinking is off. Cache breakpoints mark the stable prefix: the system
text, and the last messages marked as the end of one. Which parameters this SDK release's
``messages.create`` has is :func:`sdk_takes`.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.models._base import Message, ModelRequest

__all__ = ["AnthropicRequest", "OutputTool", "sdk_takes"]

_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputTool:
    """The tool that carries structured output. ``wrapped``: the schema is not an object, so the
    answer travels as ``{"value": ...}``."""

    name: str
    wrapped: bool


_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}
"""Neutral reasoning efforts → ``output_config.effort`` (which has no ``minimal``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AnthropicRequest:
    params: dict[str, Any]
    output: OutputTool | None = None
    extra_body: dict[str, Any] | None = None

    @classmethod
    def build(cls, request: ModelRequest, *, max_tokens: int, dropped: Mapping[str, str]) -> AnthropicRequest:
        system, turns = _turns(request.messages)
        tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": {"type": "object", **t.parameters}}
            for t in request.tools
        ]
        settings = request.settings
        params: dict[str, Any] = {"max_tokens": settings.max_tokens or max_tokens, "messages": turns}
        if settings.temperature is not None and "temperature" not in dropped:
            params["temperature"] = settings.temperature
        if settings.top_p is not None and "top_p" not in dropped:
            params["top_p"] = settings.top_p
        if settings.stop:
            params["stop_sequences"] = list(settings.stop)
        effort = settings.reasoning_effort
        if effort is not None and "reasoning_effort" not in dropped:
            if effort == "none":
                params["thinking"] = {"type": "disabled"}
            else:
                params["output_config"] = {"effort": _EFFORT[effort]}
        extra = dict(settings.extra)
        output = None
        if request.output is not None:
            name = _output_tool_name(request.output.name, {t.name for t in request.tools})
            schema, wrapped = _object_schema(request.output.json_schema)
            output = OutputTool(name=name, wrapped=wrapped)
            tools.append(
                {
                    "name": name,
                    "description": "Give the final answer with this tool: its input is the answer, "
                    "JSON that fits the schema.",
                    "input_schema": schema,
                }
            )
            if request.tools or _thinks(extra):
                params["tool_choice"] = {"type": "auto"}
                note = f"When you have the final answer, give it by calling the tool {name!r}, not as text."
                system = f"{system}\n\n{note}" if system else note
            else:
                params["tool_choice"] = {"type": "tool", "name": name}
        if tools:
            params["tools"] = tools
        if system:
            # A cache breakpoint after the system text: tools and system, which do not change within
            # a run, are the stable prefix the API caches (it ignores a prefix too short to cache).
            params["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
        return cls(params=params, output=output, extra_body=extra or None)


def _thinks(extra: Mapping[str, Any]) -> bool:
    """Whether the extras turn thinking on (a forced tool choice is then refused by the API)."""
    thinking = extra.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") not in (None, "disabled")


@functools.cache
def _create_parameters() -> frozenset[str]:
    from anthropic.resources.messages import AsyncMessages

    return frozenset(inspect.signature(AsyncMessages.create).parameters)


def sdk_takes(parameter: str) -> bool:
    """Whether this SDK release's ``messages.create`` has ``parameter`` (recent ones have no temperature)."""
    return parameter in _create_parameters()


def _turns(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text, and the user/assistant turns (adjacent turns of one role merged), a cache
    breakpoint after each message that ends a stable prefix."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    marked: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            if m.content:
                system.append(m.content)
            continue
        role, blocks = _blocks(m)
        if not blocks:
            continue
        if m.cache_point:
            marked.append(blocks[-1])
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    # The API takes at most four cache breakpoints: the system text has one, the last three
    # messages marked as the end of a stable prefix get the others.
    for block in marked[-(_BREAKPOINTS - 1) :]:
        block["cache_control"] = {"type": "ephemeral"}
    return "\n\n".join(system), turns


_BREAKPOINTS = 4


def _blocks(m: Message) -> tuple[str, list[dict[str, Any]]]:
    if m.role == "tool":
        if not m.tool_call_id:
            raise UsageError(
                "a tool result needs the id of the call it answers",
                [Problem(code="message", where="tool_call_id", message="set it on every role='tool' message")],
            )
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
        if m.content:
            result["content"] = m.content
        return "user", [result]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    if m.role == "assistant":
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
    return m.role, blocks


def _object_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """Tool input must be an object: other schemas are wrapped as ``{"value": schema}``."""
    result = dict(schema)
    if result.get("type") == "object":
        return result, False
    if "type" not in result and "properties" in result:
        return {"type": "object", **result}, False
    defs: dict[str, Any] = {key: result.pop(key) for key in ("$defs", "definitions") if key in result}
    return {"type": "object", "properties": {"value": result}, "required": ["value"], **defs}, True


def _output_tool_name(name: str, taken: set[str]) -> str:
    base = _TOOL_NAME.sub("_", name)[:56] or "output"
    return base if base not in taken else f"{base}_answer"
