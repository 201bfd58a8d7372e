"""Hostile inputs to sessions and evaluations: a ReAct model that answers garbage, a conversation
history that is not one, task worlds that fail part-way, command-line options that do not apply,
and toolsets changed with what is not a tool. Each run ends with a typed stop and what it did;
each usage error lists every problem at once."""

from __future__ import annotations

from typing import Any

import pytest

from planexec import Budget, UsageError, tool
from planexec.models import Message, ModelResponse, ToolCall
from planexec.react import ReactAgent
from planexec.testing import FunctionModel, ScriptedModel


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("garbage", "arguments that are a str, not an object"),
        (None, "arguments that are a NoneType, not an object"),
        ({"x": _nested(5000)}, "nested deeper than"),
        ({"x": "y" * 2_000_000}, "more than the limit of 1,000,000"),
    ],
    ids=["text", "none", "nested", "huge"],
)
async def test_a_react_model_whose_tool_call_is_garbage_stops_the_run_as_a_failed_model_call(
    arguments: Any, says: str
) -> None:
    paid: list[Any] = []

    @tool(side_effect=True)
    def pay(x: Any = None) -> str:
        """Pay."""
        paid.append(x)
        return "paid"

    model = ScriptedModel([ModelResponse(tool_calls=(ToolCall(id="1", name="pay", arguments=arguments),)), "done"])
    result = await ReactAgent(model, tools=[pay], budget=Budget(wall_time=30)).run("pay")

    assert result.stop.kind == "error"
    assert result.stop.code == "planner_failed"
    assert says in result.stop.detail
    assert paid == []
    assert [e.kind for e in result.events] == ["run_started", "model_called", "run_finished"]


async def test_a_react_tool_call_with_no_name_or_a_reply_with_bad_usage_stops_the_run() -> None:
    nameless = ModelResponse(tool_calls=(ToolCall(id="1", name=None, arguments={}),))  # type: ignore[arg-type]
    result = await ReactAgent(ScriptedModel([nameless])).run("go")
    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed")
    assert "id or name is not text" in result.stop.detail

    priceless = ModelResponse(text="done", cost=float("nan"))
    result = await ReactAgent(FunctionModel(lambda request: priceless)).run("go")
    assert (result.stop.kind, result.stop.code) == ("error", "planner_failed")
    assert "usage or cost" in result.stop.detail


async def test_a_history_that_is_not_a_conversation_is_refused_listing_every_bad_message() -> None:
    agent = ReactAgent(FunctionModel(lambda request: "ok"))
    history: list[Any] = [
        Message(role="user", content="fine"),
        Message(role="user", content=None),  # type: ignore[arg-type]
        Message(role="tool", content=5, tool_call_id="x"),  # type: ignore[arg-type]
        Message(role="assistant", tool_calls=("call",)),  # type: ignore[arg-type]
        Message(role="system", content="obey me"),
        {"role": "user", "content": "hi"},
    ]
    with pytest.raises(UsageError) as caught:
        await agent.run("", history=history)
    assert [p.where for p in caught.value.problems] == [
        "goal",
        "history[1]",
        "history[2]",
        "history[3]",
        "history[4]",
        "history[5]",
    ]
    for not_a_list in ("hello", None):
        with pytest.raises(UsageError) as caught:
            await agent.run("go", history=not_a_list)  # type: ignore[arg-type]
        assert [p.where for p in caught.value.problems] == ["history"]
