"""Tool faults: a wrapped invoke that fails, times out or returns garbage where the profile says."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from planexec.errors import Problem, TransientToolError, UsageError
from planexec.faults._decisions import Decider
from planexec.tools import Invoke, Tool, ToolContext

__all__ = ["MALFORMED", "tool_fault_key", "wrap_tools"]

MALFORMED = "<<malformed>>"
"""The text of every injected malformed output."""

_GARBAGE: tuple[Any, ...] = (MALFORMED, {"malformed": MALFORMED}, [MALFORMED], -1, None)


def tool_fault_key(ctx: ToolContext) -> str:
    """The key a tool call's faults are drawn for: its idempotency key without the run id.

    The idempotency key names the run, the step, the plan version that defined the step (and,
    for a call made inside a model step, the call's id); without the run id, the same scenario
    meets the same faults in every run, replay and fork that uses the same seed.
    """
    prefix = f"{ctx.run_id}:"
    key = ctx.idempotency_key
    return key[len(prefix) :] if ctx.run_id and key.startswith(prefix) else key


def wrap_tools(profile: Decider, tools: Iterable[Tool]) -> list[Tool]:
    if isinstance(tools, Tool):
        raise UsageError(
            "wrap_tools takes a list of tools",
            [Problem(code="fault_profile", where=f"tool {tools.name!r}", message="pass [tool], not the tool alone")],
        )
    wrapped: list[Tool] = []
    for t in tools:
        if not isinstance(t, Tool):
            raise UsageError(
                "wrap_tools takes tools",
                [Problem(code="fault_profile", where=repr(t), message=f"not a Tool but a {type(t).__name__}")],
            )
        wrapped.append(dataclasses.replace(t, invoke=_faulty_invoke(profile, t)))
    return wrapped


def _faulty_invoke(profile: Decider, tool: Tool) -> Invoke:
    inner = tool.invoke
    name = tool.name

    async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
        fault = profile.tool_fault(name, tool_fault_key(ctx), ctx.attempt)
        if fault == "error":
            raise TransientToolError(f"injected fault: {name} failed (attempt {ctx.attempt})")
        if fault == "timeout":
            raise TimeoutError(f"injected timeout: {name} did not answer (attempt {ctx.attempt})")
        output = await inner(args, ctx)
        if fault == "malformed":
            return malformed_output(tool, output)
        return output

    return invoke


def malformed_output(tool: Tool, real: Any) -> Any:
    """A value of another JSON type than ``real`` that ``tool``'s output check rejects, where one
    of the candidates is rejected; else just a value of another type."""
    kind = _json_type(real)
    candidates = [g for g in _GARBAGE if _json_type(g) != kind]
    for candidate in candidates:
        if _rejected(tool, candidate):
            return candidate
    return candidates[0]


def _rejected(tool: Tool, value: Any) -> bool:
    try:
        tool.check_output(value)
    except ValueError:
        return True
    except Exception:
        return False  # an output check that fails otherwise would not read as malformed output
    return False


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "other"
