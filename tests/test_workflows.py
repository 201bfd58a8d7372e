"""Hand-offs to workflows: the planner gives the rest of the work to a registered deterministic
script, whose output is the run's answer — checked, approved, journaled and run exactly once like
any tool step, and replayed exactly."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from planexec import (
    Agent,
    AnswerReview,
    ApprovalDecision,
    ApprovalRequest,
    Approvals,
    Event,
    Limits,
    Planner,
    ToolContext,
    ToolError,
    UsageError,
    Workflow,
    tool,
    workflow,
)
from planexec.errors import PlanInvalid, ToolDefinitionError
from planexec.log import (
    ModelCalled,
    PlannerOutputRejected,
    RunFinished,
    RunSuspended,
    StepFailed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepStreamed,
    StepSucceeded,
    dump_event,
)
from planexec.models import ModelRequest
from planexec.plan import CheckContext, Step, check_steps, validate_steps
from planexec.runtime import replay_log
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel, ScriptedModel, StreamingScriptedModel, handoff_reply
from planexec.tools import Toolset

from .cli_support import invoke
from .support import SAFETY, events_of, tool_step


@tool
async def transcript(meeting: str) -> str:
    """Read a meeting's transcript."""
    return f"{meeting}: Ann will ship the release on Friday. Bo reviews the notes."


@dataclass
class Outbox:
    """Where the summary workflow sends: one entry per idempotency key, and every call it got."""

    sent: dict[str, str] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_first: int = 0

    def workflow(self, **options: Any) -> Workflow:
        @workflow(**options)
        async def send_summary(text: str, to: list[str], ctx: ToolContext) -> str:
            """Summarize a transcript and send the summary to the people listed.

            Args:
                text: The transcript.
                to: Who gets the summary.
            """
            self.calls.append(ctx.step_id)
            if self.fail_first > 0:
                self.fail_first -= 1
                raise ToolError("the mail server is down")
            summary = " ".join(text.split()[:6])
            self.sent.setdefault(ctx.idempotency_key, f"to {', '.join(to)}: {summary}")
            return f"sent to {len(to)}: {summary}"

        return send_summary


def summary_plan(**args: Any) -> dict[str, Any]:
    return handoff_reply(
        "send_summary",
        {"text": "${read}", "to": ["ann@example.com"], **args},
        steps=[tool_step("read", "transcript", {"meeting": "standup"})],
        reason="read it, then the workflow summarizes and sends",
    )


ANSWER = "sent to 1: standup: Ann will ship the release"


def agent(planner: Any, outbox: Outbox, tmp_path: Path, **options: Any) -> Agent:
    workflow_options = options.pop("workflow_options", {})
    return Agent(
        planner,
        tools=[transcript],
        workflows=[outbox.workflow(**workflow_options)],
        store=SQLiteStore(tmp_path / "runs.db"),
        budget=SAFETY,
        **options,
    )


# -- defining workflows ----------------------------------------------------------------------------


def test_a_workflow_is_a_plain_value_built_from_a_function() -> None:
    flow = Outbox().workflow()
    assert isinstance(flow, Workflow)
    assert flow.name == "send_summary"
    assert flow.description == "Summarize a transcript and send the summary to the people listed."
    assert flow.parameters["required"] == ["text", "to"]
    assert flow.parameters["properties"]["to"]["description"] == "Who gets the summary."
    assert "ctx" not in flow.parameters["properties"]
    assert not flow.read_only
    assert flow.tool.side_effect  # its step changes the world: it is journaled with an intent

    def plain(n: int) -> int:
        """Count."""
        return n

    quiet = Workflow.from_function(plain, read_only=True, name="count")
    assert (quiet.name, quiet.read_only, quiet.tool.side_effect) == ("count", True, False)


class Opaque:
    """A type with no JSON Schema."""


def test_a_bad_workflow_definition_lists_every_problem() -> None:
    def nothing(a: Opaque, b) -> None:  # type: ignore[no-untyped-def]
        pass

    with pytest.raises(ToolDefinitionError) as info:
        workflow(nothing)
    codes = sorted(p.code for p in info.value.problems)
    assert codes == ["tool_description", "tool_signature", "tool_type"], info.value


def test_an_agent_refuses_bad_workflows_listing_every_problem() -> None:
    one = Outbox().workflow()
    clash = Outbox().workflow(name="transcript")
    with pytest.raises(UsageError) as info:
        Agent(ScriptedModel([]), tools=[transcript], workflows=[one, one, clash, "send"], store=None)  # type: ignore[list-item]
    found = sorted((p.code, p.where) for p in info.value.problems)
    assert found == [
        ("duplicate_workflow", "workflow 'send_summary'"),
        ("workflow", "workflows: 'send'"),
        ("workflow_name", "workflow 'transcript'"),
    ]


# -- the hand-off --------------------------------------------------------------------------------


async def test_a_hand_off_runs_the_workflow_once_and_its_output_is_the_answer(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel([summary_plan()])
    result = await agent(planner, outbox, tmp_path).run("Summarize the standup and send it", run_id="h1")

    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    assert "workflow send_summary finished the work" in result.stop.detail
    assert outbox.calls == ["handoff"]
    assert list(outbox.sent) == ["h1:handoff:v1"]
    planner.assert_consumed()  # one planner call: no final-answer call after the workflow
    assert [e.purpose for e in events_of(result, ModelCalled)] == ["planner.propose"]

    plan = result.plans[-1]
    assert plan.ids == ("read", "handoff")
    step = plan.step("handoff")
    assert (step.tool, step.effect, step.depends_on) == ("send_summary", "write", ("read",))
    started = [e for e in events_of(result, StepStarted) if e.step_id == "handoff"]
    assert started[0].idempotency_key == "h1:handoff:v1"

    # the planner was told about the workflow, apart from the tools
    prompt = planner.calls[0].messages[1].content
    assert "Workflows:" in prompt
    assert "- send_summary(text: string, to: array<string>) [writes]" in prompt.replace("string[]", "array<string>")
    tools_part = prompt.split("Workflows:")[0]
    assert "send_summary" not in tools_part

    await _log_is_intact(tmp_path, "h1", result.events)  # the log in the SQLite file is the run's


async def test_a_hand_off_with_no_steps_and_a_step_by_step_hand_off(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel([handoff_reply("send_summary", {"text": "notes", "to": ["bo@example.com"]})])
    result = await agent(planner, outbox, tmp_path).run("send the notes")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "sent to 1: notes"
    assert result.plans[-1].ids == ("handoff",)

    step = tool_step("send", "send_summary", {"text": "short notes", "to": ["bo@example.com"]})
    turns = ScriptedModel([{"thought": "the workflow does it", "confidence": 0.9, "stop": False, "step": step}])
    result = await agent(Planner(model=turns, policy="step"), outbox, tmp_path).run("send the notes")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "sent to 1: short notes"
    turns.assert_consumed()


async def test_a_read_only_workflow_makes_a_read_step(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel([summary_plan()])
    options = {"workflow_options": {"read_only": True}}
    result = await agent(planner, outbox, tmp_path, **options).run("summarize")
    assert result.answer == ANSWER
    assert result.plans[-1].step("handoff").effect == "read"


# -- approvals -------------------------------------------------------------------------------------


class Approver:
    def __init__(self, approved: bool) -> None:
        self.approved = approved
        self.asked: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision(approved=self.approved, by="carol", reason="checked" if self.approved else "not now")


async def test_a_sensitive_workflow_runs_once_a_human_approves(tmp_path: Path) -> None:
    outbox = Outbox()
    approver = Approver(approved=True)
    run = agent(
        ScriptedModel([summary_plan()]),
        outbox,
        tmp_path,
        approvals=Approvals(approver=approver),
        workflow_options={"sensitive": True},
    )
    result = await run.run("summarize and send")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    assert [(r.subject, r.step.id if r.step else None) for r in approver.asked] == [("step", "handoff")]
    assert outbox.calls == ["handoff"]


async def test_a_refused_sensitive_workflow_never_runs_and_the_run_stops_rejected(tmp_path: Path) -> None:
    outbox = Outbox()
    approver = Approver(approved=False)
    run = agent(
        ScriptedModel([summary_plan()]),
        outbox,
        tmp_path,
        approvals=Approvals(approver=approver),
        workflow_options={"sensitive": True},
    )
    result = await run.run("summarize and send")
    assert result.stop.kind == "rejected", result.stop
    assert "not now" in result.stop.detail
    assert outbox.calls == []
    assert result.answer is None


async def test_a_deferred_approval_survives_a_restart_and_the_workflow_runs_once(tmp_path: Path) -> None:
    outbox = Outbox()
    options = {"approvals": Approvals(deferred=True), "workflow_options": {"sensitive": True}}
    first = agent(ScriptedModel([summary_plan()]), outbox, tmp_path, **options)
    waiting = await first.run("summarize and send", run_id="d1")
    assert waiting.stop.kind == "waiting"
    assert outbox.calls == []
    [suspended] = events_of(waiting, RunSuspended)
    [approval_id] = suspended.approvals

    later = agent(ScriptedModel([]), outbox, tmp_path, **options)  # a new process: no more planner calls
    run = await later.resume("d1")
    run.decide(approval_id, approved=True, by="carol")
    result = await run.result()
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    assert outbox.calls == ["handoff"]


# -- bad hand-offs ---------------------------------------------------------------------------------


async def test_bad_hand_offs_are_refused_with_every_problem_and_repaired(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel(
        [
            handoff_reply("send_all", {"text": "x"}),
            summary_plan(to="ann@example.com", cc=["x"]),
            summary_plan(),
        ]
    )
    result = await agent(planner, outbox, tmp_path).run("summarize and send")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    rejected = events_of(result, PlannerOutputRejected)
    assert [p.code for p in rejected[0].problems] == ["unknown_workflow"]
    assert "known: send_summary" in rejected[0].problems[0].message
    assert sorted(p.code for p in rejected[1].problems) == ["invalid_arguments", "invalid_arguments"]
    assert "unknown workflow 'send_all'" in planner.calls[1].last_user_text
    assert outbox.calls == ["handoff"]


async def test_a_huge_hand_off_is_refused_and_repaired(tmp_path: Path) -> None:
    outbox = Outbox()
    huge = {"text": "x" * 1_100_000, "to": []}
    planner = ScriptedModel([handoff_reply("send_summary", huge), summary_plan()])
    limits = Limits(max_reply_chars=2_000_000)
    result = await agent(planner, outbox, tmp_path, limits=limits).run("summarize and send")
    assert result.stop.kind == "goal_met", result.stop
    [rejected] = events_of(result, PlannerOutputRejected)
    assert [p.code for p in rejected.problems] == ["too_large"]
    assert outbox.calls == ["handoff"]


async def test_a_reply_too_large_to_read_stops_the_run_with_a_typed_reason(tmp_path: Path) -> None:
    outbox = Outbox()
    huge = {"text": "x" * 1_100_000, "to": []}
    planner = ScriptedModel([handoff_reply("send_summary", huge)])
    result = await agent(planner, outbox, tmp_path).run("summarize and send", run_id="big")
    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed")
    assert "max_reply_chars" in result.stop.detail
    assert outbox.calls == []
    await _log_is_intact(tmp_path, "big", result.events)


async def _log_is_intact(tmp_path: Path, run_id: str, events: Sequence[Event]) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    logged = [dump_event(s.event) for s in await store.read(run_id)]
    assert logged == [dump_event(e) for e in events]
    assert isinstance(events[-1], RunFinished)
    await store.close()


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"x": value}
    return value


async def test_deep_and_nan_hand_off_arguments_are_refused_and_repaired(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel(
        [
            handoff_reply("send_summary", {"text": _deep(150), "to": []}),
            handoff_reply("send_summary", {"text": "x", "to": [], "n": math.nan}),
            summary_plan(),
        ]
    )
    result = await agent(planner, outbox, tmp_path).run("summarize and send")
    assert result.stop.kind == "goal_met", result.stop
    rejected = events_of(result, PlannerOutputRejected)
    assert [p.code for p in rejected[0].problems] == ["too_deep"]
    assert [p.code for p in rejected[1].problems] == ["invalid_json"]
    assert outbox.calls == ["handoff"]


async def test_a_planner_that_keeps_handing_off_wrongly_stops_with_a_typed_reason(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel([handoff_reply("nope", {})] * 3)
    result = await agent(planner, outbox, tmp_path).run("summarize and send", run_id="bad")
    assert result.stop.kind == "error"
    assert result.stop.code == "planner_output"
    assert "unknown workflow 'nope'" in result.stop.detail
    assert outbox.calls == []
    await _log_is_intact(tmp_path, "bad", result.events)


def test_the_checks_keep_a_hand_off_last_and_alone() -> None:
    flow = Outbox().workflow()
    ctx = CheckContext(tools=Toolset(transcript, flow.tool), workflows={"send_summary"}, default_executor="model")
    args = {"text": "t", "to": []}
    steps = [
        Step(id="read", description="read", tool="transcript", args={"meeting": "m"}),
        Step(id="send", description="send", tool="send_summary", args=args),
        Step(id="again", description="send again", tool="send_summary", args=args, depends_on=("send",)),
        Step(id="after", description="after", tool="transcript", args={"meeting": "m"}, depends_on=("send",)),
        Step(id="model", description="think", allowed_tools=("send_summary",)),
    ]
    codes = sorted(p.code for p in check_steps(steps, ctx))
    assert codes == ["after_handoff", "handoff_not_last", "handoff_twice", "workflow_not_a_tool"]
    with pytest.raises(PlanInvalid):
        validate_steps(steps, ctx)


# -- failures, crashes, replay ---------------------------------------------------------------------


async def test_a_workflow_that_fails_fails_its_step_and_the_planner_patches(tmp_path: Path) -> None:
    outbox = Outbox(fail_first=1)
    planner = ScriptedModel([summary_plan(), handoff_reply("send_summary", {"text": "${read}", "to": ["bo@x.io"]})])
    result = await agent(planner, outbox, tmp_path).run("summarize and send", run_id="f1")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "sent to 1: standup: Ann will ship the release"
    [failed] = events_of(result, StepFailed)
    assert failed.step_id == "handoff"
    assert failed.error.kind == "tool_error"
    assert "the mail server is down" in failed.error.message
    assert [e.purpose for e in events_of(result, ModelCalled)] == ["planner.propose", "planner.patch"]
    assert "the mail server is down" in planner.calls[1].last_user_text
    assert outbox.calls == ["handoff", "handoff_2"]
    assert list(outbox.sent) == ["f1:handoff_2:v2"]
    assert result.plans[-1].ids == ("read", "handoff_2")


def planner_model() -> FunctionModel:
    """Plans once; any other call is a failure of the test (a hand-off needs no final answer)."""

    def reply(request: ModelRequest) -> Any:
        assert request.purpose == "planner.propose", request.purpose
        return summary_plan()

    return FunctionModel(reply)


async def test_a_crash_at_any_point_never_sends_twice(tmp_path: Path) -> None:
    reference = Outbox()
    whole = await agent(planner_model(), reference, tmp_path, workflow_options={"idempotent": True}).run(
        "summarize and send", run_id="c1"
    )
    assert whole.answer == ANSWER
    events = list(whole.events)
    intent = next(i for i, e in enumerate(events) if isinstance(e, StepStarted) and e.step_id == "handoff")
    for cut in range(1, len(events)):
        # the outside world as the crash left it: the summary was sent once its intent was written
        outbox = Outbox(sent=dict(reference.sent) if cut > intent else {})
        store = SQLiteStore(tmp_path / f"cut{cut}.db")
        await store.append("c1", events[:cut], expected_seq=0)
        again = Agent(
            planner_model(),
            tools=[transcript],
            workflows=[outbox.workflow(idempotent=True)],
            store=store,
            budget=SAFETY,
        )
        result = await (await again.resume("c1")).result()
        assert result.stop.kind == "goal_met", (cut, result.stop)
        assert result.answer == ANSWER, cut
        assert outbox.sent == reference.sent, cut  # one summary, under one key
        finished = {e.step_id for e in events[:cut] if isinstance(e, StepSucceeded)}
        if "handoff" in finished:
            assert outbox.calls == [], cut
        if cut == intent + 1:  # the intent without its result: sent again with the same key
            assert [e.step_id for e in events_of(result, StepRequeued)] == ["handoff"]
        logged = [dump_event(s.event) for s in await store.read("c1")]
        assert logged == [dump_event(e) for e in result.events]
        await store.close()


async def test_an_interrupted_unsafe_workflow_is_held_for_a_human_not_repeated(tmp_path: Path) -> None:
    reference = Outbox()
    whole = await agent(planner_model(), reference, tmp_path).run("summarize and send", run_id="u1")
    events = list(whole.events)
    cut = next(i for i, e in enumerate(events) if isinstance(e, StepStarted) and e.step_id == "handoff") + 1
    store = SQLiteStore(tmp_path / "cut.db")
    await store.append("u1", events[:cut], expected_seq=0)
    outbox = Outbox(sent=dict(reference.sent))
    again = Agent(planner_model(), tools=[transcript], workflows=[outbox.workflow()], store=store, budget=SAFETY)
    result = await (await again.resume("u1")).result()
    assert result.stop.kind == "waiting"
    assert [e.step_id for e in events_of(result, StepHeld)] == ["handoff"]
    assert outbox.calls == []
    await store.close()


async def test_a_hand_off_replays_exactly_with_no_model_and_no_tool(tmp_path: Path) -> None:
    outbox = Outbox(fail_first=1)
    planner = ScriptedModel([summary_plan(), handoff_reply("send_summary", {"text": "${read}", "to": ["bo@x.io"]})])
    live = agent(planner, outbox, tmp_path)
    result = await live.run("summarize and send", run_id="r1")
    assert result.stop.kind == "goal_met"
    calls = list(outbox.calls)

    report = await replay_log(list(result.events))  # the set-up the log records: stand-ins only
    assert report.matched, report.divergence
    assert [dump_event(e) for e in report.events] == [dump_event(e) for e in result.events]
    assert report.result is not None
    assert report.result.answer == result.answer

    again = await live.replay("r1")
    assert again.matched, again.divergence
    assert outbox.calls == calls  # the workflow was not called by either replay
    assert len(planner.calls) == 2


async def test_a_reviewed_answer_is_still_reviewed_after_a_hand_off(tmp_path: Path) -> None:
    """A hand-off cannot lift the answer review: the planner writes the answer, and it is judged."""
    outbox = Outbox()
    planner = ScriptedModel([summary_plan(), {"answer": "Sent the standup summary to Ann."}])
    seen: list[str] = []

    def mentions_ann(answer: str) -> bool:
        seen.append(answer)
        return "Ann" in answer

    result = await agent(planner, outbox, tmp_path, review=AnswerReview(checks=[mentions_ann])).run("send it")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "Sent the standup summary to Ann."
    assert seen == ["Sent the standup summary to Ann."]
    assert ANSWER in planner.calls[1].last_user_text  # the workflow's output is in the record
    assert outbox.calls == ["handoff"]


async def test_a_streamed_plan_hands_off_once_its_steps_are_done_and_replays(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = StreamingScriptedModel([summary_plan()], chunks=12)
    result = await agent(planner, outbox, tmp_path).run("summarize and send", run_id="s1")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    assert [e.step.id for e in events_of(result, StepStreamed)] == ["read"]  # the hand-off waits for the plan
    assert outbox.calls == ["handoff"]
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence


async def test_a_flat_turn_hands_off_with_a_step_calling_the_workflow(tmp_path: Path) -> None:
    outbox = Outbox()
    turn = {
        "thought": "the workflow does the rest",
        "next_step": "summarize and send the notes",
        "tool": "send_summary",
        "arguments": '{"text": "flat notes", "to": ["bo@example.com"]}',
        "stop": False,
        "confidence": 0.9,
    }
    planner = Planner(model=ScriptedModel([turn]), policy="step", turn_format="flat")
    result = await agent(planner, outbox, tmp_path).run("send the notes")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == "sent to 1: flat notes"
    assert result.plans[-1].step("s1").tool == "send_summary"


async def test_planexec_replay_reproduces_a_hand_off_from_the_store(tmp_path: Path) -> None:
    outbox = Outbox()
    result = await agent(ScriptedModel([summary_plan()]), outbox, tmp_path).run("summarize and send", run_id="cli1")
    assert result.stop.kind == "goal_met"
    done = await asyncio.to_thread(invoke, ["replay", "cli1", "--store", str(tmp_path / "runs.db"), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["matched"] is True
    assert report["compared"] == report["events"] == len(result.events)
    assert outbox.calls == ["handoff"]


async def test_replanning_after_each_step_keeps_the_hand_off_and_asks_nothing_after_it(tmp_path: Path) -> None:
    outbox = Outbox()
    planner = ScriptedModel([summary_plan(), summary_plan()])  # the plan, then the patch after "read"
    chosen = Planner(model=planner, replan="after_each_step")
    result = await agent(chosen, outbox, tmp_path).run("summarize and send", run_id="a1")
    assert result.stop.kind == "goal_met", result.stop
    assert result.answer == ANSWER
    assert [e.purpose for e in events_of(result, ModelCalled)] == ["planner.propose", "planner.patch"]
    assert result.plans[-1].ids == ("read", "handoff")  # the hand-off not yet started keeps its id
    assert list(outbox.sent) == ["a1:handoff:v1"]  # unchanged: the same step, the same key


@pytest.mark.parametrize(
    ("handoff", "where"),
    [
        ({"workflow": "send_summary", "args": "[1, 2]"}, "handoff.args"),
        ({"workflow": "send_summary", "args": "{not json"}, "handoff.args"),
        ("send_summary", "handoff"),
        ({"workflow": "send_summary", "args": {}, "when": "now"}, "handoff.when"),
    ],
)
async def test_a_malformed_hand_off_is_refused_and_repaired(tmp_path: Path, handoff: Any, where: str) -> None:
    outbox = Outbox()
    planner = ScriptedModel([{"reason": "", "steps": [], "handoff": handoff}, summary_plan()])
    result = await agent(planner, outbox, tmp_path).run("summarize and send")
    assert result.stop.kind == "goal_met", result.stop
    [rejected] = events_of(result, PlannerOutputRejected)
    assert where in {p.where for p in rejected.problems}, rejected.problems
    assert outbox.calls == ["handoff"]
