"""Stall detection: a repeated failing call, an identical patch, or no progress for K rounds."""

from __future__ import annotations

from typing import Any

import pytest

from planexec import Agent, Limits, Planner, RunResult, ToolError, tool
from planexec.errors import Stalled
from planexec.log import StallDetected
from planexec.testing import ScriptedModel
from tests.support import events_of, failing_tool_of_n, tool_step, turn


def assert_stalled(result: RunResult, rule: str) -> StallDetected:
    assert result.stop.kind == "stalled", result.stop
    stalls = events_of(result, StallDetected)
    assert len(stalls) == 1
    assert stalls[0].rule == rule
    assert stalls[0].detail == result.stop.detail
    assert result.events[-1].kind == "run_finished"
    with pytest.raises(Stalled) as raised:
        result.raise_for_stop()
    assert raised.value.result is result
    return stalls[0]


async def test_the_same_tool_with_the_same_arguments_failing_again_is_a_stall() -> None:
    calls: list[dict[str, Any]] = []

    @tool
    async def lookup(key: str, limit: int = 10) -> str:
        """Look a key up."""
        calls.append({"key": key, "limit": limit})
        raise ToolError(f"no entry for {key}")

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "lookup", {"key": "k", "limit": 5})]},
            # A new id, but the very same call (argument order does not matter).
            {"reason": "try again", "steps": [tool_step("b", "lookup", {"limit": 5, "key": "k"})]},
        ]
    )
    result = await Agent(planner, tools=[lookup]).run("lookup")

    stall = assert_stalled(result, "repeated_failure")
    assert "lookup failed again with the same arguments" in stall.detail
    assert len(calls) == 2
    planner.assert_consumed()


async def test_the_same_tool_with_other_arguments_is_not_a_stall() -> None:
    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        if key == "bad":
            raise ToolError("no entry")
        return key.upper()

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "lookup", {"key": "bad"})]},
            {"reason": "another key", "steps": [tool_step("b", "lookup", {"key": "good"})]},
            {"answer": "GOOD"},
        ]
    )
    result = await Agent(planner, tools=[lookup]).run("lookup")
    assert result.stop.kind == "goal_met"
    assert events_of(result, StallDetected) == []


async def test_an_identical_patch_twice_is_a_stall() -> None:
    fetch = failing_tool_of_n("item {n} is gone", name="fetch")

    same_patch = {"reason": "fetch the other item", "steps": [tool_step("b", "fetch", {"n": 2})]}
    planner = ScriptedModel([{"steps": [tool_step("a", "fetch", {"n": 1})]}, same_patch, same_patch])
    result = await Agent(planner, tools=[fetch]).run("fetch")

    stall = assert_stalled(result, "identical_patch")
    assert "same patch" in stall.detail
    assert len(result.plans) == 2  # the repeated patch was never installed
    planner.assert_consumed()


async def test_no_new_finished_step_for_k_rounds_is_a_stall() -> None:
    attempt = failing_tool_of_n("attempt {n} failed", name="attempt")

    planner = ScriptedModel(
        [
            {"steps": [tool_step("t1", "attempt", {"n": 1})]},
            {"reason": "try 2", "steps": [tool_step("t2", "attempt", {"n": 2})]},
            {"reason": "try 3", "steps": [tool_step("t3", "attempt", {"n": 3})]},
        ]
    )
    result = await Agent(planner, tools=[attempt], limits=Limits(stall_rounds=2)).run("try")

    stall = assert_stalled(result, "no_progress")
    assert "2 planning rounds" in stall.detail
    assert result.replans == 2
    planner.assert_consumed()  # no third patch was asked for


async def test_a_finished_step_resets_the_no_progress_count() -> None:
    @tool
    async def attempt(n: int) -> str:
        """Odd attempts fail; even ones work."""
        if n % 2:
            raise ToolError(f"attempt {n} failed")
        return f"ok {n}"

    planner = ScriptedModel(
        [
            {"steps": [tool_step("t1", "attempt", {"n": 1})]},
            {
                "reason": "two steps",
                "steps": [tool_step("t2", "attempt", {"n": 2}), tool_step("t3", "attempt", {"n": 3})],
            },
            {"reason": "last try", "steps": [tool_step("t4", "attempt", {"n": 4})]},
            {"answer": "done"},
        ]
    )
    result = await Agent(planner, tools=[attempt], limits=Limits(stall_rounds=2)).run("try")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"t2": "ok 2", "t4": "ok 4"}


async def test_step_by_step_turns_without_progress_are_a_stall() -> None:
    attempt = failing_tool_of_n("attempt {n} failed", name="attempt")

    turns = [turn(tool_step(f"t{n}", "attempt", {"n": n}), f"try {n}", 0.5) for n in (1, 2)]
    planner = Planner(model=ScriptedModel(turns), policy="step")
    result = await Agent(planner, tools=[attempt], limits=Limits(stall_rounds=1)).run("try")
    assert_stalled(result, "no_progress")
