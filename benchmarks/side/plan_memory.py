"""W12: plan memory and planner ensembles on the 50-goal suite (``plan_memory_suite``), side by side.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.plan_memory`` (needs ``bfcl-eval``:
``pip install --no-deps bfcl-eval==2026.3.23 mpmath``, which ``make`` does).

Four configurations run the same 50 goals in order, each with one store (and one memory) for all
its goals; memory is ``PlanMemory(store)`` as it comes (the lexical embedder, its default
thresholds), so a goal may run directly from a remembered plan (re-bound to its values, with no
planner call to plan, and none to answer when the remembered answer quotes the outputs), be
planned with a remembered plan as the example (guided), or be planned afresh:

    (a) strong        the strong model plans alone, memory off
    (b) strong+mem    the same, plan memory on
    (c) ensemble      the fast model plans first and hands planning to the strong one, memory off
    (d) ensemble+mem  the same, plan memory on

The planner models are BFCL's oracle (it plans the ground truth) dressed as two priced models:
``gpt-4.1`` (strong) and ``gpt-4.1-mini`` (fast), at the prices of the project's price table. They
report realistic usage: input tokens from the characters of the messages they are sent, output
tokens from the characters of their answer (four characters a token, as ``estimate_tokens``), and
their latency is simulated from it: a time to the first token plus the output tokens at a
provider's typical decoding speed (strong 0.5 s + 80 tokens/s; fast 0.3 s + 160 tokens/s). The
models' latencies are slept at ``--latency-scale`` of those times (0.2 by default, so that a
sitting is short); a goal's latency is its wall time (BFCL's checks apart) with the model time put
back at full length: the framework's time (memory's look-up and remembering included) as
measured, the models' at the simulated provider speed. The tools are BFCL's own classes, in
process.

The fast model fails in a fixed way, by the size of the goal's ground truth (its calls):

    4 calls or more   it plans a step depending on a step that does not exist, and again when asked
                      to repair it: the plan's checks refuse it, and after the planner's repairs
                      the ensemble hands the request to the strong model (``repair_failed``)
    3 calls           it plans correctly with a confidence of 0.4, under the ensemble's 0.5: the
                      strong model plans it (``low_confidence``)
    fewer             it plans correctly, with a confidence of 0.9

Its failures are all of a kind the ensemble sees, so the ensemble loses no goal that the strong
model passes; a fast model that plans valid but wrong steps would cost pass rate instead.

A goal passes when BFCL's checks (its state and response checks) pass it. Printed, per
configuration: pass rate, planner calls, planner tokens in and out, cost in dollars (each call's
usage at its model's price in the table), and latency per goal (median, p90); the same split
over the repeated half (goals that come back to an earlier one: repeats, rewordings, new values)
and the new half; and the repeated half by kind (planner tokens with memory off and on; how many
goals ran directly, guided, or without memory's help). Then each goal of W12, met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from benchmarks.side.plan_memory_suite import Goal, load_suite
from planexec import Agent, Budget, Planner
from planexec.bfcl import Oracle, TaskRun, says_something
from planexec.log import ModelCalled, PlanRecalled, RunResult
from planexec.memory import PlanMemory
from planexec.models import FunctionModel, ModelRequest, ModelResponse, cost_of, estimate_tokens, price_for
from planexec.planner import Ensemble
from planexec.runtime import AnswerReview
from planexec.store import MemoryStore

__all__ = [
    "CONFIGS",
    "FAST",
    "STRONG",
    "Config",
    "ConfigFigures",
    "GoalFigures",
    "fast_mistake",
    "goals_met",
    "run_config",
]

STRONG = "gpt-4.1"
FAST = "gpt-4.1-mini"
CONFIDENCE_BELOW = 0.5
"""The ensemble's confidence under which the fast model's plan goes to the strong model."""


@dataclass(frozen=True, kw_only=True)
class Speed:
    """A model's simulated latency: seconds to the first token, then output tokens per second."""

    first_token: float
    tokens_per_second: float

    def seconds(self, output_tokens: int) -> float:
        return self.first_token + output_tokens / self.tokens_per_second


SPEEDS = {STRONG: Speed(first_token=0.5, tokens_per_second=80.0), FAST: Speed(first_token=0.3, tokens_per_second=160.0)}

Mistake = Literal["invalid", "unsure"]


def fast_mistake(calls: int) -> Mistake | None:
    """How the fast model gets a goal with ``calls`` ground-truth calls wrong (None: it does not)."""
    if calls >= 4:
        return "invalid"
    if calls == 3:
        return "unsure"
    return None


@dataclass
class ModelTime:
    """The model time of one goal: simulated at full length, and slept (at the latency scale)."""

    simulated: float = 0.0
    slept: float = 0.0


def _priced_model(oracle: Oracle, name: str, clock: ModelTime, latency_scale: float, *, fast: bool) -> FunctionModel:
    """The oracle as the model ``name``: its price from the table, its usage from the characters,
    its latency simulated from its answer; as the fast model, with its mistakes."""
    price = price_for(name)
    assert price is not None, name
    speed = SPEEDS[name]

    async def reply(request: ModelRequest) -> ModelResponse:
        answer = await oracle.model.request(request)
        data = answer.parsed
        if isinstance(data, dict) and data.get("steps") and request.purpose in ("planner.propose", "planner.patch"):
            data = _as_fast(data, len(oracle.wanted())) if fast else data
        text = json.dumps(data, ensure_ascii=False) if data is not None else answer.text
        seconds = speed.seconds(max(1, estimate_tokens(text)))
        clock.simulated += seconds
        if latency_scale > 0:
            started = time.perf_counter()
            await asyncio.sleep(latency_scale * seconds)
            clock.slept += time.perf_counter() - started
        return ModelResponse(text=text, parsed=data)

    return FunctionModel(reply, name=name, cost_per_million=(price.input, price.output))


def _as_fast(plan: dict[str, Any], calls: int) -> dict[str, Any]:
    mistake = fast_mistake(calls)
    if mistake == "invalid":
        steps = [dict(s) for s in plan["steps"]]
        steps[-1]["depends_on"] = [*steps[-1].get("depends_on", []), "prepare"]  # no step is called that
        return {**plan, "steps": steps}
    return {**plan, "confidence": 0.4 if mistake == "unsure" else 0.9}


@dataclass(frozen=True, kw_only=True)
class Config:
    key: str
    label: str
    ensemble: bool
    memory: bool


CONFIGS = (
    Config(key="a", label="strong", ensemble=False, memory=False),
    Config(key="b", label="strong+mem", ensemble=False, memory=True),
    Config(key="c", label="ensemble", ensemble=True, memory=False),
    Config(key="d", label="ensemble+mem", ensemble=True, memory=True),
)


@dataclass(frozen=True, kw_only=True)
class GoalFigures:
    """One goal under one configuration."""

    goal: str
    kind: str
    valid: bool
    planner_calls: int
    answer_calls: int
    """Of the planner calls, those that wrote the final answer (``planner.finish``)."""
    calls_by_model: dict[str, int]
    input_tokens: int
    output_tokens: int
    cost: float
    latency: float
    """Seconds: the goal's wall time (BFCL's checks apart), its model time at full length."""
    recall: str | None = None
    """How plan memory helped: ``direct`` (a remembered plan re-bound, no planner call for it),
    ``guided`` (the planner shown a remembered plan), or None."""
    error: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _planner_figures(result: RunResult) -> tuple[list[ModelCalled], dict[str, int], int, int, float]:
    calls = [e for e in result.events if isinstance(e, ModelCalled) and e.role == "planner"]
    by_model: dict[str, int] = {}
    cost = 0.0
    for e in calls:
        by_model[e.model] = by_model.get(e.model, 0) + 1
        cost += cost_of(e.usage, price_for(e.model)) or 0.0
    return (
        calls,
        by_model,
        sum(e.usage.input_tokens for e in calls),
        sum(e.usage.output_tokens for e in calls),
        cost,
    )


async def run_goal(
    goal: Goal, config: Config, *, store: MemoryStore, memory: PlanMemory | None, latency_scale: float
) -> GoalFigures:
    run = TaskRun(goal.task)
    oracle = Oracle(goal.task, run.world)
    clock = ModelTime()
    strong = _priced_model(oracle, STRONG, clock, latency_scale, fast=False)
    if config.ensemble:
        fast = _priced_model(oracle, FAST, clock, latency_scale, fast=True)
        ensemble = Ensemble(
            escalate_to=[strong], escalate_on=("repair_failed", "low_confidence"), confidence_below=CONFIDENCE_BELOW
        )
        planner = Planner(model=fast, ensemble=ensemble)
    else:
        planner = Planner(model=strong)
    agent = Agent(
        planner,
        tools=run.tools(0),
        store=store,
        budget=Budget(),
        name="bfcl",
        review=AnswerReview(checks=[says_something]),
        memory=memory,
    )
    run.begin_turn(0)
    oracle.next_turn(0)
    started = time.perf_counter()
    result = await agent.run(goal.request, run_id=f"{config.key}-{goal.id}")
    wall = time.perf_counter() - started
    verdict = run.check(0)
    calls, by_model, tokens_in, tokens_out, cost = _planner_figures(result)
    recalled = next((e for e in result.events if isinstance(e, PlanRecalled)), None)
    return GoalFigures(
        goal=goal.id,
        kind=goal.kind,
        valid=bool(verdict.get("valid")),
        planner_calls=len(calls),
        answer_calls=sum(e.purpose == "planner.finish" for e in calls),
        calls_by_model=by_model,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost=cost,
        latency=wall - clock.slept + clock.simulated,
        recall=recalled.mode if recalled is not None else None,
        error={} if verdict.get("valid") else {**verdict, "stop": result.stop.kind},
    )


@dataclass(frozen=True, kw_only=True)
class ConfigFigures:
    """One configuration over the suite."""

    config: Config
    goals: tuple[GoalFigures, ...]

    def part(self, which: Callable[[GoalFigures], bool]) -> ConfigFigures:
        return ConfigFigures(config=self.config, goals=tuple(g for g in self.goals if which(g)))

    @property
    def passed(self) -> int:
        return sum(g.valid for g in self.goals)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.goals) if self.goals else math.nan

    @property
    def planner_calls(self) -> int:
        return sum(g.planner_calls for g in self.goals)

    @property
    def answer_calls(self) -> int:
        return sum(g.answer_calls for g in self.goals)

    @property
    def input_tokens(self) -> int:
        return sum(g.input_tokens for g in self.goals)

    @property
    def output_tokens(self) -> int:
        return sum(g.output_tokens for g in self.goals)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost(self) -> float:
        return sum(g.cost for g in self.goals)

    def latency(self, quantile: float) -> float:
        return _quantile([g.latency for g in self.goals], quantile)

    def calls_by_model(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for g in self.goals:
            for model, n in g.calls_by_model.items():
                total[model] = total.get(model, 0) + n
        return total

    def summary(self) -> dict[str, Any]:
        return {
            "goals": len(self.goals),
            "pass_rate": round(self.pass_rate, 4),
            "planner_calls": self.planner_calls,
            "calls_by_model": self.calls_by_model(),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost, 6),
            "latency_p50_s": round(self.latency(0.5), 3),
            "latency_p90_s": round(self.latency(0.9), 3),
            "recalled": {m: n for m in ("direct", "guided") if (n := sum(g.recall == m for g in self.goals))},
        }


def _quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def run_config(config: Config, goals: Sequence[Goal], *, latency_scale: float) -> ConfigFigures:
    """Run ``goals`` in order under ``config``, with one store (and one memory) for all of them."""
    store = MemoryStore()
    memory = PlanMemory(store) if config.memory else None
    figures = [await run_goal(g, config, store=store, memory=memory, latency_scale=latency_scale) for g in goals]
    return ConfigFigures(config=config, goals=tuple(figures))


# -- the report ------------------------------------------------------------------------------


def _row(label: str, f: ConfigFigures) -> str:
    return (
        f"{label:<26}{f.pass_rate:>7.0%}{f.planner_calls:>8}{f.input_tokens:>10,}{f.output_tokens:>9,}"
        f"{f.cost:>10.4f}{f.latency(0.5):>8.2f}{f.latency(0.9):>8.2f}"
    )


HEADER = (
    f"{'configuration':<26}{'pass':>7}{'calls':>8}{'tok in':>10}{'tok out':>9}{'cost $':>10}{'p50 s':>8}{'p90 s':>8}"
)


def _of_kind(kind: str) -> Callable[[GoalFigures], bool]:
    return lambda g: g.kind == kind


def _by_kind(results: dict[str, ConfigFigures]) -> str:
    """The repeated half by kind: planner tokens memory off → on, and how memory helped."""
    head = f"{'repeated half, by kind':<26}{'goals':>6}{'tokens off -> on':>30}{'direct':>8}{'guided':>8}{'none':>6}"
    lines = [head]
    for off, on in (("a", "b"), ("c", "d")):
        for kind in ("repeat", "reworded", "new_values"):
            before = results[off].part(_of_kind(kind))
            after = results[on].part(_of_kind(kind))
            if not before.tokens:
                continue
            modes = [g.recall for g in after.goals]
            label = f"{results[on].config.label}: {kind}"
            change = f"{before.tokens:,} -> {after.tokens:,} ({after.tokens / before.tokens - 1:+.0%})"
            lines.append(
                f"{label:<26}{len(after.goals):>6}{change:>30}{modes.count('direct'):>8}"
                f"{modes.count('guided'):>8}{modes.count(None):>6}"
            )
    return "\n".join(lines)


def _repeated(g: GoalFigures) -> bool:
    return g.kind != "new"


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("MET" if met else "NOT MET")


def goals_met(results: dict[str, ConfigFigures]) -> list[tuple[str, bool | None, str]]:
    """W12's goals: (goal, met — None when not measured —, the figures behind it)."""
    label = {c.key: c.label for c in CONFIGS}
    unmeasured = "plan memory is not in this build"
    lines: list[tuple[str, bool | None, str]] = []
    for off, on in (("a", "b"), ("c", "d")):
        name = f"memory cuts planner tokens on the repeated half by >= 50 % ({label[on]} vs {label[off]})"
        if on not in results or off not in results:
            lines.append((name, None, unmeasured))
            continue
        before = results[off].part(_repeated).tokens
        after = results[on].part(_repeated).tokens
        cut = 1 - after / before if before else math.nan
        lines.append((name, cut >= 0.5, f"{before:,} -> {after:,} tokens: {cut:.0%} fewer"))
    for on in ("b", "d"):
        name = f"0 planner calls on exact repeats ({label[on]})"
        if on not in results:
            lines.append((name, None, unmeasured))
            continue
        repeats = results[on].part(lambda g: g.kind == "repeat")
        calls, answers = repeats.planner_calls, repeats.answer_calls
        direct = sum(g.recall == "direct" for g in repeats.goals)
        detail = (
            f"{calls} calls on {len(repeats.goals)} repeats ({calls - answers} to plan, {answers} to answer); "
            f"{direct} run directly from memory"
        )
        lines.append((name, calls == 0, detail))
    for strong, ensemble in (("a", "c"), ("b", "d")):
        name = f"ensemble cheaper than strong-only at the same pass rate ({label[ensemble]} vs {label[strong]})"
        if strong not in results or ensemble not in results:
            lines.append((name, None, unmeasured))
            continue
        s, e = results[strong], results[ensemble]
        saved = 1 - e.cost / s.cost if s.cost else math.nan
        detail = f"${s.cost:.4f} -> ${e.cost:.4f} ({saved:.0%} less); passed {s.passed} vs {e.passed}"
        lines.append((name, e.cost < s.cost and e.passed == s.passed, detail))
    return lines


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--goals", type=int, default=None, help="Only the first N goals of the suite.")
    parser.add_argument(
        "--latency-scale", type=float, default=0.2, help="The share of the simulated model latency slept (0: none)."
    )
    args = parser.parse_args(argv)
    goals = load_suite(limit=args.goals)
    configs = CONFIGS
    repeated = sum(g.comes_back for g in goals)
    print(
        f"W12 plan memory and ensembles: {len(goals)} BFCL goals ({len(goals) - repeated} new, {repeated} coming back: "
        f"{sum(g.kind == 'repeat' for g in goals)} repeats, {sum(g.kind == 'reworded' for g in goals)} reworded, "
        f"{sum(g.kind == 'new_values' for g in goals)} with new values); strong {STRONG}, fast {FAST}; "
        f"model latency slept at {args.latency_scale:g}x, printed at full length"
    )
    results: dict[str, ConfigFigures] = {}
    for config in configs:
        figures = await run_config(config, goals, latency_scale=args.latency_scale)
        results[config.key] = figures
        print(json.dumps({"workload": "W12", "config": config.label, **figures.summary()}))
        for half, which in (("repeated", _repeated), ("new", lambda g: not _repeated(g))):
            part = figures.part(which)
            print(json.dumps({"workload": "W12", "config": config.label, "half": half, **part.summary()}))
        for failed in (g for g in figures.goals if not g.valid):
            print(json.dumps({"workload": "W12", "config": config.label, "failed": failed.goal, **failed.error}))
    print()
    print(HEADER)
    for key, f in results.items():
        print(_row(f"({key}) {f.config.label}", f))
        print(_row("      repeated half", f.part(_repeated)))
        print(_row("      new half", f.part(lambda g: not _repeated(g))))
    print()
    print(_by_kind(results))
    print()
    for name, met, detail in goals_met(results):
        print(f"{_verdict(met):<13} {name}: {detail}")


if __name__ == "__main__":
    asyncio.run(main())
