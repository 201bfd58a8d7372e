"""What the store holds, from the command line: ``runs``, ``show`` (with plan diffs), ``export``,
``replay`` (offline, and forks that go on live), ``gc`` and the global ``--store`` option."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from planexec.cli import main
from planexec.log import Event, RunFinished, RunStarted, StopReason, load_event
from planexec.plan import Plan, Step
from planexec.views import diff_plans
from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_runs, write_script, write_tools_module

TOOLS_SOURCE = ARITHMETIC_TOOLS + "\n\nTOOLS = [add, double, broken]\n"

PATCHED = [
    {
        "reason": "try the broken tool first",
        "steps": [
            {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
            {"id": "b", "description": "Break", "tool": "broken", "args": {"x": 1}, "depends_on": ["sum"]},
            {"id": "after", "description": "Double b", "tool": "double", "args": {"x": "${b}"}, "depends_on": ["b"]},
        ],
    },
    {
        "reason": "b is broken: double the sum instead",
        "steps": [
            {
                "id": "after",
                "description": "Double the sum",
                "tool": "double",
                "args": {"x": "${sum}"},
                "depends_on": ["sum"],
            },
            {"id": "extra", "description": "Add 1 and 1", "tool": "add", "args": {"a": 1, "b": 1}},
        ],
    },
    {"answer": "10"},
]
SIMPLE = [
    {
        "steps": [
            {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
            {"id": "twice", "description": "Double", "tool": "double", "args": {"x": "${sum}"}, "depends_on": ["sum"]},
        ]
    },
    {"answer": "(2 + 3) * 2 = 10"},
]


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    return f"{write_tools_module(tmp_path, monkeypatch, TOOLS_SOURCE, 'records_tools')}:TOOLS"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


def cli(store: str, *args: str) -> Result:
    return invoke(["--store", store, *args])


def run_json(store: str, *args: str) -> dict[str, Any]:
    result = cli(store, "run", *args, "--json")
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def seed_old_runs(store: str, count: int) -> list[str]:
    """Runs whose every event is dated 1970: older than any age."""

    logs: dict[str, list[Event]] = {
        run_id: [
            RunStarted(at=1000.0, run_id=run_id, goal="long ago", budget={}),
            RunFinished(at=1001.0, stop=StopReason(kind="goal_met")),
        ]
        for run_id in (f"old{i}" for i in range(count))
    }
    write_runs(store, logs)
    return list(logs)


# -- runs, show, export ---------------------------------------------------------------------------


def test_runs_lists_the_store_newest_first(tmp_path: Path, tools: str, store: str) -> None:
    first = run_json(store, "first goal", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)
    patched = run_json(store, "second goal", "--planner", write_script(tmp_path, PATCHED, "p.json"), "--tools", tools)
    listed = json.loads(cli(store, "runs", "--json").stdout)
    assert [r["run_id"] for r in listed] == [patched["run_id"], first["run_id"]]
    assert {r["status"] for r in listed} == {"finished"}
    assert listed[0]["goal"] == "second goal"
    assert listed[0]["stop"] == "goal_met"
    assert listed[0]["pending_approvals"] == 0

    table = cli(store, "runs")
    assert table.exit_code == 0
    for part in (first["run_id"], patched["run_id"], "finished", "goal_met", "first goal", "$0.0000"):
        assert part in table.stdout, part
    assert json.loads(cli(store, "runs", "--status", "waiting", "--json").stdout) == []
    assert len(json.loads(cli(store, "runs", "--limit", "1", "--json").stdout)) == 1

    bad = cli(store, "runs", "--status", "done", "--limit", "x")
    assert bad.exit_code == 2
    assert "2 problems" in bad.stderr


def test_show_gives_every_plan_version_with_its_diff(tmp_path: Path, tools: str, store: str) -> None:
    data = run_json(store, "compute", "--planner", write_script(tmp_path, PATCHED), "--tools", tools)
    assert data["ok"], data
    run_id = data["run_id"]

    shown = cli(store, "show", run_id)
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    for part in (
        f"run {run_id}",
        "compute",
        "finished: goal_met",
        "b is broken",
        "failure",
        "+ extra: tool add — Add 1 and 1",
        "- b: tool broken — Break",
        "~ after:",
        'args: {"x": "${b}"} → {"x": "${sum}"}',
        'depends_on: ["b"] → ["sum"]',
        "tool_error: broken: broken on purpose",
        "usage",
        "planner",
    ):
        assert part in text, part

    doc = json.loads(cli(store, "show", run_id, "--json").stdout)
    assert [(p["version"], p["author"], p["trigger"]) for p in doc["plans"]] == [
        (1, "planner", "initial"),
        (2, "planner", "failure"),
    ]
    diff = doc["plans"][1]["diff"]
    assert diff["added"] == ["extra"]
    assert diff["removed"] == ["b"]
    assert diff["kept"] == ["sum"]
    (changed,) = diff["changed"]
    assert changed["id"] == "after"
    assert set(changed["fields"]) == {"description", "args", "depends_on"}
    assert changed["fields"]["depends_on"] == {"from": ["b"], "to": ["sum"]}
    steps = {(s["id"], s["superseded"]): s for s in doc["steps"]}
    assert steps["b", False]["status"] == "failed"
    assert steps["after", False]["output"] == 10
    assert steps["after", True]["status"] == "pending"  # v1's 'after' never ran
    assert doc["usage"]["model_calls"] == 3
    assert doc["status"] == "finished"
    assert doc["answer"] == "10"


def test_diff_of_a_first_version_adds_everything() -> None:
    plan = Plan(steps=(Step(id="a", description="A", tool="t"),))
    assert [s.id for s in diff_plans(None, plan).added] == ["a"]
    assert diff_plans(plan, plan).empty


def test_export_writes_one_event_envelope_per_line(tmp_path: Path, tools: str, store: str) -> None:
    run_id = run_json(store, "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)["run_id"]
    out = cli(store, "export", run_id)
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    events = [load_event(json.loads(line)) for line in lines]
    assert isinstance(events[0], RunStarted)
    assert events[0].run_id == run_id
    assert isinstance(events[-1], RunFinished)
    assert len(events) == json.loads(cli(store, "show", run_id, "--json").stdout)["events"]

    target = tmp_path / "run.jsonl"
    written = cli(store, "export", run_id, "--output", str(target))
    assert written.exit_code == 0
    assert target.read_text() == out.stdout
    assert f"wrote {len(lines)} events" in written.stderr


@pytest.mark.parametrize("command", ["show", "export", "resume", "replay", "approve"])
def test_an_unknown_run_is_a_usage_error(store: str, command: str) -> None:
    result = cli(store, command, "nosuchrun")
    assert result.exit_code == 2
    assert "RUN: no run 'nosuchrun' in sqlite:///" in result.stderr


def test_a_bad_store_url_is_a_usage_error(tmp_path: Path) -> None:
    for url, message in (
        ("nosuch://x", "--store: unknown store URL"),
        (f"sqlite:///{tmp_path}/missing/dir/runs.db", "--store: cannot open"),
    ):
        result = CliRunner().invoke(main, ["--store", url, "runs"], catch_exceptions=False)
        assert result.exit_code == 2
        assert message in result.stderr


def test_the_store_can_come_from_the_environment(tmp_path: Path, tools: str, store: str) -> None:
    runner = CliRunner(env={"PLANEXEC_STORE": store})
    planner = write_script(tmp_path, SIMPLE)
    ran = runner.invoke(main, ["run", "compute", "--planner", planner, "--tools", tools, "--json"])
    assert ran.exit_code == 0, ran.output
    run_id = json.loads(ran.stdout)["run_id"]
    assert [r["run_id"] for r in json.loads(cli(store, "runs", "--json").stdout)] == [run_id]


def test_the_store_may_be_a_plain_file_path(tmp_path: Path, tools: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "plain.db"
    ran = invoke(
        ["--store", str(path), "run", "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools]
    )
    assert ran.exit_code == 0, ran.output
    assert path.is_file()
    monkeypatch.chdir(tmp_path)
    listed = CliRunner(env={"PLANEXEC_STORE": "plain.db"}).invoke(main, ["runs", "--json"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    assert [r["goal"] for r in json.loads(listed.stdout)] == ["compute"]


def test_the_global_options_may_follow_the_command(tmp_path: Path, tools: str, store: str) -> None:
    planner = write_script(tmp_path, SIMPLE)
    goal = "mail ada@example.com the sum"
    ran = invoke(["run", goal, "--planner", planner, "--tools", tools, "--json", "--store", store])
    assert ran.exit_code == 0, ran.output
    run_id = json.loads(ran.stdout)["run_id"]
    assert [r["run_id"] for r in json.loads(invoke(["runs", "--store", store, "--json"]).stdout)] == [run_id]
    # Given on both sides, the one after the command wins, as it does over the environment.
    runner = CliRunner(env={"PLANEXEC_STORE": "memory://"})
    shown = runner.invoke(main, ["--store", "memory://", "show", run_id, "--store", store], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert "ada@example.com" in shown.stdout

    private = invoke(["run", goal, "--planner", planner, "--tools", tools, "--json", "--redact-pii", "--store", store])
    assert private.exit_code == 0, private.output
    shown = invoke(["show", json.loads(private.stdout)["run_id"], "--store", store])
    assert "ada@example.com" not in shown.stdout
    assert "[REDACTED:email]" in shown.stdout


def test_every_command_that_keeps_runs_takes_the_global_options() -> None:
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        flags = {flag for param in command.params for flag in getattr(param, "opts", [])}
        if name != "schema":  # the plan's schema involves no run
            assert {"--store", "--redact-pii"} <= flags, name


# -- replay ---------------------------------------------------------------------------------------


def test_replaying_a_finished_run_matches_its_log(tmp_path: Path, tools: str, store: str) -> None:
    run_id = run_json(store, "compute", "--planner", write_script(tmp_path, PATCHED), "--tools", tools)["run_id"]
    (tmp_path / "planner.json").unlink()  # nothing is asked of the model again
    replayed = cli(store, "replay", run_id)
    assert replayed.exit_code == 0, replayed.output
    assert f"run {run_id} replayed exactly" in replayed.stdout
    report = json.loads(cli(store, "replay", run_id, "--json").stdout)
    assert report["matched"] is True
    assert report["compared"] == report["events"] > 10
    assert report["divergence"] is None


def test_replay_with_an_injected_fault_goes_on_live(tmp_path: Path, tools: str, store: str) -> None:
    run_id = run_json(store, "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)["run_id"]
    patch = {
        "reason": "sum failed: add other numbers",
        "steps": [
            {"id": "sum2", "description": "Add 1 and 4", "tool": "add", "args": {"a": 1, "b": 4}},
            {
                "id": "twice",
                "description": "Double",
                "tool": "double",
                "args": {"x": "${sum2}"},
                "depends_on": ["sum2"],
            },
        ],
    }
    fork_planner = write_script(tmp_path, [patch, {"answer": "1 + 4 doubled is 10"}], name="fork.json")
    forked = cli(store, "replay", run_id, "--fail", "sum:timeout", "--planner", fork_planner)
    assert forked.exit_code == 0, forked.output
    out = forked.stdout
    assert f"a fork of run {run_id}" in out
    assert "step sum failed" in out
    assert "timeout: fault injected by replay (timeout)" in out
    assert "plan v2 by planner (failure)" in out
    assert "1 + 4 doubled is 10" in out

    listed = json.loads(cli(store, "runs", "--json").stdout)
    assert len(listed) == 2
    new_id = next(r["run_id"] for r in listed if r["run_id"] != run_id)
    shown = json.loads(cli(store, "show", new_id, "--json").stdout)
    assert {s["id"]: s["status"] for s in shown["steps"] if not s["superseded"]} == {
        "sum": "failed",
        "sum2": "succeeded",
        "twice": "succeeded",
    }


def test_replay_under_a_fault_profile_goes_live_at_the_first_spoiled_call(
    tmp_path: Path, tools: str, store: str
) -> None:
    run_id = run_json(store, "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)["run_id"]
    profile = tmp_path / "faults.yaml"
    profile.write_text("seed: 1\ntool_error_rate: 1.0\n")
    fork_planner = write_script(tmp_path, [{"give_up": "the tools are failing"}], name="fork.json")
    forked = cli(store, "replay", run_id, "--faults", str(profile), "--planner", fork_planner, "--json")
    doc = json.loads(forked.stdout)
    assert doc["stop"]["kind"] == "waiting", forked.output  # giving up is escalated to a human, never goal_met
    (question,) = doc["pending_approvals"]
    assert (question["kind"], question["code"]) == ("escalation", "planner_gave_up")
    assert doc["answer"] is None
    assert doc["forked_from"] == run_id
    bad = cli(store, "replay", run_id, "--faults", "no-such-profile")
    assert bad.exit_code == 2
    assert "unknown fault profile 'no-such-profile'" in bad.output


def test_a_fork_with_the_recorded_planner_skips_the_replies_already_used(
    tmp_path: Path, tools: str, store: str
) -> None:
    run_id = run_json(store, "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)["run_id"]
    # keep run_started, planning_started and the planner's answer; decide the rest live
    forked = cli(store, "replay", run_id, "--fork-at", "3", "--json")
    assert forked.exit_code == 0, forked.output
    data = json.loads(forked.stdout)
    assert data["answer"] == "(2 + 3) * 2 = 10"  # the second reply: the first was used before the fork
    assert data["forked_from"] == run_id
    assert data["replayed_events"] == 3


def test_bad_replay_options_are_listed_together(tmp_path: Path, tools: str, store: str) -> None:
    run_id = run_json(store, "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)["run_id"]
    result = cli(store, "replay", run_id, "--fork-at", "0", "--fail", "nope:sideways")
    assert result.exit_code == 2
    err = result.stderr
    assert "3 problems" in err
    assert "--fork-at: '0' must be from 1 to" in err
    assert "'sideways' is not a step error kind" in err
    assert "step 'nope' never ran in this run (steps that ran: sum, twice)" in err


# -- gc -------------------------------------------------------------------------------------------


def test_gc_removes_old_runs_and_dry_run_does_not(tmp_path: Path, tools: str, store: str) -> None:
    old = seed_old_runs(store, 2)
    fresh = run_json(store, "compute", "--planner", write_script(tmp_path, SIMPLE), "--tools", tools)["run_id"]

    dry = cli(store, "gc", "--older-than", "30d", "--dry-run")
    assert dry.exit_code == 0
    assert "would remove 2 runs" in dry.stdout
    assert len(json.loads(cli(store, "runs", "--json").stdout)) == 3

    removed = cli(store, "gc", "--older-than", "30d")
    assert removed.exit_code == 0
    assert "removed 2 runs" in removed.stdout
    assert all(run_id in removed.stdout for run_id in old)
    assert [r["run_id"] for r in json.loads(cli(store, "runs", "--json").stdout)] == [fresh]


def test_gc_older_than_zero_seconds(store: str) -> None:
    seed_old_runs(store, 3)
    assert "would remove 3 runs" in cli(store, "gc", "--older-than", "0s", "--dry-run").stdout
    assert len(json.loads(cli(store, "runs", "--json").stdout)) == 3
    assert "removed 3 runs" in cli(store, "gc", "--older-than", "0s").stdout
    assert json.loads(cli(store, "runs", "--json").stdout) == []


@pytest.mark.parametrize("age", ["30", "3w", "-1d", "d", ""])
def test_gc_refuses_bad_ages(store: str, age: str) -> None:
    result = cli(store, "gc", "--older-than", age)
    assert result.exit_code == 2
    assert f"--older-than: {age!r} is not an age" in result.stderr


# -- the demo -------------------------------------------------------------------------------------


def test_the_demo_is_logged_in_the_store_and_replays(tmp_path: Path, store: str) -> None:
    demo = cli(store, "demo", "--no-live", "--pace", "0", "--workdir", str(tmp_path / "work"))
    assert demo.exit_code == 0, demo.output
    (summary,) = json.loads(cli(store, "runs", "--json").stdout)
    assert summary["stop"] == "goal_met"
    assert summary["run_id"] in demo.stdout
    assert cli(store, "replay", summary["run_id"]).exit_code == 0
