"""Invalid planner output: every problem goes back to the planner, for a bounded number of repairs."""

from __future__ import annotations

from planexec import Agent, Planner
from planexec.log import PlannerOutputRejected, PlanProposed, StepStarted
from planexec.models import ModelResponse
from planexec.testing import ScriptedModel
from tests.support import add, events_of, failing_tool, tool_step

GOOD_PLAN = {"steps": [tool_step("s1", "add", {"a": 1, "b": 2})]}


def repair_text(planner: ScriptedModel, call: int) -> str:
    return planner.calls[call].last_user_text


async def test_bad_json_then_schema_violations_are_sent_back_then_the_repaired_plan_runs() -> None:
    schema_violations = {
        "steps": [
            {"id": "s1", "tool": "add", "args": {"a": 1, "b": 2}},  # no description
            {"id": "9bad", "description": "bad id", "tool": "add", "args": {"a": 1, "b": 2}},  # id pattern
        ]
    }
    planner = ScriptedModel(["this is not JSON at all", schema_violations, GOOD_PLAN, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("1+2")

    assert result.stop.kind == "goal_met"
    assert result.outputs == {"s1": 3}
    assert len(result.plans) == 1

    assert [c.purpose for c in planner.calls] == ["planner.propose"] * 3 + ["planner.finish"]
    first_repair = repair_text(planner, 1)
    assert "not valid JSON" in first_repair
    assert "[invalid_json]" in first_repair
    second_repair = repair_text(planner, 2)
    assert "steps.0.description" in second_repair
    assert "Field required" in second_repair
    assert "steps.1.id" in second_repair
    assert second_repair.count("\n- ") == 2  # both problems, in one list
    # The model sees its own previous reply before the list of problems.
    assert planner.calls[1].messages[-2].role == "assistant"
    assert planner.calls[1].messages[-2].content == "this is not JSON at all"

    rejected = events_of(result, PlannerOutputRejected)
    assert [e.attempt for e in rejected] == [1, 2]
    assert [p.code for p in rejected[0].problems] == ["invalid_json"]
    assert sorted(p.where for p in rejected[1].problems) == ["steps.0.description", "steps.1.id"]


async def test_every_static_problem_is_listed_in_one_repair_request() -> None:
    bad = {
        "steps": [
            tool_step("a", "add", {"a": 1, "b": "two"}),  # invalid argument
            tool_step("b", "serch", {"q": "x"}),  # unknown tool
            tool_step("c", "add", {"a": "${zz}", "b": 1}, "zz"),  # missing dependency and binding
            tool_step("d", "add", {"a": 1, "b": 1}),
            tool_step("d", "add", {"a": 2, "b": 2}),  # duplicate id
        ]
    }
    planner = ScriptedModel([bad, GOOD_PLAN, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("1+2")

    assert result.stop.kind == "goal_met"
    text = repair_text(planner, 1)
    for code in ("invalid_arguments", "unknown_tool", "missing_dependency", "binding_missing_step", "duplicate_id"):
        assert f"[{code}]" in text, code
    codes = {p.code for p in events_of(result, PlannerOutputRejected)[0].problems}
    assert {"invalid_arguments", "unknown_tool", "missing_dependency", "duplicate_id"} <= codes


async def test_repairs_exhausted_stop_with_a_clear_error() -> None:
    planner = ScriptedModel(["nope", "still nope", "{not json either"])
    result = await Agent(planner, tools=[add]).run("1+2")

    assert result.stop.kind == "error"
    assert "still invalid after 2 repairs" in result.stop.detail
    assert "not valid JSON" in result.stop.detail
    assert len(planner.calls) == 3
    assert len(events_of(result, PlannerOutputRejected)) == 3
    assert events_of(result, PlanProposed) == []
    assert events_of(result, StepStarted) == []
    assert result.plans == ()


async def test_max_repairs_zero_gives_up_at_the_first_problem() -> None:
    planner = Planner(model=ScriptedModel([{"steps": [tool_step("s1", "nope", {})]}]), max_repairs=0)
    result = await Agent(planner, tools=[add]).run("1+2")
    assert result.stop.kind == "error"
    assert "unknown tool 'nope'" in result.stop.detail


async def test_an_unknown_tool_in_the_plan_is_repaired() -> None:
    planner = ScriptedModel([{"steps": [tool_step("s1", "addition", {"a": 1, "b": 2})]}, GOOD_PLAN, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("1+2")

    assert result.stop.kind == "goal_met"
    text = repair_text(planner, 1)
    assert "unknown tool 'addition'" in text
    assert "known: add" in text
    assert result.plans[0].step("s1").tool == "add"


async def test_a_cycle_in_the_plan_is_repaired() -> None:
    cyclic = {
        "steps": [
            tool_step("x", "add", {"a": "${y}", "b": 1}, "y"),
            tool_step("y", "add", {"a": "${x}", "b": 1}, "x"),
        ]
    }
    fixed = {"steps": [tool_step("x", "add", {"a": 1, "b": 1}), tool_step("y", "add", {"a": "${x}", "b": 1}, "x")]}
    planner = ScriptedModel([cyclic, fixed, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("cycle")

    assert result.stop.kind == "goal_met"
    assert result.outputs == {"x": 2, "y": 3}
    text = repair_text(planner, 1)
    assert "[cycle]" in text
    assert "x → y → x" in text or "y → x → y" in text


async def test_a_cycle_that_is_never_fixed_stops_with_an_error() -> None:
    cyclic = {
        "steps": [tool_step("x", "add", {"a": 1, "b": 1}, "y"), tool_step("y", "add", {"a": 1, "b": 1}, "x")],
    }
    planner = Planner(model=ScriptedModel([cyclic, cyclic]), max_repairs=1)
    result = await Agent(planner, tools=[add]).run("cycle")
    assert result.stop.kind == "error"
    assert "cycle" in result.stop.detail
    assert events_of(result, StepStarted) == []


async def test_a_fenced_json_reply_is_read() -> None:
    fenced = ModelResponse(
        text='```json\n{"steps": [{"id": "s1", "description": "d", "tool": "add", "args": {"a": 2, "b": 2}}]}\n```'
    )
    planner = ScriptedModel([fenced, {"answer": "4"}])
    result = await Agent(planner, tools=[add]).run("2+2")
    assert result.stop.kind == "goal_met"
    assert result.outputs == {"s1": 4}
    assert events_of(result, PlannerOutputRejected) == []


async def test_a_refusal_is_a_problem_sent_back() -> None:
    planner = ScriptedModel([ModelResponse(refusal="I cannot help"), GOOD_PLAN, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("1+2")
    assert result.stop.kind == "goal_met"
    assert "the model refused: I cannot help" in repair_text(planner, 1)


async def test_a_bad_patch_is_repaired_too() -> None:
    fails = failing_tool()

    planner = ScriptedModel(
        [
            {"steps": [tool_step("f", "fails", {})]},
            {"steps": [tool_step("f", "add", {"a": 1, "b": 1})]},  # reuses no finished id; fine
            {"answer": "2"},
        ]
    )
    result = await Agent(planner, tools=[add, fails]).run("patch")
    assert result.stop.kind == "goal_met"
    assert result.outputs == {"f": 2}

    # A patch that reuses a finished step's id is sent back.
    planner2 = ScriptedModel(
        [
            {"steps": [tool_step("ok", "add", {"a": 1, "b": 1}), tool_step("f", "fails", {})]},
            {"steps": [tool_step("ok", "add", {"a": 5, "b": 5})]},
            {"steps": [tool_step("ok2", "add", {"a": "${ok}", "b": 5}, "ok")]},
            {"answer": "7"},
        ]
    )
    result2 = await Agent(planner2, tools=[add, fails]).run("patch")
    assert result2.stop.kind == "goal_met"
    assert result2.outputs == {"ok": 2, "ok2": 7}
    assert "[finished_id]" in repair_text(planner2, 2)
    assert planner2.calls[2].purpose == "planner.patch"


async def test_the_problems_of_both_steps_sharing_an_id_are_reported() -> None:
    # The first of two steps with the same id has an invalid argument: the repair request must
    # still name it, not only the duplicate id.
    bad = {"steps": [tool_step("a", "add", {"a": 1, "b": "two"}), tool_step("a", "add", {"a": 1, "b": 1})]}
    planner = ScriptedModel([bad, GOOD_PLAN, {"answer": "3"}])
    result = await Agent(planner, tools=[add]).run("1+2")
    assert result.stop.kind == "goal_met"
    text = repair_text(planner, 1)
    assert "[duplicate_id]" in text
    assert "[invalid_arguments]" in text
