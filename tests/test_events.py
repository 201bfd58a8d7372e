"""Events: every kind round-trips, old logs keep loading, and folding the log gives the run's state."""

from __future__ import annotations

import itertools
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from planexec import (
    Agent,
    ApprovalRequest,
    Approvals,
    Budget,
    Plan,
    Problem,
    RetryPolicy,
    Run,
    RunContext,
    Step,
    StopReason,
    ToolError,
    TransientToolError,
    tool,
)
from planexec.executor import CheckResult, StepError, Verdict
from planexec.log import (
    EVENT_SCHEMA_VERSION,
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    ChecklistResult,
    Event,
    Forecast,
    InformationAdded,
    ModelAttemptFailed,
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
    StepStreamed,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    ToolsChanged,
    dump_event,
    load_event,
)
from planexec.models import ModelRequest, ModelResponse, ToolCall, Usage
from planexec.plan import NonEmpty
from planexec.testing import ScriptedModel, tool_calls
from planexec.trust import Provenance, Source, Violation

FIXTURES = Path(__file__).parent / "fixtures"


def _kept(new: Any, old: Any) -> bool:
    """Whether ``new`` (an event dumped now) keeps every field of ``old`` (as an older version dumped
    it) with the same value; fields added since are left out of the comparison, at any depth."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _kept(new[k], v) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(map(_kept, new, old))
    return bool(new == old)


_PLAN = Plan(
    version=2,
    steps=(
        Step(id="a", description="fetch", tool="fetch", args={"q": "x"}, checks=(NonEmpty(),)),
        Step(id="b", description="sum", executor="model", args={"rows": "${a}"}, depends_on=("a",), confidence=0.4),
    ),
    author="human",
    reason="edited",
)
_ERROR = StepError(
    kind="invalid_arguments",
    message="bad",
    problems=(Problem(code="invalid_argument", where="q", message="not a string"),),
)
_VERDICT = Verdict(passed=False, checks=(CheckResult(name="non_empty", passed=False, detail="the output is empty"),))

EXAMPLES: dict[str, Event] = {
    "run_started": RunStarted(
        at=1.5,
        run_id="r1",
        goal="g",
        constraints=("c1", "c2"),
        policy="step",
        replan="never",
        budget={"model_calls": 3, "cost": 0.5, "steps": None},
        tools=("fetch", "sum"),
    ),
    "model_attempt_failed": ModelAttemptFailed(
        at=1.5,
        role="planner",
        purpose="planner.propose",
        model="openai:gpt-4o-mini",
        attempt=1,
        status=429,
        error="openai:gpt-4o-mini answered 429: slow down",
        retry_in=2.5,
        retry_after=2.0,
    ),
    "model_called": ModelCalled(
        at=2.0,
        role="executor",
        purpose="executor",
        model="scripted",
        step_id="b",
        request_chars=120,
        response=ModelResponse(
            text="t",
            tool_calls=(ToolCall(id="call_1", name="fetch", arguments={"q": "y", "n": [1, 2]}),),
            parsed={"k": [1, None]},
            usage=Usage(input_tokens=10, output_tokens=2, cached_input_tokens=4, requests=1),
            cost=0.25,
            model="m",
            finish_reason="tool_calls",
            refusal=None,
        ),
        usage=Usage(input_tokens=10, output_tokens=2, cached_input_tokens=4, requests=1),
        cost=0.25,
        duration=0.125,
    ),
    "planning_started": PlanningStarted(at=2.5, trigger="failure", why="step a failed"),
    "planner_output_rejected": PlannerOutputRejected(
        at=3.0, attempt=2, problems=(Problem(code="cycle", where="step 'a'", message="a → a"),)
    ),
    "plan_proposed": PlanProposed(at=4.0, plan=_PLAN, trigger="human", cancelled=("z",)),
    "approval_requested": ApprovalRequested(
        at=5.0, approval_id="ap1", subject="step", step_id="b", plan_version=2, reason="sensitive tool"
    ),
    "approval_decided": ApprovalDecided(at=6.0, approval_id="ap1", approved=False, by="ops", reason="no"),
    "step_started": StepStarted(at=7.0, step_id="a", executor="tools", tool="fetch", args={"q": "x", "deep": {"n": 1}}),
    "step_attempt_failed": StepAttemptFailed(at=8.0, step_id="a", attempt=1, error=_ERROR, retry_in=0.4),
    "tool_called": ToolCalled(
        at=9.0,
        step_id="b",
        call_id="call_1",
        tool="fetch",
        args={"q": "y"},
        output=[{"row": 1}],
        error=None,
        attempts=2,
        duration=0.5,
    ),
    "tool_progress": ToolProgress(at=9.5, step_id="b", progress=3, total=10, message="rows", call_id="call_1"),
    "plan_recalled": PlanRecalled(
        at=9.7,
        entry_id="m-0123456789abcdef",
        goal="count the words of report.txt",
        similarity=0.91,
        mode="direct",
        steps=(Step(id="c", description="count", tool="word_count", args={"path": "notes.txt"}),),
        answer="{{c}} words",
        bindings=(("report.txt", "notes.txt"),),
    ),
    "plan_forecast": PlanForecast(
        at=9.8,
        plan_version=2,
        forecast=Forecast(
            planner_calls=(1, 3),
            executor_calls=(2, 12),
            tool_calls=(4, 4),
            input_tokens=(3_000, 21_000),
            output_tokens=(400, 5_200),
            cost=(0.0125, 0.081),
            unpriced=("scripted",),
            basis=("planner requests of about 2,400 characters, as this run's",),
        ),
        over=("cost",),
    ),
    "tools_changed": ToolsChanged(
        at=9.75,
        tools=({"name": "extra", "description": "new", "parameters": {"type": "object"}, "side_effect": False},),
        removed=("old",),
    ),
    "step_succeeded": StepSucceeded(
        at=10.0, step_id="a", output={"rows": [1, 2]}, verdict=Verdict(passed=True), attempts=2
    ),
    "step_failed": StepFailed(
        at=11.0, step_id="b", error=_ERROR, verdict=_VERDICT, output="", attempts=3, started=False
    ),
    "step_cancelled": StepCancelled(at=12.0, step_id="c", reason="obsolete after plan v3"),
    "budget_exhausted": BudgetExhaustedEvent(at=13.0, budget="cost", limit=1.0, used=1.25),
    "stall_detected": StallDetected(at=14.0, rule="identical_patch", detail="same patch"),
    "step_streamed": StepStreamed(at=14.45, step=_PLAN.steps[0], plan_version=3),
    "run_suspended": RunSuspended(at=14.5, reason="waiting for a human", approvals=("ap1", "ap2")),
    "run_resumed": RunResumed(at=14.6, events=40),
    "step_requeued": StepRequeued(at=14.7, step_id="a", reason="interrupted; it has no side effect"),
    "step_held": StepHeld(at=14.8, step_id="b", approval_id="ap3", reason="effect uncertain"),
    "information_added": InformationAdded(at=14.9, text="use metric units", by="ops", constraint=True),
    "answer_reviewed": AnswerReviewed(
        at=14.95, answer="42", passed=False, reviewer="human", problems=("cites a source: none given",)
    ),
    "run_finished": RunFinished(
        at=15.0, stop=StopReason(kind="budget_exhausted", detail="cost", budget="cost"), answer=None
    ),
}

NEW_IN_V5: list[Event] = [
    ApprovalRequested(at=1.0, approval_id="q1", subject="question", reason="Which city?"),
    ApprovalRequested(at=1.0, approval_id="e1", subject="escalation", reason="unknown tool", code="unknown_tool"),
    ApprovalRequested(
        at=1.0,
        approval_id="r1",
        subject="review",
        step_id="a",
        plan_version=1,
        reason="failed",
        output=3,
        verdict=_VERDICT,
    ),
    ApprovalRequested(
        at=1.0, approval_id="a1", subject="answer", reason="review", output="42", checklist=("ok", "cited")
    ),
    ApprovalDecided(at=2.0, approval_id="q1", approved=True, text="Oslo"),
    ApprovalDecided(at=2.0, approval_id="e1", approved=True, choice="guidance", text="use fetch"),
    ApprovalDecided(
        at=2.0,
        approval_id="a1",
        approved=False,
        checklist=(ChecklistResult(item="ok", passed=True), ChecklistResult(item="cited", passed=False, note="no")),
    ),
    StepSucceeded(at=3.0, step_id="a", output="x", verdict=Verdict(passed=True), confidence=0.75),
    PlanningStarted(at=4.0, trigger="information", why="new information"),
    RunFinished(at=5.0, stop=StopReason(kind="escalated", code="answer_rejected", detail="refused twice")),
]


@pytest.mark.parametrize("event", NEW_IN_V5, ids=lambda e: e.kind)
def test_what_version_5_added_round_trips(event: Event) -> None:
    loaded = load_event(json.loads(json.dumps(dump_event(event))))
    assert loaded == event


def _event_classes() -> list[Any]:
    union = typing.get_args(Event)[0]
    return list(typing.get_args(union))


def _load_log(path: Path) -> list[Event]:
    return [load_event(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- round trips ---------------------------------------------------------------------------------


def test_every_event_kind_has_an_example() -> None:
    kinds = {cls.__dataclass_fields__["kind"].default for cls in _event_classes()}
    assert kinds == set(EXAMPLES)
    for kind, event in EXAMPLES.items():
        assert event.kind == kind


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_event_round_trip(kind: str) -> None:
    event = EXAMPLES[kind]
    dumped = dump_event(event)
    assert dumped["v"] == EVENT_SCHEMA_VERSION == 14
    assert dumped["event"]["kind"] == kind
    text = json.dumps(dumped, ensure_ascii=False)
    loaded = load_event(json.loads(text))
    assert type(loaded) is type(event)
    assert loaded == event
    assert dump_event(loaded) == dumped


def test_events_are_frozen_and_keyword_only() -> None:
    event = EXAMPLES["step_cancelled"]
    with pytest.raises(AttributeError):
        setattr(event, "reason", "x")  # noqa: B010 - assigning through setattr on purpose
    make: Any = StepCancelled
    with pytest.raises(TypeError):
        make("step_cancelled", 1.0, "c", "why")


@pytest.mark.parametrize("envelope", [{"v": 99, "event": {}}, {"v": 0}, {"event": {"kind": "run_finished"}}, {}])
def test_unknown_version_is_refused(envelope: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="version"):
        load_event(envelope)


def test_future_version_of_a_valid_event_is_refused() -> None:
    dumped = dump_event(EXAMPLES["stall_detected"])
    dumped["v"] = EVENT_SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="unknown event schema version"):
        load_event(dumped)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic's message
        load_event({"v": 1, "event": {"kind": "step_teleported", "at": 1.0}})


# -- the version 1 fixture log keeps loading ----------------------------------------------------


def test_v1_fixture_loads() -> None:
    events = _load_log(FIXTURES / "events_v1.jsonl")
    assert [e.kind for e in events] == [
        "run_started",
        "model_called",
        "plan_proposed",
        "step_started",
        "step_attempt_failed",
        "step_succeeded",
        "step_started",
        "step_failed",
        "model_called",
        "plan_proposed",
        "step_started",
        "step_succeeded",
        "model_called",
        "run_finished",
    ]
    # a version 1 event is dumped as the current version, its fields unchanged
    for line, event in zip(
        (FIXTURES / "events_v1.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)["event"]
        new = dump_event(event)
        assert new["v"] == EVENT_SCHEMA_VERSION
        assert _kept(new["event"], old)
        assert load_event(new) == event


def test_v1_fixture_folds_to_the_expected_state() -> None:
    state = RunState.fold(_load_log(FIXTURES / "events_v1.jsonl"))

    assert state.run_id == "run-v1-fixture"
    assert state.goal == "Report the weather in Oslo"
    assert state.constraints == ("metric units",)
    assert (state.policy, state.replan) == ("upfront", "on_failure")
    assert state.budget["model_calls"] == 10
    assert state.budget["replans"] == 3
    assert state.tools == ("fetch_weather", "format_report")
    assert state.started_at == 1700000000.0
    assert state.finished_at == 1700000004.1

    assert [p.version for p in state.plans] == [1, 2]
    assert state.plan is not None
    assert state.plan.ids == ("s1", "s3")
    assert state.plan.reason == "use a known style"

    assert {sid: rec.status for sid, rec in state.steps.items()} == {
        "s1": "succeeded",
        "s2": "failed",
        "s3": "succeeded",
    }
    s1, s2, s3 = state.steps["s1"], state.steps["s2"], state.steps["s3"]
    assert s1.attempts == 2
    assert [e.kind for e in s1.attempt_errors] == ["transient"]
    assert s1.plan_version == 1
    assert s1.duration == pytest.approx(1.0)
    assert s2.error == StepError(kind="tool_error", message="format_report: unknown style 'haiku'")
    assert s2.args == {"weather": {"temp_c": 21, "sky": "clear"}, "style": "haiku"}
    assert s2.step.confidence == 0.9
    assert s3.plan_version == 2
    assert s3.executor == "tools"
    assert state.superseded == []

    assert state.outputs == {"s1": {"temp_c": 21, "sky": "clear"}, "s3": "Oslo: 21 °C, clear"}
    assert state.usage == Usage(input_tokens=875, output_tokens=82, cached_input_tokens=100, requests=3)
    assert state.cost == pytest.approx(0.0035)
    assert state.model_calls == 3
    assert state.tool_calls == 4  # three steps started, one retry
    assert state.steps_started == 3
    assert state.replans == 1
    assert state.rounds_since_progress == 0
    assert state.repairs == 0
    assert list(state.failed_calls.values()) == [1]
    assert state.pending_approvals == []
    assert state.stalls == []
    assert state.budget_hit is None
    assert state.stop == StopReason(kind="goal_met", detail="the planner gave the final answer")
    assert state.answer == "It is 21 °C and clear in Oslo."
    assert state.finished
    assert state.events == 14


def test_fold_is_incremental() -> None:
    events = _load_log(FIXTURES / "events_v1.jsonl")
    state = RunState()
    for e in events:
        state.apply(e)
    assert state == RunState.fold(events)
    partial = RunState.fold(events[:8])
    assert not partial.finished
    assert partial.steps["s2"].status == "failed"
    assert partial.replans == 0


def test_fold_of_patches_keeps_finished_work_and_supersedes_the_rest() -> None:
    def s(sid: str, description: str = "", *deps: str) -> Step:
        return Step(id=sid, description=description or sid, tool="t", depends_on=deps)

    b1, b2 = s("b", "first b", "a"), s("b", "second b", "a")
    events: list[Event] = [
        RunStarted(at=0.0, run_id="r", goal="g", budget={}),
        PlanProposed(at=1.0, plan=Plan(version=1, steps=(s("a"), b1, s("c")))),
        StepStarted(at=2.0, step_id="a", executor="tools", tool="t", args={}),
        StepSucceeded(at=3.0, step_id="a", output=1, verdict=Verdict(passed=True)),
        StepStarted(at=4.0, step_id="c", executor="tools", tool="t", args={}),
        StepCancelled(at=5.0, step_id="c", reason="obsolete after plan v2"),
        PlanProposed(at=5.0, plan=Plan(version=2, steps=(s("a"), b2, s("d"))), trigger="failure", cancelled=("c",)),
        PlanProposed(at=6.0, plan=Plan(version=3, steps=(s("a"), s("d")), author="human"), trigger="human"),
        StepStarted(at=7.0, step_id="d", executor="tools", tool="t", args={}),
        RunFinished(at=8.0, stop=StopReason(kind="cancelled", detail="the run was cancelled")),
    ]
    state = RunState.fold(events)
    assert {sid: (r.status, r.plan_version) for sid, r in state.steps.items()} == {
        "a": ("succeeded", 1),
        "c": ("cancelled", 1),
        "d": ("cancelled", 2),  # running when the run finished
    }
    assert [(r.step, r.status, r.plan_version) for r in state.superseded] == [
        (b1, "pending", 1),
        (b2, "dropped", 2),
    ]
    assert state.outputs == {"a": 1}
    assert state.replans == 1
    assert state.rounds_since_progress == 1
    assert [p.version for p in state.plans] == [1, 2, 3]
    assert state.stop is not None
    assert state.stop.kind == "cancelled"


# -- a real run: the fold of its log is the runtime's own view ------------------------------------


async def test_fold_of_a_real_run_equals_the_runtime_state() -> None:
    fetch_calls: list[str] = []

    @tool(retry=RetryPolicy(initial_delay=0.0, jitter=0.0))
    async def fetch(city: str) -> dict[str, Any]:
        """Fetch the weather."""
        fetch_calls.append(city)
        if len(fetch_calls) == 1:
            raise TransientToolError("rate limited")
        return {"city": city, "temp_c": 21}

    @tool
    async def render(weather: dict[str, Any], style: str) -> str:
        """Render a report."""
        if style != "plain":
            raise ToolError(f"unknown style {style!r}")
        return f"{weather['city']}: {weather['temp_c']} °C"

    summary = {
        "id": "summary",
        "description": "summarise the weather",
        "allowed_tools": ["fetch"],
        "args": {"temp": "${fetch.temp_c}"},
        "depends_on": ["fetch"],
    }
    render2 = {
        "id": "render2",
        "description": "render plainly",
        "tool": "render",
        "args": {"weather": "${fetch}", "style": "plain"},
        "depends_on": ["fetch"],
    }
    runs: list[Run] = []

    def patch(request: ModelRequest) -> dict[str, Any]:
        # the patch lists every unfinished step: the summary only while it has not finished
        finished = {sid for sid, r in runs[0].state.steps.items() if r.status == "succeeded"}
        return {"reason": "use a known style", "steps": [render2] + ([summary] if "summary" not in finished else [])}

    planner = ScriptedModel(
        [
            {
                "reason": "fetch, render, summarise",
                "steps": [
                    {"id": "fetch", "description": "fetch", "tool": "fetch", "args": {"city": "Oslo"}},
                    {
                        "id": "render",
                        "description": "render",
                        "tool": "render",
                        "args": {"weather": "${fetch}", "style": "haiku"},
                        "depends_on": ["fetch"],
                    },
                    summary,
                ],
            },
            patch,
            {"answer": "Oslo: 21 °C"},
        ],
        usage=Usage(input_tokens=100, output_tokens=20),
        cost_per_million=(1.0, 4.0),
    )
    executor = ScriptedModel([tool_calls(("fetch", {"city": "Bergen"})), "mild"], name="cheap")
    approved: list[str] = []

    async def approver(request: ApprovalRequest) -> bool:
        approved.append(request.subject)
        return True

    ticks = itertools.count()
    ids = itertools.count()
    agent = Agent(
        planner,
        tools=[fetch, render],
        executor=executor,
        budget=Budget(replans=2),
        approvals=Approvals(approver=approver, plan=True),
        context=RunContext(clock=lambda: float(next(ticks)), new_id=lambda: f"id{next(ids)}", seed=1),
    )
    run = agent.start("weather in Oslo", constraints=("metric",))
    runs.append(run)
    result = await run.result()

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "Oslo: 21 °C"
    assert result.outputs == {"fetch": {"city": "Oslo", "temp_c": 21}, "render2": "Oslo: 21 °C", "summary": "mild"}
    assert approved == ["plan", "plan"]
    planner.assert_consumed()
    executor.assert_consumed()
    kinds = {e.kind for e in result.events}
    assert {"step_attempt_failed", "step_failed", "tool_called", "approval_requested", "approval_decided"} <= kinds

    folded = RunState.fold(result.events)
    assert folded == run.state  # the runtime's view is exactly the fold of its log
    assert folded.stop == result.stop
    assert folded.answer == result.answer
    assert folded.plans == list(result.plans)
    assert folded.steps == dict(result.steps)
    assert {sid: r.status for sid, r in folded.steps.items()} == {
        "fetch": "succeeded",
        "render": "failed",
        "summary": "succeeded",
        "render2": "succeeded",
    }
    assert folded.outputs == result.outputs
    assert folded.superseded == list(result.superseded)
    assert (
        folded.usage
        == result.usage
        == Usage(input_tokens=300, output_tokens=60, requests=3)
        + sum((e.usage for e in result.events if isinstance(e, ModelCalled) and e.role == "executor"), Usage())
    )
    assert folded.cost == pytest.approx(result.cost)
    assert result.cost > 0
    assert folded.model_calls == result.model_calls == 5
    assert folded.tool_calls == result.tool_calls == 5  # fetch twice (one retry), render, render2, inner fetch
    assert folded.replans == result.replans == 1
    assert folded.started_at == result.started_at
    assert folded.finished_at == result.finished_at

    # the log survives a trip through JSON and folds to the same state
    reloaded = [load_event(json.loads(json.dumps(dump_event(e)))) for e in result.events]
    assert reloaded == list(result.events)
    assert RunState.fold(reloaded) == folded


# -- the version 2 fixture log: a run stopped mid-effect, held, settled by a human, finished --------


def test_v2_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v2.jsonl")
    kinds = [e.kind for e in events]
    assert kinds.count("run_resumed") == 2
    assert "step_held" in kinds
    assert "run_suspended" in kinds
    state = RunState.fold(events)
    assert state.status == "finished"
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    assert state.resumes == 2
    assert state.suspended is None
    mail = state.steps["mail"]
    assert mail.status == "succeeded"
    assert mail.output == "mailed ops@example.com"
    (approval,) = state.approvals.values()
    assert approval.subject == "effect"
    assert approval.choice == "done"
    assert approval.by == "ops"
    assert state.pending_approvals == []
    for line, event in zip(
        (FIXTURES / "events_v2.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 2
        assert _kept(dump_event(event)["event"], old["event"])


# -- the version 3 fixture log: a streamed plan, then a budget stop ------------------------------


def test_v3_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v3.jsonl")
    kinds = [e.kind for e in events]
    assert kinds.count("step_streamed") == 2
    state = RunState.fold(events)
    assert state.stop is not None
    assert (state.stop.kind, state.stop.budget, state.stop.code) == ("budget_exhausted", "model_calls", None)
    assert state.outputs == {"w": {"city": "Oslo", "temp_c": 7}, "r": "Oslo: 7 C"}
    assert state.budget_hit is not None
    assert (state.budget_hit.used, state.budget_hit.needed) == (1.0, 0.0)
    assert state.plan is not None
    assert state.plan.schema_version == 1
    for line, event in zip(
        (FIXTURES / "events_v3.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 3
        new = dump_event(event)["event"]
        assert _kept(new, old["event"])


# -- the version 4 fixture log: a plan of schema 2, a tool-call budget stop with what it needed ----


def test_v4_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v4.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert (state.stop.kind, state.stop.budget) == ("budget_exhausted", "tool_calls")
    assert state.budget_hit is not None
    assert (state.budget_hit.used, state.budget_hit.needed) == (1.0, 2.0)
    assert state.plan is not None
    assert state.plan.schema_version == 2
    assert state.plan.step("b").allowed_tools == ("add",)
    assert state.plan.step("b").on_fail is None
    assert state.information == []
    assert state.reviews == []
    for line, event in zip(
        (FIXTURES / "events_v4.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 4
        assert _kept(dump_event(event)["event"], old["event"])


# -- the version 5 fixture log: a final answer reviewed against a checklist, refused, told ----------
# -- something new from another process, answered again and approved ------------------------------


def test_v5_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v5.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    assert state.answer == "the sum is 5"
    assert [(i.text, i.by) for i in state.information] == [("say it as a sentence", "ana")]
    answers = [a for a in state.approvals.values() if a.subject == "answer"]
    assert [a.checklist for a in answers] == [("states the sum",), ("states the sum",)]
    assert [a.approved for a in answers] == [False, True]
    assert [[(c.passed, c.note) for c in a.checklist_results] for a in answers] == [
        [(False, "bare number")],
        [(True, "")],
    ]
    assert len(state.reviews) == 2
    assert state.pending_approvals == []
    for line, event in zip(
        (FIXTURES / "events_v5.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 5
        assert _kept(dump_event(event)["event"], old["event"])


# -- the version 6 fixture log: a fallback list whose first model failed twice (429) ---------------


def test_v6_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v6.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    failed = [e for e in events if isinstance(e, ModelAttemptFailed)]
    assert [(f.model, f.attempt, f.status, f.retry_in is None) for f in failed] == [
        ("primary > backup", 1, 429, False),
        ("primary > backup", 2, 429, True),
    ]
    answered = [e.answered_by for e in events if isinstance(e, ModelCalled)]
    assert answered == ["backup", "backup"]
    assert state.usage.failed_requests == 2
    for line, event in zip(
        (FIXTURES / "events_v6.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 6
        assert _kept(dump_event(event)["event"], old["event"])


# -- the version 7 fixture log: a tool that reported its progress ------------------------------------


def test_v7_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v7.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.step_id, p.progress, p.total, p.message) for p in progress] == [
        ("c", 0, 4, "starting"),
        ("c", 4, 4, "done"),
    ]
    assert state.steps["c"].progress == progress[-1]
    for line, event in zip(
        (FIXTURES / "events_v7.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 7
        assert _kept(dump_event(event)["event"], old["event"])


# -- the version 8 fixture log: an MCP server added a tool while the run went on ---------------------


def test_v8_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v8.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    [change] = [e for e in events if isinstance(e, ToolsChanged)]
    assert [spec["name"] for spec in change.tools] == ["extra"]
    assert change.removed == ()
    assert state.tools == ("grow", "shrink", "extra")
    assert state.tool_changes == [change]
    assert state.outputs["e"] == {"result": "extra"}
    for line, event in zip(
        (FIXTURES / "events_v8.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 8
        assert _kept(dump_event(event)["event"], old["event"])


async def test_v8_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v8.jsonl"))
    assert report.matched, report.divergence


# -- the version 9 fixture log: a traced run keeps its trace context -------------------------------


def test_v9_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v9.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    first = events[0]
    assert isinstance(first, RunStarted)
    assert first.trace == {"traceparent": "00-3caad72d8643627c901661aa0f5924f0-05369803d0c97b22-03"}
    assert state.outputs == {"a": 4, "b": 8}
    for line, event in zip(
        (FIXTURES / "events_v9.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 9
        assert _kept(dump_event(event)["event"], old["event"])
    older = _load_log(FIXTURES / "events_v8.jsonl")[0]
    assert isinstance(older, RunStarted)
    assert older.trace == {}  # a log from before: no trace context


def test_v10_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v10.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    assert state.recalled is not None
    assert (state.recalled.mode, state.recalled.bindings) == ("direct", (("report.txt", "notes.txt"),))
    assert [p.author for p in state.plans] == ["memory"]
    assert state.answer == "notes.txt has 90 words"
    for line, event in zip(
        (FIXTURES / "events_v10.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 10
        assert _kept(dump_event(event)["event"], old["event"])
    assert RunState.fold(_load_log(FIXTURES / "events_v9.jsonl")).recalled is None


async def test_v10_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v10.jsonl"))
    assert report.matched, report.divergence


async def test_v9_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v9.jsonl"))
    assert report.matched, report.divergence


def test_v11_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v11.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    # the rule that asked, and the arguments as they were to be sent
    budget, step = state.approvals.values()
    assert (budget.subject, budget.rule, budget.budget, budget.raised) == (
        "budget",
        "budget_cap",
        "tool_calls",
        {"tool_calls": 10},
    )
    assert budget.budget_hit is not None
    assert (budget.budget_hit.limit, budget.budget_hit.used) == (2, 2)
    assert (step.subject, step.rule, step.args) == ("step", "sensitive_tool", {"text": "total 3"})
    assert state.budget["tool_calls"] == 10  # raised by the answer
    assert sorted(state.forecasts) == [1]
    assert state.forecasts[1].tool_calls == (1, 1)  # the forecast of the rest, when the cap was reached
    for line, event in zip(
        (FIXTURES / "events_v11.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 11
        assert _kept(dump_event(event)["event"], old["event"])
    older = RunState.fold(_load_log(FIXTURES / "events_v10.jsonl"))
    assert older.forecasts == {}
    assert all(a.rule is None for a in older.approvals.values())


async def test_v11_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v11.jsonl"))
    assert report.matched, report.divergence


def test_v12_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v12.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    # a sealed run: its plans carry answer templates (plan schema 4), and the answer was filled in
    assert [(p.schema_version, p.answer) for p in state.plans] == [
        (4, "Fields: {{f}}"),
        (4, "Paid {{p}} (IBAN {{x.iban}})."),
    ]
    assert state.answer == "Paid 12 to DE89370400440532013000 (IBAN DE89370400440532013000)."
    first = events[0]
    assert isinstance(first, RunStarted)
    assert (first.config["planner"]["sealed"], first.config["planner"]["extractor"]) == (True, "extractor")
    assert [e.purpose for e in events if isinstance(e, ModelCalled)] == ["planner.propose", "planner.patch", "executor"]
    for line, event in zip(
        (FIXTURES / "events_v12.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 12
        assert _kept(dump_event(event)["event"], old["event"])
    assert all(p.answer is None for p in RunState.fold(_load_log(FIXTURES / "events_v11.jsonl")).plans)


async def test_v12_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v12.jsonl"))
    assert report.matched, report.divergence


# -- the version 13 fixture log: trust labels on every value -----------------------------------

_TOOL = Source(kind="tool", trusted=False, step="a", tool="fetch")
_LABEL = Provenance.of(_TOOL)
_BROKEN = Violation(
    tool="transfer",
    argument="to",
    rule="argument_rule",
    requires="trusted values only",
    reason="it comes from tool:a (fetch), which is not trusted",
    provenance=_LABEL,
    step_id="b",
)

NEW_IN_V13: list[Event] = [
    StepStarted(at=1.0, step_id="b", executor="tools", tool="transfer", args={"to": "X"}, provenance={"to": _LABEL}),
    StepSucceeded(at=2.0, step_id="a", output="x", verdict=Verdict(passed=True), provenance=_LABEL),
    StepFailed(
        at=2.5,
        step_id="b",
        error=StepError(kind="untrusted", message="refused"),
        started=False,
        provenance=Provenance.of(Source(kind="config", trusted=True)),
        violations=(_BROKEN,),
    ),
    ToolCalled(
        at=3.0,
        step_id="c",
        call_id="call_1",
        tool="fetch",
        args={"q": "y"},
        output="page",
        provenance={"q": Provenance(trusted=True, sources=(_TOOL,), confirmed_by="ana")},
        output_provenance=Provenance.of(Source(kind="tool", trusted=True, step="c", tool="fetch", call="call_1")),
    ),
    PlanProposed(at=4.0, plan=_PLAN, trigger="failure", tainted=("b",), read=(_TOOL,)),
    StepStreamed(at=4.5, step=_PLAN.steps[0], plan_version=3, tainted=True),
    ModelCalled(at=5.0, role="planner", purpose="planner.patch", model="m", read=(_TOOL,)),
    ApprovalRequested(
        at=6.0,
        approval_id="q1",
        subject="step",
        step_id="b",
        rule="argument_rule",
        args={"to": "X"},
        provenance={"to": _LABEL},
        violations=(_BROKEN,),
    ),
    RunFinished(
        at=7.0,
        stop=StopReason(kind="refused", detail="step b", violations=(_BROKEN,)),
        answer="done",
        answer_provenance=Provenance.of(Source(kind="planner", trusted=False), _TOOL),
    ),
]


@pytest.mark.parametrize("event", NEW_IN_V13, ids=lambda e: e.kind)
def test_what_version_13_added_round_trips(event: Event) -> None:
    loaded = load_event(json.loads(json.dumps(dump_event(event))))
    assert loaded == event


def test_v13_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v13.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    steps = state.steps
    # a tool's output is untrusted unless the tool is declared trusted
    assert steps["acct"].output_provenance is not None
    assert steps["acct"].output_provenance.trusted
    assert steps["inv"].status == "failed"
    assert steps["inv"].output_provenance == Provenance.of(
        Source(kind="tool", trusted=False, step="inv", tool="read_invoice")
    )
    # the patch came after the planner read the failed tool's error: every step it wrote is tainted
    assert [p.version for p in state.plans] == [1, 2]
    assert state.plan_reads[2] == (Source(kind="tool", trusted=False, step="inv", tool="read_invoice"),)
    assert {sid: rec.tainted for sid, rec in steps.items()} == {
        "inv": False,
        "acct": False,
        "inv2": True,
        "pay": True,
        "note": True,
    }
    # a human's yes confirmed the arguments of the held transfer, as they were sent
    pay = steps["pay"]
    assert pay.provenance is not None
    assert pay.provenance["to"].confirmed_by == "ana"
    assert pay.provenance["to"].trusted
    assert pay.provenance["to"].untrusted_sources == (
        Source(kind="tool", trusted=False, step="inv2", tool="read_invoice"),
    )
    (question,) = state.approvals.values()
    assert (question.rule, [(v.argument, v.rule) for v in question.violations]) == (
        "argument_rule",
        [("to", "argument_rule"), ("amount", "untrusted_effect"), ("*", "untrusted_effect")],
    )
    # the model step read untrusted text: its output, and the call it asked for, are untrusted
    note = steps["note"]
    assert note.output_provenance is not None
    assert not note.output_provenance.trusted
    (call,) = note.tool_calls
    assert (call.tool, call.error.kind if call.error else None) == ("send_mail", "rejected")
    assert [v.argument for v in call.violations] == ["*"]
    # the planner wrote the answer after reading tool outputs
    assert state.answer_provenance is not None
    assert not state.answer_provenance.trusted
    for line, event in zip(
        (FIXTURES / "events_v13.jsonl").read_text(encoding="utf-8").splitlines(), events, strict=True
    ):
        old = json.loads(line)
        assert old["v"] == 13
        assert _kept(dump_event(event)["event"], old["event"])
    older = RunState.fold(_load_log(FIXTURES / "events_v12.jsonl"))
    assert older.answer_provenance is None
    assert all(rec.provenance is None and rec.output_provenance is None for rec in older.steps.values())


async def test_v13_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v13.jsonl"))
    assert report.matched, report.divergence


# -- the version 14 fixture log: an untrusted answer asked about, and withheld ------------------


def test_what_version_14_added_round_trips() -> None:
    finished = RunFinished(
        at=3.0, stop=StopReason(kind="goal_met", detail="d"), answer="[withheld]", withheld=("a", "*")
    )
    asked = ApprovalRequested(
        at=2.0,
        approval_id="q1",
        subject="answer",
        reason="the final answer holds text the run does not trust",
        output="text",
        rule="untrusted_answer",
        provenance={"answer": _LABEL},
    )
    for event in (finished, asked):
        assert load_event(json.loads(json.dumps(dump_event(event)))) == event


def test_v14_fixture_loads_and_folds() -> None:
    events = _load_log(FIXTURES / "events_v14.jsonl")
    state = RunState.fold(events)
    assert state.stop is not None
    assert state.stop.kind == "goal_met"
    (question,) = state.approvals.values()
    assert (question.subject, question.rule, question.approved) == ("answer", "untrusted_answer", False)
    assert question.provenance is not None
    assert not question.provenance["answer"].trusted
    assert state.withheld == ("reviews",)
    assert state.answer is not None
    assert "[withheld: step reviews's output is untrusted]" in state.answer
    assert "Riverside View Hotel" in str(state.outputs["reviews"])
    for line in (FIXTURES / "events_v14.jsonl").read_text(encoding="utf-8").splitlines():
        assert json.loads(line)["v"] == 14
    assert RunState.fold(_load_log(FIXTURES / "events_v13.jsonl")).withheld == ()


async def test_v14_fixture_replays_exactly() -> None:
    from planexec.runtime import replay_log

    report = await replay_log(_load_log(FIXTURES / "events_v14.jsonl"))
    assert report.matched, report.divergence
