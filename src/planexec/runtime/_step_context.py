"""The context a step's executor works in: every tool and model call goes through the run."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal

from planexec._util.strict_json import json_problem
from planexec.executor import StepError, StepFailure
from planexec.log import StepAttemptFailed, ToolCalled
from planexec.models import Model, ModelRequest, ModelResponse, ToolCall
from planexec.plan import Step
from planexec.runtime._budget import BudgetHit
from planexec.tools import OutputNotJSON, Tool, ToolContext, ToolCrashed, Toolset, call_with_timeout

if TYPE_CHECKING:
    from planexec.runtime._engine import Engine

__all__ = ["StepCtx"]


class StepCtx:
    """The :class:`StepContext` an executor gets: calls go through the engine's checks and log."""

    __slots__ = ("_engine", "attempts", "confidence", "step")

    def __init__(self, engine: Engine, step: Step) -> None:
        self._engine = engine
        self.step = step
        self.attempts = 1
        self.confidence: float | None = None

    def report_confidence(self, confidence: float) -> None:
        if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
            raise StepFailure(
                StepError(kind="executor", message=f"a confidence is a number from 0 to 1, not {confidence!r}")
            )
        self.confidence = float(confidence)

    @property
    def run_id(self) -> str:
        return self._engine.run_id

    @property
    def tools(self) -> Toolset:
        return self._engine.config.tools

    @property
    def cancel_grace(self) -> float:
        return self._engine.config.limits.cancel_grace

    async def call_model(self, model: Model, request: ModelRequest) -> ModelResponse:
        role = "judge" if request.purpose == "judge" else "executor"
        return await self._engine.call_model(role, model, request, self.step.id)

    def refuse_tool_call(self, call: ToolCall, error: StepError) -> None:
        engine = self._engine
        engine.emit(
            ToolCalled(
                at=engine.clock(),
                step_id=self.step.id,
                call_id=call.id,
                tool=call.name,
                args=call.arguments,
                error=error,
                attempts=0,
            )
        )

    async def call_tool(self, tool: Tool, args: dict[str, Any], *, call_id: str | None = None) -> Any:
        """Call ``tool`` with timeout, retries and output check; every attempt counted and checked
        against the tool-call budget before it is made."""
        engine = self._engine
        inner = call_id is not None
        if inner:
            self._gate_inner(tool, args, call_id or "")
        key = engine.idempotency_key(self.step) + (f":{call_id}" if inner else "")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        attempt = 0
        counted = 0
        """Attempts added to the engine's count of inner calls in flight (refused ones are not)."""
        try:
            while True:
                attempt += 1
                if inner:  # the step's own first call was checked and counted when it was dispatched
                    engine.budget.check_tool_call(
                        engine.state,
                        engine.clock(),
                        in_flight=engine._unstarted_tool_calls + engine._inner_tool_calls_in_flight,
                    )
                    engine._inner_tool_calls_in_flight += 1
                    counted += 1
                try:
                    output = await self._attempt(tool, args, attempt, key, inner)
                except (asyncio.CancelledError, StepFailure, BudgetHit, ToolCrashed):
                    raise
                except Exception as e:
                    error = _tool_error(tool, e)
                    if not (tool.retry.retries(e) and attempt < tool.retry.max_attempts):
                        raise StepFailure(error) from None
                    delay = tool.retry.delay(attempt, engine.rng)
                    if not inner:
                        engine.budget.check_tool_call(engine.state, engine.clock())
                        engine.emit(
                            StepAttemptFailed(
                                at=engine.clock(), step_id=self.step.id, attempt=attempt, error=error, retry_in=delay
                            )
                        )
                        self.attempts = attempt + 1
                    await asyncio.sleep(delay)
                    continue
                if inner:
                    self._log_inner(call_id or "", tool, args, attempt, loop.time() - t0, output=output)
                return output
        except StepFailure as f:
            if inner:
                self._log_inner(call_id or "", tool, args, attempt, loop.time() - t0, error=f.error)
            raise
        finally:
            engine._inner_tool_calls_in_flight -= counted

    def _gate_inner(self, tool: Tool, args: dict[str, Any], call_id: str) -> None:
        """A model-driven step may not call a tool that a human would be asked about as a step of its
        own: the gate is not lifted by routing the call through a model."""
        engine = self._engine
        approvals = engine.config.approvals
        gated = tool.requires_approval or (
            engine.can_ask_humans and (approvals.steps == "all" or (approvals.steps == "sensitive" and tool.sensitive))
        )
        if gated:
            message = f"{tool.name} needs a human's approval: it can only be called by a step of its own"
            error = StepError(kind="rejected", message=message)
            engine.emit(
                ToolCalled(
                    at=engine.clock(),
                    step_id=self.step.id,
                    call_id=call_id,
                    tool=tool.name,
                    args=args,
                    error=error,
                    attempts=0,
                )
            )
            raise StepFailure(error)

    async def _attempt(self, tool: Tool, args: dict[str, Any], attempt: int, key: str, inner: bool) -> Any:
        tctx = ToolContext(run_id=self._engine.run_id, step_id=self.step.id, attempt=attempt, idempotency_key=key)
        limit: asyncio.Semaphore | None = None
        if inner and tool.max_concurrency is not None:
            limit = self._engine._inner_limits.setdefault(tool.name, asyncio.Semaphore(tool.max_concurrency))
        grace = self._engine.config.limits.cancel_grace
        if limit is None:
            raw = await call_with_timeout(tool, args, tctx, grace=grace)
        else:
            async with limit:
                raw = await call_with_timeout(tool, args, tctx, grace=grace)
        try:
            output = tool.check_output(raw)
        except OutputNotJSON as e:
            message = f"the output of {tool.name} is not JSON data: {e}"
            raise StepFailure(StepError(kind="invalid_output", message=message)) from None
        except ValueError as e:
            message = f"the output of {tool.name} does not fit its schema: {e}"
            raise StepFailure(StepError(kind="invalid_output", message=message)) from None
        except Exception as e:  # an output that cannot even be converted (an object JSON has no form for)
            message = f"the output of {tool.name} is not JSON data: {type(e).__name__}: {e}"
            raise StepFailure(StepError(kind="invalid_output", message=message)) from None
        problem = json_problem(output, max_chars=self._engine.config.limits.max_output_chars, where="output")
        if problem is not None:
            message = f"the output of {tool.name} cannot be kept: {problem.where}: {problem.message}"
            raise StepFailure(StepError(kind="invalid_output", message=message, problems=(problem,)))
        return output

    def _log_inner(
        self,
        call_id: str,
        tool: Tool,
        args: dict[str, Any],
        attempts: int,
        duration: float,
        *,
        output: Any = None,
        error: StepError | None = None,
    ) -> None:
        engine = self._engine
        engine.emit(
            ToolCalled(
                at=engine.clock(),
                step_id=self.step.id,
                call_id=call_id,
                tool=tool.name,
                args=args,
                output=output,
                error=error,
                attempts=attempts,
                duration=duration,
            )
        )


def _tool_error(tool: Tool, e: Exception) -> StepError:
    if isinstance(e, TimeoutError):
        after = f" after {tool.timeout:g}s" if tool.timeout is not None else ""
        detail = f": {e}" if str(e) and tool.timeout is None else ""
        return StepError(kind="timeout", message=f"{tool.name} timed out{after}{detail}")
    kind: Literal["transient", "tool_error"] = "transient" if tool.retry.retries(e) else "tool_error"
    text = str(e) or type(e).__name__
    return StepError(kind=kind, message=f"{tool.name}: {text}")
