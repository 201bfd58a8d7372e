"""Carrying out one step: the gate, binding resolution, the intent written before any side effect,
the executor, the acceptance verdict — as the world has the step end — reported to the loop.

A call whose effect became uncertain while it ran (:class:`~planexec.errors.EffectUncertain`: the
machine running it died) is not repeated: the step is held for a human, as a resumed run holds an
interrupted one, and goes on as the human says (retry with the same idempotency key, skip, or mark
done)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from planexec._util.strict_json import json_problem
from planexec.errors import EffectUncertain, UsageError
from planexec.executor import PASSED, Executor, StepError, StepFailure, Verdict
from planexec.log import ApprovalRequested, StepAttemptFailed, StepHeld, StepStarted
from planexec.models import ModelCrashed, cancelled_for_real
from planexec.plan import BindingError, Step
from planexec.runtime._budget import BudgetHit
from planexec.runtime._humans import Humans
from planexec.runtime._journal import Journal, JournalFailed
from planexec.runtime._planning import Planning
from planexec.runtime._step_context import StepCtx, StepLoop
from planexec.runtime._step_gate import StepGate
from planexec.runtime._trust import Trust, TrustRefused
from planexec.runtime._world import StepOutcome
from planexec.tools import ToolCrashed
from planexec.trust import Provenance, Violation

__all__ = ["StepDone", "StepRunLoop", "ToolCrashed", "run_step"]


class StepRunLoop(StepLoop, Protocol):
    """What running a step sees of the loop, beyond a step's context."""

    journal: Journal | None
    humans: Humans
    gate: StepGate
    planning: Planning
    trust: Trust
    queue: asyncio.Queue[Any]

    def side_effecting(self, step: Step) -> bool: ...

    def retries_on_fail(self, step: Step) -> int: ...

    def reviews_on_fail(self, step: Step) -> bool: ...


@dataclass(slots=True)
class StepDone:
    """How one step ended, as the loop receives it."""

    step_id: str
    token: int
    output: Any = None
    verdict: Verdict | None = None
    error: StepError | None = None
    attempts: int = 1
    started: bool = True
    budget: BudgetHit | None = None
    crash: BaseException | None = None
    confidence: float | None = None
    refused: tuple[Violation, ...] | None = None
    """A call of the step broke a trust rule and was not made: the rules it broke."""
    by_human: bool = False
    """The output is a human's (an uncertain effect they marked done)."""


class _Settled(Exception):
    """Internal: a held step was settled by a human without running it."""


async def run_step(engine: StepRunLoop, step: Step, executor: Executor, token: int, held: str | None) -> None:
    """Carry out one step (or settle a held one) and report how it ended to the loop."""
    ctx = StepCtx(engine, step)
    done = StepDone(step_id=step.id, token=token, started=False)
    reserved = held is None  # a dispatched step is counted as committed to until it starts (or will not)
    uncertain: str | None = None  # why the step is held: its call's effect became uncertain
    try:
        if held is not None:
            await _settle_held(engine, step, held, done)
        args, labels = _arguments(engine, step)
        if held is None and engine.gate.may_ask(step):
            # a human sees the arguments exactly as they will be sent, and where each comes from
            confirmed_by = await engine.gate.gate(step, args, labels)
            if confirmed_by is not None and labels is not None:
                labels = {name: label.confirmed(confirmed_by) for name, label in labels.items()}
        # dispatched before a round that may replace the plan began: no effect until it is in force
        await engine.planning.until_free(step)
        done.started = True
        if reserved:
            reserved = False
            engine.dispatcher.unreserve(step)
        await _started(engine, step, executor, args, labels)
        outcome = await engine.world.step_outcome(step, lambda: _carry_out(engine, step, executor, args, ctx, done))
        _ended(outcome, done, ctx)
        if done.verdict is not None and not done.verdict.passed and engine.reviews_on_fail(step):
            done.verdict = await engine.humans.review(step, done.output, done.verdict)
        if done.verdict is not None and not done.verdict.passed:
            done.error = _refused(done.verdict)
    except _Settled:
        pass
    except StepFailure as f:
        done.error = f.error
    except BudgetHit as hit:
        done.budget = hit
    except EffectUncertain as e:
        uncertain = _held_because(step, e)
    except _Held as e:
        uncertain = e.reason
    except TrustRefused as e:
        done.refused = e.violations
    except (UsageError, JournalFailed, ToolCrashed, ModelCrashed) as e:
        done.crash = e
    except Exception as e:
        done.error = StepError(kind="tool_error", message=f"{type(e).__name__}: {e}")
    except BaseException as e:  # a real cancellation goes on; nothing else may end the task unreported
        if cancelled_for_real(e):
            raise
        done.crash = e
    finally:
        if reserved:
            engine.dispatcher.unreserve(step)
    done.attempts = ctx.attempts
    if uncertain is not None:
        try:
            approval_id = await _hold(engine, step, uncertain)
        except JournalFailed as e:
            done.crash = e
        else:
            await run_step(engine, step, executor, token, approval_id)
            return
    engine.queue.put_nowait(done)


async def _settle_held(engine: StepRunLoop, step: Step, held: str, done: StepDone) -> None:
    """A step held after an uncertain effect: the human's answer says to retry it (return), to
    skip it (``StepFailure``), or that it is done (``_Settled``, with the output they give)."""
    decision = await engine.humans.await_effect(step, held)
    if decision.choice == "done":
        done.output, done.verdict, done.by_human = decision.output, PASSED, True
        raise _Settled()
    if decision.choice == "skip" or not decision.approved:
        message = f"a human skipped the step after an uncertain effect: {decision.reason or 'no reason'}"
        raise StepFailure(StepError(kind="tool_error", message=message))


def _arguments(engine: StepRunLoop, step: Step) -> tuple[dict[str, Any], dict[str, Provenance] | None]:
    """The step's arguments, its bindings resolved, and where each comes from (None: the run
    labels nothing)."""
    compiled = engine.planning.compiled_args(step)
    limit = engine.config.limits.max_output_chars
    try:
        args = compiled.resolve(engine.state.outputs, max_chars=limit)
    except BindingError as e:
        raise StepFailure(StepError(kind="binding", message=str(e), problems=tuple(e.problems))) from None
    if compiled.root is not None:  # bound outputs, each within the limit, may add up past it
        problem = json_problem(args, max_chars=limit, where="args")
        if problem is not None:  # e.g. a large output bound many times over
            message = f"the step's arguments cannot be kept: {problem.where}: {problem.message}"
            raise StepFailure(StepError(kind="invalid_arguments", message=message, problems=(problem,)))
    labels = engine.trust.arguments(step, compiled) if engine.trust.on else None
    return args, labels


async def _started(
    engine: StepRunLoop, step: Step, executor: Executor, args: dict[str, Any], labels: dict[str, Provenance] | None
) -> None:
    """Log the step's start — its intent, saved before any effect can happen."""
    key = engine.idempotency_key(step) if step.tool is not None else None
    await engine.world.turn(lambda e: isinstance(e, StepStarted) and e.step_id == step.id)
    engine.emit(
        StepStarted(
            at=engine.now(),
            step_id=step.id,
            executor=executor.name,
            tool=step.tool,
            args=args,
            idempotency_key=key,
            provenance=labels,
        )
    )
    if engine.journal is not None and engine.side_effecting(step):
        await engine.journal.flush()  # the intent is saved before the effect can happen


async def _carry_out(
    engine: StepRunLoop, step: Step, executor: Executor, args: dict[str, Any], ctx: StepCtx, done: StepDone
) -> StepOutcome:
    """Run the step on its executor and judge the result, again while a failed verdict has
    retries left (``done`` carries the last attempt's output and verdict as they come)."""
    retries = engine.retries_on_fail(step)
    while True:
        if engine.telemetry is None:
            done.output = await executor.run(step, args, ctx)
        else:
            with engine.telemetry.step(step.id):
                done.output = await executor.run(step, args, ctx)
        if executor.kind == "model":  # a tool step's output was checked where the tool was called
            limit = engine.config.limits.max_output_chars
            problem = json_problem(done.output, max_chars=limit, where="output")
            if problem is not None:
                message = f"the step's result cannot be kept: {problem.where}: {problem.message}"
                raise StepFailure(StepError(kind="invalid_output", message=message, problems=(problem,)))
        acceptance = engine.config.acceptance
        done.verdict = (
            await acceptance.verdict(step, done.output, ctx, providers=engine.config.providers)
            if acceptance.checks_anything(step)
            else PASSED
        )
        done.confidence = ctx.confidence
        if done.verdict is None or done.verdict.passed or retries <= 0:
            return StepOutcome(
                output=done.output, verdict=done.verdict, attempts=ctx.attempts, confidence=done.confidence
            )
        retries -= 1
        if step.tool is not None:  # the step's tool is called again: that call is checked like any other
            engine.budget.check_tool_call(engine.state, engine.clock())
        error = _refused(done.verdict)
        engine.emit(
            StepAttemptFailed(at=engine.now(), step_id=step.id, attempt=ctx.attempts, error=error, retry_in=0.0)
        )
        ctx.attempts += 1
        ctx.confidence = None


class _Held(Exception):
    """The step's call was cut off with its effect uncertain, and the step is held for a human,
    for this reason (as a recorded run's log gives it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _held_because(step: Step, uncertain: EffectUncertain) -> str:
    return (
        f"effect uncertain: {uncertain.detail} while {step.id} ({step.tool or step.executor}) was running, "
        "and its effect is not safe to repeat: retry, skip, or mark done"
    )


async def _hold(engine: StepRunLoop, step: Step, reason: str) -> str:
    """Hold ``step`` for a human after its call's effect became uncertain; the question's id."""
    approval_id = engine.new_id()
    await engine.world.turn(lambda e: isinstance(e, ApprovalRequested) and e.step_id == step.id)
    engine.emit(
        ApprovalRequested(
            at=engine.now(),
            approval_id=approval_id,
            subject="effect",
            step_id=step.id,
            plan_version=engine.state.steps[step.id].plan_version,
            reason=reason,
            rule="effect_uncertain",
            args=engine.state.steps[step.id].args,
        )
    )
    engine.emit(StepHeld(at=engine.now(), step_id=step.id, approval_id=approval_id, reason=reason))
    if engine.journal is not None:
        await engine.journal.flush()  # the question is saved before anyone is asked
    return approval_id


def _refused(verdict: Verdict) -> StepError:
    reasons = "; ".join(f"{c.name}: {c.detail}" for c in verdict.failures)
    return StepError(kind="acceptance", message=f"acceptance checks failed: {reasons}")


def _ended(outcome: StepOutcome, done: StepDone, ctx: StepCtx) -> None:
    """The step ended as ``outcome`` says (a record's: every recorded attempt at once)."""
    done.output, done.verdict, done.attempts = outcome.output, outcome.verdict, outcome.attempts
    done.confidence = outcome.confidence
    ctx.attempts = outcome.attempts
    if outcome.held is not None:
        raise _Held(outcome.held)
    if outcome.violations and outcome.error is not None and outcome.error.kind == "untrusted":
        raise TrustRefused(outcome.violations)
    if outcome.budget is not None:
        raise outcome.budget
    if outcome.error is not None and outcome.error.kind != "acceptance":
        raise StepFailure(outcome.error)
