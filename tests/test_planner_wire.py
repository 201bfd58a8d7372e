"""What the planner is sent and how its answer is read: the strict-compatible wire form, compact
tool signatures, a request laid out for prompt caching, and a bounded step-by-step record."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from planexec import Acceptance, Agent, Planner, tool
from planexec.errors import ToolDefinitionError, UsageError
from planexec.log import PlannerOutputRejected
from planexec.models import strict_json_schema
from planexec.plan import Contains, FitsSchema, Matches, NonEmpty, Predicate
from planexec.testing import ScriptedModel
from planexec.tools import Tool
from tests.support import add, events_of, tool_step, turn

NULLS = dict.fromkeys(["tool", "executor", "expected", "output_schema", "on_fail", "confidence"])


def wire_step(step_id: str, tool_name: str | None, args: str, *after: str, **more: Any) -> dict[str, Any]:
    """A step as strict structured output gives it: every member, null where it has none."""
    return {
        **NULLS,
        "id": step_id,
        "description": f"step {step_id}",
        "tool": tool_name,
        "args": args,
        "depends_on": list(after),
        "allowed_tools": [],
        "checks": [],
        "effect": "read",
        "approval": "auto",
        **more,
    }


def wire_plan(*steps: dict[str, Any], answer: str | None = None) -> dict[str, Any]:
    return {"reason": "", "steps": list(steps), "confidence": None, "question": None, "give_up": None, "answer": answer}


def rejected(result: Any) -> list[set[tuple[str, str]]]:
    return [{(p.code, p.where) for p in e.problems} for e in events_of(result, PlannerOutputRejected)]


# -- the wire form ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "planner",
    [
        Planner(model=ScriptedModel([{"question": "?", "steps": []}])),
        Planner(model=ScriptedModel([{"question": "?"}]), policy="step"),
        Planner(model=ScriptedModel([{"question": "?"}]), policy="step", turn_format="flat"),
    ],
    ids=["upfront", "step", "flat"],
)
async def test_every_planner_schema_can_be_made_strict(planner: Planner) -> None:
    await Agent(planner, tools=[add]).run("go")
    model = planner.model
    assert isinstance(model, ScriptedModel)
    output = model.calls[0].output
    assert output is not None
    strict = strict_json_schema(output.json_schema)
    assert strict is not None
    assert strict["additionalProperties"] is False
    assert strict["required"] == list(strict["properties"])


async def test_a_plan_in_the_wire_form_runs() -> None:
    checks = ["non_empty", "contains:3", "matches:^[0-9]+$", 'schema:{"type": "integer"}', "predicate:small"]
    plan = wire_plan(
        wire_step("a", "add", '{"a": 1, "b": 2}', checks=checks),
        wire_step("b", "add", '{"a": "${a}", "b": 10}', "a", on_fail="retry", confidence=0.8),
    )
    model = ScriptedModel([plan, wire_plan(answer="13")])
    agent = Agent(model, tools=[add], acceptance=Acceptance(predicates={"small": lambda _step, output: output < 100}))
    result = await agent.run("1+2+10")

    assert result.stop.kind == "goal_met", result.stop
    assert (result.answer, result.outputs) == ("13", {"a": 3, "b": 13})
    a, b = result.plans[0].steps
    assert a.checks == (
        NonEmpty(),
        Contains(text="3"),
        Matches(pattern="^[0-9]+$"),
        FitsSchema(json_schema={"type": "integer"}),
        Predicate(name="small"),
    )
    assert (a.tool, a.executor, a.expected, a.output_schema) == ("add", None, None, None)
    assert (b.args, b.depends_on, b.on_fail, b.confidence) == ({"a": "${a}", "b": 10}, ("a",), "retry", 0.8)


HOSTILE_TEXTS = [
    ("args", "not json", "steps.0.args"),
    ("args", "[1, 2]", "steps.0.args"),
    ("args", '{"a": NaN}', "steps.0.args"),
    ("args", "[" * 500 + "]" * 500, "steps.0.args"),
    ("output_schema", '{"type": ', "steps.0.output_schema"),
    ("checks", ["bogus:x"], "steps.0.checks.0"),
    ("checks", ["contains"], "steps.0.checks.0"),
    ("checks", ["schema:[]"], "steps.0.checks.0"),
]


@pytest.mark.parametrize(("member", "value", "where"), HOSTILE_TEXTS)
async def test_hostile_text_in_a_wire_plan_is_a_listed_problem(member: str, value: Any, where: str) -> None:
    bad = wire_plan({**wire_step("a", "add", '{"a": 1, "b": 2}'), member: value})
    model = ScriptedModel([bad, bad])
    result = await Agent(Planner(model=model, max_repairs=1), tools=[add]).run("1+2")

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    assert result.outputs == {}
    assert all(("invalid_output", where) in problems for problems in rejected(result))


async def test_every_problem_of_an_answer_is_listed_at_once() -> None:
    bad = wire_plan(
        wire_step("a", "add", "nope", output_schema="{", checks=["bogus"]),
        wire_step("b", "add", "[]"),
        answer="too soon",
    )
    good = wire_plan(wire_step("a", "add", '{"a": 1, "b": 2}'))
    model = ScriptedModel([bad, good, wire_plan(answer="3")])
    result = await Agent(model, tools=[add]).run("1+2")

    assert result.stop.kind == "goal_met", result.stop
    [problems] = rejected(result)
    assert problems == {
        ("invalid_output", "answer"),
        ("invalid_output", "steps.0.args"),
        ("invalid_output", "steps.0.output_schema"),
        ("invalid_output", "steps.0.checks.0"),
        ("invalid_output", "steps.1.args"),
    }
    # The repair request names each problem where it is.
    repair = model.calls[1].last_user_text
    for where in ("steps.0.args", "steps.1.args", "answer"):
        assert where in repair


async def test_a_final_answer_request_needs_an_answer() -> None:
    model = ScriptedModel([tool_step_plan(), wire_plan(), wire_plan(answer="3")])
    result = await Agent(model, tools=[add]).run("1+2")
    assert result.answer == "3"
    assert rejected(result) == [{("invalid_output", "answer")}]


def tool_step_plan() -> dict[str, Any]:
    return {"steps": [tool_step("a", "add", {"a": 1, "b": 2})]}


async def test_a_flat_turn_takes_its_arguments_as_text() -> None:
    model = ScriptedModel(
        [
            {"thought": "add", "next_step": "add them", "tool": "add", "arguments": '{"a": 1, "b": 2}', "stop": False}
            | {"confidence": 0.9, "answer": None, "question": None, "give_up": None},
            {"thought": "done", "next_step": "3", "tool": None, "arguments": "{}", "stop": True, "confidence": 0.9},
        ]
    )
    result = await Agent(Planner(model=model, policy="step", turn_format="flat"), tools=[add]).run("1+2")
    assert (result.stop.kind, result.answer, result.outputs) == ("goal_met", "3", {"s1": 3})


# -- what the planner is sent ------------------------------------------------------------------


class Address(BaseModel):
    city: str
    zip: str | None = None


@tool
async def ship(parcel: str, to: Address, speed: str = "normal", tags: list[str] | None = None) -> str:
    """Ship a parcel."""
    return "shipped"


async def echo(args: dict[str, Any], _context: Any) -> Any:
    return args


search = Tool(
    name="search",
    description="Search the catalogue.",
    parameters={
        "type": "object",
        "properties": {"q": {"type": "string", "description": "what to look for", "minLength": 2}},
        "required": ["q"],
        "additionalProperties": False,
    },
    invoke=echo,
)

odd = Tool(
    name="odd",
    description="A tool whose schema has no signature form.",
    parameters={"type": "object", "properties": {"x": {"not": {"type": "null"}}}, "additionalProperties": False},
    invoke=echo,
)


async def first_request_text(*tools: Any) -> tuple[str, str]:
    model = ScriptedModel([{"question": "which?", "steps": []}])
    await Agent(model, tools=list(tools)).run("go")
    messages = model.calls[0].messages
    return messages[1].content, messages[3].content


async def test_tools_are_sent_as_compact_signatures_that_keep_what_their_schemas_say() -> None:
    stable, _ = await first_request_text(ship, search, odd)
    lines = stable.splitlines()
    # A nested model is written in place; a pydantic model takes members it does not name ("...").
    ship_line = '- ship(parcel: string, to: {city: string, zip?: string|null = null, ...}, speed?: string = "normal", '
    assert ship_line + "tags?: string[]|null = null): Ship a parcel." in lines
    assert '- search(q: string {"minLength":2}): Search the catalogue.' in lines
    assert "  q: what to look for" in lines
    # A schema the signature form cannot say is sent as JSON, whole.
    odd_at = lines.index("- odd: A tool whose schema has no signature form.")
    assert json.loads(lines[odd_at + 1].removeprefix("  args schema: ")) == odd.parameters


async def test_what_a_run_does_not_change_comes_first() -> None:
    model = ScriptedModel([{"steps": [tool_step("a", "add", {"a": 1, "b": 2})]}, {"answer": "3"}])
    await Agent(model, tools=[add]).run("1+2", constraints=["be exact"])
    propose, finish = model.calls
    assert propose.output == finish.output
    assert propose.messages[:3] == finish.messages[:3]
    assert [m.cache_point for m in propose.messages] == [True, True, True, False]
    assert propose.messages[1].content.startswith("Tools:\n- add(a: integer, b: integer): Add two numbers.")
    assert propose.messages[2].content == "Goal: 1+2\nConstraints:\n- be exact"
    assert propose.messages[3].content.startswith("Budget left:")
    assert finish.messages[3].content.startswith("Record:\n- a add {")
    # One cache key for every planner request that starts the same way, in this run and the next.
    again = ScriptedModel([{"steps": [tool_step("a", "add", {"a": 2, "b": 2})]}, {"answer": "4"}])
    await Agent(again, tools=[add]).run("2+2")
    assert propose.cache_key == finish.cache_key == again.calls[0].cache_key
    assert propose.cache_key is not None
    assert propose.cache_key.startswith("planexec/planner/")


async def test_the_record_grows_by_appending() -> None:
    @tool
    async def flaky(n: int) -> int:
        """Fails the first time it sees 2."""
        if n == 2 and not seen:
            seen.append(n)
            raise ValueError("try again")
        return n

    seen: list[int] = []
    steps = [tool_step(f"s{i}", "flaky", {"n": i}, *([f"s{i - 1}"] if i else [])) for i in range(5)]
    model = ScriptedModel([{"steps": steps}, {"steps": steps[2:]}, {"answer": "done"}])
    result = await Agent(model, tools=[flaky]).run("count")
    assert result.stop.kind == "goal_met", result.stop

    _, patch, finish = (c.messages[3].content for c in model.calls)
    done_then = patch.split("\nNot finished:")[0]
    assert done_then.endswith("✗ failed: tool_error: flaky: try again")
    assert finish.startswith(done_then + "\n- s2 flaky ")  # the failed try stays where it was


# -- the step-by-step record ---------------------------------------------------------------------


async def test_the_step_by_step_record_keeps_a_window_and_folds_older_steps() -> None:
    n = 30
    script = [turn(tool_step(f"s{i}", "add", {"a": i, "b": 0}), "next", 0.9) for i in range(n)]
    model = ScriptedModel([*script, {"thought": "done", "confidence": 0.9, "stop": True, "answer": "ok"}])
    result = await Agent(Planner(model=model, policy="step", record_window=6), tools=[add]).run("count")
    assert result.stop.kind == "goal_met", result.stop

    last = model.calls[-1].messages[3].content
    shown = [line for line in last.splitlines() if line.startswith("- s")]
    assert 3 < len(shown) <= 6
    assert "- earlier steps, outputs not shown (bind them with ${id}): succeeded s0–s" in last
    sizes = [c.chars for c in model.calls]
    assert max(sizes[12:]) - min(sizes[12:]) < 400  # bounded: it no longer grows with the run

    whole = ScriptedModel([*script, {"thought": "done", "confidence": 0.9, "stop": True, "answer": "ok"}])
    await Agent(Planner(model=whole, policy="step", record_window=None), tools=[add]).run("count")
    assert whole.calls[-1].messages[3].content.count("\n- s") == n


def test_a_record_window_must_be_a_positive_whole_number_or_none() -> None:
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(UsageError, match="record_window"):
            Planner(model=ScriptedModel([]), record_window=bad)  # type: ignore[arg-type]


async def test_thousands_of_bad_members_make_a_capped_list() -> None:
    bad = wire_plan(*(wire_step(f"s{i}", "add", "[]", checks=["bogus"] * 20) for i in range(100)))
    model = ScriptedModel([bad, bad])
    result = await Agent(Planner(model=model, max_repairs=1), tools=[add]).run("1+2")

    assert (result.stop.kind, result.stop.code) == ("error", "planner_output"), result.stop
    for event in events_of(result, PlannerOutputRejected):
        assert len(event.problems) <= 21  # the first twenty, and how many more there were


async def test_a_tool_schema_whose_references_fan_out_is_sent_as_json() -> None:
    def obj(name: str, ref: str | None) -> dict[str, Any]:
        member = {"$ref": f"#/$defs/{ref}"} if ref else {"type": "string"}
        return {"type": "object", "properties": {f"{name}{i}": member for i in range(60)}}

    defs = {"A": obj("p", "B"), "B": obj("q", "C"), "C": obj("r", None)}
    params = {"type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}, "$defs": defs}
    wide = Tool(name="wide", description="Refers to its parts many times.", parameters=params, invoke=echo)
    stable, _ = await first_request_text(wide)
    assert len(stable) < 3 * len(json.dumps(params))  # not the 216,000 members written out
    assert json.loads(stable.splitlines()[-1].removeprefix("  args schema: ")) == params


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(levels):
        schema = {"items": schema}
    return schema


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"x": {"type": "number", "default": {1, 2}}}},
        {"type": "object", "properties": {"x": {"type": "number", "default": float("nan")}}},
        {"type": "object", "properties": {"x": nested(150)}},
        ["not", "a", "schema"],
    ],
    ids=["a set", "NaN", "150 levels deep", "a list"],
)
def test_tool_parameters_that_are_not_a_json_object_are_refused_when_the_tool_is_defined(parameters: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="schema"):
        Tool(name="bad", description="A tool.", parameters=parameters, invoke=echo)


def own_check(args: Mapping[str, Any]) -> tuple[dict[str, Any] | None, list[Any]]:
    return dict(args), []


async def test_a_tool_with_its_own_validator_and_an_odd_required_list_is_described_as_json() -> None:
    params = {"type": "object", "properties": {"x": {"type": "string"}}, "required": [["x"]]}
    own = Tool(name="own", description="Checks its own arguments.", parameters=params, invoke=echo, validator=own_check)
    stable, _ = await first_request_text(own)
    assert json.loads(stable.splitlines()[-1].removeprefix("  args schema: ")) == params
