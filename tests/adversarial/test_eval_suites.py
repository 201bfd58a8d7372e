"""Hostile and broken evaluation suites, fault files and baseline reports: each is refused when it is
read, with every problem listed and where it is, and nothing in one makes reading or running it
unbounded (alias bombs, deep nesting, huge counts, huge files, numbers that are not numbers)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from planexec import UsageError
from planexec.eval import (
    EvalReport,
    EvalSettings,
    SuiteInvalid,
    Task,
    dump_report,
    load_report,
    load_suite,
    report_text,
    run_suite,
    suite_from_mapping,
)
from planexec.models import ModelResponse
from planexec.testing import ScriptedModel
from tests.cli_support import invoke
from tests.test_eval import ADD_THEN_DOUBLE, ARITHMETIC, TOOLS_SOURCE, step, write_module, write_script

README = Path(__file__).resolve().parents[2] / "examples" / "eval" / "README.md"

# -- building suites ----------------------------------------------------------------------------


def base_suite(folder: Path, *, task: str = "", suite: str = "") -> Path:
    """A suite in ``folder`` with one task ``t`` that would pass, plus the YAML lines given: ``suite``
    among the suite's keys, ``task`` among the task's keys."""
    tools = write_module(folder, TOOLS_SOURCE, "arith")
    write_script(
        folder,
        "planner.json",
        [{"steps": [step("s", "add", {"a": 1, "b": 2}), step("d", "double", {"x": "${s}"}, "s")]}, {"answer": "6"}],
    )
    path = folder / "suite.yaml"
    expect = '    expect_answer: {exact: "6"}\n'
    task_lines = "".join(f"    {line}\n" for line in task.splitlines() if line.strip())
    suite_lines = "".join(f"{line}\n" for line in suite.splitlines() if line.strip())
    path.write_text(
        f"\nname: hostile\n"
        f"{suite_lines}"
        f"tasks:\n"
        f"  - id: t\n"
        f"    goal: double 1 + 2\n"
        f'    tools: ["{tools}:TOOLS"]\n'
        f"    planner: scripted:planner.json\n"
        f"{'' if 'expect_answer' in task else expect}"
        f"{task_lines}"
    )
    return path


def problems_of(path: Path) -> list[str]:
    """Every problem of the suite at ``path``, as ``where: message``."""
    with pytest.raises(SuiteInvalid) as caught:
        load_suite(path)
    return [f"{p.where}: {p.message}" for p in caught.value.problems]


def refused_for(path: Path, fragment: str) -> list[str]:
    found = problems_of(path)
    assert any(fragment in p for p in found), found
    return found


def laughs(levels: int, width: int) -> str:
    """A "billion laughs" document: each level lists ``width`` aliases of the one below."""
    lines = ['lol0: &lol0 ["lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*lol{level - 1}"] * width)
        lines.append(f"lol{level}: &lol{level} [{refs}]")
    lines.append(f"tasks: [{{id: t, goal: g, constraints: *lol{levels - 1}}}]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int) -> str:
    """Merge keys that double a mapping's entries at every level."""
    lines = ["m0: &m0 {a: 1}"]
    for level in range(1, levels):
        lines.append(f"m{level}: &m{level} {{<<: [*m{level - 1}, *m{level - 1}], k{level}: 1}}")
    lines.append(f"tasks: [{{id: t, goal: g, faults: *m{levels - 1}}}]")
    return "\n".join(lines) + "\n"


def deep_alias_chain(links: int, depth: int) -> str:
    """Anchors each nested ``depth`` levels, each holding an alias of the one before: shallow as
    written, ``links * depth`` levels deep once the aliases are followed."""
    lines = [f"c0: &c0 {'[' * depth}1{']' * depth}"]
    for link in range(1, links):
        lines.append(f"c{link}: &c{link} {'[' * depth}*c{link - 1}{']' * depth}")
    lines.append(f"tasks: [{{id: t, goal: g, constraints: *c{links - 1}}}]")
    return "\n".join(lines) + "\n"


def nested_json(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def eval_cli(*args: str | Path) -> Result:
    """``planexec eval``; any exception (a traceback for a user) fails the test."""
    return invoke(["eval", *map(str, args)])


def no_nan(text: str) -> Any:
    """``text`` as JSON, failing on NaN and Infinity (which are not JSON)."""

    def refuse(token: str) -> Any:
        raise AssertionError(f"the JSON holds {token}")

    return json.loads(text, parse_constant=refuse)


# -- alias bombs --------------------------------------------------------------------------------


def test_a_suite_with_too_many_aliases_is_refused(tmp_path: Path) -> None:
    many = ", ".join(["*word"] * 101)  # small once expanded, but more aliases than allowed
    (tmp_path / "suite.yaml").write_text(f"word: &word lol\ntasks: [{{id: t, goal: g, constraints: [{many}]}}]\n")
    found = refused_for(tmp_path / "suite.yaml", "more than 100 aliases")
    assert len(found) == 1
    shared = base_suite(tmp_path, suite="defaults: {budget: &budget {model_calls: 20}}", task="budget: *budget")
    assert load_suite(shared).tasks[0].budget.model_calls == 20  # a few aliases are fine


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        (laughs(levels=9, width=9), "expands to more than 100,000 values"),  # the classic: 9^9 "lol"s
        (laughs(levels=45, width=2), "expands to more than 100,000 values"),  # 88 aliases, 2^44 values
        (merge_bomb(levels=18), "expands to more than 100,000 values"),
        ("loop: &loop [*loop]\ntasks: [{id: t, goal: g, constraints: *loop}]\n", "refers to a value that contains it"),
        (deep_alias_chain(links=4, depth=30), "nested more than 64 levels deep"),
    ],
    ids=["billion-laughs", "binary-laughs", "merge-keys", "self-reference", "deep-through-aliases"],
)
def test_an_alias_bomb_is_refused_without_expanding_it(tmp_path: Path, document: str, fragment: str) -> None:
    (tmp_path / "suite.yaml").write_text(document)
    found = refused_for(tmp_path / "suite.yaml", fragment)
    assert len(found) == 1
    assert found[0].startswith("line ")  # where in the file


def test_the_limits_hold_without_libyaml_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from planexec.eval import _files

    monkeypatch.setattr(_files, "_Loader", _files._PyLoader)  # the pure-Python scanner and parser
    for document, fragment in (
        (laughs(levels=9, width=9), "expands to more than 100,000 values"),
        (merge_bomb(levels=18), "expands to more than 100,000 values"),
        (f"tasks: {nested_json(5000)}\n", "nested more than 64 levels deep"),
        ("a: 1\na: 2\ntasks: []\n", "duplicate key 'a'"),
    ):
        (tmp_path / "suite.yaml").write_text(document)
        refused_for(tmp_path / "suite.yaml", fragment)


def test_a_device_is_never_read_past_the_limit() -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    refused_for(Path("/dev/zero"), "larger than 524,288 bytes")


def test_an_alias_bomb_on_the_command_line_exits_2(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(laughs(levels=9, width=9))
    result = eval_cli(tmp_path / "suite.yaml")
    assert result.exit_code == 2
    assert "1 problem:" in result.stderr
    assert "expands to more than 100,000 values" in result.stderr


# -- deep nesting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        f"tasks: {nested_json(5000)}\n",
        "tasks: [{id: t, goal: g, faults: " + "{a: " * 5000 + "1" + "}" * 5000 + "}]\n",
        nested_json(10_000),  # JSON is YAML too
    ],
    ids=["yaml-lists", "yaml-mappings", "json"],
)
def test_a_deeply_nested_suite_is_refused_not_a_recursion_error(tmp_path: Path, document: str) -> None:
    (tmp_path / "suite.yaml").write_text(document)
    found = refused_for(tmp_path / "suite.yaml", "nested more than 64 levels deep")
    assert len(found) == 1


def test_a_deeply_nested_suite_built_in_python_is_refused(tmp_path: Path) -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    looped: dict[str, Any] = {}
    looped["again"] = looped
    task = {"id": "t", "goal": "g", "tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE}
    for hostile in ({**task, "constraints": deep}, {**task, "faults": looped}):
        with pytest.raises(SuiteInvalid) as caught:
            suite_from_mapping({"tasks": [hostile]}, root=tmp_path)
        assert [p.message for p in caught.value.problems] == [
            "is nested more than 64 levels deep (or refers to itself)"
        ]


def test_a_deeply_nested_suite_on_the_command_line_exits_2(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(f"tasks: {nested_json(5000)}\n")
    result = eval_cli(tmp_path / "suite.yaml")
    assert result.exit_code == 2
    assert "nested more than 64 levels deep" in result.stderr


def test_a_deeply_nested_script_or_fault_file_is_refused(tmp_path: Path) -> None:
    path = base_suite(tmp_path, task="judge: scripted:deep.json\nexpect_answer: {exact: '6', judge: fine}")
    (tmp_path / "deep.json").write_text(nested_json(10_000))
    (tmp_path / "faults.json").write_text(nested_json(10_000, '{"tool_error_rate": 0.1}'))
    result = eval_cli(path, "--faults", tmp_path / "faults.json")
    assert result.exit_code == 2
    assert "2 problems" in result.stderr
    assert "RecursionError" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "nested more than 64 levels deep" in line]
    assert len(lines) == 2
    assert any("tasks[0] (t).judge" in line and "deep.json" in line for line in lines)
    assert any("--faults" in line for line in lines)


# -- counts and numbers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "suite", "where", "fragment"),
    [
        ("repeat: 1000000000", "", "tasks[0] (t).repeat", "must be at most 1,000"),
        ("repeat: 1001", "", "tasks[0] (t).repeat", "must be at most 1,000"),
        ("max_turns: 100000", "", "tasks[0] (t).max_turns", "must be at most 1,000"),
        ("", "concurrency: 1000000", "concurrency", "must be at most 256"),
        ("", "seed: 18446744073709551616", "seed", "must be at most 9,223,372,036,854,775,807"),
        ("limits: {max_concurrency: 100000}", "", "tasks[0] (t).limits.max_concurrency", "must be at most 256"),
        ("limits: {stall_rounds: 1000000}", "", "tasks[0] (t).limits.stall_rounds", "must be at most 1,000"),
        ("limits: {confidence_threshold: .nan}", "", "tasks[0] (t).limits.confidence_threshold", "must be finite"),
        ("limits: {max_concurrency: null}", "", "tasks[0] (t).limits.max_concurrency", "must be a whole number"),
        ("budget: {cost: .nan}", "", "tasks[0] (t).budget.cost", "must be finite"),
        ("budget: {wall_time: .inf}", "", "tasks[0] (t).budget.wall_time", "must be finite"),
        ("budget: {cost: -.inf}", "", "tasks[0] (t).budget.cost", "must be finite"),
        ("budget: {model_calls: 10000000000000}", "", "tasks[0] (t).budget.model_calls", "must be at most"),
        ("budget: {wall_time: 1.0e+300}", "", "tasks[0] (t).budget.wall_time", "must be at most"),
        ("", "tolerances: {cost: null}", "tolerances.cost", "must be a number"),
        ("", "tolerances: {pass_rate: .nan}", "tolerances.pass_rate", "must be finite"),
        ("", "tolerances: {latency: .inf}", "tolerances.latency", "must be finite"),
        ("", "tolerances: {pass_rate: 2}", "tolerances.pass_rate", "must be at most 1"),
        ("faults: {rate_limit_storm: 1000000000}", "", "tasks[0] (t).faults.rate_limit_storm", "must be at most 1,000"),
    ],
)
def test_a_number_out_of_bounds_is_refused_and_named(
    tmp_path: Path, task: str, suite: str, where: str, fragment: str
) -> None:
    found = problems_of(base_suite(tmp_path, task=task, suite=suite))
    assert len(found) == 1, found
    assert found[0].startswith(f"{where}: "), found
    assert fragment in found[0]


def test_every_numeric_problem_is_listed_at_once(tmp_path: Path) -> None:
    path = base_suite(
        tmp_path,
        suite="seed: -1\nconcurrency: true\ntolerances: {pass_rate: '0.1', cost: .nan, latency: -1}",
        task=(
            "repeat: 1000000000\n"
            "max_turns: '10'\n"
            "budget: {model_calls: true, cost: .inf, wall_time: -5, steps: 2.5, tool_calls: '3'}\n"
            "limits: {max_concurrency: 0, stall_rounds: false, confidence_threshold: .nan}"
        ),
    )
    where = sorted(p.split(": ")[0] for p in problems_of(path))
    assert where == sorted(
        [
            "seed",
            "concurrency",
            "tolerances.pass_rate",
            "tolerances.cost",
            "tolerances.latency",
            "tasks[0] (t).repeat",
            "tasks[0] (t).max_turns",
            "tasks[0] (t).budget.model_calls",
            "tasks[0] (t).budget.cost",
            "tasks[0] (t).budget.wall_time",
            "tasks[0] (t).budget.steps",
            "tasks[0] (t).budget.tool_calls",
            "tasks[0] (t).limits.max_concurrency",
            "tasks[0] (t).limits.stall_rounds",
            "tasks[0] (t).limits.confidence_threshold",
        ]
    )


def test_numbers_in_a_suite_built_in_python_are_checked_too(tmp_path: Path) -> None:
    task = {"id": "t", "goal": "g", "tools": ARITHMETIC, "planner": ADD_THEN_DOUBLE}
    with pytest.raises(SuiteInvalid) as caught:
        suite_from_mapping(
            {
                "concurrency": 10**9,
                "tasks": [{**task, "budget": {"cost": math.nan, "steps": True}, "repeat": 10**9, "max_turns": 2**70}],
            },
            root=tmp_path,
        )
    assert sorted(p.where for p in caught.value.problems) == [
        "concurrency",
        "tasks[0] (t).budget.cost",
        "tasks[0] (t).budget.steps",
        "tasks[0] (t).max_turns",
        "tasks[0] (t).repeat",
    ]


@pytest.mark.parametrize(
    "value",
    ["0x" + "f" * 3000, "9" * 5000, "1" + "0" * 100],
    ids=["hex-huge", "beyond-int-digits", "googol"],
)
def test_a_number_too_large_to_handle_is_refused(tmp_path: Path, value: str) -> None:
    path = base_suite(tmp_path, task=f"expect_answer: {{exact: {value}}}\nbudget: {{steps: {value}}}")
    found = problems_of(path)
    assert found, found
    assert all("too large" in p or "must be at most" in p for p in found), found


def test_too_many_tasks_or_runs_are_refused(tmp_path: Path) -> None:
    many = base_suite(tmp_path, suite="defaults: {goal: g, planner: scripted:planner.json}")
    text = many.read_text() + "".join(f"  - {{id: t{i}}}\n" for i in range(1000))
    many.write_text(text)
    assert refused_for(many, "at most 1,000 tasks")[0].startswith("tasks: ")
    runs = base_suite(tmp_path, suite="defaults: {goal: g, planner: scripted:planner.json, repeat: 1000}")
    runs.write_text(runs.read_text() + "".join(f"  - {{id: t{i}}}\n" for i in range(10)))
    assert refused_for(runs, "11,000 runs")[0].startswith("tasks: ")


def test_counts_given_in_python_are_bounded_too() -> None:
    with pytest.raises(UsageError, match="repeat"):
        Task(id="t", goal="g", repeat=10**9)
    with pytest.raises(UsageError, match="max_turns"):
        Task(id="t", goal="g", max_turns=-1)
    for settings in ({"concurrency": 10**6}, {"concurrency": 0}, {"concurrency": True}, {"seed": -1}, {"seed": 2**64}):
        with pytest.raises(UsageError):
            EvalSettings(**settings)


@pytest.mark.parametrize(
    "option",
    [
        ("--concurrency", "1000000"),
        ("--seed", str(2**64)),
        ("--tolerance-cost", "nan"),
        ("--tolerance-latency", "inf"),
        ("--tolerance-pass-rate", "2"),
    ],
)
def test_a_numeric_option_out_of_bounds_exits_2(tmp_path: Path, option: tuple[str, str]) -> None:
    result = eval_cli(base_suite(tmp_path), *option)
    assert result.exit_code == 2, result.output
    assert option[0] in result.stderr


def test_numeric_problems_on_the_command_line_are_all_listed(tmp_path: Path) -> None:
    path = base_suite(tmp_path, suite="concurrency: .inf", task="repeat: 1000000000\nbudget: {cost: .nan}")
    result = eval_cli(path)
    assert result.exit_code == 2
    assert "3 problems" in result.stderr
    assert "concurrency: must be a whole number" in result.stderr
    assert "tasks[0] (t).repeat: must be at most 1,000" in result.stderr
    assert "tasks[0] (t).budget.cost: must be finite" in result.stderr
    assert "Traceback" not in result.output


# -- size, encoding, duplicates -----------------------------------------------------------------


def test_a_suite_file_larger_than_the_maximum_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_bytes(b"tasks: [" + b"1, " * (512 * 1024 // 3))  # never closed: parsing it would fail
    found = refused_for(path, "larger than 524,288 bytes")
    assert len(found) == 1
    assert "YAML" not in found[0]
    fits = base_suite(tmp_path)
    padding = 512 * 1024 - len(fits.read_bytes()) - 1
    fits.write_bytes(fits.read_bytes() + b"#" * padding + b"\n")
    assert len(fits.read_bytes()) == 512 * 1024
    assert load_suite(fits).name == "hostile"


def test_a_large_suite_file_on_the_command_line_exits_2(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_bytes(b"# " + b"x" * (600 * 1024))
    result = eval_cli(tmp_path / "suite.yaml")
    assert result.exit_code == 2
    assert "larger than 524,288 bytes" in result.stderr


def test_a_suite_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_bytes(b"name: \xff\xfe broken\ntasks: []\n")
    found = refused_for(tmp_path / "suite.yaml", "UTF-8")
    assert len(found) == 1
    result = eval_cli(tmp_path / "suite.yaml")
    assert result.exit_code == 2
    assert "UTF-8" in result.stderr


def test_every_problem_of_a_suite_is_listed_at_once_with_where_it_is(tmp_path: Path) -> None:
    path = base_suite(
        tmp_path,
        suite="concurrency: 100000",
        task="repeat: 2\nrepeat: 1000000000\nbudget: {cost: .nan}",
    )
    path.write_text(
        path.read_text()
        + "  - {id: u, goal: g, planner: scripted:planner.json, limits: {stall_rounds: .inf}, max_turns: true}\n"
        + "  - {id: v, planner: scripted:planner.json, faults: {tool_error_rate: .nan}}\n"
    )
    found = problems_of(path)
    wheres = {p.split(": ")[0] for p in found}
    assert {
        "concurrency",
        "tasks[0] (t).repeat",
        "tasks[0] (t).budget.cost",
        "tasks[1] (u).limits.stall_rounds",
        "tasks[1] (u).max_turns",
        "tasks[2] (v).goal",
        "tasks[2] (v).faults.tool_error_rate",
    } <= wheres, found
    assert any(p.startswith("line 11, column 5: duplicate key 'repeat'") for p in found), found


# -- baseline reports ---------------------------------------------------------------------------


@pytest.fixture
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real report of the base suite, as JSON data."""
    folder = tmp_path_factory.mktemp("made")
    result = eval_cli(base_suite(folder), "--json", folder / "report.json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((folder / "report.json").read_text())
    return data


def hostile_reports(report: dict[str, Any]) -> dict[str, bytes]:
    """Baseline files, by name, each of which must be refused."""
    text = json.dumps(report)
    with_nan = text.replace('"pass_rate": 1.0', '"pass_rate": NaN', 1)
    with_inf = text.replace('"cost_mean": 0.0', '"cost_mean": 1e999', 1)
    huge = text.replace('"seed": 0', '"seed": ' + "9" * 5000, 1)
    assert text not in (with_nan, with_inf, huge)
    texts = {
        "nested": nested_json(10_000),
        "nested-inside": json.dumps({**report, "faults": "HOLE"}).replace('"HOLE"', nested_json(10_000, "{}")),
        "nan": with_nan,
        "infinity": with_inf,
        "bool-for-number": json.dumps({**report, "seed": True}),
        "string-for-number": json.dumps({**report, "summary": {**report["summary"], "pass_rate": "1.0"}}),
        "huge-number": huge,
        "truncated": text[:200],
        "not-an-object": "[1, 2, 3]",
    }
    return {name: t.encode() for name, t in texts.items()} | {"not-utf8": b'{"format": "\xff"}'}


def test_a_hostile_or_damaged_baseline_is_refused_on_the_command_line(tmp_path: Path, report: dict[str, Any]) -> None:
    suite = base_suite(tmp_path)
    for name, data in hostile_reports(report).items():
        base = tmp_path / f"{name}.json"
        base.write_bytes(data)
        result = eval_cli(suite, "--baseline", base)
        assert result.exit_code == 2, (name, result.output)
        assert "--baseline: " in result.stderr, name
        assert "RecursionError" not in result.stderr


def test_a_baseline_larger_than_the_maximum_is_refused(tmp_path: Path, report: dict[str, Any]) -> None:
    base = tmp_path / "big.json"
    base.write_text(json.dumps({**report, "padding": "x" * (32 * 1024 * 1024)}))
    result = eval_cli(base_suite(tmp_path), "--baseline", base)
    assert result.exit_code == 2
    assert "larger than 33,554,432 bytes" in result.stderr


def test_load_report_refuses_hostile_data(report: dict[str, Any]) -> None:
    deep: Any = {}
    for _ in range(10_000):
        deep = {"x": deep}
    for hostile in (
        {**report, "faults": deep},
        {**report, "summary": {**report["summary"], "pass_rate": math.nan}},
        {**report, "summary": {**report["summary"], "latency_mean": math.inf}},
        {**report, "summary": {**report["summary"], "runs": True}},
        {**report, "summary": {**report["summary"], "cost": "0.1"}},
        {**report, "seed": 10**5000},
    ):
        with pytest.raises(UsageError):
            load_report(hostile)
    assert load_report(report).suite == "hostile"
    first = {key: value for key, value in report.items() if key != "notes"}  # as the first version wrote it
    assert load_report({**first, "version": 1}).summary == load_report(report).summary


# -- the report written -------------------------------------------------------------------------


def judge_costing(cost: float) -> Any:
    verdict = {"passed": True, "reason": "fine"}
    return lambda: ScriptedModel([ModelResponse(text=json.dumps(verdict), parsed=verdict, cost=cost)])


async def test_the_json_report_never_holds_nan_or_infinity(tmp_path: Path) -> None:
    task = {
        "goal": "double 1 + 2",
        "tools": ARITHMETIC,
        "planner": ADD_THEN_DOUBLE,
        "expect_answer": {"exact": "6", "judge": "the answer is 6"},
    }
    suite = suite_from_mapping(
        {
            "tasks": [
                {**task, "id": "inf", "judge": judge_costing(math.inf)},
                {**task, "id": "ok", "judge": judge_costing(0.5)},
            ]
        },
        root=tmp_path,
    )
    report: EvalReport = await run_suite(suite)
    report = dataclasses.replace(report, summary=dataclasses.replace(report.summary, latency_mean=math.nan))
    data = no_nan(report_text(report))
    assert data["summary"]["judge_cost"] is None
    assert data["summary"]["latency_mean"] is None
    assert data["tasks"][0]["runs"][0]["judge_cost"] is None
    assert data["tasks"][1]["summary"]["judge_cost"] == 0.5
    assert "summary.latency_mean: nan written as null" in data["notes"]
    assert "tasks[0].runs[0].judge_cost: inf written as null" in data["notes"]
    assert dump_report(report) == data
    with pytest.raises(UsageError, match="written as null"):
        load_report(data)  # a report missing numbers is no baseline


def test_the_report_written_by_the_command_line_holds_no_nan(tmp_path: Path) -> None:
    judge = write_module(
        tmp_path,
        "import math\n"
        "from planexec.models import ModelResponse\nfrom planexec.testing import ScriptedModel\n\n"
        "def judge():\n"
        "    verdict = {'passed': True, 'reason': 'fine'}\n"
        "    return ScriptedModel([ModelResponse(text='{}', parsed=verdict, cost=math.nan)])\n",
        "judge",
    )
    path = base_suite(tmp_path, task=f"judge: object:{judge}:judge\nexpect_answer: {{exact: '6', judge: fine}}")
    result = eval_cli(path, "--json", tmp_path / "out.json")
    assert result.exit_code == 0, result.output
    data = no_nan((tmp_path / "out.json").read_text())
    assert data["summary"]["judge_cost"] is None
    assert "note: summary.judge_cost: nan written as null" in result.output
    stdout = eval_cli(path, "--json", "-")
    assert no_nan(stdout.stdout)["summary"]["judge_cost"] is None


# -- the documented limits ----------------------------------------------------------------------


def test_the_readme_states_the_limits() -> None:
    from planexec.eval import _limits

    text = README.read_text()
    for value in (
        _limits.MAX_SUITE_BYTES,
        _limits.MAX_REPORT_BYTES,
        _limits.MAX_ALIASES,
        _limits.MAX_VALUES,
        _limits.MAX_REPORT_VALUES,
        _limits.MAX_DEPTH,
        _limits.MAX_TASKS,
        _limits.MAX_REPEAT,
        _limits.MAX_RUNS,
        _limits.MAX_CONCURRENCY,
        _limits.MAX_TURNS,
        _limits.MAX_STALL_ROUNDS,
    ):
        assert f"{value:,}" in text, value
