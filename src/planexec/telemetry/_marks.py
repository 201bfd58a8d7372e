"""The marks events leave on spans that are already open: a span event, or attributes, on the run's
span, the planning round's, a step's or a model call's. Each kind's mark is one function here; the
spans that events open and close are in :mod:`planexec.telemetry._fold`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from planexec.log import (
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    InformationAdded,
    ModelAttemptFailed,
    PlannerOutputRejected,
    PlanRecalled,
    RunStarted,
    StallDetected,
    StepAttemptFailed,
    StepHeld,
    StepRequeued,
    StepStreamed,
    ToolProgress,
    ToolsChanged,
)
from planexec.telemetry._names import ERROR_TYPE, INPUT_MESSAGES

if TYPE_CHECKING:
    from planexec.telemetry._fold import SpanFold

__all__ = ["MARKS", "MAX_NAMES"]

MAX_NAMES = 100
"""The most names a list on a span holds (the tools an MCP server added or removed)."""


# -- on a step's span ------------------------------------------------------------------------


def _attempt_failed(fold: SpanFold, event: StepAttemptFailed) -> None:
    fold.on_step(
        event.step_id,
        "planexec.retry",
        {
            "planexec.step.attempt": event.attempt,
            ERROR_TYPE: event.error.kind,
            "planexec.error": fold.values.text(event.error.message),
            "planexec.retry_in": event.retry_in if event.retry_in is not None else -1.0,
        },
    )


def _progress(fold: SpanFold, event: ToolProgress) -> None:
    attrs: dict[str, Any] = {"planexec.progress": event.progress}
    if event.total is not None:
        attrs["planexec.progress.total"] = event.total
    fold.on_step(event.step_id, "planexec.progress", attrs)


# -- on the planning round's span --------------------------------------------------------------


def _output_rejected(fold: SpanFold, event: PlannerOutputRejected) -> None:
    if fold.round is not None:
        problems = "; ".join(str(p) for p in event.problems)
        fold.round.add_event(
            "planexec.plan_refused",
            {"planexec.attempt": event.attempt, "planexec.problems": fold.values.text(problems)},
        )


def _step_streamed(fold: SpanFold, event: StepStreamed) -> None:
    if fold.round is not None:
        fold.round.add_event("planexec.step_streamed", {"planexec.step.id": fold.values.name(event.step.id)})


# -- on a model call's span --------------------------------------------------------------------


def _model_attempt_failed(fold: SpanFold, event: ModelAttemptFailed) -> None:
    span = trace.get_current_span()  # the call's own span, in the task making the call
    if span.is_recording():
        attrs: dict[str, Any] = {"planexec.attempt": event.attempt, "planexec.error": fold.values.text(event.error)}
        if event.status is not None:
            attrs["http.response.status_code"] = event.status
        if event.retry_in is not None:
            attrs["planexec.retry_in"] = event.retry_in
        span.add_event("planexec.model_retry", attrs)


# -- on the run's span -------------------------------------------------------------------------


def _approval_requested(fold: SpanFold, event: ApprovalRequested) -> None:
    if fold.run is None:
        return
    attrs: dict[str, Any] = {"planexec.approval.id": event.approval_id, "planexec.approval.subject": event.subject}
    if event.step_id is not None:
        attrs["planexec.step.id"] = fold.values.name(event.step_id)
    if event.reason:
        attrs["planexec.reason"] = fold.values.text(event.reason)
    fold.run.add_event("planexec.approval.requested", attrs)


def _approval_decided(fold: SpanFold, event: ApprovalDecided) -> None:
    if fold.run is None:
        return
    attrs: dict[str, Any] = {
        "planexec.approval.id": event.approval_id,
        "planexec.approval.approved": event.approved,
        "planexec.approval.by": fold.values.text(event.by),
    }
    if event.choice is not None:
        attrs["planexec.approval.choice"] = event.choice
    if event.reason:
        attrs["planexec.reason"] = fold.values.text(event.reason)
    fold.run.add_event("planexec.approval.decided", attrs)


def _budget_exhausted(fold: SpanFold, event: BudgetExhaustedEvent) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.budget_exhausted",
            {
                "planexec.budget": event.budget,
                "planexec.budget.limit": float(event.limit),
                "planexec.budget.used": float(event.used),
                "planexec.budget.needed": float(event.needed),
            },
        )


def _stall(fold: SpanFold, event: StallDetected) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.stall", {"planexec.stall.rule": event.rule, "planexec.detail": fold.values.text(event.detail)}
        )


def _plan_recalled(fold: SpanFold, event: PlanRecalled) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.plan_recalled",
            {
                "planexec.memory.entry": fold.values.name(event.entry_id),
                "planexec.memory.mode": event.mode,
                "planexec.memory.similarity": float(event.similarity),
            },
        )


def _tools_changed(fold: SpanFold, event: ToolsChanged) -> None:
    if fold.run is not None:
        added = [str(spec.get("name", "")) for spec in event.tools]
        fold.run.add_event(
            "planexec.tools_changed",
            {
                "planexec.tools.added": [fold.values.name(n) for n in added[:MAX_NAMES]],
                "planexec.tools.removed": [fold.values.name(n) for n in event.removed[:MAX_NAMES]],
            },
        )


def _information(fold: SpanFold, event: InformationAdded) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.information",
            {"planexec.by": fold.values.text(event.by), "planexec.constraint": event.constraint},
        )


def _answer_reviewed(fold: SpanFold, event: AnswerReviewed) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.answer_reviewed", {"planexec.passed": event.passed, "planexec.reviewer": event.reviewer}
        )


def _step_held(fold: SpanFold, event: StepHeld) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.step_held",
            {"planexec.step.id": fold.values.name(event.step_id), "planexec.approval.id": event.approval_id},
        )


def _step_requeued(fold: SpanFold, event: StepRequeued) -> None:
    if fold.run is not None:
        fold.run.add_event(
            "planexec.step_requeued",
            {"planexec.step.id": fold.values.name(event.step_id), "planexec.reason": fold.values.text(event.reason)},
        )


def _run_started(fold: SpanFold, event: RunStarted) -> None:
    run = fold.run
    if run is None:
        return
    run.set_attributes(
        {"planexec.policy": event.policy, "planexec.replan": event.replan, "planexec.tools": list(event.tools)}
    )
    if fold.capture:
        run.set_attribute(
            INPUT_MESSAGES,
            fold.values.content([{"role": "user", "parts": [{"type": "text", "content": event.goal}]}]),
        )


MARKS: dict[type, Callable[[SpanFold, Any], None]] = {
    StepAttemptFailed: _attempt_failed,
    ToolProgress: _progress,
    PlannerOutputRejected: _output_rejected,
    StepStreamed: _step_streamed,
    ModelAttemptFailed: _model_attempt_failed,
    ApprovalRequested: _approval_requested,
    ApprovalDecided: _approval_decided,
    BudgetExhaustedEvent: _budget_exhausted,
    StallDetected: _stall,
    PlanRecalled: _plan_recalled,
    ToolsChanged: _tools_changed,
    InformationAdded: _information,
    AnswerReviewed: _answer_reviewed,
    StepHeld: _step_held,
    StepRequeued: _step_requeued,
    RunStarted: _run_started,
}
"""Each event class's mark on the spans already open (a class not here leaves none)."""
