"""Side effects and plan patches: no call that may change the world is made twice because the plan
was replaced while it was under way, or about to be."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from planexec import Agent, Budget, Run, tool
from planexec.log import (
    PlannerOutputRejected,
    PlanProposed,
    StepCancelled,
    StepStarted,
    StepStreamed,
    StepSucceeded,
)
from planexec.models import ModelRequest
from planexec.runtime import replay_log
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel, StreamingScriptedModel
from tests.support import SAFETY, Blocker, events_of, failing_tool, tool_step


class Payments:
    """A side-effecting tool that records every payment; it waits for ``release`` when ``blocking``."""

    def __init__(self, *, blocking: bool = False) -> None:
        self.paid: list[int] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        if not blocking:
            self.release.set()

        @tool(side_effect=True)
        async def pay(amount: int) -> str:
            """Pay ``amount``."""
            self.paid.append(amount)
            self.started.set()
            await self.release.wait()
            return f"paid {amount}"

        self.tool = pay


def position(events: list[Any], wanted: Any) -> int:
    return next(i for i, e in enumerate(events) if e is wanted)


class Watch:
    """Waits, from inside a run's model or tool, for an event of the run to be logged."""

    def __init__(self) -> None:
        self.run: Run | None = None

    async def until(self, kind: type[Any], step_id: str) -> None:
        assert self.run is not None
        async for event in self.run.events():
            if isinstance(event, kind) and getattr(event, "step_id", None) == step_id:
                return


async def test_a_side_effect_that_became_ready_while_the_plan_was_patched_waits_for_the_patch() -> None:
    """a fails; while the planner patches, d finishes and the payment b becomes ready. b waits for
    the patch, which drops it and asks for the same payment as b2: it is paid once. The read-only
    step e, ready at the same moment, runs meanwhile."""
    payments = Payments()
    lookup = Blocker("lookup")
    watch = Watch()

    @tool
    async def note() -> str:
        """Take a note (read-only)."""
        return "noted"

    async def patch(request: ModelRequest) -> dict[str, Any]:
        lookup.release.set()  # d finishes while the planner works...
        await watch.until(StepSucceeded, "e")  # ...and what depends on it is ready (e, read-only, even ran)
        return {"reason": "pay under a new id", "steps": [tool_step("b2", "pay", {"amount": 10})]}

    planner = ScriptedModel(
        [
            {
                "steps": [
                    tool_step("a", "fails", {}),
                    tool_step("d", "lookup", {"label": "d"}),
                    tool_step("b", "pay", {"amount": 10}, "d"),
                    tool_step("e", "note", {}, "d"),
                ]
            },
            patch,
            {"answer": "paid"},
        ]
    )
    store = MemoryStore()
    agent = Agent(planner, tools=[failing_tool(), lookup.tool, payments.tool, note], budget=SAFETY, store=store)
    watch.run = agent.start("pay once")
    result = await watch.run.result()

    assert result.stop.kind == "goal_met", result.stop
    assert payments.paid == [10]
    assert [e.step_id for e in events_of(result, StepStarted) if e.tool == "pay"] == ["b2"]
    assert [r.status for r in result.superseded if r.id == "b"] == ["dropped"]
    assert events_of(result, StepCancelled) == []
    # e, read-only, started and finished before the patch was in force
    events = list(result.events)
    patched = next(e for e in events_of(result, PlanProposed) if e.plan.version == 2)
    e_done = next(e for e in events_of(result, StepSucceeded) if e.step_id == "e")
    assert position(events, e_done) < position(events, patched)
    assert result.outputs["b2"] == "paid 10"

    # the log replays exactly
    report = await replay_log([s.event for s in await store.read(result.run_id)])
    assert report.matched, report.divergence


async def test_a_side_effect_kept_by_the_patch_starts_once_it_is_in_force() -> None:
    """The payment that waited for the patch starts when the patch keeps it unchanged."""
    payments = Payments()
    lookup = Blocker("lookup")
    watch = Watch()
    b = tool_step("b", "pay", {"amount": 10}, "d")

    async def patch(request: ModelRequest) -> dict[str, Any]:
        lookup.release.set()
        await watch.until(StepSucceeded, "d")  # b is ready now, and is not started
        return {"reason": "keep b", "steps": [tool_step("c", "lookup", {"label": "c"}), b]}

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {}), tool_step("d", "lookup", {"label": "d"}), b]},
            patch,
            {"answer": "paid"},
        ]
    )
    watch.run = Agent(planner, tools=[failing_tool(), lookup.tool, payments.tool], budget=SAFETY).start("pay")
    result = await watch.run.result()

    assert result.stop.kind == "goal_met", result.stop
    assert payments.paid == [10]
    assert result.steps["b"].status == "succeeded"
    events = list(result.events)
    started = next(e for e in events_of(result, StepStarted) if e.step_id == "b")
    patched = next(e for e in events_of(result, PlanProposed) if e.plan.version == 2)
    assert position(events, patched) < position(events, started)


async def test_a_running_side_effect_is_not_cancelled_by_a_patch_that_drops_it() -> None:
    """b pays and is still running when a fails. The patch drops b: b is not called back; it runs
    to its end, stays in the new plan version, and its result is recorded."""
    payments = Payments(blocking=True)
    fails = failing_tool("broken", after=payments.started)

    @tool
    async def quick() -> str:
        """Return at once, and let the payment finish."""
        payments.release.set()
        return "quick"

    seen: list[str] = []

    def patch(request: ModelRequest) -> dict[str, Any]:
        seen.append("\n".join(str(m.content) for m in request.messages))
        return {"reason": "b is no longer wanted", "steps": [tool_step("c", "quick", {})]}

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {}), tool_step("b", "pay", {"amount": 10})]},
            patch,
            {"answer": "done"},
        ]
    )
    result = await Agent(planner, tools=[payments.tool, fails, quick], budget=SAFETY).run("pay")

    assert result.stop.kind == "goal_met", result.stop
    assert payments.paid == [10]
    assert events_of(result, StepCancelled) == []
    patched = next(e for e in events_of(result, PlanProposed) if e.plan.version == 2)
    assert patched.cancelled == ()
    assert [s.id for s in patched.plan.steps] == ["b", "c"]
    assert result.steps["b"].status == "succeeded"
    assert result.outputs == {"b": "paid 10", "c": "quick"}
    # the planner was told, and saw b running
    assert re.search(r"^- b pay .* running$", seen[0], re.MULTILINE), seen[0]
    assert "cannot be stopped" in seen[0]


async def test_a_read_only_running_step_a_patch_drops_is_still_cancelled() -> None:
    blocker = Blocker()
    fails = failing_tool("broken", after=blocker.started)

    @tool
    async def quick() -> str:
        """Return at once."""
        return "quick"

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {}), tool_step("b", "block", {"label": "b"})]},
            {"reason": "b is no longer needed", "steps": [tool_step("c", "quick", {})]},
            {"answer": "quick"},
        ]
    )
    result = await Agent(planner, tools=[blocker.tool, fails, quick], budget=SAFETY).run("cancel b")

    assert result.stop.kind == "goal_met", result.stop
    assert blocker.cancelled
    assert not blocker.completed
    assert [e.step_id for e in events_of(result, StepCancelled)] == ["b"]


async def test_a_patch_that_redefines_a_running_side_effect_is_sent_back() -> None:
    """Giving the running payment's id to another step fails the checks (``running_id``); the
    repaired patch keeps it, and it is paid once."""
    payments = Payments(blocking=True)
    fails = failing_tool("broken", after=payments.started)
    b = tool_step("b", "pay", {"amount": 10})

    @tool
    async def quick() -> str:
        """Return at once, and let the payment finish."""
        payments.release.set()
        return "quick"

    planner = ScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {}), b]},
            {"reason": "pay more", "steps": [tool_step("b", "pay", {"amount": 20})]},
            {"reason": "keep b", "steps": [b, tool_step("c", "quick", {})]},
            {"answer": "done"},
        ]
    )
    result = await Agent(planner, tools=[payments.tool, fails, quick], budget=SAFETY).run("pay")

    assert result.stop.kind == "goal_met", result.stop
    assert payments.paid == [10]
    rejected = events_of(result, PlannerOutputRejected)
    assert [p.code for e in rejected for p in e.problems] == ["running_id"]
    assert events_of(result, StepCancelled) == []
    assert result.outputs == {"b": "paid 10", "c": "quick"}


async def test_a_planner_that_keeps_redefining_a_running_side_effect_stops_the_run() -> None:
    """A hostile planner that answers every repair by redefining the running payment: the run
    ends with a typed stop, within its repairs, and the payment is made once."""
    payments = Payments(blocking=True)
    fails = failing_tool("broken", after=payments.started)
    calls = 0

    def hostile(request: ModelRequest) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"reason": "again", "steps": [tool_step("b", "pay", {"amount": 10 + calls})]}

    planner = ScriptedModel(
        [{"steps": [tool_step("a", "fails", {}), tool_step("b", "pay", {"amount": 10})]}] + [hostile] * 3
    )
    run = Agent(planner, tools=[payments.tool, fails], budget=Budget(wall_time=30, replans=5)).start("pay")
    result = await run.result()

    assert result.stop.kind == "error", result.stop
    assert result.stop.code == "planner_output"
    assert "running_id" in result.stop.detail
    assert payments.paid == [10]
    assert calls == 3  # the answer, and two repairs


async def test_a_payment_approved_while_the_plan_is_patched_waits_and_is_not_repeated() -> None:
    """b was dispatched before a failed and waited for a human's approval; the approval comes while
    the planner patches. b does not pay before the patch is in force; the patch drops it and pays
    as b2: paid once."""
    from planexec import ApprovalDecision, ApprovalRequest, Approvals

    payments = Payments()
    planning = asyncio.Event()
    approve = asyncio.Event()

    async def approver(request: ApprovalRequest) -> ApprovalDecision:
        await approve.wait()
        return ApprovalDecision(approved=True, by="alice")

    fails = failing_tool("broken", after=planning)

    async def patch(request: ModelRequest) -> dict[str, Any]:
        approve.set()
        for _ in range(10):  # the approval reaches b, which must not pay yet
            await asyncio.sleep(0)
        return {"reason": "pay under a new id", "steps": [tool_step("b2", "pay", {"amount": 10})]}

    @tool
    async def ready() -> str:
        """Let a fail once b waits for its approval."""
        planning.set()
        return "ok"

    planner = ScriptedModel(
        [
            {
                "steps": [
                    tool_step("b", "pay", {"amount": 10}, approval="always"),
                    tool_step("r", "ready", {}),
                    tool_step("a", "fails", {}, "r"),
                ]
            },
            patch,
            {"answer": "paid"},
        ]
    )
    agent = Agent(planner, tools=[payments.tool, fails, ready], budget=SAFETY, approvals=Approvals(approver=approver))
    result = await agent.run("pay once")

    assert result.stop.kind == "goal_met", result.stop
    assert payments.paid == [10]
    assert [e.step_id for e in events_of(result, StepStarted) if e.tool == "pay"] == ["b2"]
    assert [e.step_id for e in events_of(result, StepCancelled)] == ["b"]


async def test_a_side_effect_streamed_in_a_patch_waits_for_the_whole_patch() -> None:
    """A payment streamed in a patch waits until the whole patch is in force (a repair of the
    patch could still drop it); it is paid once."""
    payments = Payments()

    @tool
    async def look() -> str:
        """Look something up (read-only)."""
        return "seen"

    planner = StreamingScriptedModel(
        [
            {"steps": [tool_step("a", "fails", {})]},
            {"reason": "pay instead", "steps": [tool_step("r", "look", {}), tool_step("p", "pay", {"amount": 5})]},
            {"answer": "paid"},
        ],
        chunks=8,
    )
    result = await Agent(planner, tools=[failing_tool(), payments.tool, look], budget=SAFETY).run("pay")

    assert result.stop.kind == "goal_met", result.stop
    assert payments.paid == [5]
    events = list(result.events)
    patched = next(e for e in events_of(result, PlanProposed) if e.plan.version == 2)
    streamed = [e.step.id for e in events_of(result, StepStreamed)]
    assert streamed == ["a", "r", "p"]
    started = {e.step_id: position(events, e) for e in events_of(result, StepStarted)}
    assert position(events, patched) < started["p"]
