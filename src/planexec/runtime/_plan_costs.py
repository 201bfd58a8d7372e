"""A plan version's cost forecast, as planning uses it: logged once a version, refused as a plan
problem when it passes a cap the run acts on, and shown with a question about raising a cap.

Where a record knows what the run forecast or refused (a replay), the world serves that instead:
the forecast reads prices and tallies that a replay cannot rebuild exactly."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planexec.errors import Problem
from planexec.log import BudgetName, Forecast, PlanForecast
from planexec.plan import Plan, Step
from planexec.runtime._core import Core
from planexec.runtime._forecast import ACTING_CAPS, forecast_problem, forecast_steps, over_caps

__all__ = ["PlanForecasts"]


class PlanForecasts:
    """What plan versions are expected to cost, for one run."""

    def __init__(self, engine: Core, next_plan: Callable[[list[Step]], Plan]) -> None:
        self._engine = engine
        self._next_plan = next_plan
        """The plan version a list of proposed steps would make."""

    def refuses(self) -> bool:
        """Whether a plan whose forecast passes a cap is refused as a plan problem."""
        engine = self._engine
        rule = engine.config.limits.over_forecast
        if rule == "run":
            return False
        return rule == "replan" or not engine.can_ask_humans

    def of(self, steps: Sequence[Step]) -> tuple[Forecast, tuple[BudgetName, ...]]:
        """What a plan version of ``steps`` is expected to cost from now, and the caps it passes."""
        engine = self._engine
        planner = engine.config.planner
        forecast = forecast_steps(
            engine.config, engine.state, engine.budget, steps, policy=planner.policy, replan=planner.replan
        )
        return forecast, over_caps(forecast, engine.state, engine.budget)

    def problems(self, steps: Sequence[Step]) -> list[Problem]:
        """A plan problem when ``steps`` are forecast to pass a cost or token cap (a record says
        what it decided)."""
        return self._engine.world.forecast_refusal(lambda: self._problems(steps))

    def _problems(self, steps: Sequence[Step]) -> list[Problem]:
        engine = self._engine
        plan = self._next_plan(list(steps))
        forecast, over = self.of(plan.steps)
        acting = [name for name in over if name in ACTING_CAPS]
        if not acting:
            return []
        message = forecast_problem(forecast, acting, engine.state, engine.budget)
        return [Problem(code="over_budget", where=f"budget.{acting[0]}", message=message)]

    def rest(self, plan: Plan) -> None:
        """Log what the rest of ``plan`` is expected to cost from now (for a question about raising
        a cap; a record's, where it has one)."""
        engine = self._engine
        event = engine.world.forecast(None, lambda: self._event(plan))
        if event is not None:
            engine.emit(event)

    def forecast(self, plan: Plan) -> tuple[BudgetName, ...]:
        """Log plan version ``plan``'s cost forecast (once a version; a record's, as it has it);
        the caps it passes that a forecast acts on (cost and tokens)."""
        engine = self._engine
        state = engine.state
        if plan.version not in state.forecasts:
            event = engine.world.forecast(plan.version, lambda: self._event(plan))
            if event is not None:
                engine.emit(event)
        return tuple(name for name in state.over_forecast.get(plan.version, ()) if name in ACTING_CAPS)

    def _event(self, plan: Plan) -> PlanForecast:
        forecast, over = self.of(plan.steps)
        return PlanForecast(at=self._engine.now(), plan_version=plan.version, forecast=forecast, over=over)
