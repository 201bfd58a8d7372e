"""A suite's MCP servers (``mcp:``): real servers over stdio, started once for the whole suite, their
tools used by the tasks beside the tasks' own, checked once listed, and stopped at the end — also
when the suite's run fails or is cancelled. Bad entries are every one a problem of the suite."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from planexec.eval import SuiteInvalid, load_suite, run_suite
from tests.test_eval import TOOLS_SOURCE, step, write_module, write_script
from tests.test_eval_cli import eval_cli
from tests.test_mcp_crash import alive, wait_until

TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"
LEDGER_SERVER = Path(__file__).parent / "fixtures" / "mcp_ledger_server.py"
pytestmark = pytest.mark.skipif(not TIME_SERVER.exists(), reason="mcp-server-time is not installed")


def ledger_server(ledger: Path, hold: float = 0) -> str:
    """The ledger server's command line: its calls are written to ``ledger`` with its pid."""
    return f"{sys.executable} {LEDGER_SERVER} {ledger} {hold:g}"


def read_ledger(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def write_suite(folder: Path, text: str) -> Path:
    path = folder / "suite.yaml"
    path.write_text(text)
    return path


def two_servers_suite(folder: Path, ledger: Path) -> Path:
    """Tasks using mcp-server-time's tools, and the ledger server's beside a local module's."""
    tools = write_module(folder, TOOLS_SOURCE, "arith")
    tokyo = [step("now", "get_current_time", {"timezone": "Asia/Tokyo"})]
    write_script(folder, "tokyo.json", [{"steps": tokyo}, {"answer": "it is morning in Tokyo"}])
    pay = [
        step("sum", "add", {"a": 2, "b": 3}),
        step("pay", "deposit", {"account": "acme", "amount": "${sum}"}, "sum"),
    ]
    write_script(folder, "pay.json", [{"steps": pay}, {"answer": "paid 5"}])
    return write_suite(
        folder,
        f"""
name: with-servers
concurrency: 4
mcp:
  - {TIME_SERVER} --local-timezone UTC
  - {ledger_server(ledger)}
tasks:
  - id: tokyo
    goal: What time is it in Tokyo?
    planner: scripted:tokyo.json
    repeat: 2
    expect_tools: [get_current_time]
    expect_answer: {{contains: Tokyo}}
  - id: pay
    goal: Pay acme the sum of 2 and 3.
    tools: ["{tools}:TOOLS"]
    planner: scripted:pay.json
    repeat: 2
    expect_tools: {{match: strict, tools: [add, deposit]}}
    expect_answer: {{exact: paid 5}}
""",
    )


async def test_a_suite_starts_its_servers_once_and_stops_them_at_the_end(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    suite = load_suite(two_servers_suite(tmp_path, ledger))
    assert len(suite.mcp) == 2
    report = await run_suite(suite)
    assert report.summary.runs == 4
    assert [r.reasons for r in report.failed_runs] == []
    assert report.summary.pass_rate == 1.0
    calls = read_ledger(ledger)
    # One ledger server served both runs of the task (a server per run would show two pids), and
    # each run's call came with its own idempotency key.
    assert [(c["tool"], c["args"]) for c in calls] == [("deposit", {"account": "acme", "amount": 5})] * 2
    assert len({c["pid"] for c in calls}) == 1
    assert len({c["key"] for c in calls}) == 2
    # Stopped when the suite's run ended.
    wait_until(lambda: not alive(calls[0]["pid"]), "the suite's MCP server to stop")


async def test_the_servers_are_stopped_when_the_suites_run_is_cancelled(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    write_script(tmp_path, "pay.json", [{"steps": [step("pay", "deposit", {"account": "acme", "amount": 1})]}])
    path = write_suite(
        tmp_path,
        f"""
name: hangs
mcp: ["{TIME_SERVER}", {ledger_server(ledger, hold=600)}]
tasks:
  - {{id: pay, goal: pay acme, planner: scripted:pay.json}}
""",
    )
    running = asyncio.ensure_future(run_suite(load_suite(path)))
    deadline = time.monotonic() + 60
    while not read_ledger(ledger):  # the call is under way, and will not answer for ten minutes
        assert not running.done(), running.result()
        assert time.monotonic() < deadline, "the call never came"
        await asyncio.sleep(0.02)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    [call] = read_ledger(ledger)
    assert not alive(call["pid"])  # stopped before the cancelled run of the suite returned


def test_bad_mcp_entries_are_every_one_a_problem_of_the_suite(tmp_path: Path) -> None:
    write_script(tmp_path, "p.json", [{"answer": "x"}])
    path = write_suite(
        tmp_path,
        """
name: bad-servers
mcp:
  - ""
  - '"unclosed --flag'
  - ftp://example.com/mcp
  - 42
  - no-such-mcp-server-here --port 1
  - ./servers/missing.py
tasks:
  - {id: t, goal: g, planner: scripted:p.json, expect_tools: [get_current_time]}
""",
    )
    with pytest.raises(SuiteInvalid) as caught:
        load_suite(path)
    found = [(p.where, p.message) for p in caught.value.problems]
    assert [where for where, _ in found] == ["mcp[0]", "mcp[1]", "mcp[2]", "mcp[3]", "mcp[4]", "mcp[5]"]
    messages = dict(found)
    assert "is not an MCP server: a command line, or an http:// or https:// URL" in messages["mcp[0]"]
    assert "cannot read" in messages["mcp[1]"]
    assert "http:// or https://" in messages["mcp[2]"]
    assert "42 is not an MCP server" in messages["mcp[3]"]
    assert "no program 'no-such-mcp-server-here' to start" in messages["mcp[4]"]
    assert "no program './servers/missing.py' to start" in messages["mcp[5]"]

    # The command line lists them all, under the suite's file, and exits with status 2.
    result = eval_cli(path, "--no-live")
    assert result.exit_code == 2, result.output
    assert "6 problems" in result.stderr
    for where in messages:
        assert f"{path}: {where}: " in result.stderr


def test_a_suite_without_servers_still_checks_expected_tools_when_it_is_read(tmp_path: Path) -> None:
    tools = write_module(tmp_path, TOOLS_SOURCE, "arith")
    write_script(tmp_path, "p.json", [{"answer": "x"}])
    task = f'{{id: t, goal: g, planner: scripted:p.json, tools: ["{tools}:TOOLS"], expect_tools: [get_current_time]}}'
    with pytest.raises(SuiteInvalid, match="not among the task's tools: get_current_time"):
        load_suite(write_suite(tmp_path, f"name: local\ntasks:\n  - {task}\n"))
    # With a server, the same name is left to be checked once the server has listed its tools.
    served = f'name: served\nmcp: ["{TIME_SERVER}"]\ntasks:\n  - {task}\n'
    assert load_suite(write_suite(tmp_path, served)).tasks[0].expect_tools is not None


CLASHING_TOOLS = '''
from planexec import tool


@tool
def convert_time(time: str) -> str:
    """Say a time (a name mcp-server-time has too)."""
    return time


TOOLS = [convert_time]
'''


async def test_tools_that_do_not_fit_are_refused_before_any_run(tmp_path: Path) -> None:
    tools = write_module(tmp_path, CLASHING_TOOLS, "clash")
    write_script(tmp_path, "p.json", [{"answer": "never asked"}])
    path = write_suite(
        tmp_path,
        f"""
name: misfits
mcp: ["{TIME_SERVER}"]
tasks:
  - {{id: typo, goal: g, planner: scripted:p.json, expect_tools: [get_current_tiem, get_current_time]}}
  - {{id: clash, goal: g, planner: scripted:p.json, tools: ["{tools}:TOOLS"]}}
""",
    )
    suite = load_suite(path)
    with pytest.raises(SuiteInvalid) as caught:
        await run_suite(suite)
    assert [(p.where, p.message) for p in caught.value.problems] == [
        ("tasks[0] (typo).expect_tools.tools", "not among the task's tools or its MCP servers': get_current_tiem"),
        ("tasks[1] (clash).tools", "'convert_time' is also a tool of mcp[0]"),
    ]


async def test_a_server_that_cannot_start_is_a_problem_of_the_suite_named_by_its_entry(tmp_path: Path) -> None:
    write_script(tmp_path, "p.json", [{"answer": "never asked"}])
    path = write_suite(
        tmp_path,
        f"""
name: dead-on-arrival
mcp:
  - {TIME_SERVER}
  - {sys.executable} -c "import sys; sys.exit(3)"
tasks:
  - {{id: t, goal: g, planner: scripted:p.json}}
""",
    )
    with pytest.raises(SuiteInvalid) as caught:
        await run_suite(load_suite(path))
    [problem] = caught.value.problems
    assert problem.where == "mcp[1]"
    assert "cannot connect to the MCP server" in problem.message


def test_planexec_eval_runs_a_suite_with_mcp_servers(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    result = eval_cli(two_servers_suite(tmp_path, ledger), "--no-live", "--fail-on-task-failure")
    assert result.exit_code == 0, result.output
    assert "with-servers — planexec agent" in result.output
    assert len(read_ledger(ledger)) == 2
