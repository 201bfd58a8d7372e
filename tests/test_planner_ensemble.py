"""Planner ensembles: the first model plans; each configured trigger hands planning to the next
model, and only that trigger; the model that authored each plan version is in the log, in
``planexec show``, and in an exact replay."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, Budget, Planner, UsageError, tool
from planexec.eval import EnsembleSpec, EvalSettings, SuiteInvalid, run_suite, suite_from_mapping
from planexec.log import RunStarted, RunState
from planexec.planner import ENSEMBLE_TRIGGERS, Ensemble, EnsembleTrigger
from planexec.runtime import replay_log
from planexec.store import MemoryStore, open_store
from planexec.testing import FunctionModel, ScriptedModel
from tests.cli_support import invoke, write_script, write_tools_module
from tests.support import failing_tool, tool_step, turn


@tool
async def echo(text: str) -> str:
    """Return the text."""
    return text


GOOD = {"reason": "echo it", "steps": [tool_step("s1", "echo", {"text": "hi"})]}
BAD = {"steps": [tool_step("s1", "echo", {"text": "hi"}, "missing")]}
ANSWER = {"answer": "done"}
ECHO_TOOLS = '''
from planexec import tool


@tool
async def echo(text: str) -> str:
    """Return the text."""
    return text
'''


def agent(fast: Any, strong: Any, on: tuple[EnsembleTrigger, ...] = ENSEMBLE_TRIGGERS, **kw: Any) -> Agent:
    planner = Planner(model=fast, ensemble=Ensemble(escalate_to=[strong], escalate_on=on, confidence_below=0.5))
    return Agent(planner, tools=kw.pop("tools", [echo]), **kw)


def authors(events: Any) -> dict[int, str]:
    return RunState.fold(list(events)).plan_models


async def test_the_first_model_plans_while_all_is_well() -> None:
    fast = ScriptedModel([GOOD, ANSWER], name="fast")
    strong = ScriptedModel([], name="strong")  # fails on any call
    result = await agent(fast, strong).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert len(fast.calls) == 2
    assert strong.calls == []
    assert authors(result.events) == {1: "fast"}


@pytest.mark.parametrize("on", [("repair_failed",), ENSEMBLE_TRIGGERS])
async def test_a_plan_still_failing_its_checks_after_repairs_goes_to_the_next_model(
    on: tuple[EnsembleTrigger, ...],
) -> None:
    fast = ScriptedModel([BAD, BAD, BAD, ANSWER], name="fast")  # two repairs allowed
    strong = ScriptedModel([GOOD], name="strong")
    result = await agent(fast, strong, on).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert [c.purpose for c in strong.calls] == ["planner.propose"]
    assert "problems" not in strong.calls[0].last_user_text  # the next model starts afresh
    assert authors(result.events) == {1: "strong"}


async def test_without_the_repair_trigger_the_planner_gives_up_as_before() -> None:
    fast = ScriptedModel([BAD, BAD, BAD], name="fast")
    strong = ScriptedModel([], name="strong")
    result = await agent(fast, strong, ("low_confidence", "replan", "acceptance_failed")).run("say hi")
    assert result.stop.kind != "goal_met"
    assert strong.calls == []


async def test_low_confidence_goes_to_the_next_model() -> None:
    unsure = {**GOOD, "confidence": 0.2}
    fast = ScriptedModel([unsure, ANSWER], name="fast")
    strong = ScriptedModel([{**GOOD, "confidence": 0.9}], name="strong")
    result = await agent(fast, strong, ("low_confidence",)).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert len(strong.calls) == 1
    assert authors(result.events) == {1: "strong"}

    sure = ScriptedModel([{**GOOD, "confidence": 0.7}, ANSWER], name="fast")
    idle = ScriptedModel([], name="strong")
    assert (await agent(sure, idle, ("low_confidence",)).run("say hi")).stop.kind == "goal_met"
    unsure_alone = ScriptedModel([unsure, ANSWER], name="fast")
    result = await agent(unsure_alone, idle, ("repair_failed",)).run("say hi")
    assert result.stop.kind == "goal_met"
    assert idle.calls == []


async def test_a_replan_after_a_failure_goes_to_the_next_model() -> None:
    failing = {"steps": [tool_step("s1", "fails", {})]}
    fast = ScriptedModel([failing, ANSWER], name="fast")
    strong = ScriptedModel(
        [{"reason": "echo instead", "steps": [tool_step("s2", "echo", {"text": "hi"})]}], name="strong"
    )
    result = await agent(fast, strong, ("replan",), tools=[echo, failing_tool()]).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert [c.purpose for c in strong.calls] == ["planner.patch"]
    assert authors(result.events) == {1: "fast", 2: "strong"}


async def test_an_acceptance_failure_goes_to_the_next_model_and_a_tool_error_does_not() -> None:
    checked = {"steps": [tool_step("s1", "echo", {"text": ""}, checks=[{"kind": "non_empty"}])]}
    patch = {"steps": [tool_step("s2", "echo", {"text": "hi"})]}
    fast = ScriptedModel([checked, ANSWER], name="fast")
    strong = ScriptedModel([patch], name="strong")
    result = await agent(fast, strong, ("acceptance_failed",)).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert result.steps["s1"].error is not None
    assert result.steps["s1"].error.kind == "acceptance"
    assert authors(result.events) == {1: "fast", 2: "strong"}

    failing = {"steps": [tool_step("s1", "fails", {})]}
    fast = ScriptedModel([failing, patch, ANSWER], name="fast")
    idle = ScriptedModel([], name="strong")
    result = await agent(fast, idle, ("acceptance_failed",), tools=[echo, failing_tool()]).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert idle.calls == []
    assert authors(result.events) == {1: "fast", 2: "fast"}


async def test_an_always_failing_ensemble_ends_with_a_typed_stop_within_budget() -> None:
    calls: list[str] = []

    def hostile(request: Any) -> str:
        calls.append(request.purpose)
        return "{not json"

    result = await agent(FunctionModel(hostile, name="a"), FunctionModel(hostile, name="b")).run("x")
    assert result.stop.kind == "error", result.stop
    assert len(calls) == 6  # three answers for each model, no more

    capped = agent(FunctionModel(hostile, name="a"), FunctionModel(hostile, name="b"), budget=Budget(model_calls=4))
    result = await capped.run("x")
    assert result.stop.kind == "budget_exhausted", result.stop


async def test_a_replay_of_an_ensemble_run_reproduces_it() -> None:
    failing = {"steps": [tool_step("s1", "fails", {})]}
    fast = ScriptedModel([BAD, BAD, BAD, ANSWER], name="fast")
    strong = ScriptedModel([failing, {"steps": [tool_step("s2", "echo", {"text": "hi"})]}], name="strong")
    store = MemoryStore()
    result = await agent(fast, strong, tools=[echo, failing_tool()], store=store).run("say hi", run_id="ens")
    assert result.stop.kind == "goal_met", result.stop
    log = [s.event for s in await store.read("ens")]
    report = await replay_log(log)
    assert report.divergence is None
    assert report.matched
    assert list(report.events) == log
    assert authors(log) == {1: "strong", 2: "strong"}


def test_show_names_the_model_of_each_plan_version(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    failing = {"steps": [tool_step("s1", "fails", {})]}
    fast = ScriptedModel([failing, ANSWER], name="fast-model")
    strong = ScriptedModel([{"steps": [tool_step("s2", "echo", {"text": "hi"})]}], name="strong-model")
    store = open_store(url)
    run = agent(fast, strong, ("replan",), tools=[echo, failing_tool()], store=store)
    result = asyncio.run(run.run("say hi", run_id="shown"))
    assert result.stop.kind == "goal_met", result.stop

    text = invoke(["--store", url, "show", "shown"]).stdout
    assert "planner (fast-model)" in text
    assert "planner (strong-model)" in text
    doc = json.loads(invoke(["--store", url, "show", "shown", "--json"]).stdout)
    assert [(p["version"], p["author"], p["model"]) for p in doc["plans"]] == [
        (1, "planner", "fast-model"),
        (2, "planner", "strong-model"),
    ]


def test_bad_ensembles_are_refused_with_every_problem_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        Ensemble(escalate_to=[], escalate_on=("on_tuesdays",), confidence_below=2)  # type: ignore[arg-type]
    wheres = [p.where for p in caught.value.problems]
    assert wheres == ["escalate_to", "escalate_on", "confidence_below"]

    with pytest.raises(UsageError) as caught:
        Ensemble(escalate_to=[42, "", ScriptedModel([])], escalate_on=("replan", "sometimes"))  # type: ignore[list-item, arg-type]
    assert [p.where for p in caught.value.problems] == ["escalate_to.0", "escalate_to.1", "escalate_on"]
    assert "2 problems" not in str(caught.value)
    assert "3 problems" in str(caught.value)

    with pytest.raises(UsageError, match="ensemble"):
        Planner(model=ScriptedModel([]), ensemble=["strong"])  # type: ignore[arg-type]


async def test_a_plain_planner_is_unchanged() -> None:
    fast = ScriptedModel([GOOD, ANSWER], name="solo")
    result = await Agent(Planner(model=fast), tools=[echo]).run("say hi")
    assert result.stop.kind == "goal_met"
    assert authors(result.events) == {1: "solo"}
    started = result.events[0]
    assert isinstance(started, RunStarted)
    assert "ensemble" not in started.config["planner"]


async def test_a_step_by_step_planner_escalates_an_unsure_turn() -> None:
    step = tool_step("s1", "echo", {"text": "hi"})
    stop = {"thought": "done", "confidence": 0.9, "stop": True, "answer": "hi"}
    fast = ScriptedModel([turn(step, "maybe", 0.1), stop], name="fast")
    strong = ScriptedModel([turn(step, "surely", 0.9)], name="strong")
    planner = Planner(
        model=fast, policy="step", ensemble=Ensemble(escalate_to=[strong], escalate_on=("low_confidence",))
    )
    result = await Agent(planner, tools=[echo]).run("say hi")
    assert result.stop.kind == "goal_met", result.stop
    assert [c.purpose for c in strong.calls] == ["planner.turn"]
    assert authors(result.events)[1] == "strong"


# -- the command line: --escalate-to, --escalate-on, --confidence-below ------------------------------


def test_planexec_run_gives_the_planner_an_ensemble(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = write_tools_module(tmp_path, monkeypatch, ECHO_TOOLS, "ensemble_tools")
    fast = write_script(tmp_path, [BAD, BAD, BAD, ANSWER], "fast.json")  # still bad after two repairs
    strong = write_script(tmp_path, [GOOD], "strong.json")
    url = f"sqlite:///{tmp_path}/runs.db"
    args = ["--store", url, "run", "say hi", "--planner", fast, "--tools", f"{tools}:echo", "--json"]
    result = invoke([*args, "--escalate-to", strong, "--escalate-on", "repair_failed", "--confidence-below", "0.3"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == "done"
    doc = json.loads(invoke(["--store", url, "show", data["run_id"], "--json"]).stdout)
    assert [p["model"] for p in doc["plans"]] == ["scripted:strong.json"]


def test_planexec_run_refuses_a_bad_ensemble_listing_every_problem(tmp_path: Path) -> None:
    fast = write_script(tmp_path, [GOOD, ANSWER], "fast.json")
    args = ["run", "say hi", "--planner", fast, "--escalate-to", "nosuchprovider:big"]
    result = invoke([*args, "--escalate-on", "on_tuesdays", "--escalate-on", "replan", "--confidence-below", "2"])
    assert result.exit_code == 2
    assert "--escalate-to: unknown model provider 'nosuchprovider'" in result.stderr
    assert "--escalate-on: 'on_tuesdays' is not one of repair_failed, low_confidence, replan" in result.stderr
    assert "--confidence-below: '2' must be from 0 to 1" in result.stderr

    alone = invoke(["run", "say hi", "--planner", fast, "--escalate-on", "replan", "--confidence-below", "0.4"])
    assert alone.exit_code == 2
    assert "--escalate-on: applies to the planner's ensemble: name a model to escalate to too" in alone.stderr
    assert "--confidence-below: applies to the planner's ensemble" in alone.stderr


def test_the_ensemble_options_are_in_run_help() -> None:
    text = invoke(["run", "--help"]).stdout
    for flag in ("--escalate-to", "--escalate-on", "--confidence-below"):
        assert flag in text


# -- evaluation suites: the task's ensemble, and `planexec eval bfcl:...` with the options ------------


async def test_an_eval_task_gives_its_planner_an_ensemble(tmp_path: Path) -> None:
    fast = ScriptedModel([BAD, BAD, BAD, ANSWER], name="fast")  # still bad after two repairs
    strong = ScriptedModel([GOOD], name="strong")
    task = {
        "goal": "say hi",
        "tools": [echo],
        "planner": lambda: fast,
        "ensemble": {"escalate_to": [lambda: strong], "escalate_on": ["repair_failed"], "confidence_below": 0.3},
    }
    suite = suite_from_mapping({"name": "ensemble", "tasks": [{"id": "hi", **task}]}, root=tmp_path)
    ensemble = suite.tasks[0].ensemble
    assert isinstance(ensemble, EnsembleSpec)
    assert (len(ensemble.escalate_to), ensemble.escalate_on, ensemble.confidence_below) == (1, ("repair_failed",), 0.3)
    report = await run_suite(suite, EvalSettings())
    assert report.summary.passed == 1
    assert [c.purpose for c in strong.calls] == ["planner.propose"]


def test_an_eval_task_with_a_bad_ensemble_is_refused_with_every_problem(tmp_path: Path) -> None:
    task = {
        "goal": "say hi",
        "tools": [echo],
        "planner": lambda: ScriptedModel([GOOD, ANSWER]),
        "ensemble": {"escalate_to": [], "escalate_on": ["sometimes"], "confidence_below": 2, "size": 3},
    }
    with pytest.raises(SuiteInvalid) as caught:
        suite_from_mapping({"name": "bad", "tasks": [{"id": "hi", **task}]}, root=tmp_path)
    wheres = sorted(p.where for p in caught.value.problems)
    assert wheres == [
        "tasks[0] (hi).ensemble.confidence_below",
        "tasks[0] (hi).ensemble.escalate_on",
        "tasks[0] (hi).ensemble.escalate_to",
        "tasks[0] (hi).ensemble.size",  # not a key of an ensemble
    ]


@pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="needs bfcl-eval")
def test_planexec_eval_gives_bfcls_planner_an_ensemble(tmp_path: Path) -> None:
    strong = write_script(tmp_path, [], "strong.json")  # the oracle plans every task: never asked
    args = ["eval", "bfcl:multi_turn_base", "--limit", "2", "--escalate-to", strong, "--escalate-on", "replan"]
    result = invoke([*args, "--confidence-below", "0.4", "--fail-on-task-failure"])
    assert result.exit_code == 0, result.output

    bad = ["eval", "bfcl:multi_turn_base", "--escalate-on", "sometimes", "--confidence-below", "2"]
    refused = invoke(bad)
    assert refused.exit_code == 2
    assert "--escalate-on: applies to the planner's ensemble: name a model to escalate to too" in refused.stderr
    assert "--escalate-on: 'sometimes' is not one of repair_failed" in refused.stderr
    assert "--confidence-below: '2' is not a number from 0 to 1" in refused.stderr
    react = invoke(["eval", "bfcl:multi_turn_base", "--agent", "react", "--escalate-to", strong])
    assert react.exit_code == 2
    assert "--escalate-to: does not apply to the react agent" in react.stderr
