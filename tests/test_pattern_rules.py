"""The pattern's own rules, end to end with scripted models: escalation to a human (unknown tool,
low confidence, a planner that gives up), what happens when a result fails its checks (patch,
retry, review), a reviewed final answer, questions to the user, new information while a run
runs, and the flat turn format."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from planexec import (
    Acceptance,
    Agent,
    AnswerReview,
    ApprovalDecision,
    ApprovalRequest,
    Approvals,
    Escalation,
    ModelExecutor,
    Planner,
    RunContext,
    UsageError,
    tool,
)
from planexec.log import (
    AnswerReviewed,
    ApprovalRequested,
    ChecklistResult,
    InformationAdded,
    PlannerOutputRejected,
    PlanProposed,
    RunState,
    StepAttemptFailed,
    StepSucceeded,
)
from planexec.models import FunctionModel, ModelRequest
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel

from .support import SAFETY, add, events_of, tool_step, turn


@tool
async def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


class Script:
    """A planner (or judge) model that answers from a list and keeps every request it got."""

    def __init__(self, replies: list[Any], name: str = "scripted-planner") -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []
        self.model = FunctionModel(self._reply, name=name)

    def _reply(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"no reply left for {request.purpose}")
        reply = self.replies.pop(0)
        return reply(request) if callable(reply) else reply

    def said(self, index: int = -1) -> str:
        """The text of every message of request ``index``."""
        return "\n".join(str(m.content) for m in self.requests[index].messages)


def flat(next_step: str, tool_name: str | None, arguments: dict[str, Any], confidence: float = 0.9) -> dict[str, Any]:
    return {
        "thought": f"next: {next_step}",
        "next_step": next_step,
        "tool": tool_name,
        "arguments": arguments,
        "stop": False,
        "confidence": confidence,
    }


def approver_of(
    answer: Callable[[ApprovalRequest], ApprovalDecision | bool],
) -> tuple[Approvals, list[ApprovalRequest]]:
    asked: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> ApprovalDecision | bool:
        asked.append(request)
        return answer(request)

    return Approvals(approver=approve), asked


ARITH = "What is 12 × 4 + 5?"


# -- the flat turn format ---------------------------------------------------------------------------


async def test_the_toy_sum_runs_in_the_flat_turn_format() -> None:
    script = Script(
        [
            flat("multiply 12 by 4", "multiply", {"a": 12, "b": 4}),
            flat("add 5 to the product", "add", {"a": "${s1}", "b": 5}),
            {
                "thought": "12 × 4 + 5 = 53",
                "next_step": "53",
                "tool": None,
                "arguments": {},
                "stop": True,
                "confidence": 1,
            },
        ]
    )
    agent = Agent(Planner(model=script.model, policy="step", turn_format="flat"), tools=[multiply, add], store=None)
    result = await agent.run(ARITH)
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "53"
    assert result.steps["s1"].output == 48
    assert result.steps["s2"].step.depends_on == ("s1",)
    assert result.steps["s2"].output == 53
    schema = script.requests[0].output.json_schema  # type: ignore[union-attr]
    assert {"next_step", "tool", "arguments", "stop", "confidence"} <= set(schema["properties"])


async def test_flat_and_nested_turns_both_work_in_one_run_and_nested_is_the_schema_by_default() -> None:
    script = Script(
        [
            flat("multiply 12 by 4", "multiply", {"a": 12, "b": 4}),
            turn(tool_step("plus", "add", {"a": "${s1}", "b": 5}, "s1"), "add five"),
            {"thought": "done", "stop": True, "answer": "53"},
        ]
    )
    agent = Agent(Planner(model=script.model, policy="step"), tools=[multiply, add], store=None)
    result = await agent.run(ARITH)
    assert result.answer == "53"
    assert result.steps["plus"].output == 53
    assert "step" in script.requests[0].output.json_schema["properties"]  # type: ignore[union-attr]


async def test_a_flat_turn_with_an_invalid_field_is_repaired_with_its_problems_named() -> None:
    script = Script(
        [
            {**flat("multiply", "multiply", {"a": 12, "b": 4}), "confidence": 7},
            flat("multiply", "multiply", {"a": 12, "b": 4}),
            {"stop": True, "next_step": "48"},
        ]
    )
    result = await Agent(Planner(model=script.model, policy="step"), tools=[multiply], store=None).run("12 × 4")
    assert result.answer == "48"
    (rejected,) = events_of(result, PlannerOutputRejected)
    assert rejected.problems[0].where == "confidence"


# -- escalation: an unknown tool --------------------------------------------------------------------


def unknown_plan() -> dict[str, Any]:
    return {"steps": [tool_step("g", "search_google", {"q": "x"})]}


GOOD_PLAN = {"steps": [tool_step("m", "multiply", {"a": 12, "b": 4})]}


async def test_an_unknown_tool_with_nobody_to_ask_gets_one_repair_then_the_run_stops_escalated() -> None:
    script = Script([unknown_plan(), unknown_plan()])
    result = await Agent(script.model, tools=[multiply], store=None).run("find it")
    assert result.stop.kind == "escalated"
    assert result.stop.code == "unknown_tool"
    assert "search_google" in result.stop.detail
    assert len(script.requests) == 2  # one repair, not max_repairs
    assert "search_google" in script.said(1)


async def test_an_unknown_tool_repaired_once_goes_on() -> None:
    script = Script([unknown_plan(), GOOD_PLAN, {"answer": "48"}])
    result = await Agent(script.model, tools=[multiply], store=None).run("12 × 4")
    assert result.stop.kind == "goal_met"
    assert result.answer == "48"


async def test_an_unknown_tool_escalates_to_a_human_who_gives_guidance() -> None:
    approvals, asked = approver_of(
        lambda r: ApprovalDecision(approved=True, choice="guidance", text="use multiply, there is no search")
    )
    script = Script([unknown_plan(), unknown_plan(), GOOD_PLAN, {"answer": "48"}])
    result = await Agent(script.model, tools=[multiply], approvals=approvals, store=None).run("12 × 4")
    assert result.stop.kind == "goal_met", result.stop
    assert [r.subject for r in asked] == ["escalation", "escalation"]  # a human, not a repair cap, decides
    assert asked[0].code == "unknown_tool"
    assert "use multiply, there is no search" in script.said(2)
    escalations = [e for e in events_of(result, ApprovalRequested) if e.subject == "escalation"]
    assert [e.code for e in escalations] == ["unknown_tool", "unknown_tool"]


async def test_a_human_stops_an_escalated_run() -> None:
    approvals, _ = approver_of(lambda r: ApprovalDecision(approved=False, reason="not worth it"))
    script = Script([unknown_plan()])
    result = await Agent(script.model, tools=[multiply], approvals=approvals, store=None).run("find it")
    assert result.stop.kind == "escalated"
    assert result.stop.code == "unknown_tool"
    assert "not worth it" in result.stop.detail


async def test_an_escalation_answer_must_fit_it() -> None:
    approvals, _ = approver_of(lambda r: ApprovalDecision(approved=True))  # no choice: a broken answer refuses
    script = Script([unknown_plan()])
    result = await Agent(script.model, tools=[multiply], approvals=approvals, store=None).run("find it")
    assert result.stop.kind == "escalated"
    assert "choice" in result.stop.detail


# -- escalation: low confidence, giving up ----------------------------------------------------------


async def test_a_turn_under_the_confidence_floor_is_not_acted_on_and_stops_the_run() -> None:
    script = Script([turn(tool_step("m", "multiply", {"a": 1, "b": 2}), "unsure", confidence=0.2)])
    agent = Agent(
        Planner(model=script.model, policy="step"),
        tools=[multiply],
        escalation=Escalation(confidence_floor=0.5, on_low_confidence="stop"),
        store=None,
    )
    result = await agent.run("multiply")
    assert result.stop.kind == "escalated"
    assert result.stop.code == "low_confidence"
    assert result.steps == {}  # not acted on


async def test_low_confidence_asks_a_human_who_lets_the_planner_try_again() -> None:
    approvals, asked = approver_of(lambda r: ApprovalDecision(approved=True, choice="replan"))
    script = Script(
        [
            turn(tool_step("m", "multiply", {"a": 1, "b": 2}), "unsure", confidence=0.2),
            turn(tool_step("m", "multiply", {"a": 1, "b": 2}), "sure now", confidence=0.9),
            {"thought": "done", "stop": True, "answer": "2"},
        ]
    )
    agent = Agent(
        Planner(model=script.model, policy="step"),
        tools=[multiply],
        approvals=approvals,
        escalation=Escalation(confidence_floor=0.5),
        store=None,
    )
    result = await agent.run("multiply")
    assert result.stop.kind == "goal_met"
    assert [(r.subject, r.code) for r in asked] == [("escalation", "low_confidence")]
    assert "A human lets you try again" in script.said(1)


async def test_an_upfront_plan_under_the_floor_is_judged_by_its_lowest_step_confidence() -> None:
    plan = {"steps": [tool_step("m", "multiply", {"a": 1, "b": 2}, confidence=0.3)]}
    agent = Agent(Script([plan]).model, tools=[multiply], escalation=Escalation(confidence_floor=0.5), store=None)
    result = await agent.run("multiply")  # nobody to ask: stop
    assert (result.stop.kind, result.stop.code) == ("escalated", "low_confidence")


async def test_a_planner_that_gives_up_never_ends_goal_met() -> None:
    step_script = Script([{"thought": "no way", "give_up": "the data does not exist"}])
    result = await Agent(Planner(model=step_script.model, policy="step"), tools=[multiply], store=None).run("x")
    assert (result.stop.kind, result.stop.code) == ("escalated", "planner_gave_up")
    assert "the data does not exist" in result.stop.detail
    upfront = Script([{"give_up": "impossible"}])
    result = await Agent(upfront.model, tools=[multiply], store=None).run("x")
    assert (result.stop.kind, result.stop.code) == ("escalated", "planner_gave_up")


# -- an empty plan ----------------------------------------------------------------------------------


async def test_an_empty_plan_with_no_work_done_is_a_plan_problem_without_a_review() -> None:
    script = Script([{"steps": []}, {"steps": []}, {"steps": []}])
    result = await Agent(script.model, tools=[multiply], store=None).run("x")
    assert result.stop.kind == "error"
    assert result.stop.code == "planner_output"
    assert "no step has been tried" in result.stop.detail


async def test_an_empty_plan_ends_goal_met_only_when_its_answer_passes_the_review() -> None:
    script = Script([{"steps": []}, {"answer": "placeholder"}, {"steps": []}, {"answer": "Paris"}])
    review = AnswerReview(checks=[lambda a: a != "placeholder" or "a placeholder is not an answer"])
    result = await Agent(script.model, tools=[multiply], review=review, store=None).run("capital of France?")
    assert result.stop.kind == "goal_met"
    assert result.answer == "Paris"
    reviews = events_of(result, AnswerReviewed)
    assert [(r.answer, r.passed) for r in reviews] == [("placeholder", False), ("Paris", True)]
    assert "a placeholder is not an answer" in script.said(2)  # the planner hears why


# -- the final answer's review ----------------------------------------------------------------------


async def test_an_answer_refused_as_often_as_allowed_stops_the_run_escalated() -> None:
    script = Script([GOOD_PLAN, {"answer": "about 50"}, {"steps": []}, {"answer": "roughly 50"}])
    review = AnswerReview(checks=[lambda a: "48" in a], max_rounds=2)
    result = await Agent(script.model, tools=[multiply], review=review, store=None).run("12 × 4")
    assert (result.stop.kind, result.stop.code) == ("escalated", "answer_rejected")
    assert result.answer is None


async def test_a_model_rubric_reviews_the_answer() -> None:
    judge = Script([{"passed": False, "reason": "no units"}, {"passed": True, "reason": "fine"}], name="scripted-judge")
    script = Script([GOOD_PLAN, {"answer": "48"}, {"steps": []}, {"answer": "48 apples"}])
    review = AnswerReview(rubric="The answer names its units.", judge=judge.model)
    result = await Agent(script.model, tools=[multiply], review=review, store=None).run("12 × 4 apples")
    assert result.answer == "48 apples"
    assert [r.reviewer for r in events_of(result, AnswerReviewed)] == ["rubric", "rubric"]
    assert "The answer names its units." in judge.said(0)
    assert "no units" in script.said(2)


async def test_a_human_reviewer_ticks_a_checklist_and_a_refused_answer_goes_back_with_the_notes() -> None:
    def review_answer(request: ApprovalRequest) -> ApprovalDecision:
        assert request.subject == "answer"
        assert request.checklist == ("correct", "cites a source")
        if request.output == "48":
            return ApprovalDecision(
                approved=False,
                reason="incomplete",
                checklist=(
                    ChecklistResult(item="correct", passed=True),
                    ChecklistResult(item="cites a source", passed=False, note="say how it was computed"),
                ),
            )
        return ApprovalDecision(approved=True, checklist=(ChecklistResult(item="correct", passed=True),))

    approvals, asked = approver_of(review_answer)
    script = Script([GOOD_PLAN, {"answer": "48"}, {"steps": []}, {"answer": "48 (by multiply)"}])
    review = AnswerReview(checklist=["correct", "cites a source"])
    result = await Agent(script.model, tools=[multiply], review=review, approvals=approvals, store=None).run("12 × 4")
    assert result.answer == "48 (by multiply)"
    assert [r.output for r in asked] == ["48", "48 (by multiply)"]
    assert "cites a source: say how it was computed" in script.said(2)


def test_a_checklist_needs_someone_to_tick_it() -> None:
    agent = Agent(Script([]).model, tools=[multiply], review=AnswerReview(checklist=["ok"]), store=None)
    with pytest.raises(UsageError, match="checklist needs a human reviewer"):
        agent.start("x")


def test_review_and_escalation_settings_list_every_problem() -> None:
    with pytest.raises(UsageError) as e:
        AnswerReview(rubric="", max_rounds=0, checklist=[""])
    assert {p.where for p in e.value.problems} >= {"rubric", "max_rounds", "checklist[0]"}
    with pytest.raises(UsageError) as e:
        Escalation(confidence_floor=2, on_fail="ignore", retries=0)  # type: ignore[arg-type]
    assert {p.where for p in e.value.problems} == {"confidence_floor", "on_fail", "retries"}


# -- a result that fails its checks: patch, retry, review --------------------------------------------


def flaky() -> tuple[Any, list[int]]:
    calls: list[int] = []

    @tool
    async def count() -> int:
        """Count up."""
        calls.append(1)
        return len(calls)

    return count, calls


CHECKED = {"steps": [tool_step("c", "count", {}, checks=[{"kind": "matches", "pattern": "^2$"}])]}


async def test_retry_runs_a_failed_check_again_before_patching() -> None:
    count, calls = flaky()
    agent = Agent(
        Script([CHECKED, {"answer": "2"}]).model, tools=[count], escalation=Escalation(on_fail="retry"), store=None
    )
    result = await agent.run("count to two")
    assert result.stop.kind == "goal_met"
    assert len(calls) == 2
    assert result.steps["c"].attempts == 2
    (attempt,) = events_of(result, StepAttemptFailed)
    assert attempt.error.kind == "acceptance"


async def test_a_plan_may_choose_retry_per_step() -> None:
    count, calls = flaky()
    plan = {"steps": [{**CHECKED["steps"][0], "on_fail": "retry"}]}
    result = await Agent(Script([plan, {"answer": "2"}]).model, tools=[count], store=None).run("count")
    assert result.stop.kind == "goal_met"
    assert len(calls) == 2


async def test_a_side_effecting_step_is_not_retried_on_a_failed_check() -> None:
    calls: list[int] = []

    @tool(side_effect=True)
    async def send() -> str:
        """Send a message."""
        calls.append(1)
        return "sent"

    plan = {"steps": [tool_step("s", "send", {}, checks=[{"kind": "contains", "text": "ok"}])]}
    agent = Agent(
        Script([plan, {"steps": []}, {"answer": "gave up on sending"}]).model,
        tools=[send],
        escalation=Escalation(on_fail="retry"),
        store=None,
    )
    result = await agent.run("send")
    assert len(calls) == 1
    assert result.steps["s"].status == "failed"


async def test_a_human_reviews_a_failed_result_and_accepts_it() -> None:
    count, _ = flaky()
    approvals, asked = approver_of(lambda r: ApprovalDecision(approved=True, reason="1 is fine"))
    plan = {"steps": [{**CHECKED["steps"][0], "on_fail": "patch"}]}  # a plan cannot lift a review
    agent = Agent(
        Script([plan, {"answer": "1"}]).model,
        tools=[count],
        approvals=approvals,
        escalation=Escalation(on_fail="review"),
        store=None,
    )
    result = await agent.run("count")
    assert result.stop.kind == "goal_met"
    (request,) = asked
    assert request.subject == "review"
    assert request.output == 1
    assert request.verdict is not None
    assert not request.verdict.passed
    (done,) = events_of(result, StepSucceeded)
    assert done.verdict.passed
    assert done.verdict.checks[-1].name == "review"


async def test_a_refused_review_sends_the_step_to_the_planner() -> None:
    count, _ = flaky()
    approvals, _ = approver_of(lambda r: ApprovalDecision(approved=False, reason="wrong"))
    script = Script([CHECKED, {"steps": []}, {"answer": "could not count"}])
    agent = Agent(script.model, tools=[count], approvals=approvals, escalation=Escalation(on_fail="review"), store=None)
    result = await agent.run("count")
    assert result.steps["c"].status == "failed"
    assert "refused by human: wrong" in script.said(1)


# -- an executor's confidence -----------------------------------------------------------------------


async def test_a_model_executor_reports_its_confidence_and_acceptance_can_require_one() -> None:
    plan = {"steps": [{"id": "w", "description": "write a haiku"}]}
    executor = Script([json.dumps({"result": "a haiku", "confidence": 0.9})], name="scripted-executor")
    result = await Agent(
        Script([plan, {"answer": "a haiku"}]).model,
        executor=ModelExecutor(model=executor.model),
        acceptance=Acceptance(min_confidence=0.5),
        store=None,
    ).run("haiku")
    assert result.stop.kind == "goal_met"
    assert result.steps["w"].output == "a haiku"
    (done,) = events_of(result, StepSucceeded)
    assert done.confidence == 0.9

    unsure = Script([json.dumps({"result": "a haiku?", "confidence": 0.1})], name="scripted-executor")
    planner = Script([plan, {"steps": []}, {"answer": "no haiku"}])
    result = await Agent(
        planner.model,
        executor=ModelExecutor(model=unsure.model),
        acceptance=Acceptance(min_confidence=0.5),
        store=None,
    ).run("haiku")
    assert result.steps["w"].status == "failed"
    assert "confidence 0.10 is under 0.50" in planner.said(1)


# -- questions to the user --------------------------------------------------------------------------


async def test_the_planner_asks_the_user_and_plans_with_the_answer() -> None:
    approvals, asked = approver_of(lambda r: ApprovalDecision(approved=True, text="use 12 and 4"))
    script = Script(
        [
            {"thought": "which numbers?", "question": "Which numbers should I multiply?"},
            turn(tool_step("m", "multiply", {"a": 12, "b": 4}), "as told"),
            {"thought": "done", "stop": True, "answer": "48"},
        ]
    )
    agent = Agent(Planner(model=script.model, policy="step"), tools=[multiply], approvals=approvals, store=None)
    result = await agent.run("multiply the numbers")
    assert result.answer == "48"
    assert [(r.subject, r.reason) for r in asked] == [("question", "Which numbers should I multiply?")]
    assert "The user answered your question: use 12 and 4" in script.said(1)
    assert "use 12 and 4" in script.said(2)  # and it stays in what the planner is told


async def test_a_question_nobody_can_answer_gets_one_repair_then_stops_escalated() -> None:
    ask = {"question": "Which numbers?"}
    result = await Agent(Script([ask, ask]).model, tools=[multiply], store=None).run("multiply")
    assert (result.stop.kind, result.stop.code) == ("escalated", "clarification_needed")


async def test_a_question_is_answered_after_a_restart_and_wall_time_counts_only_while_running() -> None:
    now = [1000.0]
    context = RunContext(clock=lambda: now[0])
    store = MemoryStore()

    def agent(*replies: Any) -> Agent:
        script = Script(list(replies))
        return Agent(
            script.model,
            tools=[multiply],
            approvals=Approvals(deferred=True),
            context=context,
            budget=SAFETY,
            store=store,
        )

    first = await agent({"question": "Which numbers?"}).run("multiply", run_id="q")
    assert first.stop.kind == "waiting"
    (question,) = RunState.fold(first.events).pending_approvals
    assert question.subject == "question"
    now[0] += 3600  # an hour with the question open: not counted against the 30 s budget

    again = await agent().resume("q")  # a restart before anyone answered: it waits under the same id
    still = await again.result()
    assert still.stop.kind == "waiting"
    assert [a.approval_id for a in RunState.fold(still.events).pending_approvals] == [question.approval_id]
    asked = [e for e in still.events if isinstance(e, ApprovalRequested)]
    assert len(asked) == 1

    run = await agent(GOOD_PLAN, {"answer": "48"}).resume("q")  # the planner is not asked again first
    run.answer(question.approval_id, "12 and 4")
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "48"


async def test_answers_that_do_not_fit_a_question_are_refused() -> None:
    store = MemoryStore()
    agent = Agent(
        Script([{"question": "Which?"}]).model, tools=[multiply], approvals=Approvals(deferred=True), store=store
    )
    await agent.run("x", run_id="q")
    run = await Agent(Script([]).model, tools=[multiply], approvals=Approvals(deferred=True), store=store).resume("q")
    (question,) = run.state.pending_approvals
    with pytest.raises(UsageError, match="needs an answer"):
        run.answer(question.approval_id, "   ")
    with pytest.raises(UsageError, match="a choice answers only"):
        run.decide(question.approval_id, approved=True, text="x", choice="retry")
    run.cancel()
    await run.result()


# -- new information while it runs ------------------------------------------------------------------


async def test_new_information_makes_the_planner_replan_keeping_finished_work() -> None:
    release = asyncio.Event()

    @tool
    async def slow(x: int) -> int:
        """Wait, then echo."""
        await release.wait()
        return x

    first = {
        "steps": [
            tool_step("m", "multiply", {"a": 12, "b": 4}),
            tool_step("s", "slow", {"x": 1}),
        ]
    }
    patched = {"reason": "numbers changed", "steps": [tool_step("m2", "multiply", {"a": 12, "b": 5})]}
    script = Script([first, patched, {"answer": "60"}])
    agent = Agent(script.model, tools=[multiply, slow], store=MemoryStore(), budget=SAFETY)
    run = agent.start("multiply")
    async for event in run.events():
        if isinstance(event, StepSucceeded) and event.step_id == "m":
            break
    run.tell("use 5 instead of 4", constraint=True)
    result = await run.result()
    release.set()
    assert result.stop.kind == "goal_met", result.stop
    assert result.steps["m"].output == 48  # finished work is kept
    assert result.steps["m2"].output == 60
    (told,) = events_of(result, InformationAdded)
    assert told.constraint
    assert events_of(result, PlanProposed)[-1].trigger == "information"
    assert "New constraint from user: use 5 instead of 4" in script.said(1)
    with pytest.raises(UsageError, match="it has finished"):
        run.tell("too late")
    report = await agent.replay(result.run_id)  # the news is served where the log has it
    assert report.divergence is None
    assert report.matched


# -- root causes ------------------------------------------------------------------------------------


async def test_a_stop_after_refused_answers_names_their_problems_not_the_script_running_out() -> None:
    bad = {"steps": [tool_step("m", "multiply", {"a": "${nowhere}", "b": 4})]}
    planner = ScriptedModel([bad, bad])  # the repairs allowed would need a third reply
    result = await Agent(Planner(model=planner, max_repairs=2), tools=[multiply], store=None).run("multiply")
    assert (result.stop.kind, result.stop.code) == ("error", "planner_output")
    assert result.stop.detail.startswith("the planner's output kept failing its checks: ")
    assert "nowhere" in result.stop.detail.split("(then:")[0]


# -- replayed exactly -------------------------------------------------------------------------------


async def test_a_run_with_every_rule_replays_exactly_from_its_log() -> None:
    count, _ = flaky()

    def human(request: ApprovalRequest) -> ApprovalDecision:
        if request.subject == "escalation":
            return ApprovalDecision(approved=True, choice="guidance", text="count instead")
        if request.subject == "question":
            return ApprovalDecision(approved=True, text="count to one")
        return ApprovalDecision(approved=True, reason="fine")  # the review of the step's result

    approvals, asked = approver_of(human)
    script = Script([unknown_plan(), {"question": "How far?"}, CHECKED, {"answer": "1"}])
    store = MemoryStore()
    agent = Agent(
        script.model,
        tools=[count],
        approvals=approvals,
        escalation=Escalation(on_fail="review"),
        review=AnswerReview(checks=[lambda a: a == "1"]),
        store=store,
    )
    result = await agent.run("count", run_id="rules")
    assert result.stop.kind == "goal_met", result.stop
    assert [r.subject for r in asked] == ["escalation", "question", "review"]
    report = await agent.replay("rules")
    assert report.divergence is None
    assert report.matched
