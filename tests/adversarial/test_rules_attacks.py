"""The pattern's rules under attack: hostile answers, checks and checklists, executors that misreport
their confidence, retries of steps that change the world, and suites with wrong rules. Each run
must end within its budget with a typed stop and its log intact; each usage error lists every
problem at once."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from planexec import (
    Acceptance,
    Agent,
    AnswerReview,
    Approvals,
    Budget,
    Escalation,
    ModelExecutor,
    Planner,
    RetryPolicy,
    UsageError,
    tool,
)
from planexec.eval import SuiteInvalid, load_suite
from planexec.log import (
    AnswerReviewed,
    ChecklistResult,
    InformationAdded,
    PlannerOutputRejected,
    RunFinished,
    RunState,
    StepAttemptFailed,
    StepStarted,
    dump_event,
)
from planexec.models import ModelRequest, ModelResponse, ToolCall
from planexec.runtime import AnswerCheck
from planexec.store import MemoryStore, SQLiteStore
from planexec.testing import FunctionModel, ScriptedModel
from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_script, write_tools_module
from tests.support import SAFETY, events_of

ADD_PLAN = {"steps": [{"id": "sum", "description": "Add", "tool": "add", "args": {"a": 2, "b": 3}}]}


# -- the command line -------------------------------------------------------------------------------


def test_a_checklist_item_number_that_is_not_ascii_digits_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, ARITHMETIC_TOOLS + "\nTOOLS = [add]\n", "attack_tools")
    store = f"sqlite:///{tmp_path}/runs.db"
    planner = write_script(tmp_path, [ADD_PLAN, {"answer": "done"}])
    items = ("--review-item", "gives the sum", "--review-item", "says how")
    run = ("run", "add", "--planner", planner, "--tools", f"{tools}:TOOLS", *items, "--json")
    first = invoke(["--store", store, *run])
    assert first.exit_code == 3, first.output
    data = json.loads(first.stdout)
    (review,) = data["pending_approvals"]
    flags = ("--fail", "²=a superscript two", "--fail", "٣=an Arabic-Indic three", "--fail", "0=none")
    refused = invoke(["--store", store, "reject", data["run_id"], review["question_id"], "--reason", "no", *flags])
    assert refused.exit_code == 2, refused.output
    for flag in ("'²=a superscript two'", "'٣=an Arabic-Indic three'", "'0=none'"):
        assert f"--fail: {flag}: give N=NOTE with N from 1 to 2" in refused.output


def test_every_wrong_rule_flag_of_a_run_is_listed_at_once_and_unicode_digits_are_no_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, ARITHMETIC_TOOLS + "\nTOOLS = [add]\n", "attack_tools")
    planner = write_script(tmp_path, [ADD_PLAN, {"answer": "5"}])
    flags = (
        *("--review-rounds", "²", "--fail-retries", "³"),
        *("--review-rubric", "", "--judge", "nope:judge"),
        *("--review-item", "gives the sum", "--review-item", "gives the sum"),
    )
    store = f"sqlite:///{tmp_path}/runs.db"
    result = invoke(["--store", store, "run", "add", "--planner", planner, "--tools", f"{tools}:TOOLS", *flags])
    assert result.exit_code == 2, result.output
    for problem in (
        "--review-rounds: '²' must be a whole number from 1 to 999999",
        "--fail-retries: '³' must be a whole number from 1 to 999999",
        "--judge: unknown model provider 'nope'",
        "--review-rubric: is empty",
        "--review-item: 'gives the sum' is listed twice",
    ):
        assert problem in result.output, problem


# -- checks of the final answer ---------------------------------------------------------------------


@tool
async def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


MULTIPLY_PLAN = {"steps": [{"id": "m", "description": "multiply", "tool": "multiply", "args": {"a": 2, "b": 3}}]}


def reviewed(check: AnswerCheck, *, budget: Budget | None = None, rounds: int = 1) -> Agent:
    """An agent whose plan multiplies, then answers "6", judged by ``check``."""
    return Agent(
        ScriptedModel([MULTIPLY_PLAN, {"answer": "6"}]),
        tools=[multiply],
        review=AnswerReview(checks=[check], max_rounds=rounds),
        store=MemoryStore(),
        budget=budget or SAFETY,
    )


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


async def test_a_check_that_raises_an_unprintable_error_refuses_the_answer_and_is_not_a_planner_failure() -> None:
    def broken(answer: str) -> bool:
        raise Unprintable

    result = await reviewed(broken).run("multiply")
    assert (result.stop.kind, result.stop.code) == ("escalated", "answer_rejected"), result.stop
    (review,) = events_of(result, AnswerReviewed)
    assert review.problems == ("broken: the check raised Unprintable: (its message cannot be shown)",)
    assert isinstance(result.events[-1], RunFinished)


async def test_a_checks_objection_is_cut_to_a_bounded_length_wherever_it_goes() -> None:
    result = await reviewed(lambda answer: "no " * 1_000_000).run("multiply")
    assert (result.stop.kind, result.stop.code) == ("escalated", "answer_rejected")
    (review,) = events_of(result, AnswerReviewed)
    (problem,) = review.problems
    assert problem.startswith("<lambda>: no no ")
    assert len(problem) <= 2_000
    assert len(result.stop.detail) < 3_000


async def test_an_async_check_is_awaited_and_odd_answers_of_a_check_say_what_they_were() -> None:
    async def says_seven(answer: str) -> str | None:
        return None if "7" in answer else "not seven"

    class Odd:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    def odd(answer: str) -> object:
        return Odd()

    result = await reviewed(says_seven).run("multiply")  # no "coroutine never awaited" warning
    (review,) = events_of(result, AnswerReviewed)
    assert review.problems == ("says_seven: not seven",)

    result = await reviewed(odd).run("multiply")  # type: ignore[arg-type]
    (review,) = events_of(result, AnswerReviewed)
    assert review.problems == ("odd: refused (it returned a Odd, not True, None, False or text)",)


async def test_a_check_that_never_returns_leaves_the_run_to_its_wall_time_budget() -> None:
    release = threading.Event()

    def stuck(answer: str) -> bool:
        release.wait(5)  # bounded, so that a check run on the event loop fails this test rather than hanging it
        return True

    try:
        result = await reviewed(stuck, budget=Budget(wall_time=0.2)).run("multiply")
    finally:
        release.set()
    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "wall_time"), result.stop
    assert isinstance(result.events[-1], RunFinished)


# -- a failed check on a step that changed the world ------------------------------------------------


async def test_retry_on_a_failed_check_never_repeats_a_tool_call_a_model_step_made_that_changes_the_world() -> None:
    sent: list[str] = []

    @tool(side_effect=True)
    async def send(text: str) -> str:
        """Send a message."""
        sent.append(text)
        return "sent"

    def executor(request: ModelRequest) -> Any:
        if not any(m.role == "tool" for m in request.messages):
            return ModelResponse(text="", tool_calls=(ToolCall(id="c", name="send", arguments={"text": "hi"}),))
        return "sent it"  # the check wants "OK"

    checks = [{"kind": "contains", "text": "OK"}]
    step = {"id": "w", "description": "send hi", "allowed_tools": ["send"], "checks": checks}
    agent = Agent(
        ScriptedModel([{"steps": [step]}, {"steps": []}, {"answer": "could not send"}]),
        tools=[send],
        executor=ModelExecutor(model=FunctionModel(executor, name="executor")),
        escalation=Escalation(on_fail="retry", retries=3),
        store=MemoryStore(),
        budget=SAFETY,
    )
    result = await agent.run("send hi")
    assert sent == ["hi"]
    assert result.steps["w"].status == "failed"
    assert not events_of(result, StepAttemptFailed)
    assert isinstance(result.events[-1], RunFinished)


# -- suites -----------------------------------------------------------------------------------------


def test_a_suites_escalation_lists_a_review_on_fail_with_its_other_problems(tmp_path: Path) -> None:
    (tmp_path / "planner.json").write_text("[]")
    (tmp_path / "suite.yaml").write_text(
        """
tasks:
  - id: t
    goal: add
    planner: scripted:planner.json
    escalation: {confidence_floor: .nan, on_fail: review, retries: 0}
"""
    )
    with pytest.raises(SuiteInvalid) as caught:
        load_suite(tmp_path / "suite.yaml")
    assert sorted(p.where for p in caught.value.problems) == [
        "tasks[0] (t).escalation.confidence_floor",
        "tasks[0] (t).escalation.on_fail",
        "tasks[0] (t).escalation.retries",
    ]


# -- answers from people ----------------------------------------------------------------------------


async def test_a_checklist_answer_with_wrong_or_huge_values_is_refused_with_every_problem_listed() -> None:
    store = MemoryStore()

    def agent(*replies: Any) -> Agent:
        return Agent(
            ScriptedModel(list(replies)),
            tools=[multiply],
            review=AnswerReview(checklist=["right", "short"]),
            approvals=Approvals(deferred=True),
            store=store,
            budget=SAFETY,
        )

    first = await agent(MULTIPLY_PLAN, {"answer": "6"}).run("multiply", run_id="c")
    assert first.stop.kind == "waiting"
    run = await agent({"steps": []}, {"answer": "six"}).resume("c")
    (review,) = run.state.pending_approvals
    huge = "n" * 2_000_000
    odd: list[Any] = [
        ChecklistResult(item="right", passed="no", note=huge),  # type: ignore[arg-type]
        ChecklistResult(item="short", passed=False, note=123),  # type: ignore[arg-type]
    ]
    with pytest.raises(UsageError) as caught:
        run.decide(review.approval_id, approved=False, reason=huge, checklist=odd)
    problems = " | ".join(p.message for p in caught.value.problems)
    assert "'right': passed must be True or False" in problems
    assert "'right': the note is too long" in problems
    assert "'short': the note must be text" in problems
    assert "reason is too long" in problems
    assert len(str(caught.value)) < 10_000

    failed = [ChecklistResult(item="right", passed=False)]
    run.decide(review.approval_id, approved=False, reason="wrong", checklist=failed)
    result = await run.result()
    assert result.stop.kind == "waiting"  # the second answer waits for its own review
    (refused,) = RunState.fold(result.events).reviews
    assert refused.problems == ("refused by human: wrong", "right: failed")


# -- an executor's confidence -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "shown"),
    [
        ('{"result": "42", "confidence": "0.1"}', '"0.1"'),
        ('{"result": "42", "confidence": NaN}', "NaN"),
        ('{"result": "42", "confidence": -1}', "-1"),
        ('{"result": "42", "confidence": true}', "true"),
        ('{"result": "42", "confidence": [0.9]}', "a list"),
    ],
)
async def test_a_result_whose_confidence_cannot_be_read_fails_its_step_instead_of_passing_unjudged(
    reply: str, shown: str
) -> None:
    plan = {"steps": [{"id": "e", "description": "compute"}]}
    agent = Agent(
        ScriptedModel([plan, {"steps": []}, {"answer": "no result"}]),
        executor=ModelExecutor(model=ScriptedModel([reply], name="executor")),
        acceptance=Acceptance(min_confidence=0.5),
        store=MemoryStore(),
        budget=SAFETY,
    )
    result = await agent.run("compute")
    record = result.steps["e"]
    assert record.status == "failed"
    assert record.error is not None
    assert record.error.message == f"the executor's confidence must be a number from 0 to 1, not {shown}"
    assert isinstance(result.events[-1], RunFinished)


async def test_retries_on_a_failed_check_count_against_the_tool_call_budget() -> None:
    calls: list[int] = []

    @tool
    async def count() -> int:
        """Count the calls."""
        calls.append(1)
        return len(calls)

    checks = [{"kind": "matches", "pattern": "^never$"}]
    plan = {"steps": [{"id": "c", "description": "count", "tool": "count", "args": {}, "checks": checks}]}
    agent = Agent(
        ScriptedModel([plan, {"steps": []}, {"answer": "gave up"}]),
        tools=[count],
        escalation=Escalation(on_fail="retry", retries=1_000),
        store=MemoryStore(),
        budget=Budget(tool_calls=5, wall_time=30),
    )
    result = await agent.run("count")
    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "tool_calls"), result.stop
    assert len(calls) == 5
    assert RunState.fold(result.events).tool_calls == 5
    assert isinstance(result.events[-1], RunFinished)
    report = await agent.replay(result.run_id)
    assert report.divergence is None
    assert report.matched


async def test_a_run_stopped_by_the_tool_call_budget_while_a_tool_retries_replays_exactly() -> None:
    @tool(retry=RetryPolicy(max_attempts=100, initial_delay=0, max_delay=0))
    async def flaky() -> int:
        """Time out, always."""
        raise TimeoutError("again")

    plan = {"steps": [{"id": "f", "description": "flaky", "tool": "flaky", "args": {}}]}
    agent = Agent(ScriptedModel([plan]), tools=[flaky], store=MemoryStore(), budget=Budget(tool_calls=3, wall_time=30))
    result = await agent.run("try")
    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "tool_calls"), result.stop
    report = await agent.replay(result.run_id)
    assert report.divergence is None
    assert report.matched


# -- settings -----------------------------------------------------------------------------------


def test_a_planner_with_wrong_settings_lists_every_problem() -> None:
    with pytest.raises(UsageError) as caught:
        Planner(
            model=ScriptedModel([]),
            policy="greedy",
            replan=None,  # type: ignore[arg-type]
            turn_format="yaml",  # type: ignore[arg-type]
            max_repairs=-1,
            record_chars=True,
        )
    assert [p.where for p in caught.value.problems] == [
        "policy",
        "replan",
        "turn_format",
        "max_repairs",
        "record_chars",
    ]


def test_an_answer_review_refuses_a_text_for_a_list_and_a_checklist_item_given_twice() -> None:
    with pytest.raises(UsageError) as caught:
        AnswerReview(checks=len, checklist="abc")  # type: ignore[arg-type]
    assert [(p.where, p.message) for p in caught.value.problems] == [
        ("checklist", "must be a list of items (text)"),
        ("checks", "must be a list of functions"),
    ]
    with pytest.raises(UsageError, match=r"checklist\[2\]: 'right' is listed twice"):
        AnswerReview(checklist=["right", "short", "right"])


# -- hostile planner output -------------------------------------------------------------------------


async def test_a_schema_ref_with_a_unicode_digit_is_a_plan_problem_the_planner_repairs() -> None:
    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    schema = {"type": "array", "prefixItems": [{"type": "string"}], "items": {"$ref": "#/prefixItems/²"}}
    good = {"steps": [{"id": "e", "description": "echo", "tool": "echo", "args": {"text": "hi"}}]}
    bad = {"steps": [{**good["steps"][0], "output_schema": schema}]}
    agent = Agent(ScriptedModel([bad, good, {"answer": "hi"}]), tools=[echo], store=MemoryStore(), budget=SAFETY)
    result = await agent.run("echo")
    assert result.stop.kind == "goal_met", result.stop
    (rejected,) = events_of(result, PlannerOutputRejected)
    assert "points at nothing" in str(rejected.problems)


# -- news from another process ----------------------------------------------------------------------


async def test_news_another_process_writes_into_a_running_runs_log_does_not_end_it_log_failed(tmp_path: Path) -> None:
    release = asyncio.Event()

    @tool
    async def slow(x: int) -> int:
        """Wait, then echo."""
        await release.wait()
        return x

    plan = {"steps": [{"id": "s", "description": "wait", "tool": "slow", "args": {"x": 1}}]}

    def planner(request: ModelRequest) -> Any:
        if request.purpose == "planner.patch":
            return {"reason": "nothing more to do", "steps": []}
        return plan if request.purpose == "planner.propose" else {"answer": "done, in French"}

    path = tmp_path / "runs.db"
    agent = Agent(FunctionModel(planner), tools=[slow], store=SQLiteStore(path), budget=SAFETY)
    run = agent.start("wait", run_id="r")
    async for event in run.events():
        if isinstance(event, StepStarted):
            break
    other = SQLiteStore(path)  # what `planexec tell` does from another process
    try:
        last = await other.last_seq("r")
        news = InformationAdded(at=time.time(), text="answer in French", by="cli", constraint=False)
        await other.append("r", [news], expected_seq=last)
    finally:
        await other.close()
    release.set()
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert [e.text for e in events_of(result, InformationAdded)] == ["answer in French"]

    stored = [s.event for s in await SQLiteStore(path).read("r")]
    assert [dump_event(e) for e in stored] == [dump_event(e) for e in result.events]


async def test_news_told_while_the_final_answer_is_written_is_planned_with_before_the_run_ends() -> None:
    writing = asyncio.Event()
    told = asyncio.Event()
    asked: list[str] = []

    async def planner(request: ModelRequest) -> Any:
        asked.append(request.purpose)
        if request.purpose == "planner.propose":
            return MULTIPLY_PLAN
        if request.purpose == "planner.patch":
            assert "New constraint from user: answer in French" in str(request.messages[-1].content)
            return {"reason": "nothing to redo", "steps": []}
        if len(asked) == 2:  # the first final answer: the news arrives while it is written
            writing.set()
            await told.wait()
            return {"answer": "six"}
        return {"answer": "six, en français"}

    agent = Agent(FunctionModel(planner), tools=[multiply], store=MemoryStore(), budget=SAFETY)
    run = agent.start("multiply", run_id="n")
    await writing.wait()
    run.tell("answer in French", constraint=True)
    told.set()
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "six, en français"
    assert asked == ["planner.propose", "planner.finish", "planner.patch", "planner.finish"]
    report = await agent.replay("n")
    assert report.divergence is None
    assert report.matched
