"""Model-driven steps: a model executor runs a bounded tool-calling loop for one step."""

from __future__ import annotations

import asyncio
from typing import Any

from planexec import Agent, ModelExecutor, Planner, ToolError, tool
from planexec.log import ModelCalled, StepStarted, ToolCalled
from planexec.testing import ScriptedModel, tool_calls
from tests.support import SAFETY, events_of

GIVE_UP = {"reason": "stop trying", "steps": []}


def model_step(step_id: str, description: str, *tools: str, **extra: Any) -> dict[str, Any]:
    """A model-driven step that may call ``tools`` (and no other)."""
    return {"id": step_id, "description": description, "allowed_tools": tools, **extra}


class Search:
    def __init__(self) -> None:
        self.queries: list[str] = []
        search = self

        @tool
        async def find(q: str) -> list[str]:
            """Search the web."""
            search.queries.append(q)
            return [f"result for {q}"]

        self.tool = find


async def test_a_step_without_a_tool_runs_a_tool_calling_loop_on_the_default_executor() -> None:
    search = Search()
    executor = ScriptedModel([tool_calls(("find", {"q": "planexec"})), "planexec plans and executes"])
    planner = ScriptedModel([{"steps": [model_step("m1", "research planexec", "find")]}, {"answer": "it plans"}])
    result = await Agent(planner, tools=[search.tool], executor=executor).run("what is planexec?")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"m1": "planexec plans and executes"}
    assert search.queries == ["planexec"]
    executor.assert_consumed()

    rec = result.steps["m1"]
    assert rec.executor == "model"
    assert len(rec.tool_calls) == 1
    call = rec.tool_calls[0]
    assert (call.call_id, call.tool, call.args, call.output, call.error) == (
        "call_1",
        "find",
        {"q": "planexec"},
        ["result for planexec"],
        None,
    )
    started = events_of(result, StepStarted)
    assert [(e.step_id, e.executor, e.tool) for e in started] == [("m1", "model", None)]
    assert result.tool_calls == 1

    # The executor is offered the tools, sees the step, and gets the tool's result back.
    first, second = executor.calls
    assert first.purpose == "executor"
    assert [t.name for t in first.tools] == ["find"]
    assert "research planexec" in first.last_user_text
    tool_message = second.messages[-1]
    assert tool_message.role == "tool"
    assert tool_message.tool_call_id == "call_1"
    assert "result for planexec" in tool_message.content
    assert second.messages[-2].role == "assistant"
    assert second.messages[-2].tool_calls[0].name == "find"

    # Its model calls are logged under the step and counted.
    executor_calls = [e for e in events_of(result, ModelCalled) if e.role == "executor"]
    assert [e.step_id for e in executor_calls] == ["m1", "m1"]
    assert result.model_calls == 4


async def test_the_executor_can_call_several_tools_in_one_turn() -> None:
    search = Search()
    executor = ScriptedModel([tool_calls(("find", {"q": "a"}), ("find", {"q": "b"})), "a and b"])
    planner = ScriptedModel([{"steps": [model_step("m1", "compare a and b", "find")]}, {"answer": "done"}])
    result = await Agent(planner, tools=[search.tool], executor=executor).run("compare")
    assert result.stop.kind == "goal_met"
    assert sorted(search.queries) == ["a", "b"]
    assert sorted(c.call_id for c in result.steps["m1"].tool_calls) == ["call_1", "call_2"]
    tool_messages = [m for m in executor.calls[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["call_1", "call_2"]
    assert result.tool_calls == 2


async def test_an_unknown_tool_asked_for_by_the_executor_is_refused_and_reported_back() -> None:
    search = Search()
    executor = ScriptedModel([tool_calls(("delete_everything", {})), "done without it"])
    planner = ScriptedModel([{"steps": [model_step("m1", "do it", "find")]}, {"answer": "done"}])
    result = await Agent(planner, tools=[search.tool], executor=executor).run("do it")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"m1": "done without it"}
    refused = events_of(result, ToolCalled)
    assert len(refused) == 1
    assert refused[0].tool == "delete_everything"
    assert refused[0].error is not None
    assert refused[0].error.kind == "unknown_tool"
    assert refused[0].attempts == 0
    assert result.tool_calls == 0
    report = executor.calls[1].messages[-1]
    assert report.role == "tool"
    assert report.content.startswith("error:")
    assert "unknown tool 'delete_everything'" in report.content
    assert "find" in report.content  # the known tools are listed


async def test_a_tool_outside_the_executors_allowed_set_is_refused() -> None:
    search = Search()

    @tool
    async def wipe() -> str:
        """Wipe the disk."""
        raise AssertionError("must not run")

    executor = ModelExecutor(model=ScriptedModel([tool_calls(("wipe", {})), "ok"]), tools=["find"])
    planner = ScriptedModel([{"steps": [model_step("m1", "do it", "find", "wipe")]}, {"answer": "done"}])
    result = await Agent(planner, tools=[search.tool, wipe], executor=executor).run("do it")
    assert result.stop.kind == "goal_met", result.stop
    refused = events_of(result, ToolCalled)
    assert [(e.tool, e.error.kind if e.error else None) for e in refused] == [("wipe", "unknown_tool")]


async def test_invalid_tool_arguments_from_the_executor_are_refused_and_reported_back() -> None:
    search = Search()
    executor = ScriptedModel([tool_calls(("find", {"query": "x"})), tool_calls(("find", {"q": "x"})), "found x"])
    planner = ScriptedModel([{"steps": [model_step("m1", "find x", "find")]}, {"answer": "x"}])
    result = await Agent(planner, tools=[search.tool], executor=executor).run("find x")
    assert result.stop.kind == "goal_met", result.stop
    assert search.queries == ["x"]
    calls = result.steps["m1"].tool_calls
    assert [(c.error.kind if c.error else None) for c in calls] == ["invalid_arguments", None]
    assert "invalid arguments" in executor.calls[1].messages[-1].content


async def test_a_failing_tool_is_reported_back_to_the_executor() -> None:
    @tool
    async def flaky_api(x: int) -> int:
        """Call an API."""
        raise ToolError("quota exceeded")

    executor = ScriptedModel([tool_calls(("flaky_api", {"x": 1})), "the API is out of quota"])
    planner = ScriptedModel([{"steps": [model_step("m1", "call the api", "flaky_api")]}, {"answer": "no quota"}])
    result = await Agent(planner, tools=[flaky_api], executor=executor).run("api")
    assert result.stop.kind == "goal_met"
    assert result.outputs == {"m1": "the API is out of quota"}
    call = result.steps["m1"].tool_calls[0]
    assert call.error is not None
    assert "quota exceeded" in call.error.message
    assert "quota exceeded" in executor.calls[1].messages[-1].content


async def test_max_turns_exhausted_fails_the_step() -> None:
    search = Search()
    executor = ModelExecutor(
        model=ScriptedModel([tool_calls(("find", {"q": "1"})), tool_calls(("find", {"q": "2"}))]), max_turns=2
    )
    planner = ScriptedModel([{"steps": [model_step("m1", "search forever", "find")]}, GIVE_UP, {"answer": "gave up"}])
    result = await Agent(planner, tools=[search.tool], executor=executor).run("loop")

    assert result.stop.kind == "goal_met", result.stop
    rec = result.steps["m1"]
    assert rec.status == "failed"
    assert rec.error is not None
    assert rec.error.kind == "executor"
    assert "within 2 turns" in rec.error.message
    assert search.queries == ["1", "2"]
    assert "within 2 turns" in planner.calls[1].last_user_text


async def test_a_model_executor_error_fails_the_step_and_the_planner_replans() -> None:
    executor = ScriptedModel([RuntimeError("overloaded"), "second try worked"])
    planner = ScriptedModel(
        [
            {"steps": [model_step("m1", "write it")]},
            {"reason": "try again", "steps": [model_step("m2", "write it again")]},
            {"answer": "written"},
        ]
    )
    result = await Agent(planner, executor=executor).run("write")
    assert result.stop.kind == "goal_met", result.stop
    rec = result.steps["m1"]
    assert rec.error is not None
    assert rec.error.kind == "executor"
    assert "overloaded" in rec.error.message
    assert result.outputs == {"m2": "second try worked"}


async def test_an_exhausted_executor_script_stops_the_run_with_an_error() -> None:
    executor = ScriptedModel([])
    planner = ScriptedModel([{"steps": [model_step("m1", "write it")]}])
    result = await Agent(planner, executor=executor, budget=SAFETY).run("write")
    assert result.stop.kind == "error"
    assert "UnexpectedModelCall" in result.stop.detail or "scripted model" in result.stop.detail


async def test_steps_are_routed_to_named_model_executors() -> None:
    drafter = ModelExecutor(model=ScriptedModel(["a draft"]), name="drafter")
    reviewer = ModelExecutor(model=ScriptedModel(["looks good"]), name="reviewer")
    planner = ScriptedModel(
        [
            {
                "steps": [
                    model_step("draft", "write a draft", executor="drafter"),
                    model_step(
                        "review",
                        "review the draft",
                        executor="reviewer",
                        args={"draft": "${draft}"},
                        depends_on=["draft"],
                    ),
                ]
            },
            {"answer": "a reviewed draft"},
        ]
    )
    result = await Agent(planner, executors=[drafter, reviewer]).run("draft and review")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"draft": "a draft", "review": "looks good"}
    assert {e.step_id: e.executor for e in events_of(result, StepStarted)} == {
        "draft": "drafter",
        "review": "reviewer",
    }
    review_model = reviewer.resolved_model()
    assert isinstance(review_model, ScriptedModel)
    assert "a draft" in review_model.calls[0].last_user_text  # the bound input is shown
    # The planner is told which executors exist.
    assert "drafter" in planner.calls[0].last_user_text
    assert "reviewer" in planner.calls[0].last_user_text


async def test_a_model_step_without_any_executor_is_sent_back_for_repair() -> None:
    search = Search()
    planner = ScriptedModel(
        [
            {"steps": [model_step("m1", "think")]},
            {"steps": [{"id": "s1", "description": "search", "tool": "find", "args": {"q": "x"}}]},
            {"answer": "x"},
        ]
    )
    result = await Agent(planner, tools=[search.tool]).run("think")
    assert result.stop.kind == "goal_met"
    assert "[no_tool_or_executor]" in planner.calls[1].last_user_text


async def test_a_structured_model_step_is_asked_again_until_its_output_fits() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    executor = ScriptedModel(['{"n": "three"}', '{"n": 3}'])
    planner = ScriptedModel([{"steps": [model_step("m1", "count", output_schema=schema)]}, {"answer": "3"}])
    result = await Agent(planner, executor=executor).run("count")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"m1": {"n": 3}}
    assert executor.calls[0].output is not None
    assert "does not fit the schema" in executor.calls[1].last_user_text


async def test_model_steps_run_concurrently() -> None:
    both = asyncio.Event()
    arrived: list[str] = []

    async def wait_for_sibling(request: Any) -> str:
        arrived.append(request.last_user_text)
        if len(arrived) == 2:
            both.set()
        await both.wait()
        return "ok"

    executor = ScriptedModel([wait_for_sibling, wait_for_sibling])
    planner = ScriptedModel([{"steps": [model_step("m1", "one"), model_step("m2", "two")]}, {"answer": "ok"}])
    result = await Agent(Planner(model=planner), executor=executor, budget=SAFETY).run("two at once")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"m1": "ok", "m2": "ok"}


async def test_a_model_step_may_call_only_the_tools_its_step_grants() -> None:
    search = Search()

    @tool(side_effect=True)
    async def delete_everything() -> str:
        """Delete everything."""
        raise AssertionError("must not run")

    # the page the step reads tells its model to delete everything; the step granted only find
    executor = ScriptedModel([tool_calls(("find", {"q": "x"}), ("delete_everything", {})), "read it"])
    planner = ScriptedModel([{"steps": [model_step("m1", "read the page", "find")]}, {"answer": "done"}])
    result = await Agent(planner, tools=[search.tool, delete_everything], executor=executor).run("read")
    assert result.stop.kind == "goal_met", result.stop
    assert search.queries == ["x"]
    calls = result.steps["m1"].tool_calls
    assert [(c.tool, c.error.kind if c.error else None) for c in calls] == [
        ("find", None),
        ("delete_everything", "unknown_tool"),
    ]
    offered = {spec.name for spec in executor.calls[0].tools}
    assert offered == {"find"}  # the model is not even told about the others


async def test_a_model_step_granted_no_tools_can_call_none() -> None:
    search = Search()
    executor = ScriptedModel([tool_calls(("find", {"q": "x"})), "thought about it"])
    planner = ScriptedModel([{"steps": [model_step("m1", "think")]}, {"answer": "done"}])
    result = await Agent(planner, tools=[search.tool], executor=executor).run("think")
    assert result.stop.kind == "goal_met", result.stop
    assert search.queries == []
    assert executor.calls[0].tools == ()
