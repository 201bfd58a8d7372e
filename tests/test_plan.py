"""Steps and plans: validation, the JSON round trip, and the versioned plan JSON Schema."""

from __future__ import annotations

import json
from typing import Any, cast

import jsonschema
import pytest
from pydantic import ValidationError

from planexec import Plan, Step
from planexec.plan import (
    PLAN_SCHEMA_VERSION,
    Contains,
    FinalAnswer,
    FitsSchema,
    Matches,
    NonEmpty,
    PlanDraft,
    Predicate,
    Turn,
    plan_json_schema,
)


def _step(**fields: Any) -> Step:
    data: dict[str, Any] = {"id": "s1", "description": "do a thing"}
    data.update(fields)
    return Step.model_validate(data)


def _full_plan() -> Plan:
    fetch = Step(
        id="fetch",
        description="fetch the rows",
        tool="sql",
        args={"query": "select 1", "limit": 10, "opts": {"strict": True, "tags": ["a", None, 1.5]}},
        expected="a list of rows",
        checks=(
            NonEmpty(),
            Contains(text="row"),
            Matches(pattern=r"\d+"),
            FitsSchema(json_schema={"type": "array"}),
            Predicate(name="sane"),
        ),
        output_schema={"type": "array", "items": {"type": "object"}},
        effect="read",
        approval="never",
        confidence=0.75,
        thought="rows first",
    )
    write = Step(
        id="write-report_2",
        description="write the report",
        executor="drafting",
        args={"rows": "${fetch}", "title": "Rows: ${fetch.0.name}", "literal": "$${not a binding}"},
        depends_on=("fetch",),
        allowed_tools=("sql", "spell_check"),
        effect="write",
        approval="always",
        confidence=1.0,
    )
    return Plan(version=3, steps=(fetch, write), author="human", reason="a human edited it")


# -- Step validation ----------------------------------------------------------------------------


def test_step_minimal_defaults() -> None:
    step = Step(id="s1", description="do a thing")
    assert step.tool is None
    assert step.executor is None
    assert step.args == {}
    assert step.depends_on == ()
    assert step.checks == ()
    assert step.expected is None
    assert step.output_schema is None
    assert step.effect == "read"
    assert step.approval == "auto"
    assert step.confidence is None
    assert step.thought is None
    assert step.allowed_tools == ()


def test_step_is_keyword_only() -> None:
    make = cast(Any, Step)
    with pytest.raises(TypeError):
        make("s1", "do a thing")


def test_step_is_frozen() -> None:
    step = Step(id="s1", description="do a thing")
    with pytest.raises(ValidationError):
        setattr(step, "id", "s2")  # noqa: B010 - assigning through setattr on purpose
    assert step.id == "s1"


def test_step_is_hashable_and_compares_by_value() -> None:
    a = Step(id="s1", description="x", depends_on=("s0",))
    b = Step(id="s1", description="x", depends_on=("s0",))
    assert a == b
    assert a != Step(id="s1", description="y", depends_on=("s0",))


def test_step_forbids_extra_fields() -> None:
    with pytest.raises(ValidationError) as info:
        _step(toolname="search")
    assert any(e["type"] == "extra_forbidden" for e in info.value.errors())


@pytest.mark.parametrize("confidence", [0.0, 0.5, 1.0])
def test_step_confidence_in_range(confidence: float) -> None:
    assert _step(confidence=confidence).confidence == confidence


@pytest.mark.parametrize("confidence", [-0.01, 1.01, 2, -1])
def test_step_confidence_out_of_range(confidence: float) -> None:
    with pytest.raises(ValidationError):
        _step(confidence=confidence)


@pytest.mark.parametrize("step_id", ["a", "A", "_x", "fetch-rows_2", "s" + "x" * 63])
def test_step_id_pattern_accepts(step_id: str) -> None:
    assert _step(id=step_id).id == step_id


@pytest.mark.parametrize(
    "step_id",
    ["", "1abc", "-a", "a b", "a.b", "a$", "${a}", "ü", "s" + "x" * 64],
)
def test_step_id_pattern_rejects(step_id: str) -> None:
    with pytest.raises(ValidationError):
        _step(id=step_id)


def test_step_rejects_duplicate_dependencies() -> None:
    with pytest.raises(ValidationError, match="twice"):
        _step(id="c", depends_on=["a", "b", "a"])


def test_step_rejects_unknown_effect_and_approval() -> None:
    with pytest.raises(ValidationError):
        _step(effect="delete")
    with pytest.raises(ValidationError):
        _step(approval="sometimes")


def test_step_checks_are_tagged_by_kind() -> None:
    step = _step(
        checks=[
            {"kind": "non_empty"},
            {"kind": "contains", "text": "x"},
            {"kind": "matches", "pattern": "y+"},
            {"kind": "schema", "json_schema": {"type": "string"}},
            {"kind": "predicate", "name": "p"},
        ]
    )
    assert [type(c) for c in step.checks] == [NonEmpty, Contains, Matches, FitsSchema, Predicate]
    with pytest.raises(ValidationError):
        _step(checks=[{"kind": "vibes"}])
    with pytest.raises(ValidationError):
        _step(checks=[{"kind": "contains", "text": "x", "extra": 1}])


# -- Plan validation ----------------------------------------------------------------------------


def test_plan_defaults_and_lookup() -> None:
    plan = Plan(steps=(Step(id="a", description="a"), Step(id="b", description="b", depends_on=("a",))))
    assert plan.schema_version == 3  # written as the oldest version that holds it
    assert PLAN_SCHEMA_VERSION == 4
    assert plan.answer is None
    assert plan.version == 1
    assert plan.author == "planner"
    assert plan.reason == ""
    assert plan.ids == ("a", "b")
    assert plan.step("b").depends_on == ("a",)
    with pytest.raises(KeyError):
        plan.step("zzz")


def test_plan_is_frozen_and_forbids_extra_fields() -> None:
    plan = Plan(steps=())
    with pytest.raises(ValidationError):
        setattr(plan, "version", 2)  # noqa: B010 - assigning through setattr on purpose
    with pytest.raises(ValidationError):
        Plan.model_validate({"steps": [], "owner": "me"})


def test_plan_is_keyword_only() -> None:
    make = cast(Any, Plan)
    with pytest.raises(TypeError):
        make(())


@pytest.mark.parametrize(
    "data",
    [
        {"steps": [], "version": 0},
        {"steps": [], "schema_version": 5},
        {"steps": [], "schema_version": 0},
        {"steps": [], "author": "robot"},
        {"version": 1},
        {"steps": [{"id": "a"}]},
    ],
)
def test_plan_rejects_invalid_fields(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Plan.model_validate(data)


# -- JSON round trip ----------------------------------------------------------------------------


def test_plan_json_round_trip() -> None:
    plan = _full_plan()
    text = plan.model_dump_json()
    again = Plan.model_validate_json(text)
    assert again == plan
    assert again.model_dump_json() == text
    # plain JSON data too (what the store and the API exchange)
    data = json.loads(text)
    assert Plan.model_validate(data) == plan
    assert data["schema_version"] == 3
    assert "answer" not in data  # left out when there is none, as plans before version 4 were written
    assert data["steps"][0]["checks"][3] == {"kind": "schema", "json_schema": {"type": "array"}}
    assert data["steps"][1]["depends_on"] == ["fetch"]
    assert data["steps"][1]["allowed_tools"] == ["sql", "spell_check"]
    assert "allowed_tools" not in data["steps"][0]  # left out when empty, as version 1 plans were written


def test_step_json_round_trip_keeps_bindings_verbatim() -> None:
    step = _full_plan().step("write-report_2")
    again = Step.model_validate_json(step.model_dump_json())
    assert again.args == {"rows": "${fetch}", "title": "Rows: ${fetch.0.name}", "literal": "$${not a binding}"}
    assert again == step


def test_planner_output_formats() -> None:
    draft = PlanDraft.model_validate({"steps": [{"id": "a", "description": "x", "tool": "t"}]})
    assert draft.reason == ""
    assert draft.steps[0].tool == "t"
    with pytest.raises(ValidationError):
        PlanDraft.model_validate({"steps": [], "extra": 1})
    turn = Turn.model_validate({"thought": "t", "confidence": 0.9, "stop": True, "answer": "42"})
    assert turn.step is None
    with pytest.raises(ValidationError):
        Turn.model_validate({"thought": "t", "confidence": 1.5, "stop": True})
    assert FinalAnswer.model_validate({"answer": "x"}).answer == "x"


# -- the versioned JSON Schema -------------------------------------------------------------------


def test_plan_json_schema_is_versioned() -> None:
    schema = plan_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"urn:planexec:plan:{PLAN_SCHEMA_VERSION}"
    assert schema["x-planexec-schema-version"] == PLAN_SCHEMA_VERSION == 4
    assert schema["properties"]["schema_version"]["enum"] == [1, 2, 3, 4]
    assert schema["properties"]["schema_version"]["default"] == 3


def test_plan_json_schema_is_a_valid_json_document() -> None:
    schema = plan_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert json.loads(json.dumps(schema)) == schema
    assert plan_json_schema() == schema  # stable from call to call


def test_plan_json_schema_pins_the_fields() -> None:
    """Changing these is a schema change: bump PLAN_SCHEMA_VERSION and note it in the changelog."""
    schema = plan_json_schema()
    assert sorted(schema["properties"]) == ["answer", "author", "reason", "schema_version", "steps", "version"]
    assert schema["required"] == ["steps"]
    assert schema["additionalProperties"] is False
    step = schema["$defs"]["Step"]
    assert sorted(step["properties"]) == [
        "allowed_tools",
        "approval",
        "args",
        "checks",
        "confidence",
        "depends_on",
        "description",
        "effect",
        "executor",
        "expected",
        "id",
        "on_fail",
        "output_schema",
        "thought",
        "tool",
    ]
    assert sorted(step["required"]) == ["description", "id"]
    assert step["additionalProperties"] is False
    assert step["properties"]["id"]["pattern"] == r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
    assert step["properties"]["allowed_tools"] == {
        "default": [],
        "description": "For a step with no tool: the tools the model doing it may call (none when empty).",
        "items": {"type": "string"},
        "title": "Allowed Tools",
        "type": "array",
    }


def test_plan_json_schema_accepts_dumped_plans() -> None:
    validator = jsonschema.Draft202012Validator(plan_json_schema())
    validator.validate(_full_plan().model_dump(mode="json"))
    validator.validate(Plan(steps=()).model_dump(mode="json"))
    validator.validate({"steps": [{"id": "a", "description": "x"}]})


@pytest.mark.parametrize(
    "data",
    [
        {"steps": [{"id": "1a", "description": "x"}]},
        {"steps": [{"id": "a", "description": "x", "color": "red"}]},
        {"steps": [{"id": "a", "description": "x", "checks": [{"kind": "vibes"}]}]},
        {"steps": [{"id": "a", "description": "x", "confidence": 3}]},
        {"steps": [{"id": "a"}]},
        {"steps": [], "schema_version": 5},
        {"steps": [], "answer": 3},
        {"steps": [{"id": "a", "description": "x", "allowed_tools": "search"}]},
        {"steps": [], "version": 0},
    ],
)
def test_plan_json_schema_rejects_what_the_model_rejects(data: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(plan_json_schema())
    assert not validator.is_valid(data)
    with pytest.raises(ValidationError):
        Plan.model_validate(data)


# -- plan schema version 2 ----------------------------------------------------------------------


def test_a_version_1_plan_still_loads_and_keeps_its_version() -> None:
    data = {
        "schema_version": 1,
        "version": 1,
        "steps": [
            {
                "id": "s1",
                "description": "fetch",
                "tool": "fetch_weather",
                "executor": None,
                "args": {"city": "Oslo"},
                "depends_on": [],
                "expected": None,
                "checks": [],
                "output_schema": None,
                "effect": "read",
                "approval": "never",
                "thought": None,
                "confidence": None,
            }
        ],
        "author": "planner",
        "reason": "",
    }
    plan = Plan.model_validate(data)
    assert plan.schema_version == 1
    assert plan.steps[0].allowed_tools == ()
    assert plan.steps[0].approval == "never"  # kept as written; it means "auto"
    assert plan.model_dump(mode="json") == data  # dumped exactly as it was written
    jsonschema.Draft202012Validator(plan_json_schema()).validate(data)


def test_new_plans_are_version_3_unless_they_carry_an_answer_template() -> None:
    plan = Plan(steps=(Step(id="a", description="think", allowed_tools=("search",), on_fail="review"),))
    assert plan.schema_version == 3
    assert json.loads(plan.model_dump_json())["steps"][0]["on_fail"] == "review"
    assert "on_fail" not in json.loads(Plan(steps=(Step(id="b", description="x"),)).model_dump_json())["steps"][0]
    assert Plan.model_validate_json(plan.model_dump_json()) == plan
    assert json.loads(plan.model_dump_json())["steps"][0]["allowed_tools"] == ["search"]


def test_a_version_3_plan_still_loads_and_dumps_as_written() -> None:
    data = {"schema_version": 3, "version": 2, "steps": [], "author": "planner", "reason": "patched"}
    plan = Plan.model_validate(data)
    assert plan.schema_version == 3
    assert plan.answer is None
    assert plan.model_dump(mode="json") == data


def test_a_plan_keeps_its_answer_template() -> None:
    plan = Plan(steps=(Step(id="a", description="x", tool="t"),), answer="Found {{a.name}}.")
    assert plan.schema_version == 4
    data = json.loads(plan.model_dump_json())
    assert data["answer"] == "Found {{a.name}}."
    with pytest.raises(ValidationError):  # only version 4 holds a template
        Plan.model_validate({**data, "schema_version": 3})
    assert Plan.model_validate(data) == plan
    jsonschema.Draft202012Validator(plan_json_schema()).validate(data)


def test_the_step_says_approval_can_only_be_made_stricter() -> None:
    doc = Step.__doc__ or ""
    assert '"never"' in doc
    assert 'the same as ``"auto"``' in doc
    assert "allowed_tools" in doc


def test_the_planner_is_told_about_allowed_tools_and_gates() -> None:
    from planexec.planner import _prompt

    for instructions in (_prompt.UPFRONT, _prompt.STEP_BY_STEP):
        assert "allowed_tools" in instructions
        assert 'approval "always"' in instructions
        assert "RE2" in instructions
