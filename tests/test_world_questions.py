"""The loop asks each world the same questions, each with the live way to answer it: the live world
takes that way, a recorded world serves what its log holds until it goes on live."""

from __future__ import annotations

import asyncio

from planexec.log import AnswerReviewed, Event, Forecast, PlanForecast, RunStarted
from planexec.models import ModelResponse
from planexec.plan import Step
from planexec.runtime._recorded_world import RecordedWorld
from planexec.runtime._settings import RunContext
from planexec.runtime._world import Asking, LiveWorld, StepOutcome
from planexec.tools import Toolset

HUMANS = Asking(can_ask=True, suspends=True, raises_budget=True)


def _started(config: dict[str, object]) -> RunStarted:
    return RunStarted(at=1.0, run_id="r1", goal="g", budget={}, config=config)


def test_the_live_world_takes_the_live_way_for_every_question() -> None:
    world = LiveWorld(RunContext(clock=lambda: 5.0, new_id=lambda: "id1"))
    step = Step(id="s1", description="d")
    answer = ModelResponse(text="hi")
    outcome = StepOutcome(output=1)
    review = AnswerReviewed(at=1.0, answer="a", passed=True, reviewer="checks")

    async def model() -> ModelResponse:
        return answer

    async def carry_out() -> StepOutcome:
        return outcome

    async def checks() -> AnswerReviewed:
        return review

    async def recall() -> None:
        return None

    async def main() -> None:
        assert await world.model_answer("planner", "plan", None, None, model) is answer
        assert await world.step_outcome(step, carry_out) is outcome
        assert await world.answer_checks(checks) is review
        assert await world.recall(recall) is None

    asyncio.run(main())
    tools = Toolset()
    assert world.asking(HUMANS) is HUMANS
    assert world.tools_as_of(tools, []) is tools
    assert world.tools_change(tools, lambda: None) is None
    assert world.forecast_refusal(list) == []
    assert world.violations("s1", None, lambda: ()) == ()
    assert world.decision("q1", lambda: None) is None
    assert (world.now(), world.new_id(), world.keeps_wall_time) == (5.0, "id1", True)


def test_a_recorded_world_asks_humans_as_the_recorded_run_did() -> None:
    recorded: dict[str, object] = {"approvals": {"ask": False, "suspends": False}}
    world = RecordedWorld(log=[_started(recorded)], context=RunContext())
    assert world.asking(HUMANS) == Asking(can_ask=False, suspends=False, raises_budget=False)
    unrecorded = RecordedWorld(log=[_started({})], context=RunContext())
    assert unrecorded.asking(HUMANS) is HUMANS


def test_a_recorded_world_serves_its_forecast_and_goes_live_after_the_log() -> None:
    log: list[Event] = [_started({}), PlanForecast(at=2.0, plan_version=1, forecast=_forecast())]
    world = RecordedWorld(log=log, context=RunContext())
    world.resume_at(1)
    made = PlanForecast(at=3.0, plan_version=1, forecast=_forecast())
    assert world.forecast(1, lambda: made) is log[1]
    assert world.forecast(2, lambda: made) is None  # the log has none for that version here
    world.resume_at(2)  # the log has run out: the run goes on live
    assert world.forecast(1, lambda: made) is made


def _forecast() -> Forecast:
    return Forecast(
        planner_calls=(1, 1),
        executor_calls=(0, 0),
        tool_calls=(0, 0),
        input_tokens=(0, 0),
        output_tokens=(0, 0),
        cost=(0.0, 0.0),
    )
