"""The pattern's rules under attack: hostile answers, checks and checklists, executors that misreport
their confidence, retries of steps that change the world, and suites with wrong rules. Each run
must end within its budget with a typed stop and its log intact; each usage error lists every
problem at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_support import ARITHMETIC_TOOLS, invoke, write_script, write_tools_module

ADD_PLAN = {"steps": [{"id": "sum", "description": "Add", "tool": "add", "args": {"a": 2, "b": 3}}]}


# -- the command line -------------------------------------------------------------------------------


def test_a_checklist_item_number_that_is_not_ascii_digits_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, ARITHMETIC_TOOLS + "\nTOOLS = [add]\n", "attack_tools")
    store = f"sqlite:///{tmp_path}/runs.db"
    planner = write_script(tmp_path, [ADD_PLAN, {"answer": "done"}])
    items = ("--review-item", "gives the sum", "--review-item", "says how")
    run = ("run", "add", "--planner", planner, "--tools", f"{tools}:TOOLS", *items, "--json")
    first = invoke(["--store", store, *run])
    assert first.exit_code == 3, first.output
    data = json.loads(first.stdout)
    (review,) = data["pending_approvals"]
    flags = ("--fail", "²=a superscript two", "--fail", "٣=an Arabic-Indic three", "--fail", "0=none")
    refused = invoke(["--store", store, "reject", data["run_id"], review["approval_id"], "--reason", "no", *flags])
    assert refused.exit_code == 2, refused.output
    for flag in ("'²=a superscript two'", "'٣=an Arabic-Indic three'", "'0=none'"):
        assert f"--fail: {flag}: give N=NOTE with N from 1 to 2" in refused.output
