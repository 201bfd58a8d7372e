"""What a plan will cost, before it runs: every plan version's forecast in the log (model calls,
tool calls, tokens and money at the models' prices, as ranges with how they were made), a plan
whose forecast passes a cost or token cap refused as a plan problem or asked about, and exact
replays of runs that forecast."""

from __future__ import annotations

from typing import Any

from planexec import Agent, ApprovalRequest, Approvals, Budget, Limits, ModelExecutor, tool
from planexec.log import PlanForecast, PlannerOutputRejected, PlanProposed
from planexec.models import FunctionModel, ModelRequest, Usage
from planexec.runtime import replay_log
from planexec.testing import ScriptedModel
from planexec.views import QuestionView

from .support import SAFETY, events_of, tool_step

USAGE = Usage(input_tokens=2_000, output_tokens=500)
PRICE = (2.0, 8.0)  # dollars per million tokens in and out: a call of USAGE costs $0.008


@tool
async def lookup(name: str) -> str:
    """Look a name up."""
    return f"{name}: found"


THINKING = {
    "reason": "three model-driven drafts, then a lookup",
    "steps": [
        {"id": "d1", "description": "draft part one", "executor": "model"},
        {"id": "d2", "description": "draft part two", "executor": "model"},
        {"id": "d3", "description": "draft part three", "executor": "model"},
        tool_step("look", "lookup", {"name": "ACME"}),
    ],
}
CHEAP = {"reason": "tools only", "steps": [tool_step("look", "lookup", {"name": "ACME"})]}


def _agent(replies: list[Any], *, budget: Budget, limits: Limits | None = None, **extra: Any) -> Agent:
    planner = ScriptedModel(replies, name="planner-model", usage=USAGE, cost_per_million=PRICE)
    executor = ModelExecutor(
        model=ScriptedModel(["a draft"] * 6, name="drafting-model", usage=USAGE, cost_per_million=PRICE)
    )
    return Agent(planner, tools=[lookup], executors=[executor], budget=budget, limits=limits or Limits(), **extra)


async def test_every_plan_version_is_forecast_before_it_runs() -> None:
    result = await _agent([THINKING, {"answer": "done"}], budget=Budget(wall_time=30)).run("write it up")
    assert result.stop.kind == "goal_met", result.stop
    [forecast] = events_of(result, PlanForecast)
    kinds = [e.kind for e in result.events]
    assert kinds.index("plan_forecast") == kinds.index("plan_proposed") - 1
    f = forecast.forecast
    assert (forecast.plan_version, forecast.over) == (1, ())
    assert f.planner_calls[0] == 1  # the final answer at least
    assert f.executor_calls == (3, 3)  # one call for each draft (no tools to call)
    assert f.tool_calls == (1, 1)
    # the planner's answered call sets the size of its next ones: 2,000 tokens in, 500 out
    assert f.input_tokens[0] >= 2_000
    assert f.output_tokens[0] >= 500
    assert 0 < f.cost[0] <= f.cost[1]
    assert f.unpriced == ()
    assert any("planner (planner-model): 1 answered calls in this run" in line for line in f.basis)
    # what the run then spent lies within the forecast's range (one planner call had been made)
    spent_after = result.cost - 0.008
    assert f.cost[0] <= spent_after + 1e-9 <= f.cost[1] + 1e-9


async def test_a_plan_forecast_to_pass_the_cost_cap_is_sent_back_for_a_cheaper_one() -> None:
    agent = _agent([THINKING, CHEAP, {"answer": "done"}], budget=Budget(cost=0.03, wall_time=30))
    result = await agent.run("write it up")
    assert result.stop.kind == "goal_met", result.stop
    [refused] = events_of(result, PlannerOutputRejected)
    [problem] = refused.problems
    assert (problem.code, problem.where) == ("over_budget", "budget.cost")
    assert "of the cost budget is left" in problem.message
    assert "cheaper plan" in problem.message
    assert [p.plan.ids for p in events_of(result, PlanProposed)] == [("look",)]
    assert result.cost <= 0.03


async def test_a_planner_that_only_proposes_plans_over_the_cap_ends_the_run_budget_exhausted() -> None:
    agent = _agent([THINKING, THINKING, THINKING], budget=Budget(cost=0.03, wall_time=30))
    result = await agent.run("write it up")
    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "cost"), result.stop
    assert "no plan the planner proposed fits the cost budget" in result.stop.detail
    assert events_of(result, PlanProposed) == []
    assert result.cost <= 0.03


async def test_a_plan_over_the_cap_is_asked_about_with_its_forecast_when_the_run_says_so() -> None:
    asked: list[QuestionView] = []

    async def approver(request: ApprovalRequest) -> bool:
        assert request.view is not None
        asked.append(request.view)
        return False

    agent = _agent(
        [THINKING, {"answer": "done"}],
        budget=Budget(cost=0.03, wall_time=30),
        limits=Limits(over_forecast="ask"),
        approvals=Approvals(approver=approver),
    )
    result = await agent.run("write it up")
    assert result.stop.kind == "rejected"
    [view] = asked
    assert (view.kind, view.rule) == ("plan", "plan_over_budget")
    assert view.plan is not None
    assert view.plan.forecast is not None
    assert view.plan.forecast.over == ["cost"]
    assert "passes the cost cap" in view.plan.forecast.summary
    assert "cost budget" in view.why


async def test_a_run_that_forecasts_replays_exactly_and_an_old_log_replays_without_forecasts() -> None:
    result = await _agent([THINKING, CHEAP, {"answer": "done"}], budget=Budget(cost=0.03, wall_time=30)).run("go")
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence
    # a log written before forecasts: the replay makes none where the log has none
    cheap = await _agent([CHEAP, {"answer": "done"}], budget=SAFETY, limits=Limits(over_forecast="run")).run("go")
    old = [e for e in cheap.events if not isinstance(e, PlanForecast)]
    report = await replay_log(old)
    assert report.matched, report.divergence


async def test_models_without_a_price_are_named_and_count_as_free() -> None:
    def reply(request: ModelRequest) -> Any:
        return CHEAP if request.purpose == "planner.propose" else {"answer": "done"}

    result = await Agent(FunctionModel(reply, name="local-model"), tools=[lookup], budget=SAFETY).run("look")
    [forecast] = events_of(result, PlanForecast)
    assert forecast.forecast.unpriced == ("local-model",)
    assert forecast.forecast.cost == (0.0, 0.0)
    assert any("no price known for local-model" in line for line in forecast.forecast.basis)
