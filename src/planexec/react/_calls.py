"""One tool call of a ReAct turn: the same checks a planexec step gets — the tool must exist, the
arguments must fit its schema, the call runs with the tool's timeout and retry policy and counts
against the tool-call budget before every attempt, and the output must fit the tool's schema."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planexec.errors import UnknownToolError
from planexec.executor import ErrorKind, StepError
from planexec.log import RunState, ToolCalled
from planexec.models import ToolCall
from planexec.runtime import Budget
from planexec.tools import Tool, ToolContext, ToolCrashed, Toolset, call_with_timeout

__all__ = ["CallSite", "call_tool", "observation"]


@dataclass(kw_only=True)
class CallSite:
    """What a tool call needs from the loop around it: the run's identity, tools, budget and
    ledger, its clock and randomness (retry jitter), and how many calls are in flight."""

    run_id: str
    tools: Toolset
    budget: Budget
    state: RunState
    clock: Callable[[], float]
    rng: random.Random
    in_flight: int = 0


async def call_tool(site: CallSite, call: ToolCall, *, turn_id: str) -> ToolCalled:
    """Make ``call`` and return its record (``attempts == 0``: refused before any attempt).

    Every attempt is added to ``site.state.tool_calls`` as it ends. Raises ``BudgetHit`` when the
    tool-call budget has no room for an attempt.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        tool = site.tools.get(call.name)
    except UnknownToolError as e:
        return _record(site, call, turn_id, error=StepError(kind="unknown_tool", message=str(e)), attempts=0)
    args, problems = tool.check_args(call.arguments)
    if args is None:
        message = "; ".join(map(str, problems))
        error = StepError(kind="invalid_arguments", message=message, problems=tuple(problems))
        return _record(site, call, turn_id, error=error, attempts=0)
    attempt = 0
    while True:
        attempt += 1
        site.budget.check_tool_call(site.state, site.clock(), in_flight=site.in_flight)
        site.in_flight += 1
        try:
            output = await _attempt(site, tool, args, call, turn_id, attempt)
        except _Failed as failed:
            retry = failed.retryable and attempt < tool.retry.max_attempts
            if not retry:
                return _record(site, call, turn_id, error=failed.error, attempts=attempt, since=t0)
            await asyncio.sleep(tool.retry.delay(attempt, site.rng))
            continue
        finally:
            site.in_flight -= 1
            site.state.tool_calls += 1  # the ledger counts every attempt made, as a run's state does
        return _record(site, call, turn_id, output=output, attempts=attempt, since=t0)


def observation(record: ToolCalled) -> str:
    """What the model reads back: the output as text (JSON for data), or the error."""
    if record.error is not None:
        return f"error: {record.error}"
    output = record.output
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)


class _Failed(Exception):
    def __init__(self, error: StepError, *, retryable: bool) -> None:
        self.error = error
        self.retryable = retryable
        super().__init__(str(error))


async def _attempt(site: CallSite, tool: Tool, args: dict[str, Any], call: ToolCall, turn_id: str, attempt: int) -> Any:
    ctx = ToolContext(
        run_id=site.run_id, step_id=turn_id, attempt=attempt, idempotency_key=f"{site.run_id}:{turn_id}:{call.id}"
    )
    try:
        raw = await call_with_timeout(tool, args, ctx)
    except (asyncio.CancelledError, ToolCrashed):
        raise
    except Exception as e:
        raise _Failed(_error_of(tool, e), retryable=tool.retry.retries(e)) from None
    try:
        return tool.check_output(raw)
    except ValueError as e:
        message = f"the output of {tool.name} does not fit its schema: {e}"
        raise _Failed(StepError(kind="invalid_output", message=message), retryable=False) from None


def _error_of(tool: Tool, e: Exception) -> StepError:
    if isinstance(e, TimeoutError):
        return StepError(kind="timeout", message=f"{tool.name} timed out after {tool.timeout or 0:g}s")
    kind: ErrorKind = "transient" if tool.retry.retries(e) else "tool_error"
    return StepError(kind=kind, message=f"{tool.name}: {str(e) or type(e).__name__}")


def _record(
    site: CallSite,
    call: ToolCall,
    turn_id: str,
    *,
    output: Any = None,
    error: StepError | None = None,
    attempts: int,
    since: float | None = None,
) -> ToolCalled:
    duration = 0.0 if since is None else asyncio.get_running_loop().time() - since
    return ToolCalled(
        at=site.clock(),
        step_id=turn_id,
        call_id=call.id,
        tool=call.name,
        args=dict(call.arguments),
        output=output,
        error=error,
        attempts=attempts,
        duration=duration,
    )
