"""What the HTTP API returns about runs and questions: JSON values folded from a run's log as the
store keeps it (secrets redacted before they were written), the same way the CLI and the replay
read it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from planexec.log import Event, PlanProposed, RunStarted, RunState, StepRecord
from planexec.plan import Plan
from planexec.views import ForecastView, QuestionView, forecast_view, question_view

__all__ = [
    "RunDetail",
    "RunSummary",
    "agent_of",
    "detail",
    "pending_summary",
    "summary",
]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class Stop(_View):
    kind: str
    detail: str
    code: str | None


class StepCounts(_View):
    # the current plan's steps: how many, how many succeeded, how many failed
    total: int
    finished: int
    failed: int


class RunSummary(_View):
    """A run in a listing."""

    run_id: str
    agent: str | None
    goal: str
    status: str
    """``running`` (or waiting for a worker), ``waiting`` (for a human) or ``finished``."""
    stop: Stop | None
    cost: float
    started_at: float
    updated_at: float
    duration: float | None
    steps: StepCounts
    questions: int
    """Questions it waits for."""


class StepError(_View):
    kind: str
    message: str


class StepRecordView(_View):
    """A record of a step in the run (a step a later plan version replaced is ``superseded``)."""

    id: str
    description: str
    tool: str | None
    executor: str | None
    args: Any
    depends_on: list[str]
    status: str
    output: Any
    error: StepError | None
    attempts: int
    started_at: float | None
    finished_at: float | None
    superseded: bool


class PlanVersionDiff(_View):
    """Step ids added, removed and changed against the version before."""

    added: list[str]
    removed: list[str]
    changed: list[str]


class PlanVersion(_View):
    """A plan version of the run, with its changes from the version before and its cost forecast."""

    version: int
    author: str
    reason: str
    trigger: str
    steps: list[dict[str, Any]]
    diff: PlanVersionDiff
    forecast: ForecastView | None = None


class Usage(_View):
    model_calls: int
    input_tokens: int
    output_tokens: int
    tool_calls: int
    cost: float


class RunDetail(_View):
    """A run with its plans, steps (superseded ones too), usage and open questions."""

    run_id: str
    agent: str | None
    goal: str
    status: str
    stop: Stop | None
    cost: float
    started_at: float
    updated_at: float
    duration: float | None
    answer: str | None
    constraints: list[str]
    plans: list[PlanVersion]
    steps: list[StepRecordView]
    usage: Usage
    questions: list[QuestionView]
    """The questions it waits for, each with everything a human needs to answer it."""
    events: int
    """The length of its log."""


def agent_of(first: Event | None) -> str | None:
    """The name of the agent a server ran the run with (None for runs started elsewhere)."""
    if not isinstance(first, RunStarted):
        return None
    served = first.config.get("serve")
    name = served.get("agent") if isinstance(served, dict) else None
    return name if isinstance(name, str) else None


def summary(state: RunState, agent: str | None) -> RunSummary:
    stop = state.stop
    plan = state.plan
    # the steps of the current plan: a step a patch dropped or replaced is not one of them
    if plan is not None:
        records = [state.steps[s.id] for s in plan.steps if s.id in state.steps]
    else:
        records = list(state.steps.values())
    return RunSummary(
        run_id=state.run_id,
        agent=agent,
        goal=state.goal,
        status=state.status,
        stop=None if stop is None else Stop(kind=stop.kind, detail=stop.detail, code=stop.code),
        cost=state.cost,
        started_at=state.started_at,
        updated_at=state.last_at or state.started_at,
        duration=None if state.finished_at is None else max(0.0, state.finished_at - state.started_at),
        steps=StepCounts(
            total=len(plan.steps) if plan is not None else len(records),
            finished=sum(1 for r in records if r.status == "succeeded"),
            failed=sum(1 for r in records if r.status == "failed"),
        ),
        questions=len(state.pending_approvals),
    )


def pending_summary(run_id: str, agent: str, goal: str, accepted_at: float, *, failed: str | None = None) -> RunSummary:
    """A run accepted but not begun: waiting for a worker, or (``failed``) unable to begin."""
    return RunSummary(
        run_id=run_id,
        agent=agent,
        goal=goal,
        status="finished" if failed else "running",
        stop=None if failed is None else Stop(kind="error", detail=failed, code="start"),
        cost=0.0,
        started_at=accepted_at,
        updated_at=accepted_at,
        duration=None,
        steps=StepCounts(total=0, finished=0, failed=0),
        questions=0,
    )


def _step(rec: StepRecord, *, superseded: bool) -> StepRecordView:
    step = rec.step
    error = rec.error
    return StepRecordView(
        id=step.id,
        description=step.description,
        tool=step.tool,
        executor=rec.executor or step.executor,
        args=rec.args if rec.args is not None else step.args,
        depends_on=list(step.depends_on),
        status=rec.status,
        output=rec.output,
        error=None if error is None else StepError(kind=str(error.kind), message=error.message),
        attempts=rec.attempts,
        started_at=rec.started_at,
        finished_at=rec.finished_at,
        superseded=superseded,
    )


def _plans(state: RunState, plans: Sequence[Plan], events: Sequence[Event]) -> list[PlanVersion]:
    triggers = {e.plan.version: e.trigger for e in events if isinstance(e, PlanProposed)}
    views = []
    before: dict[str, Any] = {}
    for plan in plans:
        steps = {s.id: s.model_dump(mode="json") for s in plan.steps}
        views.append(
            PlanVersion(
                version=plan.version,
                author=plan.author,
                reason=plan.reason,
                trigger=triggers.get(plan.version, ""),
                steps=list(steps.values()),
                diff=PlanVersionDiff(
                    added=[i for i in steps if i not in before],
                    removed=[i for i in before if i not in steps],
                    changed=[i for i in steps if i in before and before[i] != steps[i]],
                ),
                forecast=forecast_view(state.forecasts.get(plan.version), state.over_forecast.get(plan.version, ())),
            )
        )
        before = steps
    return views


def detail(state: RunState, events: Sequence[Event]) -> RunDetail:
    base = summary(state, agent_of(events[0] if events else None))
    records = [*(_step(r, superseded=True) for r in state.superseded)]
    records += [_step(r, superseded=False) for r in state.steps.values()]
    return RunDetail(
        **base.model_dump(exclude={"steps", "questions"}),
        answer=state.answer,
        constraints=list(state.constraints),
        plans=_plans(state, state.plans, events),
        steps=records,
        usage=Usage(
            model_calls=state.model_calls,
            input_tokens=state.usage.input_tokens,
            output_tokens=state.usage.output_tokens,
            tool_calls=state.tool_calls,
            cost=state.cost,
        ),
        questions=[question_view(state, r) for r in state.pending_approvals],
        events=len(events),
    )


def detail_of_summary(base: RunSummary) -> RunDetail:
    """The detail of a run that has no log yet (accepted, waiting for a worker; or one that could
    not begin): what its summary says, no plan, no step."""
    return RunDetail(
        **base.model_dump(exclude={"steps", "questions"}),
        answer=None,
        constraints=[],
        plans=[],
        steps=[],
        usage=Usage(model_calls=0, input_tokens=0, output_tokens=0, tool_calls=0, cost=0.0),
        questions=[],
        events=0,
    )
