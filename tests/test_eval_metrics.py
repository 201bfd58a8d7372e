"""The measures of a run, checked by hand on a log with fixed times; summaries; the report's JSON
form; and the comparison with a baseline."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from planexec import Plan, RunResult, Step, StopReason
from planexec.eval import (
    REPORT_VERSION,
    EvalReport,
    Tolerances,
    compare_reports,
    dump_report,
    load_report,
    run_suite,
    suite_from_mapping,
    trace_of,
)
from planexec.executor import StepError, Verdict
from planexec.log import (
    ApprovalRequested,
    Event,
    ModelCalled,
    PlanProposed,
    RunFinished,
    RunStarted,
    RunState,
    StallDetected,
    StepFailed,
    StepStarted,
    StepSucceeded,
    ToolCalled,
)
from planexec.log._events import PlanningStarted
from planexec.models import ModelResponse, Usage
from planexec.react import ReactResult
from tests.test_eval import ADD_THEN_DOUBLE, ARITHMETIC

OK = Verdict(passed=True)


def model_called(at: float) -> ModelCalled:
    return ModelCalled(
        at=at,
        role="planner",
        purpose="planner.propose",
        model="m",
        response=ModelResponse(text="{}"),
        usage=Usage(input_tokens=100, output_tokens=10, requests=1),
        cost=0.01,
    )


def hand_checked_log() -> list[Event]:
    """A run from t=0 to t=8.

    Steps a (tool x) and b (tool y) start together at 1; b fails at 2, a succeeds at 3. The plan is
    patched (one replan) with b2, a model step from 4 to 6 that calls z (ok) and y (fails). A human
    is asked once; a stall is caught at 7; the run stops at 8.

    Step time: a 2 + b 1 + b2 2 = 5 over 8 seconds: parallelism 0.625. Tool calls x ok, y failed,
    z ok, y failed: 2 of 4 succeeded.
    """
    a = Step(id="a", description="a", tool="x")
    b = Step(id="b", description="b", tool="y")
    b2 = Step(id="b2", description="b2")
    return [
        RunStarted(at=0, run_id="r", goal="g", budget={}),
        model_called(1),
        PlanProposed(at=1, plan=Plan(version=1, steps=(a, b))),
        StepStarted(at=1, step_id="a", executor="tools", tool="x", args={}),
        StepStarted(at=1, step_id="b", executor="tools", tool="y", args={}),
        StepFailed(at=2, step_id="b", error=StepError(kind="tool_error", message="no")),
        StepSucceeded(at=3, step_id="a", output=1, verdict=OK),
        PlanningStarted(at=3, trigger="failure", why="b failed"),
        model_called(4),
        PlanProposed(at=4, plan=Plan(version=2, steps=(a, b2)), trigger="failure"),
        StepStarted(at=4, step_id="b2", executor="model"),
        ToolCalled(at=5, step_id="b2", call_id="c1", tool="z", args={}, output=2),
        ToolCalled(
            at=5, step_id="b2", call_id="c2", tool="y", args={}, error=StepError(kind="tool_error", message="no")
        ),
        ApprovalRequested(at=5, approval_id="q1", subject="step", step_id="b2", reason="sensitive"),
        StepSucceeded(at=6, step_id="b2", output="done", verdict=OK),
        StallDetected(at=7, rule="no_progress", detail="nothing new"),
        RunFinished(at=8, stop=StopReason(kind="stalled", detail="nothing new")),
    ]


def test_metrics_of_a_hand_checked_run() -> None:
    events = hand_checked_log()
    result = RunResult.from_state(RunState.fold(events), events)
    trace = trace_of(result)
    m = trace.metrics
    assert trace.tools_called == ("x", "y", "z", "y")
    assert (m.steps, m.tool_calls, m.tool_calls_ok) == (3, 4, 2)
    assert (m.replans, m.stalls, m.escalations) == (1, 1, 1)
    assert (m.model_calls, m.input_tokens, m.output_tokens) == (2, 200, 20)
    assert m.cost == pytest.approx(0.02)
    assert m.latency == 8
    assert m.parallelism == pytest.approx(5 / 8)
    assert trace.stop.kind == "stalled"


def test_a_step_still_running_at_the_end_counts_until_the_end() -> None:
    events: list[Event] = [
        RunStarted(at=0, run_id="r", goal="g", budget={}),
        PlanProposed(at=0, plan=Plan(steps=(Step(id="a", description="a", tool="x"),))),
        StepStarted(at=2, step_id="a", executor="tools", tool="x", args={}),
        RunFinished(at=4, stop=StopReason(kind="rejected", detail="no")),
    ]
    m = trace_of(RunResult.from_state(RunState.fold(events), events)).metrics
    assert (m.tool_calls, m.tool_calls_ok, m.escalations) == (1, 0, 1)
    assert m.parallelism == pytest.approx(2 / 4)


def test_metrics_of_a_react_run() -> None:
    calls = (
        ToolCalled(at=2, step_id="turn-1", call_id="1", tool="x", args={}, output=1, duration=1.0),
        ToolCalled(at=2, step_id="turn-1", call_id="2", tool="y", args={}, output=1, duration=1.0),
        ToolCalled(
            at=3,
            step_id="turn-2",
            call_id="3",
            tool="nope",
            args={},
            attempts=0,
            error=StepError(kind="unknown_tool", message="?"),
        ),
    )
    result = ReactResult(
        run_id="r",
        goal="g",
        answer="a",
        stop=StopReason(kind="goal_met"),
        calls=calls,
        turns=3,
        usage=Usage(input_tokens=30, output_tokens=3),
        cost=0.5,
        model_calls=3,
        tool_calls=2,
        started_at=0,
        finished_at=4,
        events=(StallDetected(at=3, rule="repeated_failure", detail="d"),),
    )
    m = trace_of(result).metrics
    assert (m.steps, m.tool_calls, m.tool_calls_ok, m.replans, m.stalls, m.escalations) == (3, 3, 2, 0, 1, 0)
    assert m.parallelism == pytest.approx(2 / 4)
    assert (m.input_tokens, m.output_tokens, m.cost, m.latency) == (30, 3, 0.5, 4)


# -- summaries and the JSON form ------------------------------------------------------------------


async def example_report(tmp_path: Path) -> EvalReport:
    suite = suite_from_mapping(
        {
            "name": "arith",
            "defaults": {"tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE, "goal": "double 1 + 2"},
            "tasks": [
                {"id": "good", "repeat": 3, "expect_answer": {"exact": "6"}},
                {"id": "bad", "expect_answer": {"exact": "7"}},
            ],
        },
        root=tmp_path,
    )
    return await run_suite(suite)


async def test_summaries_add_up_over_runs(tmp_path: Path) -> None:
    report = await example_report(tmp_path)
    s = report.summary
    assert (s.runs, s.passed, s.pass_rate) == (4, 3, 0.75)
    assert (s.steps_mean, s.tool_calls, s.tool_calls_ok, s.tool_success_rate) == (2.0, 8, 8, 1.0)
    assert s.model_calls == 8  # a plan and an answer per run
    assert s.input_tokens == sum(t.summary.input_tokens for t in report.tasks)
    assert s.disagreement_rate is None
    assert s.judged_both == 0


async def test_the_report_round_trips_through_json_and_is_versioned(tmp_path: Path) -> None:
    report = await example_report(tmp_path)
    data = dump_report(report)
    assert data["format"] == "planexec.eval.report"
    assert data["version"] == REPORT_VERSION == 2
    assert data["notes"] == []
    assert load_report(data) == report
    first = {key: value for key, value in data.items() if key != "notes"}  # as version 1 wrote it
    assert load_report({**first, "version": 1}) == dataclasses.replace(report, version=1)
    with pytest.raises(Exception, match="report version 99"):
        load_report({**data, "version": 99})
    with pytest.raises(Exception, match="not an evaluation report"):
        load_report({"version": 1})
    broken = {**data, "summary": {"runs": "many"}}
    with pytest.raises(Exception, match="does not fit the report format"):
        load_report(broken)


# -- comparison with a baseline ---------------------------------------------------------------------


def with_summary(report: EvalReport, **changes: Any) -> EvalReport:
    return dataclasses.replace(report, summary=dataclasses.replace(report.summary, **changes))


async def test_no_regression_against_itself(tmp_path: Path) -> None:
    report = await example_report(tmp_path)
    comparison = compare_reports(report, report, Tolerances())
    assert comparison.ok
    assert comparison.regressions == ()
    assert comparison.notes == ()


async def test_each_regression_is_named(tmp_path: Path) -> None:
    report = await example_report(tmp_path)
    current = with_summary(report, cost_mean=0.02, latency_mean=2.0)
    baseline = with_summary(report, pass_rate=1.0, cost_mean=0.01, latency_mean=1.0)
    bad_task = baseline.tasks[1]
    perfect = dataclasses.replace(bad_task, summary=dataclasses.replace(bad_task.summary, pass_rate=1.0))
    baseline = dataclasses.replace(baseline, tasks=(baseline.tasks[0], perfect))
    comparison = compare_reports(current, baseline, Tolerances())
    assert [(r.metric, r.task) for r in comparison.regressions] == [
        ("pass_rate", None),
        ("pass_rate", "bad"),
        ("cost", None),
        ("latency", None),
    ]
    assert [r.message for r in comparison.regressions] == [
        "pass rate fell from 1.00 to 0.75 (tolerance 0.00)",
        "task 'bad': pass rate fell from 1.00 to 0.00 (tolerance 0.00)",
        "cost per run rose from $0.010000 to $0.020000 (+100%; tolerance 10%)",
        "latency per run rose from 1.000s to 2.000s (+100%; tolerance 25%)",
    ]


async def test_tolerances_absorb_small_changes(tmp_path: Path) -> None:
    report = await example_report(tmp_path)
    current = with_summary(report, pass_rate=0.7, cost_mean=0.0105, latency_mean=1.2)
    baseline = with_summary(report, pass_rate=0.75, cost_mean=0.01, latency_mean=1.0)
    assert compare_reports(current, baseline, Tolerances(pass_rate=0.1)).ok
    assert not compare_reports(current, baseline, Tolerances()).ok  # the pass rate fell
    fast = with_summary(report, latency_mean=0.03)
    faster = with_summary(report, latency_mean=0.01)
    assert compare_reports(fast, faster, Tolerances()).ok  # under the latency floor
    free = with_summary(report, cost_mean=0.0)
    assert [
        r.metric for r in compare_reports(with_summary(report, cost_mean=0.001), free, Tolerances()).regressions
    ] == ["cost"]


async def test_notes_say_what_makes_reports_less_comparable(tmp_path: Path) -> None:
    report = await example_report(tmp_path)
    other = dataclasses.replace(report, agent="react", suite="other", tasks=report.tasks[:1])
    comparison = compare_reports(other, report, Tolerances())
    assert comparison.notes == (
        "the baseline is of suite 'arith', this report of 'other'",
        "the baseline ran the planexec agent, this report the react agent",
        "task 'bad' is in the baseline but was not run",
    )
