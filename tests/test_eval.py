"""Evaluation suites: reading and checking them, running them, and the checks of each run."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from planexec import Model, ToolError, tool
from planexec.eval import (
    AnswerExpectation,
    EvalSettings,
    SuiteInvalid,
    ToolExpectation,
    check_answer,
    load_suite,
    match_tools,
    run_suite,
    suite_from_mapping,
)
from planexec.models import ModelRequest
from planexec.testing import FunctionModel, ScriptedModel

# -- helpers shared with the other evaluation tests ---------------------------------------------


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
async def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool
async def broken(x: int) -> int:
    """Always fails."""
    raise ToolError("broken on purpose")


ARITHMETIC = [add, double, broken]


def step(step_id: str, tool_name: str, args: dict[str, Any], *deps: str) -> dict[str, Any]:
    return {"id": step_id, "description": f"{tool_name} {step_id}", "tool": tool_name, "args": args, "depends_on": deps}


def planner_of(*replies: Any) -> Any:
    """A model factory: a fresh ScriptedModel with these replies for every run."""
    return lambda: ScriptedModel(list(replies))


ADD_THEN_DOUBLE = planner_of(
    {"steps": [step("s", "add", {"a": 1, "b": 2}), step("d", "double", {"x": "${s}"}, "s")]}, {"answer": "6"}
)
"""A planner that adds 1 and 2, doubles the sum, and answers 6."""


def write_module(tmp_path: Path, source: str, prefix: str) -> str:
    """A module with a fresh name in ``tmp_path`` (the suite's folder); returns its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    return name


TOOLS_SOURCE = '''
from planexec import ToolError, tool


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
async def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool
async def broken(x: int) -> int:
    """Always fails."""
    raise ToolError("broken on purpose")


TOOLS = [add, double, broken]
'''


def write_script(folder: Path, name: str, replies: list[Any]) -> str:
    (folder / name).write_text(json.dumps(replies))
    return name


# -- one task passes, one fails -----------------------------------------------------------------


async def test_a_suite_with_a_passing_and_a_failing_task(tmp_path: Path) -> None:
    suite = suite_from_mapping(
        {
            "name": "halves",
            "defaults": {"tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE},
            "tasks": [
                {"id": "good", "goal": "double 1 + 2", "expect_answer": {"exact": "6"}},
                {"id": "bad", "goal": "double 1 + 2", "expect_answer": {"exact": "7"}},
            ],
        },
        root=tmp_path,
    )
    report = await run_suite(suite)
    assert report.summary.runs == 2
    assert report.summary.pass_rate == 0.5
    good, bad = report.task("good"), report.task("bad")
    assert good is not None
    assert bad is not None
    assert good.summary.pass_rate == 1.0
    assert good.runs[0].reasons == ()
    assert bad.summary.pass_rate == 0.0
    assert bad.runs[0].reasons == ("answer.exact: expected '7', got '6'",)
    assert [r.task for r in report.failed_runs] == ["bad"]


async def test_a_run_that_does_not_meet_its_goal_fails_with_the_stop_reason(tmp_path: Path) -> None:
    plan = {"steps": [step("b", "broken", {"x": 1})]}
    suite = suite_from_mapping(
        {"tasks": [{"id": "t", "goal": "break", "tools": ARITHMETIC, "planner": planner_of(plan, plan)}]},
        root=tmp_path,
    )
    (run,) = (await run_suite(suite)).tasks[0].runs
    assert not run.passed
    assert run.stop == "stalled"
    assert run.reasons[0].startswith("stop: stalled: broken failed again with the same arguments")


# -- tool sequences -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected", "called", "passed", "detail"),
    [
        ("strict", ["add", "double"], ["add", "double"], True, ""),
        ("strict", ["add", "double"], ["double", "add"], False, "expected add → double, called double → add"),
        ("strict", ["add"], ["add", "add"], False, "expected add, called add → add"),
        ("unordered", ["add", "double", "add"], ["add", "add", "double"], True, ""),
        ("unordered", ["add", "double"], ["add", "add"], False, "not called: double; called beyond the list: add"),
        ("subset", ["add"], ["double", "add", "broken"], True, ""),
        ("subset", ["add", "add"], ["add", "double"], False, "not called: add (called add, double)"),
        ("superset", ["add", "double", "broken"], ["add", "add"], True, ""),
        ("superset", ["add"], ["add", "broken"], False, "called outside the list: broken"),
    ],
)
def test_tool_sequence_match_modes(
    mode: Any, expected: list[str], called: list[str], passed: bool, detail: str
) -> None:
    outcome = match_tools(ToolExpectation(match=mode, tools=tuple(expected)), called)
    assert (outcome.name, outcome.passed, outcome.detail) == (f"tools.{mode}", passed, detail)


async def test_each_match_mode_on_a_run(tmp_path: Path) -> None:
    """The run calls add, then double: four expectations pass, four fail."""
    cases = {
        "strict_ok": ("strict", ["add", "double"], True),
        "strict_no": ("strict", ["double", "add"], False),
        "unordered_ok": ("unordered", ["double", "add"], True),
        "unordered_no": ("unordered", ["add"], False),
        "subset_ok": ("subset", ["double"], True),
        "subset_no": ("subset", ["broken"], False),
        "superset_ok": ("superset", ["add", "double", "broken"], True),
        "superset_no": ("superset", ["add", "broken"], False),
    }
    suite = suite_from_mapping(
        {
            "defaults": {"tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE, "goal": "double 1 + 2"},
            "tasks": [
                {"id": task_id, "expect_tools": {"match": mode, "tools": tools}}
                for task_id, (mode, tools, _) in cases.items()
            ],
        },
        root=tmp_path,
    )
    report = await run_suite(suite, EvalSettings(concurrency=3))
    for task_id, (_, _, passed) in cases.items():
        task = report.task(task_id)
        assert task is not None
        assert task.runs[0].tools_called == ("add", "double")
        assert task.runs[0].passed is passed, task_id
    assert report.summary.pass_rate == 0.5


# -- answer checks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expect", "answer", "passed"),
    [
        (AnswerExpectation(exact="6"), " 6\n", True),
        (AnswerExpectation(exact="Six"), "six", False),
        (AnswerExpectation(exact="Six", ignore_case=True), "six", True),
        (AnswerExpectation(contains=("spent", "42")), "Ada spent 42 euros", True),
        (AnswerExpectation(contains=("spent", "43")), "Ada spent 42 euros", False),
        (AnswerExpectation(regex=r"\b42\b"), "Ada spent 42 euros", True),
        (AnswerExpectation(regex=r"^42"), "Ada spent 42 euros", False),
        (AnswerExpectation(regex=r"ADA", ignore_case=True), "Ada spent 42 euros", True),
        (AnswerExpectation(exact="6"), None, False),
    ],
)
def test_deterministic_answer_checks(expect: AnswerExpectation, answer: str | None, passed: bool) -> None:
    outcome = check_answer(expect, answer)
    assert outcome is not None
    assert outcome.passed is passed
    assert outcome.name == f"answer.{expect.deterministic}"


def test_a_judge_only_expectation_has_no_deterministic_check() -> None:
    assert check_answer(AnswerExpectation(), "anything") is None


def grading_judge() -> Model:
    """A judge that passes an answer when it contains the digit 6, and records why."""

    def grade(request: ModelRequest) -> dict[str, Any]:
        assert request.output is not None
        assert request.output.name == "verdict"
        answer = request.last_user_text.split("Answer: ", 1)[1]
        return {"passed": "6" in answer, "reason": "has a 6" if "6" in answer else "no 6 in it"}

    return FunctionModel(grade, name="judge")


async def test_the_judge_scores_the_answer_against_the_rubric(tmp_path: Path) -> None:
    suite = suite_from_mapping(
        {
            "defaults": {"tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE, "goal": "double 1 + 2"},
            "tasks": [
                {"id": "judged", "judge": grading_judge, "expect_answer": {"judge": {"rubric": "says 6"}}},
                {
                    "id": "wrong",
                    "planner": planner_of({"steps": [step("s", "add", {"a": 1, "b": 2})]}, {"answer": "3"}),
                    "expect_answer": {"judge": {"rubric": "says 6", "model": grading_judge}},
                },
            ],
        },
        root=tmp_path,
    )
    report = await run_suite(suite)
    judged, wrong = report.tasks
    assert judged.runs[0].passed
    assert judged.runs[0].checks[-1].name == "answer.judge"
    assert judged.runs[0].checks[-1].detail == "has a 6"
    assert judged.runs[0].disagreement is None  # no deterministic check to disagree with
    assert not wrong.runs[0].passed
    assert wrong.runs[0].reasons == ("answer.judge: no 6 in it",)


async def test_the_judge_through_an_object_reference_and_evaluator_disagreement(tmp_path: Path) -> None:
    """The deterministic check wants "3"; the judge wants a 6: on the answer "6" they disagree."""
    judge_module = write_module(
        tmp_path,
        "from planexec.testing import FunctionModel\n\n"
        "def judge():\n"
        "    return FunctionModel(lambda r: {'passed': '6' in r.last_user_text.split('Answer: ')[1], 'reason': 'r'})\n",
        "judges",
    )
    tools_module = write_module(tmp_path, TOOLS_SOURCE, "arith")
    write_script(
        tmp_path,
        "planner.json",
        [{"steps": [step("s", "add", {"a": 1, "b": 2}), step("d", "double", {"x": "${s}"}, "s")]}, {"answer": "6"}],
    )
    (tmp_path / "suite.yaml").write_text(
        f"""
name: judged
defaults:
  tools: ["{tools_module}:TOOLS"]
  planner: scripted:planner.json
  judge: object:{judge_module}:judge
tasks:
  - id: agree
    goal: double 1 + 2
    repeat: 2
    expect_answer: {{contains: "6", judge: {{rubric: the answer is 6}}}}
  - id: disagree
    goal: double 1 + 2
    expect_answer: {{exact: "3", judge: {{rubric: the answer is 6}}}}
"""
    )
    report = await run_suite(load_suite(tmp_path / "suite.yaml"))
    agree, disagree = report.tasks
    assert [r.passed for r in agree.runs] == [True, True]
    assert agree.summary.disagreement_rate == 0.0
    assert disagree.runs[0].disagreement is True
    assert disagree.runs[0].reasons == ("answer.exact: expected '3', got '6'",)
    assert disagree.summary.disagreement_rate == 1.0
    assert report.summary.judged_both == 3
    assert report.summary.disagreements == 1


async def test_an_unreadable_judge_reply_fails_the_check_and_is_not_a_disagreement(tmp_path: Path) -> None:
    suite = suite_from_mapping(
        {
            "tasks": [
                {
                    "id": "t",
                    "goal": "double 1 + 2",
                    "tools": ARITHMETIC,
                    "planner": ADD_THEN_DOUBLE,
                    "judge": lambda: ScriptedModel(["not json"]),
                    "expect_answer": {"contains": "6", "judge": "the answer is 6"},
                }
            ]
        },
        root=tmp_path,
    )
    (run,) = (await run_suite(suite)).tasks[0].runs
    assert run.reasons == ("answer.judge: the judge's reply was unreadable: 'not json'",)
    assert run.disagreement is None


# -- isolation, repeats, concurrency --------------------------------------------------------------


async def test_every_run_gets_fresh_scripted_models(tmp_path: Path) -> None:
    """A script holds one run's replies: five repeats at once each get their own copy."""
    tools_module = write_module(tmp_path, TOOLS_SOURCE, "arith")
    write_script(tmp_path, "planner.json", [{"steps": [step("s", "add", {"a": 2, "b": 2})]}, {"answer": "4"}])
    shared = write_module(
        tmp_path,
        "from planexec.testing import ScriptedModel\n\n"
        "PLANNER = ScriptedModel([{'steps': [{'id': 's', 'description': 'add', 'tool': 'add', "
        "'args': {'a': 2, 'b': 2}}]}, {'answer': '4'}])\n",
        "shared",
    )
    (tmp_path / "suite.yaml").write_text(
        f"""
defaults: {{tools: ["{tools_module}:TOOLS"], goal: add 2 and 2, repeat: 5, expect_answer: {{exact: "4"}}}}
tasks:
  - {{id: from_file, planner: scripted:planner.json}}
  - {{id: from_object, planner: "object:{shared}:PLANNER"}}
"""
    )
    report = await run_suite(load_suite(tmp_path / "suite.yaml"), EvalSettings(concurrency=5))
    assert report.summary.runs == 10
    assert report.summary.pass_rate == 1.0
    assert [r.index for r in report.tasks[0].runs] == [0, 1, 2, 3, 4]


# -- reading suites -----------------------------------------------------------------------------


def test_a_suite_file_with_many_problems_reports_every_one(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(
        """
version: 2
surprise: 1
defaults:
  budget: {model_calls: -1, flights: 2}
tasks:
  - id: a
    goal: ""
    planner: scripted:missing.json
    expect_tools: {match: exact, tools: [add]}
    expect_answer: {exact: "1", regex: "(", judge: {rubric: good}}
  - id: a
    goal: fine
    planner: "nowhere:model"
    repeat: 0
    faults: hurricane
  - goal: no id
"""
    )
    with pytest.raises(SuiteInvalid) as caught:
        load_suite(tmp_path / "suite.yaml")
    where = {p.where for p in caught.value.problems}
    assert {
        "version",
        "surprise",
        "defaults.budget.model_calls",
        "defaults.budget.flights",
        "tasks[0] (a).goal",
        "tasks[0] (a).planner",
        "tasks[0] (a).expect_tools.match",
        "tasks[0] (a).expect_answer",
        "tasks[0] (a).expect_answer.regex",
        "tasks[0] (a).expect_answer.judge",
        "tasks[1] (a)",
        "tasks[1] (a).planner",
        "tasks[1] (a).repeat",
        "tasks[1] (a).faults",
        "tasks[2].id",
        "tasks[2].planner",
    } <= where
    messages = [p.message for p in caught.value.problems]
    assert sum("flights" in p.where for p in caught.value.problems) == 1  # a bad default is named once
    assert any("duplicate id" in m for m in messages)
    assert any("unknown fault profile 'hurricane'" in m for m in messages)


def test_reading_a_suite_needs_the_model_its_agent_uses(tmp_path: Path) -> None:
    data = {"tasks": [{"id": "t", "goal": "g", "planner": ADD_THEN_DOUBLE}]}
    with pytest.raises(SuiteInvalid) as caught:
        suite_from_mapping(data, root=tmp_path, agent="react")
    assert [p.where for p in caught.value.problems] == ["tasks[0] (t).react_model"]
    react = suite_from_mapping(
        {"tasks": [{"id": "t", "goal": "g", "executor": ADD_THEN_DOUBLE}]}, root=tmp_path, agent="react"
    )
    assert react.tasks[0].model_for_react() is ADD_THEN_DOUBLE


def test_expected_tools_must_be_among_the_tasks_tools(tmp_path: Path) -> None:
    data = {
        "tasks": [{"id": "t", "goal": "g", "tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE, "expect_tools": ["sub"]}]
    }
    with pytest.raises(SuiteInvalid, match="not among the task's tools: sub"):
        suite_from_mapping(data, root=tmp_path)


def test_a_missing_or_broken_suite_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteInvalid, match="cannot read the suite"):
        load_suite(tmp_path / "nothing.yaml")
    (tmp_path / "broken.yaml").write_text("tasks: [\n")
    with pytest.raises(SuiteInvalid, match="is not valid YAML"):
        load_suite(tmp_path / "broken.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(SuiteInvalid, match="must be a mapping"):
        load_suite(tmp_path / "list.yaml")


def test_tasks_inherit_defaults_and_merge_budgets(tmp_path: Path) -> None:
    suite = suite_from_mapping(
        {
            "seed": 9,
            "defaults": {"tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE, "budget": {"model_calls": 5, "replans": 1}},
            "tasks": [
                {"id": "a", "goal": "g"},
                {"id": "b", "goal": "g", "budget": {"replans": 0}, "policy": "step", "constraints": ["be brief"]},
            ],
        },
        root=tmp_path,
    )
    a, b = suite.tasks
    assert (a.budget.model_calls, a.budget.replans, a.policy) == (5, 1, "upfront")
    assert (b.budget.model_calls, b.budget.replans, b.policy, b.constraints) == (5, 0, "step", ("be brief",))
    assert suite.seed == 9
    assert a.tools.names == ("add", "double", "broken")


def test_only_the_models_the_agent_uses_are_loaded(tmp_path: Path) -> None:
    """Running the ReAct baseline does not need the planner's model to load, and the reverse."""
    write_script(tmp_path, "react.json", ["6"])
    data = {
        "tasks": [{"id": "t", "goal": "g", "planner": "scripted:absent.json", "react_model": "scripted:react.json"}]
    }
    react = suite_from_mapping(data, root=tmp_path, agent="react")
    assert react.tasks[0].planner == f"scripted:{tmp_path.resolve() / 'absent.json'}"
    with pytest.raises(SuiteInvalid, match="cannot read the script"):
        suite_from_mapping(data, root=tmp_path, agent="planexec")


def test_the_suite_reference_in_the_example_readme_names_only_known_fields() -> None:
    readme = Path(__file__).resolve().parent.parent / "examples" / "eval" / "README.md"
    (block,) = re.findall(r"```yaml\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.DOTALL)
    data = yaml.safe_load(block)
    with pytest.raises(SuiteInvalid) as caught:  # its module, model and check names are placeholders
        suite_from_mapping(data, root=readme.parent)
    # placeholders: module:fn, and MCP servers this machine may not have
    assert {p.code for p in caught.value.problems} <= {"tools", "model", "review", "mcp"}
    assert "mcp" not in {p.where.split(".")[0] for p in caught.value.problems if p.code == "suite"}


def test_the_public_names_of_eval_and_react() -> None:
    import planexec.eval
    import planexec.react

    assert sorted(planexec.react.__all__) == ["DEFAULT_REACT_INSTRUCTIONS", "ReactAgent", "ReactResult"]
    assert sorted(planexec.eval.__all__) == sorted(
        [
            "REPORT_FORMAT",
            "REPORT_VERSION",
            "SUITE_FORMAT_VERSION",
            "AnswerExpectation",
            "CheckOutcome",
            "Comparison",
            "EnsembleSpec",
            "EvalReport",
            "EvalSettings",
            "JudgeCheck",
            "MatchMode",
            "ProgressSink",
            "Regression",
            "RunMetrics",
            "RunReport",
            "Suite",
            "SuiteInvalid",
            "Summary",
            "Task",
            "TaskReport",
            "TaskWorld",
            "Tolerances",
            "ToolExpectation",
            "Trace",
            "check_answer",
            "compare_reports",
            "dump_report",
            "judge_answer",
            "load_report",
            "load_suite",
            "match_tools",
            "report_text",
            "run_suite",
            "suite_from_mapping",
            "trace_of",
            # what the command line builds on
            "AGENT_KINDS",
            "MAX_CONCURRENCY",
            "MAX_SEED",
            "MAX_TOLERANCE",
            "AgentKind",
            "FaultSpec",
            "failure_lines",
            "fault_problems",
            "json_text",
            "read_faults_option",
            "read_report",
            "report_tables",
            "seeded_profile",
        ]
    )
    for module in (planexec.eval, planexec.react):
        assert all(hasattr(module, name) for name in module.__all__)
