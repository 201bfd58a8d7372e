"""Model settings per role: the planner, each named model executor and the step judge ask their
models with their own settings; the run's log records them; a replay uses the recorded ones."""

from __future__ import annotations

from typing import Any

import pytest

from planexec import Acceptance, Agent, AnswerReview, ModelExecutor, ModelSettings, Planner, UsageError, tool
from planexec.log import RunStarted
from planexec.react import ReactAgent
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel
from tests.support import SAFETY, add, events_of, tool_step

PLANNING = ModelSettings(temperature=0.0, max_tokens=2000, reasoning_effort="high", seed=11)
DRAFTING = ModelSettings(temperature=0.9, top_p=0.95, stop=("END",))
CHECKING = ModelSettings(max_tokens=50, extra={"service_tier": "flex"})
JUDGING = ModelSettings(temperature=0.0, max_tokens=100, timeout=20.0)


def model_step(step_id: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "description": description, **extra}


def two_executor_agent(store: MemoryStore | None = None) -> tuple[Agent, dict[str, ScriptedModel]]:
    plan = {
        "steps": [
            model_step("draft", "write a draft", executor="drafter", expected="a short draft"),
            model_step("check", "check the draft", executor="checker", depends_on=["draft"]),
        ]
    }
    models = {
        "planner": ScriptedModel([plan, {"answer": "drafted and checked"}], name="planner"),
        "drafter": ScriptedModel(["a draft"], name="drafter"),
        "checker": ScriptedModel(["looks fine"], name="checker"),
        "judge": ScriptedModel([{"passed": True, "reason": "short"}], name="judge"),
    }
    agent = Agent(
        Planner(model=models["planner"], settings=PLANNING),
        executors=[
            ModelExecutor(model=models["drafter"], name="drafter", settings=DRAFTING),
            ModelExecutor(model=models["checker"], name="checker", settings=CHECKING, step_timeout=30),
        ],
        acceptance=Acceptance(judge=models["judge"], judge_settings=JUDGING),
        budget=SAFETY,
        store=store,
    )
    return agent, models


async def test_each_role_asks_its_model_with_its_own_settings() -> None:
    agent, models = two_executor_agent()
    result = await agent.run("draft and check a note")

    assert result.stop.kind == "goal_met", result.stop
    assert [(c.purpose, c.settings) for c in models["planner"].calls] == [
        ("planner.propose", PLANNING),
        ("planner.finish", PLANNING),
    ]
    assert models["drafter"].settings == [DRAFTING]
    assert models["checker"].settings == [CHECKING]
    assert [(c.purpose, c.settings) for c in models["judge"].calls] == [("judge", JUDGING)]


async def test_the_run_log_records_every_roles_settings() -> None:
    agent, _models = two_executor_agent()
    result = await agent.run("draft and check a note")

    [started] = events_of(result, RunStarted)
    config = started.config
    assert config["planner"]["settings"] == PLANNING.as_dict()
    assert config["model_executors"] == {
        "drafter": {"model": "drafter", "max_turns": 6, "step_timeout": None, "settings": DRAFTING.as_dict()},
        "checker": {"model": "checker", "max_turns": 6, "step_timeout": 30, "settings": CHECKING.as_dict()},
    }
    assert config["judge"] == {"model": "judge", "settings": JUDGING.as_dict()}
    # scripted doubles send every setting: nothing is recorded as dropped
    assert "dropped_settings" not in config["planner"]


async def test_a_replay_uses_the_recorded_settings_whatever_the_agent_says() -> None:
    store = MemoryStore()
    agent, _models = two_executor_agent(store)
    result = await agent.run("draft and check a note", run_id="settled")
    assert result.stop.kind == "goal_met"

    other = Agent(Planner(model=ScriptedModel([]), settings=ModelSettings(temperature=1.5)), store=store)
    report = await other.replay("settled")

    assert report.matched, report.divergence
    replayed = report.events[0]
    assert isinstance(replayed, RunStarted)
    assert replayed.config["planner"]["settings"] == PLANNING.as_dict()
    assert replayed.config["model_executors"]["checker"]["step_timeout"] == 30


async def test_a_fork_goes_on_with_the_forking_agents_settings_and_records_them() -> None:
    store = MemoryStore()
    planner = ScriptedModel([{"steps": [tool_step("a", "add", {"a": 1, "b": 2})]}, {"answer": "3"}])
    agent = Agent(Planner(model=planner, settings=PLANNING), tools=[add], store=store, budget=SAFETY)
    assert (await agent.run("add", run_id="first")).stop.kind == "goal_met"

    warmer = ModelSettings(temperature=0.7)
    again = ScriptedModel([{"steps": [tool_step("a", "add", {"a": 1, "b": 2})]}, {"answer": "three"}])
    fork_agent = Agent(Planner(model=again, settings=warmer), tools=[add], store=store, budget=SAFETY)
    report = await fork_agent.replay("first", fork_at=1)

    assert report.result is not None
    assert report.result.stop.kind == "goal_met"
    assert again.settings == [warmer, warmer]
    forked = report.events[0]
    assert isinstance(forked, RunStarted)
    assert forked.config["planner"]["settings"] == {"temperature": 0.7}


async def test_the_final_answers_judge_asks_with_its_settings_and_a_replay_keeps_them() -> None:
    store = MemoryStore()
    planner = ScriptedModel([{"steps": [tool_step("a", "add", {"a": 1, "b": 2})]}, {"answer": "3 apples"}])
    judge = ScriptedModel([{"passed": True, "reason": "names its units"}], name="answer-judge")
    review = AnswerReview(rubric="The answer names its units.", judge=judge, judge_settings=JUDGING)
    agent = Agent(Planner(model=planner, settings=PLANNING), tools=[add], review=review, store=store, budget=SAFETY)
    result = await agent.run("add 1 and 2 apples", run_id="reviewed")

    assert result.stop.kind == "goal_met", result.stop
    assert [(c.purpose, c.settings) for c in judge.calls] == [("answer_review", JUDGING)]
    [started] = events_of(result, RunStarted)
    assert started.config["review"]["judge_settings"] == JUDGING.as_dict()
    report = await agent.replay("reviewed")
    assert report.matched, report.divergence


async def test_the_react_baseline_asks_with_its_settings() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    model = ScriptedModel(["done"])
    result = await ReactAgent(model, tools=[echo], settings=DRAFTING).run("say done")
    assert result.answer == "done"
    assert model.settings == [DRAFTING]


def test_settings_that_are_not_model_settings_are_refused_with_every_problem() -> None:
    with pytest.raises(UsageError) as caught:
        ModelExecutor(model="scripted", max_turns=0, step_timeout=-1, settings={"temperature": 0.2})  # type: ignore[arg-type]
    assert sorted(p.where for p in caught.value.problems) == ["max_turns", "settings", "step_timeout"]
    with pytest.raises(UsageError, match="settings"):
        Planner(model="scripted", settings={"temperature": 0.2})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="judge_settings"):
        Acceptance(judge_settings=0.2)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="judge_settings"):
        AnswerReview(rubric="r", judge="scripted", judge_settings={})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="settings"):
        ReactAgent(ScriptedModel([]), settings="hot")  # type: ignore[arg-type]
