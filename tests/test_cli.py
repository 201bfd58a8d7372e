"""The ``planexec`` command line: demo, run, schema and --version, through click and as a real process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args, get_type_hints

import pytest
from rich.console import Console

from planexec import Agent, __version__
from planexec.cli._board import (
    Board,
    LineDisplay,
    LiveDisplay,
    describe_event,
    follow,
    planner_activity,
    step_rows,
)
from planexec.cli._common import display_for, start_and_follow
from planexec.cli._report import print_summary, result_json
from planexec.demo import build_demo
from planexec.executor import StepError, Verdict
from planexec.log import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    ModelCalled,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    RunFinished,
    RunStarted,
    RunState,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepStarted,
    StepSucceeded,
    StopReason,
    ToolCalled,
)
from planexec.models import ModelResponse
from planexec.plan import PLAN_SCHEMA_VERSION, Plan, Step, plan_json_schema
from planexec.testing import ScriptedModel
from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_script, write_tools_module
from tests.support import Blocker

# -- fixtures: a tools module and a scripted planner written into tmp_path -------------------------

TOOLS_SOURCE = (
    ARITHMETIC_TOOLS
    + '''

@tool(side_effect=True, sensitive=True)
def publish(value: int) -> str:
    """Publish a value (sensitive)."""
    return f"published {value}"


def plain(x: int) -> int:
    return x


TOOLS = [add, double, broken, publish]
'''
)

PLAN = {
    "reason": "add, then double the sum",
    "steps": [
        {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
        {
            "id": "twice",
            "description": "Double the sum",
            "tool": "double",
            "args": {"x": "${sum}"},
            "depends_on": ["sum"],
        },
    ],
}
ANSWER = {"answer": "(2 + 3) * 2 = 10"}


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI puts the working directory on sys.path (as ``python -m`` does); undo that after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of tools importable by name; each test gets a fresh module name."""
    return write_tools_module(tmp_path, monkeypatch, TOOLS_SOURCE, "cli_tools")


# -- --version and schema --------------------------------------------------------------------------


def test_version() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"planexec {__version__}"


def test_schema_prints_the_versioned_plan_schema() -> None:
    result = invoke(["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema == plan_json_schema()
    assert schema["x-planexec-schema-version"] == PLAN_SCHEMA_VERSION
    assert schema["$id"].endswith(f":{PLAN_SCHEMA_VERSION}")
    assert result.stdout.startswith('{\n  "')  # pretty


def test_schema_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.schema.json"
    result = invoke(["schema", "--output", str(out)])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert json.loads(out.read_text()) == plan_json_schema()
    assert str(out) in result.stderr


# -- demo ------------------------------------------------------------------------------------------


def test_demo_prints_a_line_per_event_and_writes_the_fix(tmp_path: Path) -> None:
    result = invoke(["demo", "--no-live", "--pace", "0", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"workdir: {tmp_path.resolve()}" in out
    for line in (
        "plan v1 by planner (initial), 6 steps",
        "step read_workflow started (tool read_workflow)",
        "step collect_logs failed",
        "plan v2 by planner (failure), 6 steps: collect_logs failed",
        "step fetch_archived_logs done",
        "find_root_cause called inspect_branch",
        "step write_fix done",
        "final answer reviewed (checks): refused: names_the_patch: the answer must name the patch",
        "plan v3 by planner (review), 6 steps",
        "final answer reviewed (checks): passed",
        "run finished: goal_met",
    ):
        assert line in out, line
    assert "answer · goal met" in out
    assert "deploy-311" in out
    assert (tmp_path / "fixes" / "enterprise_kyc-verify_company.patch").is_file()


def test_demo_json(tmp_path: Path) -> None:
    result = invoke(["demo", "--json", "--pace", "0", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["stop"]["kind"] == "goal_met"
    assert [(p["version"], p["author"], p["trigger"]) for p in data["plans"]] == [
        (1, "planner", "initial"),
        (2, "planner", "failure"),
        (3, "planner", "review"),
    ]
    assert data["fixes"] == ["fixes/enterprise_kyc-verify_company.patch"]
    assert data["workdir"] == str(tmp_path.resolve())
    steps = {s["id"]: s for s in data["steps"]}
    assert steps["collect_logs"]["status"] == "failed"
    assert steps["find_root_cause"]["tool_calls"][0]["tool"] == "inspect_branch"
    assert data["usage"]["model_calls"] == 7
    assert "step collect_logs failed" in result.stderr  # progress goes to stderr when stdout is JSON


def _command() -> list[str]:
    script = Path(sys.executable).with_name("planexec")
    if script.is_file():
        return [str(script)]
    found = shutil.which("planexec")
    return [found] if found else [sys.executable, "-m", "planexec"]


def test_demo_as_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "0"}
    work = tmp_path / "work"
    proc = subprocess.run(
        [*_command(), "demo", "--json", "--pace", "0", "--workdir", str(work)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True
    assert "vat_id" in data["answer"]
    assert (work / data["fixes"][0]).is_file()


async def test_the_live_board_follows_the_demo(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    demo = build_demo(tmp_path, pace=0)
    board = Board(title="planexec demo")
    result = await follow(demo.agent.start(demo.goal), LiveDisplay(console, board), interval=0.01)
    assert result.ok
    text = out.getvalue()
    assert "planexec demo" in text
    assert "plan v2 by planner" in text
    assert "failed" in text
    assert "done" in text
    # The board's rows are the folded state's steps, dependencies first.
    state = RunState.fold(result.events)
    rows = [r.step.id for r in step_rows(state)]
    assert rows.index("fetch_archived_logs") < rows.index("find_root_cause") < rows.index("draft_fix")
    assert {r.status for r in step_rows(state)} == {"succeeded", "failed"}


# -- run -------------------------------------------------------------------------------------------


def test_run_with_a_scripted_planner_and_tools_from_a_module(tmp_path: Path, tools_module: str) -> None:
    planner = write_script(tmp_path, [PLAN, ANSWER])
    result = invoke(["run", "compute (2+3)*2", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--no-live"])
    assert result.exit_code == 0, result.output
    assert "step twice done" in result.stdout
    assert "(2 + 3) * 2 = 10" in result.stdout


def test_run_json(tmp_path: Path, tools_module: str) -> None:
    planner = write_script(tmp_path, [PLAN, ANSWER])
    result = invoke(
        [
            "run",
            "compute",
            "--planner",
            planner,
            "--tools",
            f"{tools_module}:add",
            "--tools",
            f"{tools_module}:double",
            "--json",
            "--constraint",
            "be exact",
        ]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == ANSWER["answer"]
    assert {s["id"]: s["output"] for s in data["steps"]} == {"sum": 5, "twice": 10}


def test_run_with_an_object_model(tmp_path: Path, tools_module: str) -> None:
    models = tmp_path / f"{tools_module}_models.py"
    models.write_text(
        "from planexec.testing import ScriptedModel\n"
        f"PLANNER = ScriptedModel([{json.dumps(PLAN)}, {json.dumps(ANSWER)}], name='from-object')\n"
    )
    planner = f"object:{tools_module}_models:PLANNER"
    result = invoke(["run", "compute", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--no-live"])
    assert result.exit_code == 0, result.output
    assert "planner model from-object" in result.stdout


def test_a_bad_tools_reference_exits_2_naming_every_problem(tmp_path: Path, tools_module: str) -> None:
    planner = write_script(tmp_path, [PLAN, ANSWER])
    result = invoke(
        [
            "run",
            "compute",
            "--planner",
            planner,
            "--tools",
            "no_such_module_here:TOOLS",
            "--tools",
            f"{tools_module}:missing",
            "--tools",
            f"{tools_module}:plain",
            "--tools",
            tools_module,
        ]
    )
    assert result.exit_code == 2
    err = result.stderr
    assert "4 problems" in err
    assert "--tools 'no_such_module_here:TOOLS': cannot import module 'no_such_module_here'" in err
    assert f"--tools '{tools_module}:missing': '{tools_module}' has no attribute 'missing'" in err
    assert "'plain' is a plain function, not a tool: decorate it with @planexec.tool" in err
    assert f"--tools '{tools_module}': use the form package.module:attribute" in err
    assert result.stdout == ""


def test_usage_problems_are_listed_together() -> None:
    result = invoke(["run", " ", "--max-cost", "lots", "--max-steps", "-2", "--policy", "sideways"])
    assert result.exit_code == 2
    err = result.stderr
    for problem in (
        "GOAL: the goal is empty",
        "--planner: a planning model is required",
        "--max-cost: 'lots' is not a number",
        "--max-steps: '-2' must not be negative",
        "--policy: 'sideways' is not one of upfront, step",
    ):
        assert problem in err, problem


def test_bad_model_strings_are_usage_errors(tmp_path: Path) -> None:
    result = invoke(["run", "x", "--planner", "nosuchprovider:model", "--executor", f"scripted:{tmp_path}/none.json"])
    assert result.exit_code == 2
    assert "--planner: unknown model provider 'nosuchprovider'" in result.stderr
    assert "--executor: cannot read the script" in result.stderr


def test_a_budget_that_is_hit_exits_1_naming_the_budget(tmp_path: Path, tools_module: str) -> None:
    planner = write_script(tmp_path, [PLAN, ANSWER])
    result = invoke(
        [
            "run",
            "compute",
            "--planner",
            planner,
            "--tools",
            f"{tools_module}:TOOLS",
            "--max-model-calls",
            "1",
            "--no-live",
        ]
    )
    assert result.exit_code == 1
    assert "stopped: budget_exhausted (model_calls)" in result.stderr
    assert "budget model_calls exhausted: used 1 of 1" in result.stdout


def test_a_failed_run_exits_1_with_its_stop_reason(tmp_path: Path, tools_module: str) -> None:
    plan = {"steps": [{"id": "b", "description": "Break", "tool": "broken", "args": {"x": 1}}]}
    planner = write_script(tmp_path, [plan])
    result = invoke(
        ["run", "break it", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--replan", "never", "--json"]
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["stop"]["kind"] == "error"
    assert "replanning is off" in result.stderr
    assert data["steps"][0]["error"] == {"kind": "tool_error", "message": "broken: broken on purpose"}


def test_approve_plan_without_a_terminal_saves_the_question_and_suspends(tmp_path: Path, tools_module: str) -> None:
    planner = write_script(tmp_path, [PLAN, ANSWER])
    result = invoke(
        ["run", "x", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--approve-plan", "--no-live"]
    )
    assert result.exit_code == 3, result.output
    assert "approval asked for plan v1" in result.stdout
    assert "[--edit plan.json]" in result.stdout
    assert "the store is in memory" in result.stderr  # the suite's default store: nothing to resume later


@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 1)])
def test_plan_approval_at_a_terminal(
    tmp_path: Path, tools_module: str, monkeypatch: pytest.MonkeyPatch, answer: str, code: int
) -> None:
    monkeypatch.setattr("planexec.cli._terminal_approver.is_interactive", lambda console: True)
    planner = write_script(tmp_path, [PLAN, ANSWER])
    result = invoke(
        ["run", "x", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--approve-plan", "--no-live"],
        input=f"{answer}\n",
    )
    assert result.exit_code == code, result.output
    assert "Run plan v1?" in result.stdout
    shown = " ".join(result.stdout.split())
    assert "Approve plan v1" in shown
    assert "every plan version needs a human's yes" in shown
    assert "forecast" in shown
    if code == 0:
        assert "approval approved by terminal" in result.stdout
    else:
        assert "stopped: rejected" in result.stderr


def test_sensitive_steps_are_asked_about_at_a_terminal(
    tmp_path: Path, tools_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("planexec.cli._terminal_approver.is_interactive", lambda console: True)
    plan = {"steps": [{"id": "pub", "description": "Publish 7", "tool": "publish", "args": {"value": 7}}]}
    planner = write_script(tmp_path, [plan, {"answer": "published"}])
    result = invoke(["run", "x", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--no-live"], input="y\n")
    assert result.exit_code == 0, result.output
    assert "approval asked for step pub: sensitive tool" in result.stdout
    assert "Run step pub?" in result.stdout
    # the prompt shows the question's view: the step, its effect, its arguments as sent, what each answer does
    shown = " ".join(result.stdout.split())
    assert "Approve step pub: tool publish" in shown
    assert "tool publish is sensitive" in shown
    assert "value │ 7" in shown
    assert "step pub calls tool publish with the arguments shown, once" in shown


@pytest.mark.parametrize("no_input", [False, True])
def test_without_a_terminal_questions_are_saved_and_the_run_suspends(
    tmp_path: Path, tools_module: str, monkeypatch: pytest.MonkeyPatch, no_input: bool
) -> None:
    if no_input:  # a terminal, but --no-input: the same
        monkeypatch.setattr("planexec.cli._terminal_approver.is_interactive", lambda console: True)
    plan = {"steps": [{"id": "pub", "description": "Publish 7", "tool": "publish", "args": {"value": 7}}]}
    planner = write_script(tmp_path, [plan, {"answer": "published"}])
    args = ["run", "x", "--planner", planner, "--tools", f"{tools_module}:TOOLS", "--no-live"]
    result = invoke([*args, "--no-input"] if no_input else args)
    assert result.exit_code == 3, result.output
    assert "approval asked for step pub: sensitive tool publish" in result.stdout
    assert "run suspended" in result.stdout
    assert "Run step pub?" not in result.stdout
    assert "planexec approve " in result.stdout


# -- the pieces: one line per event, the report -----------------------------------------------------


def _one_of_each() -> list[Event]:
    step = Step(id="s", description="do it", tool="t")
    plan = Plan(version=2, steps=(step,), reason="because", author="planner")
    error = StepError(kind="tool_error", message="t: no")
    return [
        RunStarted(at=1.0, run_id="r", goal="g", budget={"model_calls": 3, "cost": None}),
        ModelCalled(at=1.1, role="planner", purpose="planner.propose", model="m", response=ModelResponse()),
        ModelCalled(at=1.1, role="executor", purpose="executor", model="m", step_id="s", error="Boom: x"),
        PlannerOutputRejected(at=1.2, attempt=1, problems=()),
        PlanProposed(at=1.3, plan=plan, trigger="failure", cancelled=("old",)),
        ApprovalRequested(at=1.4, approval_id="a", subject="step", step_id="s", reason="sensitive tool"),
        ApprovalDecided(at=1.5, approval_id="a", approved=False, by="terminal", reason="no"),
        StepStarted(at=1.6, step_id="s", executor="tools", tool="t", args={}),
        StepAttemptFailed(at=1.7, step_id="s", attempt=1, error=error, retry_in=0.5),
        ToolCalled(at=1.8, step_id="s", call_id="c", tool="t", args={"q": 1}, output=1, duration=0.1),
        StepSucceeded(at=1.9, step_id="s", output=1, verdict=Verdict(passed=True), attempts=2),
        StepFailed(at=2.0, step_id="s", error=error),
        StepCancelled(at=2.1, step_id="s", reason="obsolete"),
        BudgetExhaustedEvent(at=2.2, budget="cost", limit=1.0, used=1.0),
        StallDetected(at=2.3, rule="no_progress", detail="nothing new"),
        RunFinished(at=2.4, stop=StopReason(kind="stalled", detail="nothing new")),
    ]


def test_every_event_kind_has_a_line() -> None:
    state = RunState()
    lines = []
    for event in _one_of_each():
        state.apply(event)
        lines.append(describe_event(event, state))
    assert all(lines)
    assert lines[4] == "plan v2 by planner (failure), 1 step: because [cancelled: old]"
    assert "retry in 0.50s" in lines[8]
    assert "after 2 attempts" in lines[10]
    assert lines[-1] == "run finished: stalled: nothing new"


async def test_the_report_and_json_cover_a_finished_run(tmp_path: Path) -> None:
    demo = build_demo(tmp_path, pace=0)
    result = await demo.agent.run(demo.goal)
    out = io.StringIO()
    print_summary(Console(file=out, width=150), result, extra=[("fix", "fixes/x.patch")])
    text = out.getvalue()
    for part in ("answer · goal met", "plan versions", "usage", "tool calls (8)", "timings", "fixes/x.patch"):
        assert part in text, part
    data = result_json(result, note="extra")
    assert json.loads(json.dumps(data)) == data
    assert data["note"] == "extra"
    assert data["usage"]["by_role"]["executor"]["calls"] == 2


# -- cancelling -------------------------------------------------------------------------------------


def _blocking_agent(blocker: Blocker) -> Agent:
    plan = {"steps": [{"id": "w", "description": "Wait", "tool": "wait_forever"}]}
    return Agent(ScriptedModel([plan]), tools=[blocker.tool])


async def test_cancelling_follow_cancels_the_run() -> None:
    blocker = Blocker("wait_forever")
    run = _blocking_agent(blocker).start("wait")
    task = asyncio.create_task(follow(run, LineDisplay(Console(file=io.StringIO()))))
    await blocker.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = await run.result()
    assert result.stop.kind == "cancelled"
    assert result.steps["w"].status == "cancelled"


async def test_ctrl_c_in_the_cli_reports_the_cancelled_run() -> None:
    blocker = Blocker("wait_forever")
    out = io.StringIO()
    task = asyncio.create_task(
        start_and_follow(_blocking_agent(blocker), "wait", (), LineDisplay(Console(file=out, width=200)))
    )
    await blocker.started.wait()
    task.cancel()
    result = await task
    assert result.stop.kind == "cancelled"
    assert "step w started" in out.getvalue()


def test_the_display_is_live_only_on_a_terminal() -> None:
    terminal = Console(file=io.StringIO(), force_terminal=True)
    pipe = Console(file=io.StringIO(), force_terminal=False)
    assert isinstance(display_for(terminal, no_live=False, title="t"), LiveDisplay)
    assert isinstance(display_for(terminal, no_live=True, title="t"), LineDisplay)
    assert isinstance(display_for(pipe, no_live=False, title="t"), LineDisplay)


def test_run_routes_model_steps_to_the_executor_model(tmp_path: Path) -> None:
    plan = {"steps": [{"id": "think", "description": "Name the answer to everything"}]}
    planner = write_script(tmp_path, [plan, {"answer": "It is 42."}])
    executor = write_script(tmp_path, ["42"], name="executor.json")
    result = invoke(["run", "think", "--planner", planner, "--executor", executor, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["steps"][0]["output"] == "42"
    assert data["steps"][0]["executor"] == "model"
    assert data["usage"]["by_role"]["executor"]["calls"] == 1


async def test_the_board_says_what_the_planner_is_doing(tmp_path: Path) -> None:
    demo = build_demo(tmp_path, pace=0)
    run = demo.agent.start(demo.goal)
    seen: list[str | None] = []
    state = RunState()
    async for event in run.events():
        state.apply(event)
        seen.append(planner_activity(state))
    assert "planner: proposing a plan…" in seen
    assert "planner: patching the plan…" in seen
    assert "planner: writing the answer…" in seen
    assert "planner: answering again after a refused answer…" in seen
    assert seen[-1] is None


def test_the_board_names_every_planning_trigger() -> None:
    triggers = get_args(get_type_hints(PlanningStarted)["trigger"])
    assert "review" in triggers
    for trigger in triggers:
        state = RunState()
        state.apply(PlanningStarted(at=0.0, trigger=trigger))
        activity = planner_activity(state)
        assert activity is not None
        assert activity != f"planner: {trigger}…", f"{trigger!r} has no words on the board"
