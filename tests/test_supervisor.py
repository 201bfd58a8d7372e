"""The one way runs are hosted in a process (:class:`planexec.runs.Supervisor`), through its public
face and a real SQLite store: slots, cancelling a run wherever it is, ending one that cannot go on,
leaving runs for another start, and following with progress."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, Approvals, tool
from planexec.errors import UsageError
from planexec.log import RunFinished, RunStarted, RunState
from planexec.runs import Supervisor
from planexec.store import SQLiteStore, Told
from planexec.testing import ScriptedModel
from planexec.tools import Tool

from .support import tool_step

GATED = {"steps": [tool_step("wait", "gate", {"name": "g"})]}
TWO = {"steps": [tool_step("a", "note", {"text": "a"}), tool_step("b", "note", {"text": "b"}, "a")]}
PUBLISH = {"steps": [tool_step("pub", "publish", {"text": "hi"})]}


class World:
    """Tools whose calls the tests can hold and count."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.calls: list[str] = []

    def tools(self) -> list[Tool]:
        @tool(trusted=True)
        async def gate(name: str) -> str:
            """Wait until the test opens the gate."""
            self.calls.append(f"gate {name}")
            await self.open.wait()
            return f"{name} opened"

        @tool(trusted=True)
        async def note(text: str) -> str:
            """Note some text."""
            self.calls.append(f"note {text}")
            return text

        @tool(side_effect=True, requires_approval=True, trusted=True)
        async def publish(text: str) -> str:
            """Publish (a human says yes first)."""
            self.calls.append(f"publish {text}")
            return f"published {text}"

        return [gate, note, publish]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "runs.db")
    yield opened
    await opened.close()


def _agent(store: SQLiteStore, world: World, *script: Any) -> Agent:
    return Agent(ScriptedModel(list(script)), tools=world.tools(), store=store, approvals=Approvals(deferred=True))


async def _stored(store: SQLiteStore, run_id: str) -> RunState:
    return RunState.fold(s.event for s in await store.read(run_id))


async def _until(check: Any, what: str) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_run_waits_for_a_free_slot_and_hears_what_it_was_told(store: SQLiteStore) -> None:
    world = World()
    runs = Supervisor(store, slots=1)
    first = _agent(store, world, GATED, {"answer": "done"})
    second = _agent(store, world, TWO, {"answer": "noted"})

    async def begin_first() -> Any:
        return await runs.begin(first, "hold the slot", run_id="first")

    async def begin_second() -> Any:
        told = [Told(text="keep it short", constraint=True)]
        return await runs.begin(second, "note two things", run_id="second", told=told)

    seen: list[int] = []
    runs.launch("first", begin_first, closing=first.aclose)
    runs.launch("second", begin_second, on_event=seen.append, closing=second.aclose)
    await _until(lambda: _true(world.calls == ["gate g"]), "the first run to hold the slot")
    assert runs.busy("second")
    assert runs.live("second") is None
    assert await store.last_seq("second") == 0
    world.open.set()
    await _until(lambda: _true(not runs.in_hand), "both runs to end")
    assert (await _stored(store, "first")).finished
    second_state = await _stored(store, "second")
    assert second_state.stop is not None
    assert second_state.stop.kind == "goal_met"
    assert [(i.text, i.constraint) for i in second_state.information] == [("keep it short", True)]
    assert seen == list(range(1, len(seen) + 1))
    assert len(seen) == second_state.events
    assert world.calls == ["gate g", "note a", "note b"]


async def _true(value: bool) -> bool:
    return value


async def test_a_run_cancelled_while_it_waits_for_a_slot_is_recorded_cancelled_without_running(
    store: SQLiteStore,
) -> None:
    world = World()
    runs = Supervisor(store, slots=1)
    holder = _agent(store, world, GATED, {"answer": "done"})
    waiter = _agent(store, world, TWO, {"answer": "noted"})
    runs.launch("holder", lambda: runs.begin(holder, "hold", run_id="holder"), closing=holder.aclose)
    runs.launch("waiter", lambda: runs.begin(waiter, "never", run_id="waiter"), closing=waiter.aclose)
    await _until(lambda: _true(world.calls == ["gate g"]), "the holder to hold the slot")
    await runs.cancel("waiter")
    state = await _stored(store, "waiter")
    assert state.stop is not None
    assert state.stop.kind == "cancelled"
    assert world.calls == ["gate g"]
    world.open.set()
    await _until(lambda: _true(not runs.in_hand), "the holder to end")


async def test_cancelling_a_stored_run_depends_on_where_it_is(store: SQLiteStore) -> None:
    world = World()
    result = await _agent(store, world, PUBLISH).run("publish", run_id="asks")
    assert result.stop.kind == "waiting"
    runs = Supervisor(store)
    await runs.cancel("asks")
    state = await _stored(store, "asks")
    assert state.stop is not None
    assert state.stop.kind == "cancelled"
    with pytest.raises(UsageError) as finished:
        await runs.cancel("asks")
    assert [p.code for p in finished.value.problems] == ["finished"]

    agent = _agent(store, world, GATED, {"answer": "done"})
    elsewhere = await runs.begin(agent, "hold", run_id="held")  # hosted, but not by this supervisor
    await _until(lambda: _true(world.calls[-1:] == ["gate g"]), "the run to start")
    with pytest.raises(UsageError) as running:
        await Supervisor(store).cancel("held")
    assert [p.code for p in running.value.problems] == ["elsewhere"]
    world.open.set()
    assert (await elsewhere.result()).ok
    await agent.aclose()


async def test_a_run_that_cannot_go_on_is_ended_with_a_typed_stop_once(store: SQLiteStore) -> None:
    runs = Supervisor(store)
    first = RunStarted(
        at=1.0, run_id="broken", goal="g", constraints=(), policy="upfront", replan="on_failure", budget={}, config={}
    )
    assert await runs.end("broken", [], code="usage", detail="the agent cannot be built", first=first)
    events = [s.event for s in await store.read("broken")]
    assert [type(e) for e in events] == [RunStarted, RunFinished]
    stop = RunState.fold(events).stop
    assert stop is not None
    assert (stop.kind, stop.code) == ("error", "usage")
    assert not await runs.end("broken", [], code="internal", detail="again, from a stale read", first=first)
    assert len(await store.read("broken")) == 2


async def test_closing_leaves_runs_unfinished_and_another_start_goes_on_with_them(store: SQLiteStore) -> None:
    world = World()
    runs = Supervisor(store)
    agent = _agent(store, world, GATED, {"answer": "done"})
    runs.launch("left", lambda: runs.begin(agent, "hold", run_id="left"))
    await _until(lambda: _true(world.calls == ["gate g"]), "the run to start")
    await runs.close()
    assert not runs.in_hand
    assert not (await _stored(store, "left")).finished
    world.open.set()
    again = Supervisor(store)
    run = await again.pick_up("left", agent=agent)
    result = await again.follow(run)
    assert result.ok
    assert result.answer == "done"
    await agent.aclose()


async def test_following_reports_each_step_and_a_cancelled_caller_cancels_the_run(store: SQLiteStore) -> None:
    world = World()
    runs = Supervisor(store)
    agent = _agent(store, world, TWO, {"answer": "noted"})
    told: list[str] = []

    async def progress(done: float, total: float | None, message: str) -> None:
        told.append(f"{done:g}/{total:g} {message}")

    run = await runs.begin(agent, "note", run_id="noted")
    assert (await runs.follow(run, progress=progress)).ok
    assert told == ["1/2 step a finished", "2/2 step b finished"]

    held = _agent(store, world, GATED, {"answer": "done"})
    run = await runs.begin(held, "hold", run_id="abandoned")
    follower = asyncio.create_task(runs.follow(run))
    await _until(lambda: _true(runs.busy("abandoned") and world.calls[-1:] == ["gate g"]), "the run to start")
    follower.cancel()
    with pytest.raises(asyncio.CancelledError):
        await follower
    state = await _stored(store, "abandoned")
    assert state.stop is not None
    assert state.stop.kind == "cancelled"
    assert not runs.busy("abandoned")
    await agent.aclose()
    await held.aclose()
