"""Scheduling: independent steps run at once, a step starts when its own dependencies are done,
the longest chain goes first, and per-tool and per-executor limits hold.

No test here measures time: concurrency is proven with barriers that only open when every
sibling has started (a serial scheduler would never open them; the wall-time budget is only a
safety net that turns such a deadlock into a failed assertion instead of a hang).
"""

from __future__ import annotations

import asyncio
from typing import Any

from planexec import Agent, Limits, ToolContext, ToolExecutor, tool
from planexec.log import StepStarted, StepSucceeded
from planexec.testing import ScriptedModel
from tests.support import SAFETY, tool_step


class Barrier:
    """Opens when ``parties`` callers have arrived; every caller waits until then."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived: list[str] = []
        self.open = asyncio.Event()

    async def wait(self, who: str) -> None:
        self.arrived.append(who)
        if len(self.arrived) >= self.parties:
            self.open.set()
        await self.open.wait()


def started_order(events: Any) -> list[str]:
    return [e.step_id for e in events if isinstance(e, StepStarted)]


async def test_fan_out_runs_siblings_concurrently_and_fan_in_waits_for_all() -> None:
    barrier = Barrier(3)
    finished: list[str] = []
    seen_by_join: list[list[str]] = []

    @tool
    async def part(name: str) -> str:
        """Fetch one part; waits until every sibling has started."""
        await barrier.wait(name)
        finished.append(name)
        return name.upper()

    @tool
    async def join(parts: list[str]) -> str:
        """Join the parts."""
        seen_by_join.append(list(finished))
        return "+".join(parts)

    plan = {
        "steps": [
            tool_step("a", "part", {"name": "a"}),
            tool_step("b", "part", {"name": "b"}),
            tool_step("c", "part", {"name": "c"}),
            tool_step("j", "join", {"parts": ["${a}", "${b}", "${c}"]}, "a", "b", "c"),
        ]
    }
    planner = ScriptedModel([plan, {"answer": "A+B+C"}])
    result = await Agent(planner, tools=[part, join], budget=SAFETY).run("fan out")

    assert result.stop.kind == "goal_met", result.stop
    assert sorted(barrier.arrived) == ["a", "b", "c"]
    assert result.outputs["j"] == "A+B+C"
    assert len(seen_by_join) == 1
    assert sorted(seen_by_join[0]) == ["a", "b", "c"]  # the join ran after every part had finished

    # In the log, all three siblings start before any of them succeeds, and the join starts
    # only after all three succeeded.
    position = {(e.kind, getattr(e, "step_id", None)): i for i, e in enumerate(result.events)}
    first_success = min(position[("step_succeeded", s)] for s in "abc")
    assert all(position[("step_started", s)] < first_success for s in "abc")
    assert position[("step_started", "j")] > max(position[("step_succeeded", s)] for s in "abc")


async def test_a_step_starts_when_its_own_dependencies_are_done_not_layer_by_layer() -> None:
    # slow blocks until fast2 runs; fast2 depends on fast1 only. A layer-by-layer scheduler
    # would wait for slow (layer 1) before starting fast2 (layer 2) and never finish.
    release_slow = asyncio.Event()

    @tool
    async def slow() -> str:
        """Block until the fast branch has reached its second step."""
        await release_slow.wait()
        return "slow"

    @tool
    async def fast(label: str) -> str:
        """Return at once."""
        return label

    @tool
    async def fast_then_release(label: str) -> str:
        """The fast branch's second step: it lets the slow sibling go."""
        assert not release_slow.is_set()
        release_slow.set()
        return label

    @tool
    async def merge(left: str, right: str) -> str:
        """Merge two results."""
        return f"{left}|{right}"

    plan = {
        "steps": [
            tool_step("slow1", "slow", {}),
            tool_step("fast1", "fast", {"label": "f1"}),
            tool_step("fast2", "fast_then_release", {"label": "${fast1}"}, "fast1"),
            tool_step("join", "merge", {"left": "${slow1}", "right": "${fast2}"}, "slow1", "fast2"),
        ]
    }
    planner = ScriptedModel([plan, {"answer": "done"}])
    result = await Agent(planner, tools=[slow, fast, fast_then_release, merge], budget=SAFETY).run("branches")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs["join"] == "slow|f1"
    position = {(e.kind, getattr(e, "step_id", None)): i for i, e in enumerate(result.events)}
    assert position[("step_started", "fast2")] < position[("step_succeeded", "slow1")]
    assert position[("step_started", "join")] > position[("step_succeeded", "slow1")]


async def test_critical_path_first_when_only_one_step_may_run() -> None:
    @tool
    async def work(label: str) -> str:
        """Do a piece of work."""
        return label

    plan = {
        "steps": [
            tool_step("short", "work", {"label": "s"}),
            tool_step("long1", "work", {"label": "l1"}),
            tool_step("long2", "work", {"label": "l2"}, "long1"),
            tool_step("long3", "work", {"label": "l3"}, "long2"),
        ]
    }
    planner = ScriptedModel([plan, {"answer": "done"}])
    result = await Agent(planner, tools=[work], limits=Limits(max_concurrency=1)).run("chain")

    assert result.stop.kind == "goal_met"
    order = started_order(result.events)
    # long1 heads a chain of three, so it goes before short although short comes first in the
    # plan; after it, long2 (chain of two) still beats short; then ties keep the plan's order.
    assert order[0] == "long1"
    assert order == ["long1", "long2", "short", "long3"]


async def test_critical_path_counts_the_whole_chain_behind_a_step() -> None:
    @tool
    async def work(label: str) -> str:
        """Do a piece of work."""
        return label

    # b has one dependent chain of length 3 behind it; a has two short dependents.
    plan = {
        "steps": [
            tool_step("a", "work", {"label": "a"}),
            tool_step("a1", "work", {"label": "a1"}, "a"),
            tool_step("a2", "work", {"label": "a2"}, "a"),
            tool_step("b", "work", {"label": "b"}),
            tool_step("b1", "work", {"label": "b1"}, "b"),
            tool_step("b2", "work", {"label": "b2"}, "b1"),
            tool_step("b3", "work", {"label": "b3"}, "b2"),
        ]
    }
    planner = ScriptedModel([plan, {"answer": "done"}])
    result = await Agent(planner, tools=[work], limits=Limits(max_concurrency=1)).run("chains")
    assert result.stop.kind == "goal_met"
    order = started_order(result.events)
    assert order[0] == "b"
    assert order.index("b1") < order.index("a")


async def test_per_tool_max_concurrency_serializes_that_tool_only() -> None:
    barrier = Barrier(2)  # one limited call and the free call must be in flight together
    active = 0
    most = 0

    @tool(max_concurrency=1)
    async def limited(n: int) -> int:
        """A tool that may run once at a time."""
        nonlocal active, most
        active += 1
        most = max(most, active)
        await barrier.wait(f"limited{n}")
        for _ in range(5):
            await asyncio.sleep(0)  # yield, so that an unlimited scheduler would overlap calls
        active -= 1
        return n

    @tool
    async def free() -> str:
        """A tool without a limit."""
        await barrier.wait("free")
        return "free"

    plan = {
        "steps": [
            tool_step("l1", "limited", {"n": 1}),
            tool_step("l2", "limited", {"n": 2}),
            tool_step("l3", "limited", {"n": 3}),
            tool_step("f", "free", {}),
        ]
    }
    planner = ScriptedModel([plan, {"answer": "done"}])
    result = await Agent(planner, tools=[limited, free], budget=SAFETY).run("limits")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"l1": 1, "l2": 2, "l3": 3, "f": "free"}
    assert most == 1
    _assert_never_overlapping(result.events, {"l1", "l2", "l3"})


async def test_per_executor_max_concurrency_with_a_named_tool_executor() -> None:
    barrier = Barrier(2)  # one sql step and the unrouted step must be in flight together
    active: dict[str, int] = {"sql": 0}
    most: dict[str, int] = {"sql": 0}

    @tool
    async def query(sql: str, ctx: ToolContext) -> str:
        """Run a query."""
        routed = ctx.step_id.startswith("q")
        if routed:
            active["sql"] += 1
            most["sql"] = max(most["sql"], active["sql"])
        await barrier.wait(ctx.step_id)
        for _ in range(5):
            await asyncio.sleep(0)
        if routed:
            active["sql"] -= 1
        return sql.lower()

    plan = {
        "steps": [
            tool_step("q1", "query", {"sql": "A"}, executor="sql"),
            tool_step("q2", "query", {"sql": "B"}, executor="sql"),
            tool_step("q3", "query", {"sql": "C"}, executor="sql"),
            tool_step("other", "query", {"sql": "D"}),
        ]
    }
    planner = ScriptedModel([plan, {"answer": "done"}])
    agent = Agent(planner, tools=[query], executors=[ToolExecutor(name="sql", max_concurrency=1)], budget=SAFETY)
    result = await agent.run("queries")

    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"q1": "a", "q2": "b", "q3": "c", "other": "d"}
    assert most["sql"] == 1
    executors = {e.step_id: e.executor for e in result.events if isinstance(e, StepStarted)}
    assert executors == {"q1": "sql", "q2": "sql", "q3": "sql", "other": "tools"}
    assert {rec.executor for sid, rec in result.steps.items() if sid.startswith("q")} == {"sql"}
    _assert_never_overlapping(result.events, {"q1", "q2", "q3"})


async def test_global_max_concurrency_caps_steps_in_flight() -> None:
    active = 0
    most = 0

    @tool
    async def work(n: int) -> int:
        """Do a piece of work."""
        nonlocal active, most
        active += 1
        most = max(most, active)
        for _ in range(5):
            await asyncio.sleep(0)
        active -= 1
        return n

    plan = {"steps": [tool_step(f"s{i}", "work", {"n": i}) for i in range(6)]}
    planner = ScriptedModel([plan, {"answer": "done"}])
    result = await Agent(planner, tools=[work], limits=Limits(max_concurrency=2)).run("many")
    assert result.stop.kind == "goal_met"
    assert result.outputs == {f"s{i}": i for i in range(6)}
    assert most == 2


def _assert_never_overlapping(events: Any, ids: set[str]) -> None:
    running: set[str] = set()
    for e in events:
        if isinstance(e, StepStarted) and e.step_id in ids:
            assert not running, f"{e.step_id} started while {running} ran"
            running.add(e.step_id)
        elif isinstance(e, StepSucceeded) and e.step_id in ids:
            running.discard(e.step_id)
