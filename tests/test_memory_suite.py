"""The W12 suite (benchmarks/side/plan_memory.py) kept from rotting: its 50 goals load and their
ground truths pass BFCL's checks, and a cut-down run of the configurations gives the figures the
benchmark prints. No time is asserted here: speed is measured in the benchmark."""

from __future__ import annotations

import os

import pytest

bfcl = pytest.importorskip("bfcl_eval") if os.environ.get("CI", "").lower() != "true" else None

from benchmarks.side.plan_memory import (  # noqa: E402
    CONFIGS,
    FAST,
    STRONG,
    fast_mistake,
    goals_met,
    main,
    run_config,
)
from benchmarks.side.plan_memory_suite import check_suite, load_suite  # noqa: E402

CUT_DOWN = 9
"""g01 … g09: a two-call goal, a three-call one the fast model is unsure of, an exact repeat, a
goal with new values, and a four-call one the fast model plans wrongly."""


async def test_the_suite_has_50_goals_half_of_them_coming_back_and_every_ground_truth_passes() -> None:
    goals = load_suite()
    assert len(goals) == 50
    kinds = [g.kind for g in goals]
    assert kinds.count("new") == 25
    assert {k: kinds.count(k) for k in ("repeat", "reworded", "new_values")} == {
        "repeat": 9,
        "reworded": 8,
        "new_values": 8,
    }
    for i, goal in enumerate(goals):
        earlier = [g for g in goals[:i] if g.kind == "new"]
        same_calls = [g for g in earlier if g.calls == goal.calls]
        if goal.kind == "repeat":
            assert any(g.request == goal.request for g in same_calls)
        if goal.kind == "reworded":
            assert same_calls
            assert all(g.request != goal.request for g in earlier)
        if goal.kind == "new_values":
            assert not same_calls
            assert goal.changes
            assert all(new in " ".join(goal.calls) for _, new in goal.changes)
    assert await check_suite(goals) == []


def test_the_fast_model_fails_by_the_size_of_the_goal() -> None:
    assert [fast_mistake(n) for n in (1, 2, 3, 4, 7)] == [None, None, "unsure", "invalid", "invalid"]


async def test_a_cut_down_run_passes_every_goal_and_the_ensemble_escalates_only_where_the_fast_model_fails() -> None:
    goals = load_suite(limit=CUT_DOWN)
    strong = await run_config(CONFIGS[0], goals, latency_scale=0)
    ensemble = await run_config(CONFIGS[2], goals, latency_scale=0)
    assert strong.pass_rate == ensemble.pass_rate == 1.0
    assert strong.calls_by_model() == {STRONG: 2 * CUT_DOWN}  # a plan and an answer per goal
    escalated = [g.goal for g in ensemble.goals if STRONG in g.calls_by_model]
    assert escalated == [g.id for g in goals if fast_mistake(len(g.calls)) is not None] == ["g03", "g09"]
    g09 = next(g for g in ensemble.goals if g.goal == "g09")
    assert g09.calls_by_model == {FAST: 4, STRONG: 1}  # a wrong plan, two repairs, then the strong model
    assert 0 < ensemble.cost < strong.cost
    assert all(g.input_tokens > g.output_tokens > 0 for g in strong.goals)
    met = {name: ok for name, ok, _ in goals_met({"a": strong, "c": ensemble})}
    assert met["ensemble cheaper than strong-only at the same pass rate (ensemble vs strong)"] is True
    assert met["0 planner calls on exact repeats (strong+mem)"] is None  # not run


async def test_with_memory_an_exact_repeat_and_new_values_run_from_the_remembered_plan() -> None:
    goals = load_suite(limit=CUT_DOWN)
    for off, on in ((CONFIGS[0], CONFIGS[1]), (CONFIGS[2], CONFIGS[3])):
        without = await run_config(off, goals, latency_scale=0)
        with_memory = await run_config(on, goals, latency_scale=0)
        assert with_memory.pass_rate == 1.0
        by_goal = {g.goal: g for g in with_memory.goals}
        assert [g.goal for g in with_memory.goals if g.recall is not None] == ["g04", "g07"]
        for repeated in ("g04", "g07"):  # the repeat of g01, and g01 with another directory's name
            assert by_goal[repeated].recall == "direct"
            assert by_goal[repeated].planner_calls == 0
        assert all(g.recall is None for g in without.goals)
        assert with_memory.tokens < without.tokens


async def test_the_benchmark_prints_its_table_and_says_which_goals_are_met(capsys: pytest.CaptureFixture[str]) -> None:
    await main(["--goals", str(CUT_DOWN), "--latency-scale", "0"])
    out = capsys.readouterr().out
    assert "(a) strong" in out
    assert "(c) ensemble" in out
    assert "(d) ensemble+mem" in out
    assert "MET           ensemble cheaper than strong-only" in out
    assert "0 planner calls on exact repeats (strong+mem)" in out
    assert "repeated half, by kind" in out
