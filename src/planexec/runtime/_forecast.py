"""Cost forecasts: what a plan version is expected to cost from the moment it is proposed to the
run's end — the planner's and the executors' model calls it implies, the tool calls, the tokens
and the money at the providers' prices — as ranges, with how they were made, and the caps the
low end of a range would pass.

Token sizes come from the run's own answered calls of each role (average and largest), and where
a role has not been called yet, from the requests the engine would send: for a model-driven step,
its description, arguments and the specs of the tools it may call over the executor's own
prompt. Characters count as tokens at the run's own ratio (else four characters a token).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec.executor import ModelExecutor
from planexec.log import BudgetName, Forecast, RoleTally, RunState
from planexec.models import Model, Price, Providers
from planexec.plan import Step
from planexec.planner import PLANNER_POLICIES
from planexec.runtime._budget import Budget
from planexec.runtime._core import EngineConfig
from planexec.runtime._model_calls import answerers

__all__ = ["ACTING_CAPS", "forecast_problem", "forecast_steps", "over_caps"]

ACTING_CAPS: frozenset[str] = frozenset({"cost", "input_tokens", "output_tokens"})
"""The caps a plan's forecast is acted on for (``Limits.over_forecast``); the others it passes are
shown, and stop the run where it reaches them."""

CHARS_PER_TOKEN = 4.0
"""Characters a token when the run has no answered call to measure it by."""
EXECUTOR_PROMPT_CHARS = 1_500
"""About what a model-driven step's request holds besides the step itself (instructions, format)."""
PLANNER_PROMPT_CHARS = 2_000
"""About what a planner request holds besides the goal and the tools, when none has been sent yet."""
DEFAULT_OUTPUT = 300
"""Output tokens a call is expected to give when the run has none of its role to go by."""
DEFAULT_MAX_OUTPUT = 1_024
"""Output tokens a call may give at most when its settings set no ``max_tokens``."""


@dataclass(slots=True)
class _Span:
    low: float = 0.0
    high: float = 0.0

    def add(self, low: float, high: float) -> None:
        self.low += low
        self.high += high


def _ratio(state: RunState) -> tuple[float, str]:
    """Tokens per character of the run's requests, and where the figure comes from."""
    chars = sum(t.request_chars for t in state.tallies.values())
    tokens = sum(t.input_tokens for t in state.tallies.values())
    if chars > 0 and tokens > 0:
        return tokens / chars, f"{tokens / chars:.2f} tokens a character, as this run's requests"
    return 1 / CHARS_PER_TOKEN, f"{1 / CHARS_PER_TOKEN:.2f} tokens a character (no answered call to measure)"


def _price_cost(price: Price | None, input_tokens: float, output_tokens: float) -> float:
    if price is None:
        return 0.0
    return (input_tokens * price.input + output_tokens * price.output) / 1e6


@dataclass(slots=True)
class _Prices:
    """What a call to a model is charged at: the low end at the model that answers first (for a
    fallback list, its first model), the high end at the dearest that may answer."""

    low: Price | None
    high: Price | None

    def cost(self, low: tuple[float, float], high: tuple[float, float]) -> tuple[float, float]:
        return _price_cost(self.low, *low), _price_cost(self.high, *high)


def _prices_of(providers: Providers, model: Model, unpriced: set[str]) -> _Prices:
    found = [(m, providers.price_of(m)) for m in answerers(model)]
    unpriced.update(m.name for m, price in found if price is None)
    priced = [price for _m, price in found if price is not None]
    high = max(priced, key=lambda p: p.input + p.output, default=None)
    return _Prices(low=found[0][1] if found else None, high=high)


def _per_call(tally: RoleTally | None, estimate: float) -> tuple[float, float, float, float]:
    """(input low, input high, output low, output high) tokens of one call of a role."""
    if tally is None or tally.calls == 0:
        return estimate, estimate * 2, DEFAULT_OUTPUT / 3, float(DEFAULT_MAX_OUTPUT)
    avg_in = tally.input_tokens / tally.calls
    avg_out = tally.output_tokens / tally.calls
    return avg_in, max(avg_in * 1.5, float(tally.largest_input)), avg_out, max(avg_out * 2, float(tally.largest_output))


def _spec_chars(specs: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> int:
    total = 0
    for name in names:
        spec = specs.get(name)
        if spec is not None:
            total += len(json.dumps({k: spec.get(k) for k in ("name", "description", "parameters")}, default=str))
    return total


def _executor_model(config: EngineConfig, step: Step) -> tuple[str, Model | None, int]:
    """The executor a model-driven step runs on: its name, its model and its turns at most."""
    name = step.executor or config.default_executor or "model"
    executor = config.executors.get(name)
    if isinstance(executor, ModelExecutor):
        return name, executor.resolved_model(config.providers), executor.max_turns
    return name, None, 1


@dataclass(slots=True)
class _Sum:
    """A forecast as it is added up."""

    ratio: float
    specs: Mapping[str, Mapping[str, Any]]
    providers: Providers
    planner_calls: _Span = field(default_factory=_Span)
    executor_calls: _Span = field(default_factory=_Span)
    tool_calls: _Span = field(default_factory=_Span)
    input_tokens: _Span = field(default_factory=_Span)
    output_tokens: _Span = field(default_factory=_Span)
    cost: _Span = field(default_factory=_Span)
    basis: list[str] = field(default_factory=list)
    unpriced: set[str] = field(default_factory=set)

    def forecast(self) -> Forecast:
        return Forecast(
            planner_calls=(int(self.planner_calls.low), int(self.planner_calls.high)),
            executor_calls=(int(self.executor_calls.low), int(self.executor_calls.high)),
            tool_calls=(int(self.tool_calls.low), int(self.tool_calls.high)),
            input_tokens=(round(self.input_tokens.low), round(self.input_tokens.high)),
            output_tokens=(round(self.output_tokens.low), round(self.output_tokens.high)),
            cost=(round(self.cost.low, 6), round(self.cost.high, 6)),
            unpriced=tuple(sorted(self.unpriced)),
            basis=tuple(self.basis),
        )


def forecast_steps(
    config: EngineConfig, state: RunState, budget: Budget, steps: Sequence[Step], *, policy: str, replan: str
) -> Forecast:
    """What ``steps`` (the plan version's, finished ones included) are expected to cost from now."""
    ratio, ratio_basis = _ratio(state)
    done = {sid for sid, rec in state.steps.items() if rec.status == "succeeded"}
    todo = [s for s in steps if not (s.id in done and state.steps[s.id].step == s)]
    total = _Sum(ratio=ratio, specs=state.tool_specs, providers=config.providers)
    _planner_share(total, config, state, budget, steps, todo, policy=policy, replan=replan)
    _executor_share(total, config, state, todo)
    total.basis.append(f"tool calls: one for each tool step; model-driven steps may make more; {ratio_basis}")
    if total.unpriced:
        total.basis.append(f"no price known for {', '.join(sorted(total.unpriced))}: their calls count as free")
    return total.forecast()


def _planner_share(
    total: _Sum,
    config: EngineConfig,
    state: RunState,
    budget: Budget,
    steps: Sequence[Step],
    todo: Sequence[Step],
    *,
    policy: str,
    replan: str,
) -> None:
    """The planner: the final answer, and what patches or turns may still come."""
    planner_model = config.planner.resolved_model(total.providers)
    planner_prices = _prices_of(total.providers, planner_model, total.unpriced)
    handed_off = any(s.tool in config.workflows for s in steps) and config.review is None
    finish = 0 if handed_off else 1
    replans_left = 0
    if budget.replans is not None:
        replans_left = max(0, budget.replans - state.replans)
    elif replan != "never":
        replans_left = 3
    by_turns = PLANNER_POLICIES.get(policy).turns
    if by_turns:
        low_calls = float(finish)
        steps_left = budget.steps - state.steps_started if budget.steps is not None else 10
        high_calls = float(finish + max(0, steps_left))
    elif replan == "after_each_step":
        low_calls = float(finish + len(todo))
        high_calls = low_calls + replans_left
    else:
        low_calls = float(finish)
        high_calls = float(finish + (replans_left if replan != "never" else 0))
    tally = state.tallies.get("planner")
    estimate = (PLANNER_PROMPT_CHARS + _spec_chars(total.specs, list(total.specs)) + len(state.goal)) * total.ratio
    in_low, in_high, out_low, out_high = _per_call(tally, estimate)
    record = config.planner.record_chars * len(todo) * total.ratio  # a finish request reads each step's result
    in_high += record
    total.planner_calls = _Span(low_calls, high_calls)
    total.input_tokens = _Span(low_calls * in_low, high_calls * in_high)
    total.output_tokens = _Span(low_calls * out_low, high_calls * out_high)
    total.cost = _Span(
        *planner_prices.cost((low_calls * in_low, low_calls * out_low), (high_calls * in_high, high_calls * out_high))
    )
    if tally is not None and tally.calls:
        total.basis.append(
            f"planner ({planner_model.name}): {tally.calls} answered calls in this run, "
            f"{tally.input_tokens // tally.calls:,} tokens in and {tally.output_tokens // tally.calls:,} out on average"
        )
    else:
        total.basis.append(f"planner ({planner_model.name}): requests estimated from the goal and the tools")
    what = "a turn for each step the step cap allows" if by_turns else f"{replans_left} patches at most"
    total.basis.append(f"planner calls: the final answer ({finish}), then up to {what}")


def _executor_share(total: _Sum, config: EngineConfig, state: RunState, todo: Sequence[Step]) -> None:
    """The executors: each model-driven step, one call to its executor's turns at most."""
    etally = state.tallies.get("executor")
    for step in todo:
        if step.tool is not None:
            total.tool_calls.add(1, 1)
            continue
        _name, model, turns = _executor_model(config, step)
        if model is None:
            continue
        prices = _prices_of(total.providers, model, total.unpriced)
        chars = EXECUTOR_PROMPT_CHARS + len(step.description) + len(step.expected or "")
        chars += len(json.dumps(step.args, default=str)) + _spec_chars(total.specs, step.allowed_tools)
        e_in_low, e_in_high, e_out_low, e_out_high = _per_call(etally, chars * total.ratio)
        calls_high = turns if step.allowed_tools else 1
        total.executor_calls.add(1, calls_high)
        total.input_tokens.add(e_in_low, calls_high * e_in_high)
        total.output_tokens.add(e_out_low, calls_high * e_out_high)
        total.cost.add(*prices.cost((e_in_low, e_out_low), (calls_high * e_in_high, calls_high * e_out_high)))
        if step.allowed_tools:
            total.tool_calls.add(0, (turns - 1) * len(step.allowed_tools))
    if total.executor_calls.high:
        source = (
            f"{etally.calls} answered calls in this run"
            if etally is not None and etally.calls
            else "the steps' requests"
        )
        total.basis.append(f"executors: one call for each model-driven step, up to its executor's turns ({source})")


def over_caps(forecast: Forecast, state: RunState, budget: Budget) -> tuple[BudgetName, ...]:
    """The caps the low end of the forecast passes, as far as is left of them."""
    over: list[BudgetName] = []
    if budget.cost is not None and state.cost + forecast.cost[0] > budget.cost:
        over.append("cost")
    if budget.input_tokens is not None and state.usage.input_tokens + forecast.input_tokens[0] > budget.input_tokens:
        over.append("input_tokens")
    if (
        budget.output_tokens is not None
        and state.usage.output_tokens + forecast.output_tokens[0] > budget.output_tokens
    ):
        over.append("output_tokens")
    calls = forecast.planner_calls[0] + forecast.executor_calls[0]
    if budget.model_calls is not None and state.model_calls + calls > budget.model_calls:
        over.append("model_calls")
    if budget.tool_calls is not None and state.tool_calls + forecast.tool_calls[0] > budget.tool_calls:
        over.append("tool_calls")
    return tuple(over)


def forecast_problem(forecast: Forecast, over: Sequence[str], state: RunState, budget: Budget) -> str:
    """Why a plan whose forecast passes caps is refused, in words the planner can act on."""
    parts = []
    for name in over:
        cap = getattr(budget, name)
        if name == "cost":
            left = max(0.0, cap - state.cost)
            parts.append(f"it would cost at least ${forecast.cost[0]:.4f}; ${left:.4f} of the cost budget is left")
        elif name == "input_tokens":
            left = max(0, cap - state.usage.input_tokens)
            parts.append(f"it needs at least {forecast.input_tokens[0]:,} input tokens; {left:,} are left")
        elif name == "output_tokens":
            left = max(0, cap - state.usage.output_tokens)
            parts.append(f"it needs at least {forecast.output_tokens[0]:,} output tokens; {left:,} are left")
        elif name == "model_calls":
            calls = forecast.planner_calls[0] + forecast.executor_calls[0]
            parts.append(f"it needs at least {calls} model calls; {max(0, cap - state.model_calls)} are left")
        elif name == "tool_calls":
            parts.append(
                f"it needs at least {forecast.tool_calls[0]} tool calls; {max(0, cap - state.tool_calls)} are left"
            )
    return (
        "the plan is forecast to pass the run's budget: "
        + "; ".join(parts)
        + ". Make a cheaper plan: fewer model-driven steps (tool steps cost no model call), or less work."
    )
