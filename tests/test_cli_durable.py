"""Durable runs from the command line: a run without a terminal saves its questions and suspends;
``approvals`` lists them; ``approve`` / ``reject`` answer from another invocation (or process) and
resume; ``resume`` rebuilds the agent from what ``run`` recorded."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from planexec import Agent, Approvals
from planexec.log import ApprovalDecided, Event, RunStarted, StepStarted
from planexec.runs import SPEC_VERSION
from planexec.store import open_store
from planexec.testing import ScriptedModel
from tests.cli_support import invoke, write_runs, write_script, write_tools_module

TOOLS_SOURCE = '''
from pathlib import Path

from planexec import tool

LOG = Path(__file__).with_name("calls.txt")


def _note(text: str) -> None:
    with LOG.open("a") as f:
        f.write(text + "\\n")


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool(side_effect=True, sensitive=True)
def publish(value: int) -> str:
    """Publish a value (sensitive)."""
    _note(f"publish {value}")
    return f"published {value}"


@tool(side_effect=True)
def send(to: str) -> str:
    """Send a message (a side effect that is not safe to repeat)."""
    _note(f"send {to}")
    return f"sent to {to}"


TOOLS = [add, double, publish, send]
'''

SUM_THEN_PUBLISH = {
    "reason": "add, then publish the sum",
    "steps": [
        {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
        {
            "id": "pub",
            "description": "Publish the sum",
            "tool": "publish",
            "args": {"value": "${sum}"},
            "depends_on": ["sum"],
        },
    ],
}
TWO_PUBLISHES = {
    "steps": [
        {"id": "p1", "description": "Publish 1", "tool": "publish", "args": {"value": 1}},
        {"id": "p2", "description": "Publish 2", "tool": "publish", "args": {"value": 2}},
    ]
}


@dataclass
class Cli:
    """One test's store, tools module and planner scripts, and the CLI pointed at them."""

    tmp: Path
    store: str
    tools: str

    def __call__(self, *args: str, input: str | None = None) -> Result:
        return invoke(["--store", self.store, *args], input=input)

    def script(self, replies: list[Any], name: str = "planner.json") -> str:
        return write_script(self.tmp, replies, name)

    def run(self, replies: list[Any], *extra: str, goal: str = "publish the sum") -> Result:
        return self(
            "run", goal, "--planner", self.script(replies), "--tools", f"{self.tools}:TOOLS", "--no-live", *extra
        )

    def process(self, *args: str) -> subprocess.CompletedProcess[str]:
        """planexec as a process of its own, on this store, with no terminal and no model service."""
        env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "0", "PYTHONPATH": str(self.tmp)}
        env.pop("PLANEXEC_STORE", None)
        return subprocess.run(
            [*_command(), "--store", self.store, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )

    def calls(self) -> list[str]:
        log = self.tmp / "calls.txt"
        return log.read_text().splitlines() if log.exists() else []

    def log(self, run_id: str) -> list[Event]:
        async def read() -> list[Event]:
            store = open_store(self.store)
            try:
                return [s.event for s in await store.read(run_id)]
            finally:
                await store.close()

        return asyncio.run(read())

    def write(self, run_id: str, events: list[Event]) -> None:
        write_runs(self.store, {run_id: events})


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI puts module directories on sys.path; undo that after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    name = write_tools_module(tmp_path, monkeypatch, TOOLS_SOURCE, "durable_tools")
    return Cli(tmp=tmp_path, store=f"sqlite:///{tmp_path}/runs.db", tools=name)


RUN_ID = re.compile(r"run ([0-9a-f]{16}) is saved in")


def waiting_run(result: Result) -> tuple[str, list[str]]:
    """The run id and the approval ids a suspended run printed."""
    assert result.exit_code == 3, result.output
    found = RUN_ID.search(result.output)
    assert found is not None, result.output
    run_id = found.group(1)
    ids = re.findall(rf"approve {run_id} ([0-9a-f]{{16}})", result.output)
    return run_id, ids


# -- suspend, list, approve, resume ---------------------------------------------------------------


def test_a_sensitive_step_suspends_and_approve_resumes_it(cli: Cli) -> None:
    result = cli.run([SUM_THEN_PUBLISH, {"answer": "published 5"}])
    run_id, ids = waiting_run(result)
    assert len(ids) == 1
    assert f"planexec --store {cli.store} approve {run_id} {ids[0]}" in result.stdout
    assert f"reject {run_id} {ids[0]} --reason TEXT" in result.stdout
    assert cli.calls() == []

    listed = cli("approvals")
    assert listed.exit_code == 0, listed.output
    assert run_id in listed.stdout
    assert ids[0] in listed.stdout
    assert "tool publish is sensitive" in " ".join(listed.stdout.split())
    as_json = json.loads(cli("approvals", "--json").stdout)
    assert [(q["run_id"], q["question_id"], q["kind"], q["step"]["id"]) for q in as_json] == [
        (run_id, ids[0], "step", "pub")
    ]

    approved = cli("approve", run_id, ids[0], "--by", "alice", "--reason", "looks right")
    assert approved.exit_code == 0, approved.output
    assert f"approval {ids[0]} (step pub) approved by alice" in approved.stdout
    assert f"resuming run {run_id}" in approved.stdout
    assert "step pub done" in approved.stdout
    assert "planner asked (initial)" not in approved.stdout  # the history is not shown again
    assert "published 5" in approved.stdout
    assert cli.calls() == ["publish 5"]  # the tool ran once; the finished step 'sum' did not run again
    assert [e.kind for e in cli.log(run_id)].count("step_started") == 2

    assert json.loads(cli("approvals", "--json").stdout) == []
    (summary,) = json.loads(cli("runs", "--json").stdout)
    assert (summary["run_id"], summary["status"], summary["stop"]) == (run_id, "finished", "goal_met")


def test_the_run_records_how_to_rebuild_its_agent(cli: Cli) -> None:
    run_id, _ = waiting_run(cli.run([SUM_THEN_PUBLISH], "--max-steps", "5", "--constraint", "be careful"))
    first = cli.log(run_id)[0]
    assert isinstance(first, RunStarted)
    recorded = first.config["agent_spec"]
    assert recorded["version"] == SPEC_VERSION
    assert recorded["planner"] == f"scripted:{cli.tmp / 'planner.json'}"
    assert recorded["tools"] == [{"module": cli.tools, "attr": "TOOLS"}]
    assert (recorded["policy"], recorded["replan"]) == ("upfront", "on_failure")
    assert recorded["budget"] == {"steps": 5}
    assert recorded["constraints"] == ["be careful"]
    assert recorded["approve_plan"] is False


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_two_questions_answered_in_either_order_then_resumed(cli: Cli, order: tuple[int, int]) -> None:
    run_id, ids = waiting_run(cli.run([TWO_PUBLISHES, {"answer": "both published"}]))
    assert len(ids) == 2

    unnamed = cli("approve", run_id)
    assert unnamed.exit_code == 2
    assert "waits for 2 answers; name one" in unnamed.stderr
    assert all(i in unnamed.stderr for i in ids)

    first = cli("approve", run_id, ids[order[0]], "--no-resume")
    assert first.exit_code == 0, first.output
    assert "waits for 1 answer:" in first.output
    assert ids[order[1]] in first.output
    second = cli("approve", run_id, ids[order[1]], "--no-resume")
    assert second.exit_code == 0, second.output
    assert f"go on with: planexec --store {cli.store} resume {run_id}" in second.output
    assert cli.calls() == []  # only recorded

    resumed = cli("resume", run_id, "--no-live")
    assert resumed.exit_code == 0, resumed.output
    assert "both published" in resumed.stdout
    assert sorted(cli.calls()) == ["publish 1", "publish 2"]


def test_reject_resumes_the_run_and_it_stops_rejected(cli: Cli) -> None:
    run_id, (approval_id,) = waiting_run(cli.run([SUM_THEN_PUBLISH, {"answer": "never"}]))
    missing_reason = cli("reject", run_id, approval_id)
    assert missing_reason.exit_code == 2
    rejected = cli("reject", run_id, approval_id, "--reason", "not today", "--by", "bob")
    assert rejected.exit_code == 1, rejected.output
    assert "stopped: rejected" in rejected.stderr
    assert cli.calls() == []
    decided = [e for e in cli.log(run_id) if isinstance(e, ApprovalDecided)]
    assert [(d.approved, d.by, d.reason) for d in decided] == [(False, "bob", "not today")]


def test_resume_of_a_run_still_waiting_changes_nothing(cli: Cli) -> None:
    run_id, (approval_id,) = waiting_run(cli.run([SUM_THEN_PUBLISH]))
    before = len(cli.log(run_id))
    again = cli("resume", run_id)
    assert again.exit_code == 3
    assert approval_id in again.output
    assert len(cli.log(run_id)) == before


def test_flags_given_to_resume_override_what_the_run_recorded(cli: Cli) -> None:
    run_id, (approval_id,) = waiting_run(cli.run([SUM_THEN_PUBLISH, {"answer": "published 5"}]))
    assert cli("approve", run_id, approval_id, "--no-resume").exit_code == 0
    result = cli("resume", run_id, "--max-model-calls", "1", "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["stop"]["kind"] == "budget_exhausted"
    assert data["stop"]["budget"] == "model_calls"


# -- edited plans ---------------------------------------------------------------------------------


def test_an_edited_plan_is_checked_then_recorded_as_a_human_version(cli: Cli) -> None:
    run_id, (approval_id,) = waiting_run(cli.run([SUM_THEN_PUBLISH, {"answer": "doubled"}], "--approve-plan"))
    bad = cli.tmp / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "steps": [
                    {"id": "a", "description": "?", "tool": "nope"},
                    {"id": "b", "description": "?", "tool": "add", "args": {"a": "two"}},
                    {"id": "c", "description": "?", "tool": "double", "args": {"x": "${a}"}},
                ]
            }
        )
    )
    refused = cli("approve", run_id, approval_id, "--edit", str(bad))
    assert refused.exit_code == 2
    err = refused.stderr
    assert "unknown tool 'nope'" in err
    assert "argument a:" in err
    assert "binds step 'a', which is not in depends_on" in err
    assert "4 problems" in err  # b also misses its argument 'b'
    assert len(json.loads(cli("approvals", "--json").stdout)) == 1  # nothing recorded

    not_json = cli.tmp / "not.json"
    not_json.write_text("{")
    not_a_plan = cli.tmp / "not_a_plan.json"
    not_a_plan.write_text(json.dumps({"stepz": []}))
    for path, message in ((not_json, "not JSON"), (not_a_plan, "stepz: Extra inputs are not permitted")):
        result = cli("approve", run_id, approval_id, "--edit", str(path))
        assert result.exit_code == 2
        assert message in result.stderr

    good = cli.tmp / "good.json"
    good.write_text(
        json.dumps(
            {
                "reason": "double instead of publishing",
                "steps": [
                    {"id": "sum", "description": "Add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
                    {
                        "id": "twice",
                        "description": "Double",
                        "tool": "double",
                        "args": {"x": "${sum}"},
                        "depends_on": ["sum"],
                    },
                ],
            }
        )
    )
    accepted = cli("approve", run_id, approval_id, "--edit", str(good), "--by", "carol")
    assert accepted.exit_code == 0, accepted.output
    assert "with an edited plan by carol" in accepted.stdout
    assert cli.calls() == []
    shown = json.loads(cli("show", run_id, "--json").stdout)
    assert [(p["version"], p["author"]) for p in shown["plans"]] == [(1, "human")]
    assert shown["plans"][0]["reason"] == "double instead of publishing"
    assert {s["id"]: s["output"] for s in shown["steps"]} == {"sum": 5, "twice": 10}
    assert shown["answer"] == "doubled"


def test_answers_that_do_not_fit_the_question_are_refused_with_every_problem(cli: Cli) -> None:
    run_id, (approval_id,) = waiting_run(cli.run([SUM_THEN_PUBLISH]))
    plan = cli.tmp / "plan.json"
    plan.write_text(json.dumps(SUM_THEN_PUBLISH))
    result = cli("approve", run_id, approval_id, "--choice", "retry", "--edit", str(plan), "--output", "{nope")
    assert result.exit_code == 2
    err = result.stderr
    assert f"--choice: approval {approval_id} is about step pub: it takes no choice" in err
    assert "--edit: only a plan can be edited" in err
    assert "--output: not JSON" in err
    assert "--output: gives the output of a step marked done" in err

    unknown = cli("approve", run_id, "0000", "--choice", "maybe")
    assert unknown.exit_code == 2
    assert f"run {run_id} has no approval '0000' (open: {approval_id} (step pub))" in unknown.stderr
    assert "--choice: 'maybe' is not one of retry, skip, done" in unknown.stderr

    no_run = cli("approve", "nosuchrun")
    assert no_run.exit_code == 2
    assert "no run 'nosuchrun'" in no_run.stderr

    assert cli("approve", run_id, approval_id, "--no-resume").exit_code == 0
    twice = cli("approve", run_id, approval_id)
    assert twice.exit_code == 2
    assert "was answered already: approved" in twice.stderr


# -- an uncertain effect after a crash ------------------------------------------------------------


def crashed_during_a_side_effect(cli: Cli) -> None:
    """Run 'crashed': its process stopped while the step 'mail' was calling the side-effecting tool."""
    send = {"steps": [{"id": "mail", "description": "Mail the team", "tool": "send", "args": {"to": "team"}}]}
    done = cli.run([send, {"answer": "mailed"}], goal="mail the team")
    assert done.exit_code == 0, done.output
    (summary,) = json.loads(cli("runs", "--json").stdout)
    log = cli.log(summary["run_id"])
    cut = next(i for i, e in enumerate(log) if isinstance(e, StepStarted)) + 1  # the log ends with the call under way
    first = log[0]
    assert isinstance(first, RunStarted)
    cli.write("crashed", [replace(first, run_id="crashed"), *log[1:cut]])


def test_an_uncertain_effect_is_answered_with_a_choice(cli: Cli) -> None:
    crashed_during_a_side_effect(cli)
    held = cli("resume", "crashed", "--no-live")
    assert held.exit_code == 3, held.output
    assert "step mail held for a human" in held.stdout
    assert "--choice retry|skip|done" in held.stdout
    (question,) = json.loads(cli("approvals", "--json").stdout)
    assert (question["run_id"], question["kind"], question["step"]["id"]) == ("crashed", "effect", "mail")

    no_choice = cli("approve", "crashed")
    assert no_choice.exit_code == 2
    assert "is about the effect of step mail: choose retry, skip or done" in no_choice.stderr

    marked = cli("approve", "crashed", "--choice", "done", "--output", '"sent by hand"', "--json")
    assert marked.exit_code == 0, marked.output
    data = json.loads(marked.stdout)
    assert data["answer"] == "mailed"
    assert {s["id"]: s["output"] for s in data["steps"]} == {"mail": "sent by hand"}
    assert cli.calls() == ["send team"]  # only the original run's call: not repeated


# -- at a terminal ---------------------------------------------------------------------------------


@pytest.fixture
def at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("planexec.cli._terminal_approver.is_interactive", lambda console: True)
    monkeypatch.setattr("planexec.cli._resume.is_interactive", lambda console: True)


@pytest.mark.usefixtures("at_a_terminal")
def test_resume_at_a_terminal_asks_the_saved_question_there(cli: Cli) -> None:
    run_id, _ = waiting_run(cli.run([SUM_THEN_PUBLISH, {"answer": "published 5"}], "--no-input"))
    resumed = cli("resume", run_id, "--no-live", input="y\n")
    assert resumed.exit_code == 0, resumed.output
    assert "Run step pub?" in resumed.stdout
    assert "approval approved by terminal" in resumed.stdout
    assert cli.calls() == ["publish 5"]


@pytest.mark.usefixtures("at_a_terminal")
def test_an_uncertain_effect_at_a_terminal_is_a_choice(cli: Cli) -> None:
    crashed_during_a_side_effect(cli)
    resumed = cli("resume", "crashed", "--no-live", input='done\n"sent by hand"\n')
    assert resumed.exit_code == 0, resumed.output
    assert "call again, skip it, or mark it done?" in resumed.stdout
    assert "approval approved (done) by terminal" in resumed.stdout
    shown = json.loads(cli("show", "crashed", "--json").stdout)
    assert {s["id"]: s["output"] for s in shown["steps"]} == {"mail": "sent by hand"}
    assert cli.calls() == ["send team"]


# -- runs not started by `planexec run` -----------------------------------------------------------


def test_a_run_started_from_python_needs_its_models_and_tools_on_the_command_line(cli: Cli) -> None:
    async def start_waiting() -> None:
        tools = importlib.import_module(cli.tools).TOOLS
        store = open_store(cli.store)
        try:
            agent = Agent(
                ScriptedModel([SUM_THEN_PUBLISH]), tools=tools, store=store, approvals=Approvals(deferred=True)
            )
            result = await agent.run("publish", run_id="api")
            assert result.stop.kind == "waiting"
        finally:
            await store.close()

    asyncio.run(start_waiting())
    (question,) = json.loads(cli("approvals", "--json").stdout)
    result = cli("approve", "api", question["question_id"])
    assert result.exit_code == 2
    err = result.stderr
    assert "the answer is recorded, but the run cannot be resumed here" in err
    assert "--planner: the run records no planner model" in err
    assert "--tools: the run used tools that are not given: add, double, publish, send" in err

    answer = cli.script([{"answer": "published 5"}], name="rest.json")
    resumed = cli("resume", "api", "--planner", answer, "--tools", f"{cli.tools}:TOOLS", "--no-live")
    assert resumed.exit_code == 0, resumed.output
    assert cli.calls() == ["publish 5"]


# -- as real processes ----------------------------------------------------------------------------


def _command() -> list[str]:
    script = Path(sys.executable).with_name("planexec")
    if script.is_file():
        return [str(script)]
    found = shutil.which("planexec")
    return [found] if found else [sys.executable, "-m", "planexec"]


def test_suspend_and_approve_as_real_processes(cli: Cli) -> None:
    planner = cli.script([SUM_THEN_PUBLISH, {"answer": "published 5"}])

    first = cli.process("run", "publish the sum", "--planner", planner, "--tools", f"{cli.tools}:TOOLS", "--json")
    assert first.returncode == 3, first.stderr
    data = json.loads(first.stdout)
    assert data["stop"]["kind"] == "waiting"
    (question,) = data["pending_approvals"]
    assert question["commands"][0] == f"planexec --store {cli.store} approve {data['run_id']} {question['question_id']}"

    approved = cli.process("approve", data["run_id"], question["question_id"], "--json")
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["answer"] == "published 5"
    assert cli.calls() == ["publish 5"]


# -- questions, escalations and news from the command line -------------------------------------------

ASK = {"question": "Which numbers should I add?"}
ADD_PLAN = {"steps": [{"id": "sum", "description": "Add", "tool": "add", "args": {"a": 2, "b": 3}}]}
UNKNOWN = {"steps": [{"id": "g", "description": "search", "tool": "search_google", "args": {"q": "sum"}}]}


def _json_run(result: Result) -> dict[str, Any]:
    assert result.exit_code == 3, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_a_question_suspends_the_run_and_answer_resumes_it(cli: Cli) -> None:
    data = _json_run(cli.run([ASK, ADD_PLAN, {"answer": "5"}], "--json", goal="add the numbers"))
    (question,) = data["pending_approvals"]
    assert question["kind"] == "question"
    assert question["reason"] == "Which numbers should I add?"
    assert question["commands"] == [
        f"planexec --store {cli.store} answer {data['run_id']} {question['question_id']} TEXT"
    ]

    refused = cli("approve", data["run_id"], question["question_id"], "--no-live")
    assert refused.exit_code == 2
    assert "answer it with `planexec answer`" in refused.output

    answered = cli("answer", data["run_id"], question["question_id"], "2 and 3", "--json")
    assert answered.exit_code == 0, answered.output
    assert json.loads(answered.stdout)["answer"] == "5"
    decided = [e for e in cli.log(data["run_id"]) if isinstance(e, ApprovalDecided)]
    assert [d.text for d in decided] == ["2 and 3"]


def test_an_escalation_is_answered_with_guidance_from_the_command_line(cli: Cli) -> None:
    data = _json_run(cli.run([UNKNOWN, ADD_PLAN, {"answer": "5"}], "--json", goal="add"))
    (question,) = data["pending_approvals"]
    assert (question["kind"], question["code"]) == ("escalation", "unknown_tool")
    run_id, qid = data["run_id"], question["question_id"]

    bad = cli("approve", run_id, qid, "--choice", "guidance", "--no-live")
    assert bad.exit_code == 2
    assert "guidance needs text" in bad.output
    good = cli("approve", run_id, qid, "--choice", "guidance", "--text", "use add", "--json")
    assert good.exit_code == 0, good.output
    assert json.loads(good.stdout)["answer"] == "5"


def test_rejecting_an_escalation_stops_the_run_escalated(cli: Cli) -> None:
    data = _json_run(cli.run([UNKNOWN], "--json", goal="add"))
    (question,) = data["pending_approvals"]
    stopped = cli("reject", data["run_id"], question["question_id"], "--reason", "no such tool", "--json")
    assert stopped.exit_code != 0
    stop = json.loads(stopped.stdout)["stop"]
    assert (stop["kind"], stop["code"]) == ("escalated", "unknown_tool")
    shown = json.loads(cli("show", data["run_id"], "--json").stdout)
    (refused,) = shown["rejected_planner_answers"]
    assert refused["problems"][0]["code"] == "unknown_tool"
    text = cli("show", data["run_id"]).output
    assert "planner answers refused" in text
    assert "search_google" in text


def test_tell_records_news_for_a_suspended_run_and_the_planner_replans_with_it(cli: Cli) -> None:
    data = _json_run(cli.run([SUM_THEN_PUBLISH, {"steps": []}, {"answer": "nothing published"}], "--json"))
    run_id = data["run_id"]
    told = cli("tell", run_id, "do not publish anything", "--constraint", "--no-resume")
    assert told.exit_code == 0, told.output
    assert "constraint recorded" in told.output
    assert [e.text for e in cli.log(run_id) if e.kind == "information_added"] == ["do not publish anything"]
    empty = cli("tell", run_id, "  ", "--no-resume")
    assert empty.exit_code == 2
    # resumed: an information round patches the plan (dropping the publish) before anything is published
    (question,) = data["pending_approvals"]
    refused = cli("reject", run_id, question["question_id"], "--reason", "as told", "--json")
    log = cli.log(run_id)
    assert any(e.kind == "planning_started" and e.trigger == "information" for e in log)
    assert cli.calls() == []
    assert refused.exit_code in (0, 1), refused.output


def test_questions_and_answers_as_real_processes(cli: Cli) -> None:
    planner = cli.script([ASK, ADD_PLAN, {"answer": "5"}])

    first = cli.process("run", "add the numbers", "--planner", planner, "--tools", f"{cli.tools}:TOOLS", "--json")
    assert first.returncode == 3, first.stderr
    data = json.loads(first.stdout)
    (question,) = data["pending_approvals"]
    told = cli.process("tell", data["run_id"], "the numbers are small", "--no-resume")
    assert told.returncode == 0, told.stderr
    answered = cli.process("answer", data["run_id"], question["question_id"], "2 and 3", "--json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["answer"] == "5"


# -- the rules from the command line: escalation, review, confidence ----------------------------------

CHECKS_SOURCE = '''
def says_five(answer: str) -> str | None:
    """The answer must give the sum as a number."""
    return None if "5" in answer else "the answer does not give the sum"


NOT_A_CHECK = 42
'''

CHECKED_SUM = {
    "steps": [
        {
            "id": "sum",
            "description": "Add",
            "tool": "add",
            "args": {"a": 2, "b": 3},
            "checks": [{"kind": "matches", "pattern": "^6$"}],
        }
    ]
}


@pytest.fixture
def checks(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> str:
    return write_tools_module(cli.tmp, monkeypatch, CHECKS_SOURCE, "answer_checks")


def test_review_checks_from_the_command_line_send_a_bad_answer_back(cli: Cli, checks: str) -> None:
    result = cli.run(
        [ADD_PLAN, {"answer": "done"}, {"steps": []}, {"answer": "the sum is 5"}],
        "--review-check",
        f"{checks}:says_five",
        "--json",
        goal="add",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == "the sum is 5"
    shown = json.loads(cli("show", data["run_id"], "--json").stdout)
    assert [(r["reviewer"], r["passed"]) for r in shown["answer_reviews"]] == [("checks", False), ("checks", True)]
    assert shown["answer_reviews"][0]["problems"] == ["says_five: the answer does not give the sum"]


def test_rule_flags_are_checked_and_every_problem_is_listed(cli: Cli, checks: str) -> None:
    result = cli.run(
        [ADD_PLAN],
        "--review-check",
        f"{checks}:NOT_A_CHECK",
        "--review-check",
        "nope",
        "--confidence-floor",
        "1.5",
        "--on-fail",
        "shrug",
        "--fail-retries",
        "0",
        "--review-rounds",
        "x",
        "--turn-format",
        "yaml",
        "--review-rubric",
        "be right",
    )
    assert result.exit_code == 2
    for text in (
        "NOT_A_CHECK",
        "not a function of the answer",
        "use the form package.module:attribute",
        "--confidence-floor: '1.5' must be from 0 to 1",
        "--on-fail: 'shrug' is not one of patch, retry, review",
        "--fail-retries: '0' must be a whole number",
        "--review-rounds: 'x' must be a whole number",
        "--turn-format: 'yaml' is not one of nested, flat",
    ):
        assert text in result.output, text


def test_a_rubric_needs_a_judge(cli: Cli) -> None:
    result = cli.run([ADD_PLAN], "--review-rubric", "be right")
    assert result.exit_code == 2
    assert "a rubric and a judge go together" in result.output


def test_a_checklist_is_answered_from_another_process_and_a_refusal_goes_back(cli: Cli) -> None:
    planner = cli.script([ADD_PLAN, {"answer": "done"}, {"steps": []}, {"answer": "the sum is 5"}])

    items = ("--review-item", "gives the sum", "--review-item", "says how it was found")
    first = cli.process("run", "add", "--planner", planner, "--tools", f"{cli.tools}:TOOLS", *items, "--json")
    assert first.returncode == 3, first.stderr
    data = json.loads(first.stdout)
    (review,) = data["pending_approvals"]
    assert review["kind"] == "answer"
    assert review["under_review"] == "done"
    assert review["checklist"] == ["gives the sum", "says how it was found"]

    refused = cli.process(
        "reject", data["run_id"], review["question_id"], "--reason", "too short", "--fail", "1=no number", "--json"
    )
    assert refused.returncode == 3, refused.stderr  # the second answer waits for its own review
    second = json.loads(refused.stdout)
    (again,) = second["pending_approvals"]
    assert again["under_review"] == "the sum is 5"
    assert again["question_id"] != review["question_id"]
    # the planner was told why
    log = cli.log(data["run_id"])
    assert any(e.kind == "model_called" and e.purpose == "planner.patch" for e in log), (
        "the refusal went back to the planner"
    )

    approved = cli.process("approve", data["run_id"], again["question_id"], "--json")
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["answer"] == "the sum is 5"
    shown = json.loads(cli.process("show", data["run_id"], "--json").stdout)
    reviews = [(r["reviewer"], r["passed"], r["problems"]) for r in shown["answer_reviews"]]
    assert [r[:2] for r in reviews] == [("human", False), ("human", True)]
    refusal, item = reviews[0][2]
    assert refusal.startswith("refused by ")
    assert refusal.endswith(": too short")
    assert item == "gives the sum: no number"


def test_a_failed_check_is_reviewed_by_a_human_from_the_command_line(cli: Cli) -> None:
    data = _json_run(cli.run([CHECKED_SUM, {"answer": "5"}], "--on-fail", "review", "--json", goal="add"))
    (review,) = data["pending_approvals"]
    assert review["kind"] == "review"
    assert review["step"]["id"] == "sum"
    assert review["under_review"] == 5
    assert [c["passed"] for c in review["failed_checks"]] == [False]
    assert "^6$" in review["failed_checks"][0]["name"] + review["failed_checks"][0]["detail"]
    accepted = cli("approve", data["run_id"], review["question_id"], "--json")
    assert accepted.exit_code == 0, accepted.output
    out = json.loads(accepted.stdout)
    assert out["answer"] == "5"
    assert out["steps"][0]["status"] == "succeeded"


def test_a_low_confidence_plan_is_escalated_and_resumed_with_guidance(cli: Cli) -> None:
    unsure = {"reason": "not sure", "confidence": 0.2, **ADD_PLAN}
    data = _json_run(cli.run([unsure, ADD_PLAN, {"answer": "5"}], "--confidence-floor", "0.6", "--json", goal="add"))
    (question,) = data["pending_approvals"]
    assert (question["kind"], question["code"]) == ("escalation", "low_confidence")
    meta = cli.log(data["run_id"])[0]
    assert isinstance(meta, RunStarted)
    escalation = {"confidence_floor": 0.6, "on_low_confidence": "ask", "on_fail": "patch", "retries": 1}
    assert meta.config["agent_spec"]["rules"] == {"escalation": escalation}
    done = cli("approve", data["run_id"], question["question_id"], "--choice", "guidance", "--text", "add 2 and 3")
    assert done.exit_code == 0, done.output

    stopped = cli.run([unsure], "--confidence-floor", "0.6", "--on-low-confidence", "stop", "--json", goal="add")
    assert stopped.exit_code == 1
    stop = json.loads(stopped.stdout)["stop"]
    assert (stop["kind"], stop["code"]) == ("escalated", "low_confidence")


def test_every_kind_of_escalation_answered_by_other_processes(cli: Cli) -> None:
    """One run asks three times — a plan under the confidence floor, an unknown tool, a result that
    failed its checks — and stops its process each time; each answer comes from a new process."""
    unsure = {"reason": "not sure", "confidence": 0.2, **ADD_PLAN}
    planner = cli.script([unsure, UNKNOWN, CHECKED_SUM, {"answer": "the sum is 5"}])

    def pending(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
        assert proc.returncode == 3, proc.stderr
        (question,) = json.loads(proc.stdout)["pending_approvals"]
        return dict(question)

    rules = ("--confidence-floor", "0.5", "--on-fail", "review")
    first = cli.process("run", "add", "--planner", planner, "--tools", f"{cli.tools}:TOOLS", *rules, "--json")
    low = pending(first)
    run_id = low["run_id"]
    assert (low["kind"], low["code"]) == ("escalation", "low_confidence")

    unknown = pending(
        cli.process("approve", run_id, low["question_id"], "--choice", "guidance", "--text", "go on", "--json")
    )
    assert (unknown["kind"], unknown["code"]) == ("escalation", "unknown_tool")

    review = pending(cli.process("approve", run_id, unknown["question_id"], "--choice", "replan", "--json"))
    assert (review["kind"], review["step"]["id"]) == ("review", "sum")

    done = cli.process("approve", run_id, review["question_id"], "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "the sum is 5"
    decided = [e for e in cli.log(run_id) if isinstance(e, ApprovalDecided)]
    assert [d.choice for d in decided] == ["guidance", "replan", None]
    assert decided[0].text == "go on"

    replayed = cli.process("replay", run_id, "--json")
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["matched"] is True, report
    assert report["compared"] == report["events"] == len(cli.log(run_id))
