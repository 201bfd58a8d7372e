"""The context a step's executor works in: every tool and model call goes through the run."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import Any, Protocol

from planexec._util.clip import clip
from planexec.executor import StepError, StepFailure, ToolCallOutcome, ToolCallSite, call_tool
from planexec.log import StepAttemptFailed, ToolCalled, ToolProgress
from planexec.models import Model, ModelRequest, ModelResponse, ToolCall
from planexec.plan import Step
from planexec.runtime._core import Core
from planexec.runtime._dispatch import Dispatcher
from planexec.runtime._trust import Trust, TrustRefused
from planexec.tools import Tool, Toolset
from planexec.trust import Provenance, Violation

__all__ = ["StepCtx", "StepLoop"]


PROGRESS_INTERVAL = 0.25
"""Seconds between two ``tool_progress`` events of one tool call, at least."""

MAX_PROGRESS_EVENTS = 100
"""How many ``tool_progress`` events one step may log; later reports are dropped."""


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class StepLoop(Core, Protocol):
    """What a step's context sees of the loop, beyond :class:`Core`."""

    trust: Trust
    dispatcher: Dispatcher

    @property
    def rng(self) -> random.Random: ...

    def clock(self) -> float: ...

    def idempotency_key(self, step: Step) -> str: ...

    async def call_model(
        self,
        role: str,
        model: Model,
        request: ModelRequest,
        step_id: str | None,
        *,
        on_step: Callable[[Step], None] | None = None,
    ) -> ModelResponse: ...


class StepCtx:
    """The :class:`StepContext` an executor gets: calls go through the engine's checks and log."""

    __slots__ = ("_engine", "_progress_at", "_progress_logged", "attempts", "confidence", "step")

    def __init__(self, engine: StepLoop, step: Step) -> None:
        self._engine = engine
        self.step = step
        self.attempts = 1
        self.confidence: float | None = None
        self._progress_logged = 0
        self._progress_at: dict[str | None, float] = {}

    def _progress_to(self, call_id: str | None) -> Callable[[float, float | None, str | None], None]:
        """Where a tool call's progress reports go: a ``tool_progress`` event, at most every
        ``PROGRESS_INTERVAL`` seconds for the call and ``MAX_PROGRESS_EVENTS`` times for the step;
        reports that are not finite numbers are dropped."""
        engine = self._engine

        def report(progress: float, total: float | None, message: str | None) -> None:
            if not _finite(progress) or (total is not None and not _finite(total)):
                return
            now = engine.clock()
            last = self._progress_at.get(call_id)
            if self._progress_logged >= MAX_PROGRESS_EVENTS or (last is not None and now - last < PROGRESS_INTERVAL):
                return
            self._progress_at[call_id] = now
            self._progress_logged += 1
            text = clip(" ".join(message.split()), 200) if isinstance(message, str) and message.strip() else None
            engine.emit(
                ToolProgress(
                    at=now,
                    step_id=self.step.id,
                    progress=float(progress),
                    total=None if total is None else float(total),
                    message=text,
                    call_id=call_id,
                )
            )

        return report

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
        """Call ``tool`` the one way tools are called (see :func:`planexec.executor.call_tool`),
        every attempt checked against the tool-call budget before it is made and counted."""
        engine = self._engine
        inner = call_id is not None
        labels: dict[str, Provenance] | None = None
        if inner:
            labels = self._gate_inner(tool, args, call_id or "")
        t0 = asyncio.get_running_loop().time() if inner else 0.0
        counted = 0
        """Attempts added to the engine's count of inner calls in flight (refused ones are not)."""

        def before_attempt(_attempt: int) -> None:
            nonlocal counted
            if inner:  # the step's own first call was checked and counted when it was dispatched
                engine.dispatcher.check_inner_tool_call()
                counted += 1

        def before_retry(attempt: int, error: StepError, delay: float) -> None:
            if not inner:
                engine.budget.check_tool_call(engine.state, engine.clock())
                engine.emit(
                    StepAttemptFailed(
                        at=engine.clock(), step_id=self.step.id, attempt=attempt, error=error, retry_in=delay
                    )
                )
                self.attempts = attempt + 1

        site = ToolCallSite(
            run_id=engine.run_id,
            step_id=self.step.id,
            idempotency_key=engine.idempotency_key(self.step) + (f":{call_id}" if inner else ""),
            rng=lambda: engine.rng,
            max_output_chars=engine.config.limits.max_output_chars,
            cancel_grace=engine.config.limits.cancel_grace,
            limit=engine.dispatcher.inner_limit(tool) if inner else None,
            before_attempt=before_attempt,
            before_retry=before_retry,
            on_progress=self._progress_to(call_id if inner else None),
        )
        telemetry = engine.telemetry
        live = None if telemetry is None else telemetry.tool_call(tool, self.step, args, call_id, labels)
        try:
            outcome = await call_tool(tool, args, site)
        except BaseException:
            if telemetry is not None:
                telemetry.tool_abandoned(live)
            raise
        finally:
            engine.dispatcher.inner_tool_calls_ended(counted)
        if telemetry is not None:
            telemetry.tool_done(live, tool, outcome)
        if inner:
            self._log_inner(
                call_id or "", tool, args, outcome.attempts, asyncio.get_running_loop().time() - t0, outcome, labels
            )
        if outcome.error is not None:
            raise StepFailure(outcome.error)
        return outcome.output

    def _gate_inner(self, tool: Tool, args: dict[str, Any], call_id: str) -> dict[str, Provenance] | None:
        """A model-driven step may not call a tool that a human would be asked about as a step of its
        own: the gate is not lifted by routing the call through a model. Each argument is labelled
        with what the step's model had read when it asked for the call (None: the run labels
        nothing); a call that breaks a trust rule is refused, and the run stops ``refused`` (no
        human can be asked in the middle of a model's turn)."""
        engine = self._engine
        approvals = engine.config.approvals
        trust = engine.trust
        labels: dict[str, Provenance] | None = None
        untrusted: tuple[Violation, ...] = ()
        if trust.on:
            call = trust.model_label(self.step.id)
            labels = dict.fromkeys(args, call)
            broken = trust.violations(tool.name, args, labels, call, step_id=self.step.id, call_id=call_id)
            if broken:
                message = f"refused: {broken[0]}"
                self._refuse_inner(tool, args, call_id, StepError(kind="untrusted", message=message), labels, broken)
                raise TrustRefused(broken)
            if trust.asks_about_effects() and tool.side_effect:  # every argument's label is the call's
                untrusted = trust.untrusted_effect(tool.name, {}, call, step_id=self.step.id, call_id=call_id)
        gated = tool.requires_approval or (
            engine.can_ask_humans and (approvals.steps == "all" or (approvals.steps == "sensitive" and tool.sensitive))
        )
        if gated or untrusted:
            why = "needs a human's approval" if gated else "changes the world, and the step's model read untrusted text"
            message = f"{tool.name} {why}: it can only be called by a step of its own"
            error = StepError(kind="rejected", message=message)
            self._refuse_inner(tool, args, call_id, error, labels, untrusted)
            raise StepFailure(error)
        return labels

    def _refuse_inner(
        self,
        tool: Tool,
        args: dict[str, Any],
        call_id: str,
        error: StepError,
        labels: dict[str, Provenance] | None,
        violations: tuple[Violation, ...],
    ) -> None:
        engine = self._engine
        engine.emit(
            ToolCalled(
                at=engine.clock(),
                step_id=self.step.id,
                call_id=call_id,
                tool=tool.name,
                args=args,
                error=error,
                attempts=0,
                provenance=labels,
                violations=violations,
            )
        )

    def _log_inner(
        self,
        call_id: str,
        tool: Tool,
        args: dict[str, Any],
        attempts: int,
        duration: float,
        outcome: ToolCallOutcome,
        labels: dict[str, Provenance] | None,
    ) -> None:
        engine = self._engine
        trust = engine.trust
        engine.emit(
            ToolCalled(
                at=engine.clock(),
                step_id=self.step.id,
                call_id=call_id,
                tool=tool.name,
                args=args,
                output=outcome.output,
                error=outcome.error,
                attempts=attempts,
                duration=duration,
                provenance=labels,
                output_provenance=trust.inner_output(tool, self.step.id, call_id) if trust.on else None,
            )
        )
