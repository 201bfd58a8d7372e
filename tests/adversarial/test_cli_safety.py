"""What the command line shows a human: every run bounded by default (and said so in --help),
secrets redacted exactly as the store keeps them, and text from models and tools shown as text —
never as terminal markup or control sequences that could hide or restyle what a human reviews."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from planexec.log import RunStarted
from planexec.runtime import DEFAULT_CAPS
from planexec.store import open_store
from tests.cli_support import invoke, write_script, write_tools_module

SECRET = "sk-proj-Zq8v3LmN5pR7tX2wY4bC6dF9gH1jK0mA"
TOOLS = f'''
from planexec import tool


@tool
def leak(x: int) -> str:
    """Return text with a key and some markup in it."""
    return "key={SECRET} [output] [red]alarm[/red] \\x1b[2J\\x1b[31mred\\u202eevil"


TOOLS = [leak]
'''
PLAN = {"steps": [{"id": "l", "description": "leak", "tool": "leak", "args": {"x": 1}}]}


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str]:
    module = write_tools_module(tmp_path, monkeypatch, TOOLS, "leaky_tools")
    planner = write_script(tmp_path, [PLAN, {"answer": f"done; the key was {SECRET} [bold]shout[/bold]"}])
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    return module, planner, store


def test_run_help_prints_the_default_caps_and_how_to_lift_them() -> None:
    result = invoke(["run", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for flag, name in (
        ("--max-steps", "steps"),
        ("--max-model-calls", "model_calls"),
        ("--max-tool-calls", "tool_calls"),
        ("--max-time", "wall_time"),
        ("--max-replans", "replans"),
    ):
        assert re.search(rf"{flag} \S+ .*?Default: {DEFAULT_CAPS[name]:g}; 'none' lifts the cap", text), flag
    assert "Every run is bounded" in text


def test_none_lifts_a_cap_and_nonsense_is_refused(setup: tuple[str, str, str]) -> None:
    module, planner, store = setup
    args = ["--store", store, "run", "leak", "--planner", planner, "--tools", f"{module}:TOOLS", "--no-live"]
    ok = invoke([*args, "--max-steps", "none", "--max-time", "30"])
    assert ok.exit_code == 0, ok.output
    bad = invoke([*args, "--max-steps", "nan", "--max-time", "inf", "--max-cost", "-1"])
    assert bad.exit_code == 2
    assert "--max-steps" in bad.output
    assert "--max-time" in bad.output
    assert "--max-cost" in bad.output

    async def budgets() -> list[dict[str, float | int | None]]:
        s = open_store(store)
        try:
            found = []
            for summary in await s.list_runs():
                first = (await s.read(summary.run_id))[0].event
                assert isinstance(first, RunStarted)
                found.append(first.budget)
            return found
        finally:
            await s.close()

    import asyncio

    (budget,) = asyncio.run(budgets())
    assert budget["steps"] is None
    assert budget["wall_time"] == 30
    assert budget["model_calls"] == DEFAULT_CAPS["model_calls"]


@pytest.mark.parametrize("as_json", [False, True])
def test_run_prints_only_redacted_text(setup: tuple[str, str, str], as_json: bool) -> None:
    module, planner, store = setup
    args = ["--store", store, "run", f"use {SECRET}", "--planner", planner, "--tools", f"{module}:TOOLS"]
    result = invoke([*args, "--no-live", *(["--json"] if as_json else [])])
    assert result.exit_code == 0, result.output
    everything = result.output + (result.stderr if result.stderr_bytes else "")
    assert SECRET not in everything
    assert "[REDACTED:api_key]" in everything
    if as_json:
        data = json.loads(result.stdout)
        assert SECRET not in json.dumps(data)
        assert data["answer"].startswith("done; the key was [REDACTED:api_key]")


def test_show_prints_model_and_tool_text_as_text(setup: tuple[str, str, str]) -> None:
    module, planner, store = setup
    ran = invoke(["--store", store, "run", "leak", "--planner", planner, "--tools", f"{module}:TOOLS", "--json"])
    assert ran.exit_code == 0, ran.output
    run_id = json.loads(ran.stdout)["run_id"]
    shown = invoke(["--store", store, "show", run_id])
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "[output]" in out  # markup-like text is shown as it is, not swallowed
    assert "[red]alarm[/red]" in out
    assert "[bold]shout[/bold]" in out
    assert "\x1b" not in out  # no escape sequence reaches the terminal
    assert "\\x1b[2J" in out  # it is shown, escaped
    assert "\u202e" not in out
    assert "\\u202e" in out
    assert SECRET not in out


def test_the_live_lines_escape_what_they_show(setup: tuple[str, str, str]) -> None:
    module, planner, store = setup
    ran = invoke(["--store", store, "run", "leak", "--planner", planner, "--tools", f"{module}:TOOLS", "--no-live"])
    assert ran.exit_code == 0, ran.output
    assert "\x1b" not in ran.output
    assert "[bold]shout[/bold]" in ran.output  # the answer, as written
    assert SECRET not in ran.output


def test_eval_prints_and_saves_only_redacted_text(tmp_path: Path) -> None:
    from tests.test_eval import TOOLS_SOURCE, step, write_module

    tools = write_module(tmp_path, TOOLS_SOURCE, "arith")
    (tmp_path / "planner.json").write_text(
        json.dumps([{"steps": [step("s", "add", {"a": 1, "b": 2})]}, {"answer": f"3, with key {SECRET}"}])
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"""
name: leaky
defaults: {{tools: ["{tools}:TOOLS"], planner: scripted:planner.json, goal: add 1 and 2}}
tasks:
  - {{id: wrong, expect_answer: {{exact: "4"}}}}
  - {{id: right, expect_answer: {{contains: "{SECRET}"}}}}
"""
    )
    result = invoke(["eval", str(suite), "--json", str(tmp_path / "report.json")])
    assert result.exit_code == 0, result.output
    saved = (tmp_path / "report.json").read_text()
    assert SECRET not in result.output
    assert SECRET not in saved
    assert "[REDACTED:api_key]" in saved
    report = json.loads(saved)
    outcomes = {t["id"]: t["summary"]["passed"] for t in report["tasks"]}
    assert outcomes == {"wrong": 0, "right": 1}  # the answer is checked as given, and reported redacted


@pytest.mark.parametrize("switch", ["flag", "env", "off"])
def test_personal_data_is_redacted_with_one_switch(
    setup: tuple[str, str, str], switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, planner, store = setup
    email = "ada.lovelace@example.org"
    head = ["--store", store]
    if switch == "flag":
        head.append("--redact-pii")
    elif switch == "env":
        monkeypatch.setenv("PLANEXEC_REDACT_PII", "1")
    result = invoke([*head, "run", f"mail {email}", "--planner", planner, "--tools", f"{module}:TOOLS", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    shown = invoke([*head, "show", data["run_id"], "--json"])
    if switch == "off":
        assert email in data["goal"]
        assert email in shown.stdout
    else:
        assert email not in result.output
        assert "[REDACTED:email]" in data["goal"]
        assert email not in shown.stdout


def test_open_store_reads_the_pii_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANEXEC_REDACT_PII", "1")
    store = open_store("memory://")
    assert "[REDACTED:email]" in store.redactor.redact_text("write to a@b.example.com")
    monkeypatch.setenv("PLANEXEC_REDACT_PII", "0")
    assert open_store("memory://").redactor.redact_text("a@b.example.com") == "a@b.example.com"
    assert "[REDACTED:email]" in open_store("memory://", pii=True).redactor.redact_text("a@b.example.com")
