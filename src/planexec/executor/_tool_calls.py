"""One tool call, made the same way wherever it is made — a tool step, a tool call of a model
step, a turn of the ReAct baseline:

- the tool must exist and the arguments must fit its schema (else the call is refused before any
  attempt);
- each attempt runs within the tool's timeout (a tool that ignores its cancellation is abandoned
  after a grace period);
- what goes wrong is mapped to one :class:`StepError` kind (``timeout``, ``transient``,
  ``tool_error``, ``invalid_output``);
- a failure the tool's :class:`~planexec.tools.RetryPolicy` retries is tried again after its delay;
- the output must be JSON data, fit the tool's output schema, and be small enough to keep.

What surrounds the call belongs to the caller and is reached through :class:`ToolCallSite`: the
budget checked (and the call counted) before each attempt, the log of a failed attempt that will
be retried, a shared concurrency limit.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planexec._util.strict_json import json_problem
from planexec.errors import EffectUncertain, UnknownToolError
from planexec.executor._outcome import ErrorKind, StepError
from planexec.tools import OutputNotJSON, Tool, ToolContext, ToolCrashed, Toolset, call_with_timeout

__all__ = ["ToolCallOutcome", "ToolCallSite", "call_tool", "checked_call", "tool_error"]


def _nothing(*_args: Any) -> None:
    return None


@dataclass(kw_only=True, slots=True)
class ToolCallSite:
    """Where a tool call is made, and what the caller does around each attempt (built for one call
    and not changed after; not frozen, as it is built on every tool call's path)."""

    run_id: str
    step_id: str
    idempotency_key: str
    """Passed to the tool with every attempt: the same for all of them."""
    rng: Callable[[], random.Random]
    """The run's randomness, for retry jitter (asked for only when a retry needs it)."""
    max_output_chars: int | None = None
    cancel_grace: float = 1.0
    limit: asyncio.Semaphore | None = None
    """Held for each attempt (a tool's concurrency limit shared across a step's calls)."""
    before_attempt: Callable[[int], None] = field(default=_nothing)
    """Called with the attempt's number before it is made; may raise to refuse it (a budget)."""
    after_attempt: Callable[[int], None] = field(default=_nothing)
    """Called with the attempt's number once it has ended, however it ended."""
    before_retry: Callable[[int, StepError, float], None] = field(default=_nothing)
    """Called when attempt ``n`` failed with an error that will be retried after ``delay`` seconds;
    may raise to stop the retries (a budget)."""
    on_progress: Callable[[float, float | None, str | None], None] | None = None
    """Receives what the tool reports of its progress (``ToolContext.report``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallOutcome:
    """How a call ended: its output, or the error of its last attempt; ``attempts`` 0 when it
    was refused before any attempt."""

    output: Any = None
    error: StepError | None = None
    attempts: int = 0


def checked_call(tools: Toolset, name: str, args: Any) -> tuple[Tool, dict[str, Any]] | StepError:
    """The tool ``name`` names and ``args`` checked against its schema, or the error refusing the
    call (``unknown_tool`` or ``invalid_arguments``)."""
    try:
        tool = tools.get(name)
    except UnknownToolError as e:
        return StepError(kind="unknown_tool", message=str(e), problems=e.problems)
    validated, problems = tool.check_args(args)
    if validated is None:
        message = "; ".join(str(p) for p in problems)
        return StepError(kind="invalid_arguments", message=message, problems=tuple(problems))
    return tool, validated


async def call_tool(tool: Tool, args: dict[str, Any], site: ToolCallSite) -> ToolCallOutcome:
    """Call ``tool`` with arguments already checked against its schema.

    Raises only what is not the tool's failure: a cancellation, a crashed tool
    (:class:`~planexec.tools.ToolCrashed`), a call whose effect is uncertain
    (:class:`~planexec.errors.EffectUncertain`), or what the site's callbacks raise.
    """
    attempt = 0
    while True:
        attempt += 1
        site.before_attempt(attempt)
        try:
            output = await _attempt(tool, args, site, attempt)
        except _Failed as failed:
            if not (failed.retryable and attempt < tool.retry.max_attempts):
                return ToolCallOutcome(error=failed.error, attempts=attempt)
            delay = tool.retry.delay(attempt, site.rng())
            site.before_retry(attempt, failed.error, delay)
        else:
            return ToolCallOutcome(output=output, attempts=attempt)
        finally:
            site.after_attempt(attempt)
        await asyncio.sleep(delay)


def tool_error(tool: Tool, e: Exception) -> StepError:
    """The error of an attempt that raised ``e``."""
    if isinstance(e, TimeoutError):
        after = f" after {tool.timeout:g}s" if tool.timeout is not None else ""
        detail = f": {e}" if str(e) and tool.timeout is None else ""
        return StepError(kind="timeout", message=f"{tool.name} timed out{after}{detail}")
    kind: ErrorKind = "transient" if tool.retry.retries(e) else "tool_error"
    return StepError(kind=kind, message=f"{tool.name}: {str(e) or type(e).__name__}")


class _Failed(Exception):
    def __init__(self, error: StepError, *, retryable: bool) -> None:
        self.error = error
        self.retryable = retryable
        super().__init__(str(error))


async def _attempt(tool: Tool, args: dict[str, Any], site: ToolCallSite, attempt: int) -> Any:
    ctx = ToolContext(
        run_id=site.run_id,
        step_id=site.step_id,
        attempt=attempt,
        idempotency_key=site.idempotency_key,
        progress=site.on_progress,
    )
    try:
        if site.limit is None:
            raw = await call_with_timeout(tool, args, ctx, grace=site.cancel_grace)
        else:
            async with site.limit:
                raw = await call_with_timeout(tool, args, ctx, grace=site.cancel_grace)
    except (asyncio.CancelledError, ToolCrashed, EffectUncertain):
        raise
    except Exception as e:
        raise _Failed(tool_error(tool, e), retryable=tool.retry.retries(e)) from None
    return _output(tool, raw, site.max_output_chars)


def _output(tool: Tool, raw: Any, max_chars: int | None) -> Any:
    def refused(message: str, problems: tuple[Any, ...] = ()) -> _Failed:
        return _Failed(StepError(kind="invalid_output", message=message, problems=problems), retryable=False)

    try:
        output = tool.check_output(raw)
    except OutputNotJSON as e:
        raise refused(f"the output of {tool.name} is not JSON data: {e}") from None
    except ValueError as e:
        raise refused(f"the output of {tool.name} does not fit its schema: {e}") from None
    except Exception as e:  # an output that cannot even be converted (an object JSON has no form for)
        raise refused(f"the output of {tool.name} is not JSON data: {type(e).__name__}: {e}") from None
    if max_chars is not None:
        problem = json_problem(output, max_chars=max_chars, where="output")
        if problem is not None:
            raise refused(f"the output of {tool.name} cannot be kept: {problem.where}: {problem.message}", (problem,))
    return output
