"""Leaving a run unfinished in this process (``Run.detach``), as a server that shuts down does,
and picking it up again: the log stops where the process left, and a resume carries on under the
same exactly-once rules as after a crash."""

from __future__ import annotations

import asyncio

import pytest

from planexec import Agent, ToolContext, UsageError, tool
from planexec.log import RunFinished, StepCancelled, StepHeld, StepStarted
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel
from planexec.tools import Tool

from .support import tool_step


class World:
    """Effects keyed by idempotency key; ``started`` is set once a call is under way."""

    def __init__(self) -> None:
        self.effects: dict[str, int] = {}
        self.calls: list[str] = []
        self.started = asyncio.Event()
        self.slow = True

    def tools(self) -> list[Tool]:
        @tool(side_effect=True, idempotent=True)
        async def charge(amount: int, ctx: ToolContext) -> str:
            """Charge once per idempotency key."""
            self.calls.append(ctx.idempotency_key)
            self.started.set()
            if self.slow:
                await asyncio.sleep(3600)
            self.effects[ctx.idempotency_key] = self.effects.get(ctx.idempotency_key, 0) + 1
            return f"charged {amount}"

        @tool(side_effect=True)
        async def email(to: str, ctx: ToolContext) -> str:
            """Not safe to send twice."""
            self.calls.append(ctx.idempotency_key)
            self.started.set()
            if self.slow:
                await asyncio.sleep(3600)
            return f"mailed {to}"

        return [charge, email]


def replies(step: dict[str, object]) -> list[object]:
    return [{"steps": [step]}, {"answer": "done"}]


async def test_a_detached_run_stops_its_log_where_it_left_and_a_resume_sends_the_same_key() -> None:
    world, store = World(), MemoryStore()
    agent = Agent(ScriptedModel(replies(tool_step("pay", "charge", {"amount": 5}))), tools=world.tools(), store=store)
    run = agent.start("charge 5", run_id="left")
    watched: list[str] = []

    async def watch() -> None:
        async for event in run.events():
            watched.append(event.kind)

    watcher = asyncio.create_task(watch())
    await world.started.wait()
    await run.detach()
    await asyncio.wait_for(watcher, 5)  # the stream of events ends with the process's part
    assert run.done
    with pytest.raises(UsageError, match="detached"):
        await run.result()
    logged = [s.event for s in await store.read("left")]
    assert not any(isinstance(e, RunFinished | StepCancelled) for e in logged)
    assert isinstance(logged[-1], StepStarted)  # as a process that stopped mid-step would leave it
    assert watched == [e.kind for e in logged]
    await run.detach()  # again: nothing to do

    world.slow = False
    again = Agent(ScriptedModel([{"answer": "done"}]), tools=world.tools(), store=store)  # another process
    result = await (await again.resume("left")).result()
    assert result.stop.kind == "goal_met", result.stop
    assert world.calls == ["left:pay:v1", "left:pay:v1"]  # sent again with the same key
    assert world.effects == {"left:pay:v1": 1}  # and applied once


async def test_a_call_that_is_not_safe_to_repeat_is_held_for_a_human_after_a_detach() -> None:
    world, store = World(), MemoryStore()
    agent = Agent(ScriptedModel(replies(tool_step("mail", "email", {"to": "ana"}))), tools=world.tools(), store=store)
    run = agent.start("mail ana", run_id="mail")
    await world.started.wait()
    await run.detach()
    world.slow = False
    again = Agent(ScriptedModel([{"answer": "done"}]), tools=world.tools(), store=store)
    result = await (await again.resume("mail")).result()
    assert result.stop.kind == "waiting", result.stop
    assert any(isinstance(e, StepHeld) for e in result.events)
    assert world.calls == ["mail:mail:v1"]  # not sent again without a human's word


async def test_detaching_a_finished_run_changes_nothing() -> None:
    world = World()
    world.slow = False
    agent = Agent(ScriptedModel(replies(tool_step("pay", "charge", {"amount": 1}))), tools=world.tools())
    run = agent.start("charge 1")
    result = await run.result()
    await run.detach()
    assert (await run.result()) == result
