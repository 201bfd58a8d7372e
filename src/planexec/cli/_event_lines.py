"""One plain line per event: what ``planexec run --plain`` and the replay print as a run goes.

Each event kind's line is made by a function of its own, found by the event's class; a kind with
none is shown by its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from planexec._util.plural import counted
from planexec.log import (
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    InformationAdded,
    ModelCalled,
    PlanForecast,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    PlanRecalled,
    RunFinished,
    RunResumed,
    RunStarted,
    RunState,
    RunSuspended,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    ToolsChanged,
)
from planexec.plan import render_text
from planexec.views import forecast_view

__all__ = ["cut", "describe_event", "seconds"]


def cut(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (the last an ellipsis when cut)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def seconds(value: float) -> str:
    return f"{value:.2f}s"


def describe_event(event: Event, state: RunState) -> str:
    """A one-line, human-readable account of ``event``."""
    describe = _LINES.get(type(event))
    return describe(event, state) if describe is not None else event.kind


def _run_started(event: RunStarted, state: RunState) -> str:
    caps = ", ".join(f"{k} {v}" for k, v in event.budget.items() if v is not None)
    return f"run {event.run_id} started ({event.policy}, replan {event.replan}; budget: {caps}): {event.goal}"


def _model_called(event: ModelCalled, state: RunState) -> str:
    head = f"{event.role} model {event.model} [{event.purpose}]"
    if event.step_id:
        head += f" for {event.step_id}"
    if event.error is not None:
        return f"{head} failed after {seconds(event.duration)}: {event.error}"
    u = event.usage
    return (
        f"{head}: {u.input_tokens:,} in / {u.output_tokens:,} out tokens, ${event.cost:.4f}, {seconds(event.duration)}"
    )


def _planning_started(event: PlanningStarted, state: RunState) -> str:
    return f"planner asked ({event.trigger}): {event.why}"


def _planner_output_rejected(event: PlannerOutputRejected, state: RunState) -> str:
    return f"planner output rejected (attempt {event.attempt}): " + "; ".join(map(str, event.problems))


def _plan_proposed(event: PlanProposed, state: RunState) -> str:
    plan = event.plan
    line = f"plan v{plan.version} by {plan.author} ({event.trigger}), {counted(len(plan.steps), 'step')}"
    if plan.reason:
        line += f": {plan.reason}"
    if event.cancelled:
        line += f" [cancelled: {', '.join(event.cancelled)}]"
    return line


def _approval_requested(event: ApprovalRequested, state: RunState) -> str:
    if event.subject == "question":
        return f"the planner asks the user: {event.reason} (id {event.approval_id})"
    if event.subject == "escalation":
        return f"escalated to a human ({event.code}): {event.reason} (id {event.approval_id})"
    what = {
        "step": f"step {event.step_id}",
        "plan": f"plan v{event.plan_version}",
        "effect": f"the effect of step {event.step_id}",
        "review": f"a review of step {event.step_id}'s result",
        "answer": "a review of the final answer",
        "budget": f"raising the {event.budget} cap",
    }.get(event.subject, event.subject)
    return f"approval asked for {what}: {event.reason} (id {event.approval_id})"


def _approval_decided(event: ApprovalDecided, state: RunState) -> str:
    verdict = "approved" if event.approved else "rejected"
    if event.choice is not None:
        verdict += f" ({event.choice})"
    if event.edited_plan is not None:
        verdict += " with an edited plan"
    if event.text is not None:
        verdict += f" with {event.text!r}"
    if event.budget:
        verdict += " raising " + ", ".join(
            f"{k} to {'no cap' if v is None else f'{v:g}'}" for k, v in event.budget.items()
        )
    failed = [r.item for r in event.checklist if not r.passed]
    if failed:
        verdict += f" (failed: {', '.join(failed)})"
    return f"approval {verdict} by {event.by}" + (f": {event.reason}" if event.reason else "")


def _information_added(event: InformationAdded, state: RunState) -> str:
    return f"{'constraint' if event.constraint else 'information'} from {event.by}: {event.text}"


def _answer_reviewed(event: AnswerReviewed, state: RunState) -> str:
    verdict = "passed" if event.passed else "refused: " + "; ".join(event.problems)
    return f"final answer reviewed ({event.reviewer}): {verdict}"


def _step_requeued(event: StepRequeued, state: RunState) -> str:
    return f"step {event.step_id} back in the queue: {event.reason}"


def _step_held(event: StepHeld, state: RunState) -> str:
    return f"step {event.step_id} held for a human ({event.approval_id}): {event.reason}"


def _run_suspended(event: RunSuspended, state: RunState) -> str:
    return f"run suspended, waiting for {', '.join(event.approvals) or 'a human'}: {event.reason}"


def _run_resumed(event: RunResumed, state: RunState) -> str:
    return f"run resumed from its log ({counted(event.events, 'event')})"


def _step_started(event: StepStarted, state: RunState) -> str:
    where = f"tool {event.tool}" if event.tool else f"executor {event.executor}"
    return f"step {event.step_id} started ({where})"


def _step_attempt_failed(event: StepAttemptFailed, state: RunState) -> str:
    retry = f"; retry in {seconds(event.retry_in)}" if event.retry_in is not None else ""
    return f"step {event.step_id} attempt {event.attempt} failed: {event.error}{retry}"


def _tool_called(event: ToolCalled, state: RunState) -> str:
    outcome = f"failed: {event.error}" if event.error is not None else "ok"
    args = cut(render_text(event.args), 80)
    return f"  {event.step_id} called {event.tool}({args}): {outcome} in {seconds(event.duration)}"


def _step_succeeded(event: StepSucceeded, state: RunState) -> str:
    return f"step {event.step_id} done{_took(event.step_id, event.at, state)}" + _tries(event.attempts)


def _step_failed(event: StepFailed, state: RunState) -> str:
    return f"step {event.step_id} failed{_took(event.step_id, event.at, state)}: {event.error}"


def _step_cancelled(event: StepCancelled, state: RunState) -> str:
    return f"step {event.step_id} cancelled: {event.reason}"


def _budget_exhausted(event: BudgetExhaustedEvent, state: RunState) -> str:
    return f"budget {event.budget} exhausted: used {event.used:g} of {event.limit:g}"


def _stall_detected(event: StallDetected, state: RunState) -> str:
    return f"stalled ({event.rule}): {event.detail}"


def _plan_forecast(event: PlanForecast, state: RunState) -> str:
    view = forecast_view(event.forecast, event.over)
    return f"plan v{event.plan_version} forecast: {view.summary if view is not None else ''}"


def _plan_recalled(event: PlanRecalled, state: RunState) -> str:
    how = "runs it as it is" if event.mode == "direct" else f"shows it to the planner ({event.why_not_direct})"
    bound = f" with {', '.join(f'{a} → {b}' for a, b in event.bindings)}" if event.bindings else ""
    return (
        f"plan memory offers {event.entry_id} (similarity {event.similarity:.2f}){bound}: {how}; "
        f"its goal: {cut(event.goal, 80)}"
    )


def _tools_changed(event: ToolsChanged, state: RunState) -> str:
    new = ", ".join(str(t.get("name", "?")) for t in event.tools) or "none"
    gone = ", ".join(event.removed) or "none"
    return f"tools changed: new or redefined {new}; gone {gone}"


def _tool_progress(event: ToolProgress, state: RunState) -> str:
    total = f" of {event.total:g}" if event.total is not None else ""
    message = f": {event.message}" if event.message else ""
    return f"  {event.step_id} progress {event.progress:g}{total}{message}"


def _run_finished(event: RunFinished, state: RunState) -> str:
    return f"run finished: {event.stop}"


def _took(step_id: str, at: float, state: RunState) -> str:
    rec = state.steps.get(step_id)
    if rec is None or rec.started_at is None:
        return ""
    return f" in {seconds(max(0.0, at - rec.started_at))}"


def _tries(attempts: int) -> str:
    return f" after {attempts} attempts" if attempts > 1 else ""


_LINES: dict[type, Callable[[Any, RunState], str]] = {
    RunStarted: _run_started,
    ModelCalled: _model_called,
    PlanningStarted: _planning_started,
    PlannerOutputRejected: _planner_output_rejected,
    PlanProposed: _plan_proposed,
    ApprovalRequested: _approval_requested,
    ApprovalDecided: _approval_decided,
    InformationAdded: _information_added,
    AnswerReviewed: _answer_reviewed,
    StepRequeued: _step_requeued,
    StepHeld: _step_held,
    RunSuspended: _run_suspended,
    RunResumed: _run_resumed,
    StepStarted: _step_started,
    StepAttemptFailed: _step_attempt_failed,
    ToolCalled: _tool_called,
    StepSucceeded: _step_succeeded,
    StepFailed: _step_failed,
    StepCancelled: _step_cancelled,
    BudgetExhaustedEvent: _budget_exhausted,
    StallDetected: _stall_detected,
    PlanForecast: _plan_forecast,
    PlanRecalled: _plan_recalled,
    ToolsChanged: _tools_changed,
    ToolProgress: _tool_progress,
    RunFinished: _run_finished,
}
"""Each event class's line (a class not here is shown by its kind)."""
