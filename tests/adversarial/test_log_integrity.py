"""No silent failure, no lost log: a run whose log cannot be written never reports success, and
whatever a model, a tool or a human hands the run is stored faithfully or refused with a typed
error — never NaN turned into null, never a missing ``run_finished``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, Approvals, Budget, Limits, Planner, UsageError, tool
from planexec.errors import UnrecoverableError
from planexec.log import ModelCalled, PlannerOutputRejected, RunState, StepFailed, dump_event
from planexec.models import ModelRequest, ModelResponse, ToolCall, Usage
from planexec.store import MemoryStore, SQLiteStore
from planexec.testing import FunctionModel, ScriptedModel
from tests.support import events_of, tool_step

ANSWER = {"answer": "done"}


class Calls:
    def __init__(self) -> None:
        self.count = 0


def counting_tool(calls: Calls) -> Any:
    @tool
    async def work(n: int) -> int:
        """Do some work."""
        calls.count += 1
        return n

    return work


async def test_a_junk_database_stops_the_run_before_anything_is_spent(tmp_path: Path) -> None:
    junk = tmp_path / "runs.db"
    junk.write_bytes(b"this is not a database " * 200)
    calls = Calls()
    planner = ScriptedModel([{"steps": [tool_step("w", "work", {"n": 1})]}, ANSWER])
    result = await Agent(planner, tools=[counting_tool(calls)], store=SQLiteStore(junk)).run("work")
    assert result.stop.kind == "error"
    assert result.stop.code == "log_failed"
    assert result.answer is None
    assert planner.calls == []  # nothing was asked, nothing was done
    assert calls.count == 0
    with pytest.raises(UnrecoverableError):
        result.raise_for_stop()


async def test_a_store_that_fails_mid_run_never_reports_success(tmp_path: Path) -> None:
    class FillingUp(SQLiteStore):
        """A real SQLite store on a disk that fills up after a few writes."""

        def __init__(self, path: Path, room: int) -> None:
            super().__init__(path)
            self.room = room

        async def append(self, run_id: str, events: Any, *, expected_seq: int) -> int:
            if self.room <= 0:
                raise OSError(28, "No space left on device")
            self.room -= 1
            return await super().append(run_id, events, expected_seq=expected_seq)

    for room in range(1, 5):  # a run of this plan makes five appends: fail each of the first four
        calls = Calls()
        planner = ScriptedModel(
            [{"steps": [tool_step(f"w{i}", "work", {"n": i}) for i in range(3)]}, ANSWER], name=f"p{room}"
        )
        store = FillingUp(tmp_path / f"runs{room}.db", room)
        result = await Agent(planner, tools=[counting_tool(calls)], store=store).run("work", run_id=f"r{room}")
        assert result.stop.kind == "error", (room, result.stop)
        assert result.stop.code == "log_failed"
        assert result.events[-1].kind == "run_finished"
        stored = await SQLiteStore(tmp_path / f"runs{room}.db").read(f"r{room}")
        assert len(stored) < len(result.events)  # what could not be written is known to be missing
        await store.close()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_a_tool_returning_nan_fails_its_step_and_says_so(bad: float) -> None:
    @tool
    async def measure() -> dict[str, float]:
        """Measure."""
        return {"value": bad}

    planner = ScriptedModel([{"steps": [tool_step("m", "measure", {})]}], name="p")
    store = MemoryStore()
    result = await Agent(planner, tools=[measure], store=store, budget=Budget(replans=0)).run("m", run_id="nan")
    (failed,) = events_of(result, StepFailed)
    assert failed.error.kind == "invalid_output"
    assert "not JSON" in failed.error.message
    assert "output.value" in failed.error.message
    logged = [s.event for s in await store.read("nan")]
    assert [dump_event(e) for e in logged] == [dump_event(e) for e in result.events]
    assert RunState.fold(logged).steps["m"].output is None  # nothing was silently stored as null


async def test_text_with_lone_surrogates_is_stored_faithfully(tmp_path: Path) -> None:
    odd = "broken \udcff bytes \ud800 and \x00 nul"

    @tool
    async def read_file() -> str:
        """Read a file with undecodable bytes."""
        return odd

    planner = ScriptedModel([{"steps": [tool_step("r", "read_file", {})]}, {"answer": odd}])
    store = SQLiteStore(tmp_path / "runs.db")
    result = await Agent(planner, tools=[read_file], store=store).run(odd, run_id="odd")
    assert result.stop.kind == "goal_met"
    state = RunState.fold(s.event for s in await store.read("odd"))
    assert state.outputs == {"r": odd}
    assert state.answer == odd
    assert state.goal == odd
    await store.close()


async def test_a_huge_tool_output_is_refused_not_stored(tmp_path: Path) -> None:
    @tool
    async def flood() -> str:
        """Return a lot."""
        return "x" * 20_000_000

    planner = ScriptedModel([{"steps": [tool_step("f", "flood", {})]}], name="p")
    db = tmp_path / "runs.db"
    store = SQLiteStore(db)
    result = await Agent(planner, tools=[flood], store=store, budget=Budget(replans=0)).run("f", run_id="big")
    (failed,) = events_of(result, StepFailed)
    assert failed.error.kind == "invalid_output"
    assert "more than the limit of 1,000,000" in failed.error.message
    await store.close()
    assert sum(f.stat().st_size for f in tmp_path.iterdir()) < 2_000_000  # noqa: ASYNC240 - a test's own files


async def test_the_output_limit_is_a_setting() -> None:
    @tool
    async def some() -> str:
        """Return some."""
        return "y" * 5000

    planner = ScriptedModel([{"steps": [tool_step("s", "some", {})]}, ANSWER])
    ok = await Agent(planner, tools=[some], store=None).run("s")
    assert ok.stop.kind == "goal_met"
    planner = ScriptedModel([{"steps": [tool_step("s", "some", {})]}])
    small = await Agent(planner, tools=[some], store=None, limits=Limits(max_output_chars=1000)).run("s")
    assert small.steps["s"].error is not None
    assert small.steps["s"].error.kind == "invalid_output"


async def test_a_deeply_nested_output_is_a_typed_error_not_a_recursion_error() -> None:
    @tool
    async def deep() -> Any:
        """Return something deep."""
        value: Any = 0
        for _ in range(10_000):
            value = [value]
        return value

    planner = ScriptedModel([{"steps": [tool_step("d", "deep", {})]}])
    result = await Agent(planner, tools=[deep], store=MemoryStore(), budget=Budget(replans=0)).run("d")
    (failed,) = events_of(result, StepFailed)
    assert failed.error.kind == "invalid_output"
    assert "depth" in failed.error.message or "deeper than" in failed.error.message
    assert result.events[-1].kind == "run_finished"


async def test_a_planner_reply_with_nan_is_sent_back_for_repair() -> None:
    bad = {"steps": [tool_step("w", "work", {"n": math.nan})]}
    good = {"steps": [tool_step("w", "work", {"n": 1})]}
    planner = ScriptedModel([bad, good, ANSWER])
    store = MemoryStore()
    result = await Agent(planner, tools=[counting_tool(Calls())], store=store).run("w", run_id="nan-plan")
    assert result.stop.kind == "goal_met"
    (rejected,) = events_of(result, PlannerOutputRejected)
    assert any("NaN" in p.message for p in rejected.problems)
    logged = [s.event for s in await store.read("nan-plan")]
    assert len(logged) == len(result.events)


async def test_a_planner_reply_larger_than_the_limit_is_refused() -> None:
    huge = {"reason": "z" * 3_000_000, "steps": [tool_step("w", "work", {"n": 1})]}
    planner = ScriptedModel([huge])
    store = MemoryStore()
    result = await Agent(planner, tools=[counting_tool(Calls())], store=store).run("w", run_id="huge")
    assert result.stop.kind == "error"
    assert result.stop.code == "planner_failed"
    assert "Limits.max_reply_chars" in result.stop.detail
    (called,) = events_of(result, ModelCalled)
    assert called.response is None  # the reply is not stored whole


@pytest.mark.parametrize(
    "usage",
    [Usage(input_tokens=-(10**9), output_tokens=1, requests=1), Usage(input_tokens=1, output_tokens=-5, requests=1)],
)
async def test_usage_that_would_defeat_the_budgets_is_refused(usage: Usage) -> None:
    def reply(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text='{"answer": "x"}', parsed={"answer": "x"}, usage=usage)

    planner = FunctionModel(reply)
    result = await Agent(Planner(model=planner), tools=[], store=None).run("cheat")
    assert result.stop.kind == "error"
    assert result.stop.code == "planner_failed"
    assert result.usage.input_tokens >= 0
    assert result.usage.output_tokens >= 0


async def test_a_model_executor_tool_call_with_nan_arguments_fails_the_step() -> None:
    executor = ScriptedModel(
        [
            ModelResponse(
                tool_calls=(ToolCall(id="c1", name="work", arguments={"n": math.nan}),), finish_reason="tool_calls"
            )
        ]
    )
    plan = {"steps": [{"id": "m", "description": "think", "allowed_tools": ["work"]}]}
    planner = ScriptedModel([plan])
    result = await Agent(
        planner, tools=[counting_tool(Calls())], executor=executor, store=MemoryStore(), budget=Budget(replans=0)
    ).run("m")
    assert result.steps["m"].error is not None
    assert "not JSON" in result.steps["m"].error.message
    assert result.events[-1].kind == "run_finished"


async def test_a_human_answer_that_is_not_json_is_refused() -> None:
    @tool(side_effect=True, requires_approval=True)
    async def send() -> str:
        """Send."""
        return "sent"

    planner = ScriptedModel([{"steps": [tool_step("s", "send", {})]}, ANSWER])
    approvals = Approvals(deferred=True, when_waiting="wait", poll_interval=0.01)
    agent = Agent(planner, tools=[send], store=MemoryStore(), approvals=approvals)
    run = agent.start("s", run_id="human")
    async for event in run.events():
        if event.kind == "approval_requested":
            break
    (question,) = run.state.pending_approvals
    with pytest.raises(UsageError, match="NaN"):
        run.decide(question.approval_id, approved=True, output={"x": math.nan})
    run.decide(question.approval_id, approved=True)
    result = await run.result()
    assert result.stop.kind == "goal_met"
