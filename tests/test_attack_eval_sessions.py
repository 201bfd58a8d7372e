"""Hostile inputs to sessions and evaluations: a ReAct model that answers garbage, a conversation
history that is not one, task worlds that fail part-way, command-line options that do not apply,
and toolsets changed with what is not a tool. Each run ends with a typed stop and what it did;
each usage error lists every problem at once."""

from __future__ import annotations

from typing import Any, cast

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


# -- task worlds that fail part-way -----------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class _FailingWorld:
    """A world of three turns whose ``failing`` method raises (or answers junk) at turn ``at``."""

    def __init__(self, failing: str, at: int) -> None:
        self.failing = failing
        self.at = at

    def _maybe_fail(self, method: str, turn: int) -> None:
        if method == self.failing and turn == self.at:
            raise RuntimeError(f"{method} broke at turn {turn}")

    def tools(self, turn: int) -> list[Any]:
        self._maybe_fail("tools", turn)
        return [add]

    def goal(self, turn: int) -> str:
        self._maybe_fail("goal", turn)
        return f"add, turn {turn}"

    def begin_turn(self, turn: int) -> None:
        self._maybe_fail("begin_turn", turn)

    def check_turn(self, turn: int) -> Any:
        from planexec.eval import CheckOutcome

        if self.failing == "junk check" and turn == self.at:
            return "looks fine"
        self._maybe_fail("check_turn", turn)
        return CheckOutcome(name="world", passed=True, detail="")

    def stand_in(self, role: str) -> Any:
        if role == "planner":
            plan = {"steps": [{"id": "s", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}
            return ScriptedModel([plan, {"answer": "3"}] * 3)
        from planexec.testing import tool_calls

        return ScriptedModel([tool_calls(("add", {"a": 1, "b": 2})), "3"] * 3)


@pytest.mark.parametrize("agent", ["planexec", "react"])
@pytest.mark.parametrize(
    ("failing", "at", "reason"),
    [
        ("goal", 1, "turn 2: error: RuntimeError: goal broke at turn 1"),
        ("begin_turn", 2, "turn 3: error: RuntimeError: begin_turn broke at turn 2"),
        ("check_turn", 0, "turn 1: error: RuntimeError: check_turn broke at turn 0"),
        ("junk check", 1, "turn 2: error: TypeError: the world's check of the turn is a str, not a CheckOutcome"),
    ],
)
async def test_a_world_that_fails_after_turns_ran_keeps_what_they_did_in_the_report(
    tmp_path: Any, agent: str, failing: str, at: int, reason: str
) -> None:
    from planexec.eval import AgentKind, EvalSettings, Suite, Task, run_suite
    from planexec.store import SQLiteStore

    task = Task(id="t", goal="add", turns=("again", "and again"), world=lambda: _FailingWorld(failing, at))
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        report = await run_suite(
            Suite(name="s", tasks=(task,), root=tmp_path), EvalSettings(agent=cast(AgentKind, agent), store=store)
        )
        [run] = report.tasks[0].runs
        ran = at if failing in ("goal", "begin_turn") else at + 1  # the turns that ran before it failed
        assert not run.passed
        assert run.reasons == (reason,)
        assert run.stop == "goal_met"  # every turn that ran met its goal: the world failed, not the agent
        assert run.tools_called == ("add",) * ran
        assert run.metrics.model_calls == 2 * ran
        if agent == "planexec":
            assert run.run_id is not None
            assert len(await store.list_runs()) == ran
    finally:
        await store.close()


async def test_a_world_that_fails_before_any_turn_ran_fails_the_run_with_its_error(tmp_path: Any) -> None:
    from planexec.eval import Suite, Task, run_suite

    task = Task(id="t", goal="add", turns=("again",), world=lambda: _FailingWorld("begin_turn", 0))
    report = await run_suite(Suite(name="s", tasks=(task,), root=tmp_path))
    [run] = report.tasks[0].runs
    assert (run.passed, run.stop) == (False, "error")
    assert run.reasons == ("error: RuntimeError: begin_turn broke at turn 0",)


# -- BFCL suites from the command line and in files ----------------------------------------------------


def test_an_option_for_the_other_agent_is_refused_not_played_by_the_oracle(tmp_path: Any) -> None:
    from tests.cli_support import invoke

    react = invoke(["eval", "bfcl:nope", "--agent", "react", "--planner", "scripted:p.json", "--policy", "step"])
    assert react.exit_code == 2, react.output
    for said in (
        "--planner: does not apply to the react agent",
        "--policy: does not apply to the react agent",
        "bfcl.category",
    ):
        assert said in react.output, react.output
    planexec = invoke(["eval", "bfcl:multi_turn_base", "--react-model", "scripted:p.json"])
    assert planexec.exit_code == 2, planexec.output
    assert "--react-model: does not apply to the planexec agent" in planexec.output


def test_a_bfcl_suite_that_names_no_task_still_has_its_defaults_checked(tmp_path: Any) -> None:
    from tests.cli_support import invoke

    (tmp_path / "suite.yaml").write_text(
        "bfcl: {category: nope}\ndefaults: {planner: 'nope:x', budget: {cost: -1}, policy: sideways}\n",
        encoding="utf-8",
    )
    result = invoke(["eval", str(tmp_path / "suite.yaml")])
    assert result.exit_code == 2, result.output
    for where in ("bfcl.category", "defaults.planner", "defaults.policy", "defaults.budget.cost"):
        assert where in result.output, (where, result.output)


# -- changing an agent's tools ---------------------------------------------------------------------


@tool(name="add")
def other_add(a: int, b: int) -> int:
    """Another tool named add."""
    return a - b


async def test_use_tools_changes_the_next_turns_tools_and_refuses_what_is_not_a_tool_listing_everything() -> None:
    from planexec import Agent
    from planexec.errors import ToolDefinitionError
    from planexec.log import RunStarted
    from planexec.mcp import MCPStdio, MCPToolset

    plan = {"steps": [{"id": "s", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}
    agent = Agent(ScriptedModel([plan, {"answer": "3"}, plan, {"answer": "-1"}]), tools=[add], store=None)
    session = agent.session("s")
    first = await session.run("add")
    agent.use_tools([other_add])
    second = await session.run("add again")
    assert (first.outputs, second.outputs) == ({"s": 3}, {"s": -1})
    started = second.events[0]
    assert isinstance(started, RunStarted)
    assert started.tools == ("add",)

    with pytest.raises(ToolDefinitionError) as caught:
        agent.use_tools([1, add, other_add, "x"])  # type: ignore[list-item]
    assert [p.code for p in caught.value.problems] == ["not_a_tool", "duplicate_tool", "not_a_tool"]

    server = MCPToolset(server=MCPStdio(command="true"))
    for given in ([[server]], [server, add, other_add]):
        with pytest.raises(UsageError) as refused:
            agent.use_tools(given)  # type: ignore[arg-type]
        assert refused.value.problems[0].where == "tools: MCP server true"
    assert [p.code for p in refused.value.problems] == ["agent", "duplicate_tool"]
    for not_tools in (None, "add"):
        with pytest.raises(UsageError, match="must be a list of tools"):
            agent.use_tools(not_tools)  # type: ignore[arg-type]
    assert agent.tools.get("add") is other_add  # every refused change left the tools as they were


def test_an_mcp_server_in_a_nested_list_is_still_one_of_the_agents_servers() -> None:
    from planexec import Agent
    from planexec.mcp import MCPStdio, MCPToolset

    server = MCPToolset(server=MCPStdio(command="true"))
    with pytest.raises(UsageError) as caught:
        Agent(ScriptedModel([]), tools=[[server], add], store=None).start("go")  # type: ignore[list-item]
    assert [p.where for p in caught.value.problems] == ["tools: MCP server true"]  # not open: not silently toolless


# -- BFCL's functions asked for endless work ----------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "args", "says"),
    [
        ("power", {"base": 7, "exponent": 10_000_000}, "the result would have about 8.45e+06 digits"),
        ("square_root", {"number": 2, "precision": 200_000}, "a precision of more than 10,000 digits"),
        ("logarithm", {"value": 2, "base": 10, "precision": 200_000}, "a precision of more than 10,000 digits"),
    ],
)
async def test_a_bfcl_math_call_that_would_hold_the_interpreter_fails_at_once(
    function: str, args: dict[str, Any], says: str
) -> None:
    pytest.importorskip("bfcl_eval")
    from planexec.bfcl import load_tasks, run_task
    from planexec.log import StepFailed

    task = next(t for t in load_tasks("multi_turn_base") if "MathAPI" in t.involved_classes)
    step = {"id": "m", "description": function, "tool": function, "args": args}
    planner = ScriptedModel([{"steps": [step]}, {"reason": "stop", "steps": []}, {"answer": "gave up"}] * 3)
    outcome = await run_task(task, planner=planner, budget=Budget(wall_time=30))

    failed = [e for turn in outcome.turns for e in turn.events if isinstance(e, StepFailed)]
    assert failed
    assert failed[0].error.message == f"{function}: {says}"
