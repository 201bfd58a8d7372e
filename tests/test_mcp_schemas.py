"""MCP servers that break their own word: tools whose schemas are not JSON Schema, results that do
not match the output schema they declared, and floods of progress notifications, some of them not
numbers. Each ends in something typed: a ToolDefinitionError naming the tools when the server is
listed, a failed step in the run, a run that ends within its budget."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp.types as types
from mcp.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from planexec import Agent, Budget
from planexec.errors import PlanexecError, ToolDefinitionError, UsageError
from planexec.log import ToolProgress
from planexec.mcp import MCPStdio, MCPToolset
from planexec.testing import ScriptedModel
from tests.support import events_of, tool_step

FIXTURES = Path(__file__).parent / "fixtures"
READ = types.ToolAnnotations(read_only_hint=True)
COUNT_OUTPUT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def schema_server(tools: list[types.Tool], answer: Callable[[str], types.CallToolResult]) -> Server[Any]:
    """An in-process server of the SDK's low level, which sends the tools as given (the high-level
    server derives schemas from functions, so it never sends a wrong one)."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return answer(params.name)

    return Server("schemas", on_list_tools=list_tools, on_call_tool=call_tool)


def text(value: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=value)]


# -- schemas that are not JSON Schema --------------------------------------------------------------


def badly_declared() -> Server[Any]:
    tools = [
        types.Tool(name="fine", description="Nothing wrong here.", input_schema={"type": "object"}),
        types.Tool(
            name="fruit",
            description="An argument of a type JSON Schema does not have.",
            input_schema={"type": "object", "properties": {"kind": {"type": "banana"}}},
        ),
        types.Tool(
            name="shapeless",
            description="An output schema of a type JSON Schema does not have.",
            input_schema={"type": "object"},
            output_schema={"type": "banana"},
        ),
    ]
    return schema_server(tools, lambda _name: types.CallToolResult(content=text("ok")))


async def test_invalid_schemas_are_one_tool_definition_error_naming_every_tool() -> None:
    toolset = MCPToolset(server=badly_declared())
    with pytest.raises(ToolDefinitionError) as caught:
        await toolset.open()
    await toolset.close()
    refused = caught.value
    assert isinstance(refused, UsageError)  # the developer's to fix (or to leave out): not a failed run
    assert "offers tools planexec cannot use" in refused.summary
    assert [(p.code, p.where) for p in refused.problems] == [
        ("tool_schema", "fruit: parameters.properties.kind.type"),
        ("tool_schema", "shapeless: output_schema"),
    ]
    assert all("'banana' is not valid" in p.message for p in refused.problems)


async def test_an_agent_with_such_a_server_refuses_to_run_and_only_keeps_the_usable_tools() -> None:
    model = ScriptedModel([{"steps": [tool_step("f", "fine", {})]}, {"answer": "ok"}])
    agent = Agent(model, tools=[MCPToolset(server=badly_declared())], store=None)
    with pytest.raises(ToolDefinitionError, match="offers tools planexec cannot use"):
        await agent.run("use the fine tool")
    assert model.calls == []  # refused before anything was asked of the planner
    await agent.aclose()
    # The way out is to leave the broken tools out.
    kept = MCPToolset(server=badly_declared(), only=("fine",))
    result = await Agent(model, tools=[kept], store=None).run("use the fine tool")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"f": "ok"}


RAW_SERVER = FIXTURES / "mcp_raw_server.py"


def raw_server(tools: list[dict[str, Any]], result: dict[str, Any] | None = None) -> MCPToolset:
    args = [str(RAW_SERVER), json.dumps(tools), *([json.dumps(result)] if result is not None else [])]
    return MCPToolset(server=MCPStdio(command=sys.executable, args=tuple(args)), connect_timeout=20)


async def test_an_input_schema_that_is_not_an_object_is_a_typed_error_naming_the_tool() -> None:
    tools = [
        {"name": "fine", "inputSchema": {"type": "object"}},
        {"name": "words", "description": "Takes a string, not an object.", "inputSchema": {"type": "string"}},
    ]
    toolset = raw_server(tools)
    try:
        with pytest.raises(PlanexecError) as caught:
            await toolset.open()
    finally:
        await toolset.close()
    assert isinstance(caught.value, ToolDefinitionError)
    assert "sent a tool listing planexec cannot read" in caught.value.summary
    assert [(p.where, p.message) for p in caught.value.problems] == [
        ("words: inputSchema.type", "Input should be 'object'")
    ]


# -- results that do not match the declared output schema ------------------------------------------


def off_schema_server() -> Server[Any]:
    tools = [
        types.Tool(
            name="count", description="Count things.", input_schema={"type": "object"}, output_schema=COUNT_OUTPUT
        ),
        types.Tool(
            name="mute",
            description="Count things, in words only.",
            input_schema={"type": "object"},
            output_schema=COUNT_OUTPUT,
        ),
        types.Tool(name="honest", description="Count things, as declared.", input_schema={"type": "object"}),
    ]
    answers = {
        "count": types.CallToolResult(content=text("many"), structured_content={"n": "many"}),
        "mute": types.CallToolResult(content=text("7")),
        "honest": types.CallToolResult(content=text("7"), structured_content={"n": 7}),
    }
    for tool in tools:
        tool.annotations = READ
    return schema_server(tools, lambda name: answers[name])


async def test_a_result_off_its_output_schema_fails_the_step_and_is_not_tried_again() -> None:
    plan = [tool_step("c", "count", {}), tool_step("m", "mute", {}), tool_step("h", "honest", {})]
    model = ScriptedModel([{"steps": plan}, {"give_up": "the counters disagree with themselves"}])
    async with MCPToolset(server=off_schema_server()) as tools:
        assert {t.name: t.output_schema for t in tools}["count"] == COUNT_OUTPUT
        result = await Agent(model, tools=[tools], store=None).run("count")
    assert result.outputs == {"h": {"n": 7}}
    count, mute = result.steps["c"], result.steps["m"]
    assert (count.status, mute.status) == ("failed", "failed")
    assert count.error is not None
    assert mute.error is not None
    # The SDK's client checks the result against the schema the tool declared; the step fails
    # saying so (a ToolError: the server's answer is wrong, trying again will not mend it).
    assert count.error.kind == "tool_error"
    assert "answered count with a result that does not fit the output schema it declared" in count.error.message
    assert "'many' is not of type 'integer'" in count.error.message
    assert mute.error.kind == "tool_error"
    assert "Tool mute has an output schema but did not return structured content" in mute.error.message
    assert (count.attempts, mute.attempts) == (1, 1)
    # The planner was told, and gave up: a typed stop.
    assert "is not of type 'integer'" in model.calls[1].messages[-1].content
    assert (result.stop.kind, result.stop.code) == ("escalated", "planner_gave_up")


# -- floods of progress, and progress that is not a number ---------------------------------------


async def test_a_flood_of_progress_with_nan_and_infinities_ends_within_budget() -> None:
    server = MCPServer("noisy")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def crunch(n: int, ctx: Context) -> str:
        """Crunch n items, saying so after each."""
        await ctx.report_progress(math.nan, 10, "not a number")
        await ctx.report_progress(1, math.inf, "no end in sight")
        await ctx.report_progress(-math.inf, None, "less than nothing")
        for i in range(n):
            await ctx.report_progress(i + 1, n, "crunching")
        return f"crunched {n}"

    model = ScriptedModel([{"steps": [tool_step("c", "crunch", {"n": 20_000})]}, {"answer": "crunched"}])
    async with MCPToolset(server=server) as tools:
        result = await Agent(model, tools=[tools], store=None, budget=Budget(wall_time=60)).run("crunch")
    assert result.stop.kind == "goal_met", result.stop  # not budget_exhausted: the flood cost little
    assert result.outputs == {"c": {"result": "crunched 20000"}}
    progress = events_of(result, ToolProgress)
    assert 1 <= len(progress) <= 100  # at most one event a quarter second, and 100 a step
    assert all(math.isfinite(p.progress) and (p.total is None or math.isfinite(p.total)) for p in progress)
    assert progress[0].message == "crunching"  # the reports that were not numbers were dropped
    assert result.steps["c"].progress == progress[-1]


NOISY_SERVER = FIXTURES / "mcp_noisy_server.py"


async def test_over_stdio_nan_progress_is_lost_on_the_wire_and_the_call_goes_on() -> None:
    model = ScriptedModel([{"steps": [tool_step("c", "crunch", {"n": 5_000})]}, {"answer": "crunched"}])
    toolset = MCPToolset(server=MCPStdio(command=sys.executable, args=(str(NOISY_SERVER),)))
    async with toolset:
        result = await Agent(model, tools=[toolset], store=None, budget=Budget(wall_time=60)).run("crunch")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"c": {"result": "crunched 5000"}}
    progress = events_of(result, ToolProgress)
    assert 1 <= len(progress) <= 100
    # JSON has no NaN and no infinity: the server's SDK writes null for both. A null progress is
    # not a valid notification (the client's SDK drops it); a null total is "no total".
    first = progress[0]
    assert (first.progress, first.total, first.message) == (1.0, None, "no end in sight")
    assert all(math.isfinite(p.progress) for p in progress)
