"""The ReAct baseline: one model, a tool-calling loop, no plan — under planexec's budgets, tool
checks, stall rule and stop reasons."""

from __future__ import annotations

import pytest

from planexec import Budget, RetryPolicy, RunContext, ToolError, TransientToolError, UsageError, tool
from planexec.log import BudgetExhaustedEvent, ModelCalled, RunFinished, RunStarted, StallDetected, ToolCalled
from planexec.models import Usage
from planexec.react import ReactAgent
from planexec.testing import ScriptedModel, tool_calls
from tests.test_eval import add, broken, double


async def test_react_solves_a_small_task_and_reports_calls_and_usage() -> None:
    model = ScriptedModel(
        [
            tool_calls(("add", {"a": 1, "b": 2})),
            tool_calls(("double", {"x": 3})),
            "The answer is 6.",
        ],
        usage=Usage(input_tokens=50, output_tokens=5),
        cost_per_million=(1_000_000.0, 2_000_000.0),
    )
    result = await ReactAgent(model, tools=[add, double]).run("Double the sum of 1 and 2.")
    model.assert_consumed()
    assert result.ok
    assert result.stop.kind == "goal_met"
    assert result.answer == "The answer is 6."
    assert [(c.tool, c.args, c.output, c.error) for c in result.calls] == [
        ("add", {"a": 1, "b": 2}, 3, None),
        ("double", {"x": 3}, 6, None),
    ]
    assert (result.turns, result.model_calls, result.tool_calls) == (3, 3, 2)
    assert result.usage == Usage(input_tokens=150, output_tokens=15, requests=3)
    assert result.cost == pytest.approx(3 * (50 + 2 * 5))
    kinds = [e.kind for e in result.events]
    assert kinds == [
        "run_started",
        "model_called",
        "tool_called",
        "model_called",
        "tool_called",
        "model_called",
        "run_finished",
    ]
    assert isinstance(result.events[0], RunStarted)
    assert result.events[0].policy == "react"
    # the model reads each result back, answering the call it belongs to
    second = model.calls[1]
    assert [(m.role, m.content, m.tool_call_id) for m in second.messages[-1:]] == [("tool", "3", "call_1")]
    assert {t.name for t in second.tools} == {"add", "double"}


async def test_independent_calls_in_one_turn_run_together() -> None:
    model = ScriptedModel([tool_calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})), "2 and 4"])
    result = await ReactAgent(model, tools=[add]).run("two sums")
    assert sorted(c.output for c in result.calls) == [2, 4]
    assert {c.step_id for c in result.calls} == {"turn-1"}
    answers = [m for m in model.calls[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in answers] == [("call_1", "2"), ("call_2", "4")]


async def test_unknown_tools_and_bad_arguments_are_refused_and_the_model_is_told() -> None:
    model = ScriptedModel([tool_calls(("sub", {"a": 1}), ("add", {"a": "one", "b": 2})), "gave up"])
    result = await ReactAgent(model, tools=[add]).run("subtract")
    assert result.stop.kind == "goal_met"
    assert [(c.tool, c.attempts, c.error.kind if c.error else None) for c in result.calls] == [
        ("sub", 0, "unknown_tool"),
        ("add", 0, "invalid_arguments"),
    ]
    assert result.tool_calls == 0  # nothing reached a tool
    told = [m.content for m in model.calls[1].messages if m.role == "tool"]
    assert told[0].startswith("error: unknown_tool: unknown tool 'sub'")
    assert told[1].startswith("error: invalid_arguments:")


async def test_the_same_call_failing_again_is_a_stall() -> None:
    model = ScriptedModel([tool_calls(("broken", {"x": 1})), tool_calls(("broken", {"x": 1}))])
    result = await ReactAgent(model, tools=[broken]).run("break it")
    assert result.stop.kind == "stalled"
    assert "broken failed again with the same arguments" in result.stop.detail
    assert any(isinstance(e, StallDetected) for e in result.events)
    assert result.answer is None


async def test_transient_errors_are_retried_per_the_tools_policy() -> None:
    failures = [TransientToolError("busy"), TransientToolError("busy")]

    @tool(retry=RetryPolicy(max_attempts=3, initial_delay=0.0, jitter=0.0))
    async def flaky() -> str:
        """Busy twice, then fine."""
        if failures:
            raise failures.pop()
        return "ok"

    model = ScriptedModel([tool_calls(("flaky", {})), "done"])
    result = await ReactAgent(model, tools=[flaky]).run("try")
    assert [(c.attempts, c.output) for c in result.calls] == [(3, "ok")]
    assert result.tool_calls == 3


async def test_the_tool_call_budget_stops_the_run() -> None:
    model = ScriptedModel([tool_calls(("add", {"a": 1, "b": 1})), tool_calls(("add", {"a": 2, "b": 2}))])
    result = await ReactAgent(model, tools=[add], budget=Budget(tool_calls=1)).run("add twice")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "tool_calls"
    assert [c.output for c in result.calls] == [2]
    assert any(isinstance(e, BudgetExhaustedEvent) for e in result.events)


async def test_the_model_call_budget_is_checked_before_each_call() -> None:
    model = ScriptedModel([tool_calls(("add", {"a": 1, "b": 1}))])
    result = await ReactAgent(model, tools=[add], budget=Budget(model_calls=1)).run("add")
    assert result.stop.budget == "model_calls"
    assert len(model.calls) == 1


async def test_max_turns_without_an_answer() -> None:
    model = ScriptedModel([tool_calls(("add", {"a": 1, "b": n})) for n in range(2)])
    result = await ReactAgent(model, tools=[add], max_turns=2).run("keep adding")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.detail == "no answer within max_turns=2 turns"
    assert result.turns == 2


async def test_an_empty_reply_is_asked_again() -> None:
    model = ScriptedModel(["", "42"])
    result = await ReactAgent(model).run("answer")
    assert result.answer == "42"
    assert model.calls[1].messages[-1].content == "Reply with the final answer, or call a tool."


async def test_a_failing_model_ends_the_run_with_an_error() -> None:
    model = ScriptedModel([ToolError("the provider is down")])
    result = await ReactAgent(model).run("answer")
    assert result.stop.kind == "error"
    assert "the provider is down" in result.stop.detail
    (called,) = [e for e in result.events if isinstance(e, ModelCalled)]
    assert called.error is not None
    assert "the provider is down" in called.error
    assert isinstance(result.events[-1], RunFinished)


async def test_constraints_reach_the_model_and_the_run_context_fixes_ids() -> None:
    model = ScriptedModel(["fine"])
    result = await ReactAgent(model, context=RunContext(new_id=lambda: "fixed")).run("go", constraints=["be brief"])
    assert result.run_id == "fixed"
    assert model.calls[0].last_user_text == "go\nConstraints:\n- be brief"
    assert all(isinstance(e, RunStarted | ModelCalled | ToolCalled | RunFinished) for e in result.events)


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    model = ScriptedModel(["ok"])
    with pytest.raises(UsageError, match=r"await agent\.run\(\.\.\.\)"):
        ReactAgent(model).run_sync("go")
    assert model.calls == []


def test_run_sync_and_bad_settings() -> None:
    result = ReactAgent(ScriptedModel(["ok"])).run_sync("go")
    assert result.answer == "ok"
    with pytest.raises(UsageError, match="max_turns"):
        ReactAgent(ScriptedModel([]), max_turns=0)
