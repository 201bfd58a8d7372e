"""Replay: a run re-executed from its log, with no model and no tool called, reproduces the log;
a fork goes on live from any event; an injected fault shows how the planner reacts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from planexec import (
    Agent,
    ApprovalDecision,
    ApprovalRequest,
    Approvals,
    Budget,
    Planner,
    RetryPolicy,
    ToolError,
    TransientToolError,
    tool,
)
from planexec.demo import build_demo
from planexec.log import Event, RunStarted, StepAttemptFailed, StepStarted
from planexec.models import ModelRequest
from planexec.runtime import Fault, RunContext, replay_log
from planexec.store import MemoryStore
from planexec.testing import FunctionModel, ScriptedModel, tool_calls
from planexec.tools import Tool

from .support import tool_step


def counting_tools(calls: list[str]) -> list[Tool]:
    @tool
    async def fetch(item: str) -> str:
        """Fetch an item."""
        calls.append(item)
        if item == "broken":
            raise ToolError("the source is gone")
        return f"data:{item}"

    flaky_left = [2]

    @tool(retry=RetryPolicy(initial_delay=0, max_attempts=3))
    async def flaky(item: str) -> str:
        """Fails twice, then works."""
        calls.append(f"flaky:{item}")
        if flaky_left[0]:
            flaky_left[0] -= 1
            raise TransientToolError("busy")
        return f"ok:{item}"

    @tool(sensitive=True)
    async def wipe(path: str) -> str:
        """Wipe a path."""
        calls.append(f"wipe:{path}")
        return f"wiped {path}"

    return [fetch, flaky, wipe]


async def record(agent: Agent, goal: str = "do it") -> tuple[MemoryStore, str]:
    result = await agent.run(goal, run_id="rec")
    assert result.stop.kind != "waiting"
    store = agent.store
    assert isinstance(store, MemoryStore)
    return store, "rec"


async def assert_replays(store: MemoryStore, run_id: str) -> None:
    log = [s.event for s in await store.read(run_id)]
    report = await replay_log(log)
    assert report.divergence is None
    assert report.matched
    assert report.compared == len(log)
    assert list(report.events) == log  # times and ids are the recorded ones: data, not the clock


def patching_planner() -> ScriptedModel:
    return ScriptedModel(
        [
            {
                "steps": [
                    tool_step("a", "fetch", {"item": "a"}),
                    tool_step("b", "fetch", {"item": "broken"}),
                    tool_step("c", "flaky", {"item": "${a}"}, "a"),
                    tool_step("d", "fetch", {"item": "${b}"}, "b"),
                ]
            },
            {"reason": "b is gone; use a", "steps": [tool_step("d2", "fetch", {"item": "${a} again"})]},
            {"answer": "done"},
        ]
    )


async def test_a_run_with_a_failure_a_patch_and_retries_replays_exactly() -> None:
    calls: list[str] = []
    store, run_id = await record(Agent(patching_planner(), tools=counting_tools(calls), store=MemoryStore()))
    before = list(calls)
    await assert_replays(store, run_id)
    assert calls == before  # no tool was called


async def test_the_demo_replays_exactly(tmp_path: Path) -> None:
    store = MemoryStore()
    demo = build_demo(tmp_path, pace=0, store=store)
    result = await demo.agent.run(demo.goal, constraints=demo.constraints, run_id="demo")
    assert result.stop.kind == "goal_met"
    await assert_replays(store, "demo")


async def test_model_executor_steps_budget_stops_and_step_policy_replay_exactly() -> None:
    calls: list[str] = []
    executor = ScriptedModel([tool_calls(("fetch", {"item": "x"})), "the answer is data:x"])
    planner = ScriptedModel(
        [
            {
                "steps": [
                    {"id": "think", "description": "find x"},
                    tool_step("f", "fetch", {"item": "${think}"}, "think"),
                ]
            },
            {"answer": "x"},
        ]
    )
    agent = Agent(planner, tools=counting_tools(calls), executor=executor, store=MemoryStore())
    await assert_replays(*(await record(agent)))

    budget_planner = ScriptedModel([{"steps": [tool_step(f"s{i}", "fetch", {"item": str(i)}) for i in range(4)]}])
    agent = Agent(budget_planner, tools=counting_tools(calls), store=MemoryStore(), budget=Budget(tool_calls=2))
    store, run_id = await record(agent)
    assert (await store.get_run(run_id)).stop_kind == "budget_exhausted"  # type: ignore[union-attr]
    await assert_replays(store, run_id)

    turns = ScriptedModel(
        [
            {"thought": "fetch a", "confidence": 0.9, "stop": False, "step": tool_step("a", "fetch", {"item": "a"})},
            {"thought": "enough", "confidence": 0.9, "stop": True, "answer": "data:a"},
        ]
    )
    agent = Agent(Planner(model=turns, policy="step"), tools=counting_tools(calls), store=MemoryStore())
    await assert_replays(*(await record(agent)))


async def test_approvals_given_by_a_callback_replay_without_asking_again() -> None:
    asked: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, by="carol", reason="fine")

    planner = ScriptedModel([{"steps": [tool_step("w", "wipe", {"path": "/tmp/x"})]}, {"answer": "wiped"}])
    agent = Agent(planner, tools=counting_tools([]), store=MemoryStore(), approvals=Approvals(approver=approver))
    store, run_id = await record(agent)
    assert len(asked) == 1
    await assert_replays(store, run_id)
    assert len(asked) == 1


async def test_a_run_resumed_after_a_suspension_replays_across_the_restart() -> None:
    planner = FunctionModel(
        lambda r: (
            {"steps": [tool_step("w", "wipe", {"path": "/a"})]} if r.purpose == "planner.propose" else {"answer": "ok"}
        )
    )
    store = MemoryStore()
    agent = Agent(planner, tools=counting_tools([]), store=store, approvals=Approvals(deferred=True))
    first = await agent.run("wipe", run_id="sus")
    assert first.stop.kind == "waiting"
    run = await agent.resume("sus")
    run.decide(first.events[-1].approvals[0], approved=True)  # type: ignore[union-attr]
    assert (await run.result()).stop.kind == "goal_met"
    await assert_replays(store, "sus")


async def test_a_tampered_log_is_reported_at_the_first_event_that_differs() -> None:
    calls: list[str] = []
    store, run_id = await record(Agent(patching_planner(), tools=counting_tools(calls), store=MemoryStore()))
    log = [s.event for s in await store.read(run_id)]
    index = next(i for i, e in enumerate(log) if isinstance(e, StepStarted) and e.step_id == "c")
    started = log[index]
    assert isinstance(started, StepStarted)
    log[index] = replace(started, args={"item": "something else"})
    report = await replay_log(log)
    assert not report.matched
    assert report.compared == index
    assert report.divergence is not None
    assert f"event {index + 1}" in report.divergence


async def test_a_fork_keeps_the_log_up_to_the_fork_point_and_goes_on_live() -> None:
    calls: list[str] = []
    store, run_id = await record(Agent(patching_planner(), tools=counting_tools(calls), store=MemoryStore()))
    log = [s.event for s in await store.read(run_id)]
    fork_at = next(i for i, e in enumerate(log) if e.kind == "planning_started" and i > 3)  # before the patch
    other = ScriptedModel(
        [{"reason": "a different patch", "steps": [tool_step("e", "fetch", {"item": "new"})]}, {"answer": "forked"}]
    )
    agent = Agent(other, tools=counting_tools(calls), store=store)
    calls.clear()
    report = await agent.replay(run_id, fork_at=fork_at, new_run_id="fork")
    assert report.matched
    assert report.result is not None
    assert report.result.answer == "forked"
    assert report.run_id == "fork"
    forked = [s.event for s in await store.read("fork")]
    assert isinstance(forked[0], RunStarted)
    assert forked[0].run_id == "fork"

    def same(e: Event) -> Event:
        e = replace(e, at=0.0)  # the fork's events happen on its own clock
        return replace(e, idempotency_key=None) if isinstance(e, StepStarted) else e

    assert [same(e) for e in forked[1:fork_at]] == [same(e) for e in log[1:fork_at]]
    assert calls == ["new"]  # only the live part called tools
    assert (await store.get_run(run_id)) is not None  # the original run is untouched


class Ticks:
    """A clock that moves ``step`` seconds each time it is read, from ``start``."""

    def __init__(self, start: float, step: float) -> None:
        self.now, self.step = start, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize("how", ["fork_at", "fault"])
async def test_a_fork_is_timed_on_its_own_clock(how: str) -> None:
    """A fork made long after the recorded run reports its own wall time, not the time since the
    recorded run started."""
    calls: list[str] = []
    recording = Agent(
        patching_planner(),
        tools=counting_tools(calls),
        store=MemoryStore(),
        context=RunContext(clock=Ticks(1_000.0, 1.0)),
    )
    store, run_id = await record(recording)
    log = [s.event for s in await store.read(run_id)]
    assert log[-1].at - log[0].at > 10  # the recorded run took its own time
    other = ScriptedModel(
        [{"reason": "a different patch", "steps": [tool_step("e", "fetch", {"item": "new"})]}, {"answer": "forked"}]
    )
    fork_clock = Ticks(50_000.0, 0.001)
    agent = Agent(other, tools=counting_tools(calls), store=store, context=RunContext(clock=fork_clock))
    if how == "fork_at":
        fork_at = next(i for i, e in enumerate(log) if e.kind == "planning_started" and i > 3)
        report = await agent.replay(run_id, fork_at=fork_at, new_run_id="fork")
    else:
        report = await agent.replay(run_id, fault=Fault(step_id="b"), new_run_id="fork")
    assert report.matched
    result = report.result
    assert result is not None
    times = [stored.event.at for stored in await store.read("fork")]
    assert 50_000.0 < result.started_at == times[0]
    assert times == sorted(times)
    assert result.finished_at == times[-1] <= fork_clock.now
    assert 0 < result.duration < 1  # the fork's clock moved less than a second in all


async def test_an_injected_fault_shows_how_the_planner_reacts() -> None:
    calls: list[str] = []
    store, run_id = await record(Agent(patching_planner(), tools=counting_tools(calls), store=MemoryStore()))
    seen: list[str] = []

    def react(request: ModelRequest) -> Any:
        if request.purpose == "planner.patch":
            seen.append(request.last_user_text)
            return {"reason": "a failed: try another source", "steps": [tool_step("a2", "fetch", {"item": "mirror"})]}
        return {"answer": "recovered"}

    agent = Agent(FunctionModel(react), tools=counting_tools(calls), store=store)
    report = await agent.replay(run_id, fault=Fault(step_id="a", kind="timeout", message="injected timeout"))
    assert report.result is not None
    assert report.result.answer == "recovered"
    assert any("injected timeout" in text for text in seen)
    assert report.result.steps["a"].status == "failed"


async def test_replaying_an_unknown_or_unrecorded_log_is_a_usage_error() -> None:
    agent = Agent(ScriptedModel([]), tools=[], store=MemoryStore())
    with pytest.raises(Exception, match="no run"):
        await agent.replay("nope")
    with pytest.raises(Exception, match="begin with run_started"):
        await replay_log([])


async def test_a_replay_under_a_fault_profile_goes_live_at_the_first_spoiled_call_reproducibly() -> None:
    from planexec.faults import FaultProfile

    calls: list[str] = []
    store, run_id = await record(Agent(patching_planner(), tools=counting_tools(calls), store=MemoryStore()))
    recorded = [s.event for s in await store.read(run_id)]

    def react(request: ModelRequest) -> Any:
        if request.purpose == "planner.patch":
            return {"reason": "work around the faults", "steps": [tool_step("z", "fetch", {"item": "plain"})]}
        return {"answer": "survived"}

    async def replay_once(seed: int) -> list[str]:
        agent = Agent(FunctionModel(react), tools=counting_tools(calls), store=store)
        profile = FaultProfile(seed=seed, tool_error_rate=0.6)
        report = await agent.replay(run_id, faults=profile)
        assert report.result is not None
        assert report.matched  # the part before the first spoiled call is the recorded run
        injected = [e for e in report.events if isinstance(e, StepAttemptFailed) and "injected" in e.error.message]
        assert injected, "the profile spoiled no call"
        return [e.kind for e in report.events]

    first = await replay_once(3)
    assert first == await replay_once(3)  # the same seed spoils the same calls
    assert first != [e.kind for e in recorded]
