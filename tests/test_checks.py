"""Static checks: every problem a plan can have is found before anything runs, all at once."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

import pytest

from planexec import Problem, Step, Toolset, UsageError, tool
from planexec.errors import PlanInvalid
from planexec.plan import (
    CheckContext,
    FitsSchema,
    IncrementalChecker,
    Matches,
    Predicate,
    changes_world,
    check_steps,
    validate_steps,
)


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
async def total(items: list[int], label: str = "") -> int:
    """Sum a list."""
    return sum(items)


@tool
async def ping() -> str:
    """Say pong."""
    return "pong"


TOOLS = Toolset(add, total, ping)


def ctx(
    *,
    finished: Collection[str] = (),
    max_steps: int | None = None,
    default_executor: str | None = None,
    predicates: Collection[str] | None = None,
) -> CheckContext:
    return CheckContext(
        tools=TOOLS,
        executors={"tools": "tools", "sql": "tools", "model": "model", "writer": "model"},
        default_executor=default_executor,
        finished=finished,
        max_steps=max_steps,
        predicates=predicates,
    )


def step(step_id: str, *, depends_on: tuple[str, ...] = (), **fields: Any) -> Step:
    data: dict[str, Any] = {"id": step_id, "description": f"step {step_id}", "depends_on": depends_on}
    if "tool" not in fields and "executor" not in fields:
        data["tool"] = "ping"
    data.update(fields)
    return Step.model_validate(data)


def deep_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def codes(problems: list[Problem]) -> list[str]:
    return [p.code for p in problems]


def only(problems: list[Problem], code: str) -> list[Problem]:
    return [p for p in problems if p.code == code]


# -- a plan with no problems --------------------------------------------------------------------


def test_a_good_plan_has_no_problems() -> None:
    steps = [
        step("one", tool="add", args={"a": 1, "b": 2}),
        step("two", tool="add", args={"a": "${one}", "b": 5}, depends_on=("one",)),
        step("three", tool="total", args={"items": ["${one}", "${two}", 3]}, depends_on=("two",)),
        step("four", executor="writer", args={"text": "sum is ${three}"}, depends_on=("three",)),
        step("five", tool="add", executor="sql", args={"a": 1, "b": 1}),
        step("six", checks=(Matches(pattern="^p"), FitsSchema(json_schema={"type": "string"}))),
        step("seven", executor="writer", allowed_tools=("add", "total"), depends_on=("four",)),
        step(
            "eight",
            output_schema={
                "$defs": {"n": {"type": "integer", "minimum": 0}},
                "type": "object",
                "properties": {"count": {"$ref": "#/$defs/n"}, "code": {"type": "string", "pattern": r"^[A-Z]\d+$"}},
            },
        ),
    ]
    assert check_steps(steps, ctx()) == []
    validate_steps(steps, ctx())  # does not raise


def test_empty_plan_has_no_problems() -> None:
    assert check_steps([], ctx()) == []


# -- one code at a time -------------------------------------------------------------------------


def test_duplicate_id() -> None:
    problems = check_steps([step("a"), step("b"), step("a")], ctx())
    assert codes(problems) == ["duplicate_id"]
    assert problems[0].where == "step 'a'"


def test_finished_id() -> None:
    problems = check_steps([step("done"), step("new")], ctx(finished=["done"]))
    assert codes(problems) == ["finished_id"]
    assert problems[0].where == "step 'done'"
    assert "new id" in problems[0].message


def test_running_id() -> None:
    """A running step that may change the world may be listed again unchanged, not redefined."""
    pay = step("pay", tool="add", args={"a": 1, "b": 2}, effect="write")
    context = replace(ctx(), running={"pay": pay})
    assert check_steps([pay, step("new")], context) == []
    problems = check_steps([step("pay", tool="add", args={"a": 1, "b": 3}, effect="write")], context)
    assert codes(problems) == ["running_id"]
    assert problems[0].where == "step 'pay'"
    assert "cannot be stopped" in problems[0].message
    checker = IncrementalChecker(context)
    assert codes(checker.add(step("pay"))) == ["running_id"]


def test_changes_world() -> None:
    @tool(side_effect=True)
    async def send(text: str) -> str:
        """Send a message."""
        return text

    tools = Toolset(add, send)
    assert not changes_world(step("a", tool="add", args={"a": 1, "b": 2}), tools)
    assert changes_world(step("a", tool="add", args={"a": 1, "b": 2}, effect="write"), tools)
    assert changes_world(step("s", tool="send", args={"text": "hi"}), tools)
    assert changes_world(step("m", executor="model", allowed_tools=("add", "send")), tools)
    assert not changes_world(step("m", executor="model", allowed_tools=("add",)), tools)


def test_budget_steps() -> None:
    steps = [step("a"), step("b"), step("c")]
    problems = check_steps(steps, ctx(max_steps=2))
    assert codes(problems) == ["budget_steps"]
    assert "3 steps" in problems[0].message
    assert "allows 2" in problems[0].message
    assert check_steps(steps, ctx(max_steps=3)) == []
    assert codes(check_steps([step("a")], ctx(max_steps=0))) == ["budget_steps"]


def test_unknown_tool_lists_known_tools() -> None:
    problems = check_steps([step("a", tool="search")], ctx())
    assert codes(problems) == ["unknown_tool"]
    assert "'search'" in problems[0].message
    assert "add, ping, total" in problems[0].message


def test_unknown_executor_lists_known_executors() -> None:
    problems = check_steps([step("a", executor="poet")], ctx())
    assert codes(problems) == ["unknown_executor"]
    assert "'poet'" in problems[0].message
    assert "model, sql, tools, writer" in problems[0].message


def test_executor_kind_tool_step_on_model_executor() -> None:
    problems = check_steps([step("a", tool="ping", executor="writer")], ctx())
    assert codes(problems) == ["executor_kind"]
    assert "writer" in problems[0].message


def test_executor_kind_tool_executor_without_tool() -> None:
    problems = check_steps([step("a", executor="sql")], ctx())
    assert codes(problems) == ["executor_kind"]
    assert "sql" in problems[0].message


def test_no_tool_or_executor() -> None:
    bare = Step(id="a", description="think hard")
    assert codes(check_steps([bare], ctx())) == ["no_tool_or_executor"]
    assert check_steps([bare], ctx(default_executor="model")) == []


def test_self_dependency_is_not_also_a_cycle() -> None:
    problems = check_steps([step("a", depends_on=("a",))], ctx())
    assert codes(problems) == ["self_dependency"]


def test_missing_dependency() -> None:
    problems = check_steps([step("a", depends_on=("ghost", "b")), step("b")], ctx())
    assert codes(problems) == ["missing_dependency"]
    assert "'ghost'" in problems[0].message
    assert problems[0].where == "step 'a'"


def test_dependency_on_a_finished_step_is_fine() -> None:
    problems = check_steps(
        [step("b", tool="add", args={"a": "${old}", "b": 1}, depends_on=("old",))], ctx(finished=["old"])
    )
    assert problems == []


def test_cycle() -> None:
    steps = [step("a", depends_on=("c",)), step("b", depends_on=("a",)), step("c", depends_on=("b",)), step("d")]
    problems = check_steps(steps, ctx())
    assert codes(problems) == ["cycle"]
    message = problems[0].message
    for sid in ("a", "b", "c"):
        assert sid in message
    assert "'d'" not in message
    assert problems[0].where == "step 'a'"


def test_two_separate_cycles_are_both_reported() -> None:
    steps = [
        step("a", depends_on=("b",)),
        step("b", depends_on=("a",)),
        step("x", depends_on=("y",)),
        step("y", depends_on=("x",)),
    ]
    problems = check_steps(steps, ctx())
    assert codes(problems) == ["cycle", "cycle"]
    assert {p.where for p in problems} == {"step 'a'", "step 'x'"}


def test_binding_missing_step() -> None:
    problems = check_steps([step("a", tool="add", args={"a": "${ghost}", "b": 1})], ctx())
    assert codes(problems) == ["binding_missing_step"]
    assert "${ghost}" in problems[0].message


def test_binding_not_in_depends_on() -> None:
    steps = [step("a", tool="add", args={"a": 1, "b": 2}), step("b", tool="add", args={"a": "${a}", "b": 1})]
    problems = check_steps(steps, ctx())
    assert codes(problems) == ["binding_not_in_depends_on"]
    assert problems[0].where == "step 'b'"


def test_binding_a_finished_step_needs_depends_on_too() -> None:
    problems = check_steps([step("b", tool="add", args={"a": "${old}", "b": 1})], ctx(finished=["old"]))
    assert codes(problems) == ["binding_not_in_depends_on"]


def test_binding_a_transitive_ancestor_is_fine() -> None:
    steps = [
        step("a", tool="add", args={"a": 1, "b": 2}),
        step("b", depends_on=("a",)),
        step("c", depends_on=("b",)),
        step("d", tool="add", args={"a": "${a}", "b": "${b}"}, depends_on=("c",)),
    ]
    assert check_steps(steps, ctx()) == []


def test_binding_a_sibling_is_not_fine() -> None:
    steps = [
        step("root"),
        step("left", depends_on=("root",)),
        step("right", tool="total", args={"items": ["${left}"], "label": "${root}"}, depends_on=("root",)),
    ]
    problems = check_steps(steps, ctx())
    assert codes(problems) == ["binding_not_in_depends_on"]
    assert "${left}" in problems[0].message


def test_binding_syntax_problems_are_reported() -> None:
    problems = check_steps([step("a", tool="total", args={"items": [], "label": "${1bad}"})], ctx())
    assert codes(problems) == ["binding_syntax"]
    assert problems[0].where == "step 'a' args.label"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"a": "one", "b": 2}, "argument a:"),
        ({"a": 1}, "argument b:"),
        ({"a": 1, "b": 2, "c": 3}, "argument c:"),
    ],
)
def test_invalid_arguments(args: dict[str, Any], fragment: str) -> None:
    problems = check_steps([step("s", tool="add", args=args)], ctx())
    assert codes(problems) == ["invalid_arguments"]
    assert fragment in problems[0].message


def test_invalid_arguments_lists_each_argument() -> None:
    problems = check_steps([step("s", tool="add", args={"a": "x", "c": 1})], ctx())
    assert codes(problems) == ["invalid_arguments"] * 3


@pytest.mark.parametrize(
    "args",
    [
        {"a": "${up}", "b": 1},
        {"a": "${up.count}", "b": "${up.other}"},
        {"a": "text ${up} is still bound", "b": 1},
    ],
)
def test_bound_arguments_are_not_checked_before_the_run(args: dict[str, Any]) -> None:
    problems = check_steps([step("up"), step("s", tool="add", args=args, depends_on=("up",))], ctx())
    assert problems == []


def test_bound_list_item_is_skipped_but_the_rest_is_checked() -> None:
    steps = [step("up"), step("s", tool="total", args={"items": ["${up}", "two"]}, depends_on=("up",))]
    problems = check_steps(steps, ctx())
    assert codes(problems) == ["invalid_arguments"]
    assert "items.1" in problems[0].message


def test_invalid_schema() -> None:
    problems = check_steps(
        [
            step("a", output_schema={"type": "nonsense"}),
            step("b", checks=(FitsSchema(json_schema={"minimum": "ten"}),)),
        ],
        ctx(),
    )
    assert codes(problems) == ["invalid_schema", "invalid_schema"]
    assert [p.where for p in problems] == ["step 'a'", "step 'b'"]


def test_invalid_pattern() -> None:
    problems = check_steps([step("a", checks=(Matches(pattern="(unclosed"),))], ctx())
    assert codes(problems) == ["invalid_pattern"]
    assert "(unclosed" in problems[0].message


@pytest.mark.parametrize("pattern", ["(?=x)y", "(?<=x)y", r"(x)\1"])
def test_a_pattern_needs_re2_syntax(pattern: str) -> None:
    problems = check_steps(
        [
            step("a", checks=(Matches(pattern=pattern),)),
            step("b", output_schema={"type": "string", "pattern": pattern}),
            step("c", checks=(FitsSchema(json_schema={"patternProperties": {pattern: {"type": "integer"}}}),)),
        ],
        ctx(),
    )
    assert codes(problems) == ["invalid_pattern"] * 3
    assert [p.where for p in problems] == ["step 'a'", "step 'b'", "step 'c'"]
    for p in problems:
        assert "RE2 syntax" in p.message
    assert "/pattern" in problems[1].message
    assert "/patternProperties" in problems[2].message


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"$ref": "https://example.com/person.json"}, "only local refs"),
        ({"items": {"$ref": "#/$defs/item"}, "$defs": {"item": {"$ref": "#/items"}}}, "a $ref cycle"),
        ({"$ref": "#/$defs/nothing"}, "points at nothing"),
    ],
)
def test_a_schema_may_only_use_local_finite_refs(schema: dict[str, Any], fragment: str) -> None:
    problems = check_steps([step("a", output_schema=schema)], ctx())
    assert codes(problems) == ["invalid_schema"]
    assert fragment in problems[0].message


def test_allowed_tools_for_a_model_step() -> None:
    fine = step("a", executor="writer", allowed_tools=("add", "ping"))
    assert check_steps([fine], ctx()) == []
    assert check_steps([Step(id="b", description="x", allowed_tools=("ping",))], ctx(default_executor="model")) == []


def test_unknown_allowed_tool() -> None:
    problems = check_steps([step("a", executor="writer", allowed_tools=("add", "search"))], ctx())
    assert codes(problems) == ["unknown_allowed_tool"]
    assert "'search'" in problems[0].message
    assert "add, ping, total" in problems[0].message


def test_allowed_tools_on_a_tool_step() -> None:
    problems = check_steps([step("a", tool="ping", allowed_tools=("add",))], ctx())
    assert codes(problems) == ["allowed_tools_with_tool"]
    assert "'ping'" in problems[0].message


def test_duplicate_allowed_tool() -> None:
    problems = check_steps([step("a", executor="writer", allowed_tools=("add", "ping", "add", "add"))], ctx())
    assert codes(problems) == ["duplicate_allowed_tool", "duplicate_allowed_tool"]
    assert "'add' twice" in problems[0].message


def test_many_problems_of_one_kind_are_counted_after_twenty() -> None:
    steps = [step(f"s{i}", tool=f"tool{i}") for i in range(25)] + [step("x", depends_on=("ghost",))]
    problems = check_steps(steps, ctx())
    assert codes(problems) == ["unknown_tool"] * 20 + ["missing_dependency", "unknown_tool"]
    assert problems[-1].where == "plan"
    assert problems[-1].message == "5 more 'unknown_tool' problems are not listed"
    assert [p.where for p in problems[:20]] == [f"step 's{i}'" for i in range(20)]


def test_deep_args_are_too_deep() -> None:
    deep: Any = 1
    for _ in range(150):
        deep = {"x": deep}
    assert codes(check_steps([step("a", tool="total", args={"items": deep_list(98)})], ctx())) == ["invalid_arguments"]
    problems = check_steps([step("a", tool="total", args={"items": [deep]})], ctx())
    assert codes(problems) == ["too_deep"]
    assert problems[0].where.startswith("step 'a' args.items[0].x.x")
    assert "nested deeper than 100 levels" in problems[0].message


def test_args_that_are_not_json_data() -> None:
    problems = check_steps([step("a", tool="total", args={"items": [1, float("nan")]})], ctx())
    assert [(p.code, p.where) for p in problems] == [("not_json", "step 'a' args.items[1]")]


def test_unknown_predicate() -> None:
    s = step("a", checks=(Predicate(name="is_prime"),))
    problems = check_steps([s], ctx(predicates=["is_even", "is_odd"]))
    assert codes(problems) == ["unknown_predicate"]
    assert "is_even, is_odd" in problems[0].message
    assert check_steps([s], ctx(predicates=["is_prime"])) == []
    assert check_steps([s], ctx(predicates=None)) == []  # None: predicates are not checked


# -- all problems at once ------------------------------------------------------------------------


def test_every_problem_is_reported_at_once() -> None:
    steps = [
        step("dup"),
        step("dup"),
        step("old"),
        step("t", tool="search"),
        step("e", executor="poet"),
        step("k", tool="ping", executor="writer"),
        Step(id="bare", description="no tool, no executor"),
        step("self", depends_on=("self",)),
        step("m", depends_on=("ghost",)),
        step("c1", depends_on=("c2",)),
        step("c2", depends_on=("c1",)),
        step("bm", tool="add", args={"a": "${nowhere}", "b": 1}),
        step("bd", tool="add", args={"a": "${m}", "b": 1}),
        step("ia", tool="add", args={"a": "x", "b": 1}),
        step("sc", output_schema={"type": 3}),
        step("pt", checks=(Matches(pattern="["),)),
        step("pr", checks=(Predicate(name="nope"),)),
        step("bs", tool="total", args={"items": [], "label": "${}"}),
        step("at", tool="ping", allowed_tools=("ping",)),
        step("au", executor="writer", allowed_tools=("nope", "nope")),
        step("deep", tool="total", args={"items": deep_list(200)}),
        step("nan", tool="total", args={"items": [float("inf")]}),
        step("rf", output_schema={"$ref": "file:///etc/passwd"}),
    ]
    context = ctx(finished=["old"], max_steps=5, predicates=["fine"])
    expected = {
        "duplicate_id",
        "finished_id",
        "budget_steps",
        "unknown_tool",
        "unknown_executor",
        "executor_kind",
        "no_tool_or_executor",
        "self_dependency",
        "missing_dependency",
        "cycle",
        "binding_missing_step",
        "binding_not_in_depends_on",
        "invalid_arguments",
        "invalid_schema",
        "invalid_pattern",
        "unknown_predicate",
        "binding_syntax",
        "allowed_tools_with_tool",
        "unknown_allowed_tool",
        "duplicate_allowed_tool",
        "not_json",
        "too_deep",
    }
    problems = check_steps(steps, context)
    assert set(codes(problems)) == expected

    with pytest.raises(PlanInvalid) as info:
        validate_steps(steps, context)
    error = info.value
    assert isinstance(error, UsageError)
    assert list(error.problems) == problems
    text = str(error)
    assert f"({len(problems)} problems)" in text
    for p in problems:
        assert str(p) in text


def test_problems_read_well() -> None:
    [problem] = check_steps([step("a", tool="search")], ctx())
    assert str(problem) == f"step 'a': {problem.message} [unknown_tool]"
