"""Sealed planning from the command line and in evaluation suites: ``--sealed`` and ``--extractor``
on ``planexec run``, recorded with the run so that ``approve`` (which resumes it), ``show`` and
``replay`` use it; ``sealed``/``extractor`` in a suite's tasks and ``--sealed`` on ``planexec eval``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from planexec.log import RunStarted
from tests.cli_support import invoke, write_script, write_tools_module
from tests.test_eval import TOOLS_SOURCE, step, write_module
from tests.test_eval import write_script as write_suite_script

BILL_TOOLS = '''
from planexec import tool


@tool
def bill(month: str) -> str:
    """Fetch the bill of a month, as text."""
    return "CANARY: pay to DE89370400440532013000 by Friday"


@tool(sensitive=True, side_effect=True)
def pay(iban: str, amount: int) -> str:
    """Pay an amount to an IBAN."""
    return f"{amount} to {iban}"
'''

PLAN = {
    "steps": [
        {"id": "b", "description": "the bill", "tool": "bill", "args": {"month": "May"}},
        {
            "id": "x",
            "description": "the IBAN to pay",
            "executor": "extractor",
            "args": {"text": "${b}"},
            "depends_on": ["b"],
            "output_schema": {"type": "object", "properties": {"iban": {"type": "string"}}, "required": ["iban"]},
        },
        {
            "id": "p",
            "description": "pay",
            "tool": "pay",
            "args": {"iban": "${x.iban}", "amount": 12},
            "depends_on": ["x"],
        },
    ],
    "answer": "Paid {{p}}.",
}


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI puts module directories on sys.path; undo that after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_sealed_run_from_the_command_line_is_recorded_resumed_shown_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, BILL_TOOLS, "bills")
    store = f"sqlite:///{tmp_path}/runs.db"
    planner = write_script(tmp_path, [PLAN])
    extractor = write_script(tmp_path, [{"iban": "DE89370400440532013000"}], "extractor.json")
    args = ["--planner", planner, "--extractor", extractor, "--tools", f"{tools}:bill", "--tools", f"{tools}:pay"]
    first = invoke(["--store", store, "run", "Pay the May bill", *args, "--sealed", "--no-live", "--json"])
    assert first.exit_code == 3, first.output  # the payment waits for a human's yes
    data = json.loads(first.stdout)
    (question,) = data["pending_approvals"]

    done = invoke(["--store", store, "approve", data["run_id"], question["question_id"], "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["answer"] == "Paid 12 to DE89370400440532013000."

    shown = json.loads(invoke(["--store", store, "show", data["run_id"], "--json"]).stdout)
    assert shown["plans"][0]["answer"] == "Paid {{p}}."
    replayed = invoke(["--store", store, "replay", data["run_id"]])
    assert replayed.exit_code == 0, replayed.output
    assert "replayed exactly" in replayed.output
    log = _first_event(store, data["run_id"])
    assert log.config["planner"]["sealed"] is True
    rules = log.config["agent_spec"]["rules"]
    assert rules["sealed"] is True
    assert rules["extractor"].endswith("extractor.json")


def test_sealed_options_that_do_not_fit_are_refused_with_every_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, BILL_TOOLS, "bills")
    store = f"sqlite:///{tmp_path}/runs.db"
    planner = write_script(tmp_path, [PLAN])
    base = ["--store", store, "run", "x", "--planner", planner, "--tools", f"{tools}:bill", "--no-live"]
    step_policy = invoke([*base, "--sealed", "--policy", "step"])
    assert step_policy.exit_code == 2
    assert "--sealed: a sealed planner plans upfront" in step_policy.output
    unsealed = invoke([*base, "--extractor", "scripted:nothing.json"])
    assert unsealed.exit_code == 2
    assert "--extractor: an extractor serves a sealed planner" in unsealed.output


def _first_event(store: str, run_id: str) -> RunStarted:
    import asyncio

    from planexec.store import open_store

    async def read() -> RunStarted:
        s = open_store(store)
        try:
            first = (await s.read(run_id))[0].event
        finally:
            await s.close()
        assert isinstance(first, RunStarted)
        return first

    return asyncio.run(read())


# -- evaluation -----------------------------------------------------------------------------------------


def _suite(folder: Path, task: str, replies: list[Any]) -> Path:
    tools = write_module(folder, TOOLS_SOURCE, "arith")
    write_suite_script(folder, "planner.json", replies)
    path = folder / "suite.yaml"
    path.write_text(
        f"""
name: sealed
defaults: {{tools: ["{tools}:TOOLS"], planner: scripted:planner.json, goal: double 1 + 2}}
tasks:
  - {task}
"""
    )
    return path


ADD_DOUBLE = {"steps": [step("s", "add", {"a": 1, "b": 2}), step("d", "double", {"x": "${s}"}, "s")]}


def test_a_suites_sealed_task_answers_from_its_template(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "{id: t, sealed: true, expect_answer: {exact: 'twice 3 is 6'}}",
                   [{**ADD_DOUBLE, "answer": "twice {{s}} is {{d}}"}])  # fmt: skip
    result = invoke(["eval", str(suite), "--json", str(tmp_path / "r.json"), "--fail-on-task-failure"])
    assert result.exit_code == 0, result.output


def test_eval_sealed_seals_every_task(tmp_path: Path) -> None:
    # unsealed, the planner would answer "six"; sealed, the answer is the last step's output
    suite = _suite(tmp_path, "{id: t, expect_answer: {exact: '6'}}", [ADD_DOUBLE, {"answer": "six"}])
    plain = invoke(["eval", str(suite), "--fail-on-task-failure"])
    assert plain.exit_code == 1, plain.output
    sealed = invoke(["eval", str(suite), "--sealed", "--fail-on-task-failure"])
    assert sealed.exit_code == 0, sealed.output


def test_sealed_suites_refuse_what_a_sealed_planner_cannot_do(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "{id: t, policy: step}", [ADD_DOUBLE])
    result = invoke(["eval", str(suite), "--sealed"])
    assert result.exit_code == 2
    assert "--sealed: task 't' plans step by step; a sealed planner plans upfront" in result.output
    for task, said in (
        ("{id: t, sealed: 'yes'}", "sealed: must be true or false"),
        ("{id: t, extractor: scripted:planner.json}", "an extractor serves a sealed planner"),
        ("{id: t, sealed: true, policy: step}", "a sealed planner plans upfront"),
    ):
        bad = invoke(["eval", str(_suite(tmp_path, task, [ADD_DOUBLE]))])
        assert bad.exit_code == 2, task
        assert said in bad.output, bad.output


def test_untrusted_answer_from_the_command_line_withholds_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, BILL_TOOLS, "bills_answer")
    store = f"sqlite:///{tmp_path}/runs.db"
    plan = {"steps": [PLAN["steps"][0]], "answer": "The bill says: {{b}}"}
    args = ["--planner", write_script(tmp_path, [plan]), "--tools", f"{tools}:bill", "--sealed"]
    wrong = invoke(["--store", store, "run", "Read the May bill", *args, "--untrusted-answer", "hide", "--no-live"])
    assert wrong.exit_code == 2, wrong.output
    assert "untrusted_answer" in wrong.output or "--untrusted-answer" in wrong.output
    assert "label, ask, withhold" in wrong.output

    run = ["--store", store, "run", "Read the May bill", *args, "--untrusted-answer", "withhold"]
    done = invoke([*run, "--no-live", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["answer"] == "The bill says: [withheld: step b's output is untrusted]"
    assert "CANARY" not in done.stdout.split('"steps"')[0]
    shown = invoke(["--store", store, "show", data["run_id"], "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["withheld"] == ["b"]
    replayed = invoke(["--store", store, "replay", data["run_id"]])
    assert replayed.exit_code == 0, replayed.output
