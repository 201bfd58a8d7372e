"""What the hosted tools return: typed values folded from a run's log as the store keeps it (secrets
redacted), with a short text for hosts that read only text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec.log import RunState, StepRecord
from planexec.plan import Step
from planexec.store import RunSummary
from planexec.views import QuestionView, question_lines, question_view

__all__ = [
    "AnswerView",
    "OutcomeView",
    "QuestionView",
    "RunDetailView",
    "RunListView",
    "StepView",
    "StopView",
    "answer_view",
    "detail_view",
    "list_view",
    "outcome_view",
]

SHOWN_CHARS = 4_000
"""The most characters of one value (a step's output, a result under review) a view carries whole;
a longer one is carried as clipped JSON text."""

Decision = Literal["approve", "reject", "answer"]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class StopView(_View):
    """Why a run ended, or that it waits for a human (``kind`` is then ``waiting``)."""

    kind: str
    detail: str


class OutcomeView(_View):
    """Where a run stands after this call: its answer, why it stopped, and what it waits for."""

    run_id: str
    goal: str
    status: Literal["running", "waiting", "finished"]
    answer: str | None
    stop: StopView | None
    steps_finished: int
    steps_planned: int
    cost: float
    pending_questions: list[QuestionView]


class StepView(_View):
    """One step of the run's current plan, with its latest record."""

    id: str
    description: str
    tool: str | None
    executor: str | None
    depends_on: list[str]
    status: str
    attempts: int
    output: Any = None
    error: str | None = None


class UsageView(_View):
    """Tokens, calls and cost the run has used."""

    input_tokens: int
    output_tokens: int
    model_calls: int
    tool_calls: int
    replans: int
    cost: float


class RunDetailView(_View):
    """A run as its log tells it."""

    run_id: str
    goal: str
    constraints: list[str]
    status: Literal["running", "waiting", "finished"]
    stop: StopView | None
    answer: str | None
    plan_version: int | None
    steps: list[StepView]
    usage: UsageView
    pending_questions: list[QuestionView]
    unreadable: list[str]
    """Events of the log that could not be read (the rest is shown)."""


class RunSummaryView(_View):
    """One run of a listing."""

    run_id: str
    goal: str
    status: str
    stop_kind: str | None
    stop_detail: str | None
    cost: float
    model_calls: int
    started_at: float
    updated_at: float
    pending_questions: int


class RunListView(_View):
    """Runs in the store, newest first."""

    runs: list[RunSummaryView]


class AnswerView(_View):
    """An answer recorded in a run's log, and what the run waits for now."""

    run_id: str
    question_id: str
    decision: Decision
    status: Literal["running", "waiting", "finished"]
    pending_questions: list[QuestionView]
    ready_to_resume: bool
    """The run is suspended and waits for no other answer: ``resume_run`` goes on with it."""


def _shown(value: Any) -> Any:
    """``value`` as it is when small; else its JSON text, clipped."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= SHOWN_CHARS:
        return value
    return clip(text, SHOWN_CHARS, marker=f"... ({len(text):,} characters; the run's log has all of it)")


def _stop(state: RunState) -> StopView | None:
    if state.stop is not None:
        return StopView(kind=state.stop.kind, detail=state.stop.detail)
    if state.suspended is not None:
        return StopView(kind="waiting", detail=state.suspended.reason)
    return None


def _finished(state: RunState) -> int:
    return sum(1 for rec in state.steps.values() if rec.status in ("succeeded", "failed"))


def outcome_view(state: RunState) -> OutcomeView:
    plan = state.plan
    return OutcomeView(
        run_id=state.run_id,
        goal=state.goal,
        status=state.status,
        answer=state.answer,
        stop=_stop(state),
        steps_finished=_finished(state),
        steps_planned=len(plan.steps) if plan is not None else 0,
        cost=state.cost,
        pending_questions=[question_view(state, rec) for rec in state.pending_approvals],
    )


def _step_view(step: Step, rec: StepRecord | None) -> StepView:
    return StepView(
        id=step.id,
        description=step.description,
        tool=step.tool,
        executor=(rec.executor if rec is not None else None) or step.executor,
        depends_on=list(step.depends_on),
        status=rec.status if rec is not None else "pending",
        attempts=rec.attempts if rec is not None else 0,
        output=_shown(rec.output) if rec is not None and rec.status == "succeeded" else None,
        error=rec.error.message if rec is not None and rec.error is not None else None,
    )


def detail_view(state: RunState, unreadable: Sequence[str] = ()) -> RunDetailView:
    plan = state.plan
    return RunDetailView(
        run_id=state.run_id,
        goal=state.goal,
        constraints=list(state.constraints),
        status=state.status,
        stop=_stop(state),
        answer=state.answer,
        plan_version=plan.version if plan is not None else None,
        steps=[_step_view(s, state.steps.get(s.id)) for s in plan.steps] if plan is not None else [],
        usage=UsageView(
            input_tokens=state.usage.input_tokens,
            output_tokens=state.usage.output_tokens,
            model_calls=state.model_calls,
            tool_calls=state.tool_calls,
            replans=state.replans,
            cost=state.cost,
        ),
        pending_questions=[question_view(state, rec) for rec in state.pending_approvals],
        unreadable=list(unreadable),
    )


def list_view(summaries: Sequence[RunSummary]) -> RunListView:
    return RunListView(
        runs=[
            RunSummaryView(
                run_id=s.run_id,
                goal=s.goal,
                status=s.status,
                stop_kind=s.stop_kind,
                stop_detail=s.stop_detail,
                cost=s.cost,
                model_calls=s.model_calls,
                started_at=s.started_at,
                updated_at=s.updated_at,
                pending_questions=s.pending_approvals,
            )
            for s in summaries
        ]
    )


def answer_view(state: RunState, question_id: str, decision: Decision) -> AnswerView:
    pending = state.pending_approvals
    return AnswerView(
        run_id=state.run_id,
        question_id=question_id,
        decision=decision,
        status=state.status,
        pending_questions=[question_view(state, rec) for rec in pending],
        ready_to_resume=state.status == "waiting" and not pending,
    )


# -- the short texts ---------------------------------------------------------------------------------

TEXT_CHARS = 2_000
"""The most characters of an answer a short text quotes (the structured content has all of it)."""


def _questions_text(run_id: str, questions: Sequence[QuestionView]) -> list[str]:
    lines = [f"run {run_id} waits for {counted(len(questions), 'answer')}:"]
    for q in questions:
        lines.append("")
        lines += question_lines(q)
    lines.append("Answer with answer_question, then go on with resume_run.")
    return lines


def outcome_text(view: OutcomeView) -> str:
    if view.status == "waiting" and view.pending_questions:
        return "\n".join(_questions_text(view.run_id, view.pending_questions))
    stop = f"{view.stop.kind}: {view.stop.detail}" if view.stop is not None else view.status
    head = f"run {view.run_id} {'met its goal' if view.stop and view.stop.kind == 'goal_met' else 'stopped'} ({stop})"
    if view.status == "waiting":
        head = f"run {view.run_id} is suspended ({stop}); go on with resume_run"
    if view.answer is None:
        return head
    return f"{head}\n\n{clip(view.answer, TEXT_CHARS)}"


def detail_text(view: RunDetailView) -> str:
    stop = f" ({view.stop.kind}: {view.stop.detail})" if view.stop is not None else ""
    lines = [f"run {view.run_id}: {view.status}{stop}", f"goal: {clip(view.goal, 300)}"]
    if view.plan_version is not None:
        lines.append(f"plan v{view.plan_version}:")
        lines += [f"- {s.id} [{s.status}] {clip(s.description, 120)}" for s in view.steps]
    u = view.usage
    lines.append(
        f"usage: {counted(u.model_calls, 'model call')}, {counted(u.tool_calls, 'tool call')}, "
        f"{u.input_tokens:,} tokens in, {u.output_tokens:,} out, ${u.cost:.4f}"
    )
    if view.pending_questions:
        lines += _questions_text(view.run_id, view.pending_questions)
    if view.answer is not None:
        lines.append(f"answer: {clip(view.answer, TEXT_CHARS)}")
    lines += [f"unreadable: {line}" for line in view.unreadable]
    return "\n".join(lines)


def list_text(view: RunListView) -> str:
    if not view.runs:
        return "no runs"
    lines = [f"{counted(len(view.runs), 'run')}, newest first:"]
    for r in view.runs:
        status = r.stop_kind or r.status
        waiting = f", waits for {counted(r.pending_questions, 'answer')}" if r.pending_questions else ""
        lines.append(f"- {r.run_id} [{status}{waiting}] {clip(r.goal, 100)}")
    return "\n".join(lines)


def answer_text(view: AnswerView) -> str:
    head = f"run {view.run_id}: {view.decision} recorded for {view.question_id}"
    if view.ready_to_resume:
        return f"{head}; it waits for nothing else: go on with resume_run"
    if view.pending_questions:
        return "\n".join([head, *_questions_text(view.run_id, view.pending_questions)])
    return f"{head}; the run is {view.status}"
