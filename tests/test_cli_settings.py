"""Model settings and the step timeout from the command line: ``--planner-setting``,
``--executor-setting`` and ``--step-timeout`` reach the models, are recorded with the run, and are
rebuilt from the log by ``approve`` and ``resume`` (flags given there override them key by key)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planexec.log import RunStarted
from tests.cli_support import write_tools_module
from tests.test_cli_durable import Cli, waiting_run

MODELS_SOURCE = '''
import json
from pathlib import Path

from planexec import tool
from planexec.testing import FunctionModel

LOG = Path(__file__).with_name("calls.txt")


def _note(request) -> None:
    with LOG.open("a") as f:
        f.write(f"{request.purpose} {json.dumps(request.settings.as_dict(), sort_keys=True)}\\n")


@tool(side_effect=True, sensitive=True)
def publish(value: int) -> str:
    """Publish a value (sensitive: asked about)."""
    return f"published {value}"


def _plan(request):
    _note(request)
    if request.purpose == "planner.propose":
        return {
            "steps": [
                {"id": "think", "description": "think of a number"},
                {"id": "pub", "description": "publish it", "tool": "publish", "args": {"value": 7},
                 "depends_on": ["think"]},
            ]
        }
    return {"answer": "published 7"}


def _execute(request):
    _note(request)
    return "seven"


class _NoSeed(FunctionModel):
    def unsupported_settings(self, settings):
        return {"seed": "this model has no seed"} if settings.seed is not None else {}


PLANNER = FunctionModel(_plan, name="noting-planner")
NO_SEED = _NoSeed(_plan, name="no-seed-planner")
EXECUTOR = FunctionModel(_execute, name="noting-executor")
TOOLS = [publish]
'''


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    name = write_tools_module(tmp_path, monkeypatch, MODELS_SOURCE, "noting_models")
    return Cli(tmp=tmp_path, store=f"sqlite:///{tmp_path}/runs.db", tools=name)


def noted(cli: Cli) -> list[tuple[str, dict[str, object]]]:
    """Each model request so far: its purpose and its settings."""
    return [(purpose, json.loads(settings)) for purpose, settings in (line.split(" ", 1) for line in cli.calls())]


def start(cli: Cli, *flags: str) -> tuple[str, str]:
    result = cli(
        "run",
        "publish a number",
        "--planner",
        f"object:{cli.tools}:PLANNER",
        "--executor",
        f"object:{cli.tools}:EXECUTOR",
        "--tools",
        f"{cli.tools}:TOOLS",
        "--no-live",
        *flags,
    )
    run_id, (approval_id,) = waiting_run(result)
    assert "note:" not in result.stderr  # the scripted models send every setting
    return run_id, approval_id


PLANNER_FLAGS = (
    "--planner-setting",
    "temperature=0",
    "--planner-setting",
    "reasoning_effort=high",
    "--planner-setting",
    "stop=END",
    "--planner-setting",
    "extra.service_tier=flex",
)
PLANNING = {"temperature": 0, "reasoning_effort": "high", "stop": ["END"], "extra": {"service_tier": "flex"}}


def test_settings_reach_each_role_and_are_recorded(cli: Cli) -> None:
    run_id, _ = start(cli, *PLANNER_FLAGS, "--executor-setting", "max_tokens=64", "--step-timeout", "30")

    assert noted(cli) == [("planner.propose", PLANNING), ("executor", {"max_tokens": 64})]
    first = cli.log(run_id)[0]
    assert isinstance(first, RunStarted)
    recorded = first.config["agent_spec"]
    assert recorded["planner_settings"] == {
        "temperature": 0,
        "reasoning_effort": "high",
        "stop": ["END"],
        "extra": {"service_tier": "flex"},
    }
    assert recorded["executor_settings"] == {"max_tokens": 64}
    assert recorded["step_timeout"] == 30
    assert first.config["planner"]["settings"] == PLANNING
    assert first.config["model_executors"]["model"]["step_timeout"] == 30.0


def test_approve_goes_on_with_the_recorded_settings(cli: Cli) -> None:
    run_id, approval_id = start(cli, *PLANNER_FLAGS)
    approved = cli("approve", run_id, approval_id)
    assert approved.exit_code == 0, approved.output
    assert "published 7" in approved.stdout
    assert noted(cli)[-1] == ("planner.finish", PLANNING)


def test_resume_flags_override_the_recorded_settings_key_by_key(cli: Cli) -> None:
    run_id, approval_id = start(cli, *PLANNER_FLAGS)
    assert cli("approve", run_id, approval_id, "--no-resume").exit_code == 0
    resumed = cli(
        "resume", run_id, "--no-live", "--planner-setting", "temperature=0.5", "--planner-setting", "stop=null"
    )
    assert resumed.exit_code == 0, resumed.output
    assert noted(cli)[-1] == (
        "planner.finish",
        {"temperature": 0.5, "reasoning_effort": "high", "extra": {"service_tier": "flex"}},
    )


def test_every_wrong_setting_is_listed_at_once(cli: Cli) -> None:
    result = cli(
        "run",
        "publish a number",
        "--planner",
        f"object:{cli.tools}:PLANNER",
        "--tools",
        f"{cli.tools}:TOOLS",
        "--planner-setting",
        "temperature=hot",
        "--planner-setting",
        "top_p=2",
        "--planner-setting",
        "verbose",
        "--planner-setting",
        "tempo=1",
        "--executor-setting",
        "max_tokens=10",
        "--step-timeout",
        "-1",
    )
    assert result.exit_code == 2
    for expected in (
        "--planner-setting: temperature: must be a number from 0 to 2, not 'hot'",
        "--planner-setting: top_p: must be a number from 0 to 1",
        "--planner-setting: 'verbose' is not KEY=VALUE",
        "--planner-setting: tempo: unknown setting",
        "--executor-setting: applies to the executor: name the executor's model too",
        "--step-timeout: '-1' must be a positive number of seconds",
    ):
        assert expected in result.stderr
    assert cli.calls() == []


def test_a_setting_the_model_does_not_take_is_noted_and_recorded(cli: Cli) -> None:
    result = cli(
        "run",
        "publish a number",
        "--planner",
        f"object:{cli.tools}:NO_SEED",
        "--executor",
        f"object:{cli.tools}:EXECUTOR",
        "--tools",
        f"{cli.tools}:TOOLS",
        "--no-live",
        "--planner-setting",
        "seed=3",
    )
    run_id, _ = waiting_run(result)
    assert "note: the planner's seed is not sent: this model has no seed" in result.stderr
    first = cli.log(run_id)[0]
    assert isinstance(first, RunStarted)
    assert first.config["planner"]["dropped_settings"] == {"seed": "this model has no seed"}
