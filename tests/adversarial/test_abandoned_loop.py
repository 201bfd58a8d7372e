"""A program that leaves its event loop while a run is in flight — an exception out of the loop
over ``run.events()``, or ``asyncio.run`` returning — cancels every task at once, the log writer
with the run. The run must still end, and its stored log with it, never hang the program."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, tool
from planexec.log import RunFinished, StepStarted
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel
from tests.support import tool_step


@tool
async def slow(n: int) -> int:
    """Take a moment, then give n back."""
    await asyncio.sleep(0.01)
    return n


def _agent(store: Any, name: str) -> Agent:
    plan = {"steps": [tool_step(f"s{i}", "slow", {"n": i}) for i in range(6)]}
    return Agent(ScriptedModel([plan, {"answer": "done"}], name=name), tools=[slow], store=store)


def _in_a_fresh_loop(main: Any) -> BaseException | None:
    """Run ``main`` with asyncio.run in a thread of its own; what it raised. The thread must end:
    a program that hangs on its way out fails here rather than hanging the suite."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "leaving the event loop hung on the run in flight"
    return raised[0] if raised else None


async def _stored(path: Path, run_id: str) -> list[Any]:
    store = SQLiteStore(path)
    try:
        return [s.event for s in await store.read(run_id)]
    finally:
        await store.close()


@pytest.mark.parametrize("after", range(1, 20))  # the run has 19 events: stop after each but the last
def test_an_exception_out_of_the_event_stream_still_ends_the_stored_log(tmp_path: Path, after: int) -> None:
    path = tmp_path / "runs.db"

    async def main() -> None:
        run = _agent(f"sqlite:///{path}", f"p{after}").start("count", run_id="r")
        seen = 0
        async for _event in run.events():
            seen += 1
            if seen == after:
                raise KeyError("the program's own bug")

    assert isinstance(_in_a_fresh_loop(main), KeyError)
    stored = asyncio.run(_stored(path, "r"))
    assert isinstance(stored[-1], RunFinished)
    assert stored[-1].stop.kind in ("cancelled", "goal_met")
    assert sum(isinstance(e, RunFinished) for e in stored) == 1


def test_an_append_cut_off_after_the_store_took_it_is_not_written_twice(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    taken = asyncio.Event()

    class SlowToAnswer(SQLiteStore):
        """A real SQLite store whose answer to an append is lost after it took a step's start."""

        async def append(self, run_id: str, events: Any, *, expected_seq: int) -> int:
            seq = await super().append(run_id, events, expected_seq=expected_seq)
            if any(isinstance(e, StepStarted) for e in events) and not taken.is_set():
                taken.set()
                await asyncio.sleep(3600)  # the answer never comes back before the loop ends
            return seq

    async def main() -> None:
        store = SlowToAnswer(path)
        run = _agent(store, "cut").start("count", run_id="r")
        await taken.wait()
        raise KeyError("leaving now")
        await run.result()  # pragma: no cover

    assert isinstance(_in_a_fresh_loop(main), KeyError)
    stored = asyncio.run(_stored(path, "r"))
    assert isinstance(stored[-1], RunFinished)
    assert stored[-1].stop.kind == "cancelled"
    times = [(e.kind, e.at) for e in stored]
    assert len(times) == len(set(times)), "an event was written twice"
