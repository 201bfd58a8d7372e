"""One tool call of a ReAct turn, made the one way planexec calls tools (the tool must exist, the
arguments fit its schema, timeout and retries per the tool, the output checked), each attempt
counted against the tool-call budget before it is made."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planexec.executor import StepError, ToolCallSite, checked_call
from planexec.executor import call_tool as run_tool_call
from planexec.log import RunState, ToolCalled
from planexec.models import ToolCall
from planexec.runtime import Budget
from planexec.tools import Toolset

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
    """Make ``call`` the one way tools are called (:func:`planexec.executor.call_tool`) and return
    its record (``attempts == 0``: refused before any attempt).

    Every attempt is added to ``site.state.tool_calls`` as it ends. Raises ``BudgetHit`` when the
    tool-call budget has no room for an attempt.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    checked = checked_call(site.tools, call.name, call.arguments)
    if isinstance(checked, StepError):
        return _record(site, call, turn_id, error=checked, attempts=0)
    tool, args = checked

    def before_attempt(_attempt: int) -> None:
        site.budget.check_tool_call(site.state, site.clock(), in_flight=site.in_flight)
        site.in_flight += 1

    def after_attempt(_attempt: int) -> None:
        site.in_flight -= 1
        site.state.tool_calls += 1  # the ledger counts every attempt made, as a run's state does

    outcome = await run_tool_call(
        tool,
        args,
        ToolCallSite(
            run_id=site.run_id,
            step_id=turn_id,
            idempotency_key=f"{site.run_id}:{turn_id}:{call.id}",
            rng=lambda: site.rng,
            before_attempt=before_attempt,
            after_attempt=after_attempt,
        ),
    )
    return _record(site, call, turn_id, output=outcome.output, error=outcome.error, attempts=outcome.attempts, since=t0)


def observation(record: ToolCalled) -> str:
    """What the model reads back: the output as text (JSON for data), or the error."""
    if record.error is not None:
        return f"error: {record.error}"
    output = record.output
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)


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
