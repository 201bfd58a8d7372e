"""What ``planexec serve`` says about a run agrees with the run's log as the store keeps it: a run
begun whose first event has not reached the store yet reads as accepted (never as unknown, never
with a plan its event stream cannot show), then from its log once the store holds it; and its step
counts are those of the current plan (a step a patch replaced is not counted). The app runs
in-process over a store the test can hold up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from planexec import Agent, Approvals, tool
from planexec.log import Event
from planexec.server import AppSettings, ServedAgent, build_app, demo_agent
from planexec.store import MemoryStore, RunStore
from planexec.testing import ScriptedModel

TOKEN = "views-test-token-0123456789abcdef"
GATE = asyncio.Event()
"""Opened by the test: the tool step waits for it."""
CALLED = asyncio.Event()
"""Set when the tool step is under way."""


@tool
async def wait_for_gate(name: str) -> str:
    """Wait until the test opens the gate."""
    CALLED.set()
    await GATE.wait()
    return f"through {name}"


class HeldStore(MemoryStore):
    """A store whose appends wait until the test lets them through (a store under load)."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.reached = asyncio.Event()

    async def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> int:
        self.reached.set()
        await self.open.wait()
        return await super().append(run_id, events, expected_seq=expected_seq)


def gated_agent() -> ServedAgent:
    def build(store: RunStore, run_id: str) -> Agent:
        plan = {"steps": [{"id": "wait", "description": "wait", "tool": "wait_for_gate", "args": {"name": "a"}}]}
        planner = ScriptedModel([plan, {"answer": "through"}])
        return Agent(planner, tools=[wait_for_gate], store=store, approvals=Approvals(deferred=True))

    return ServedAgent(name="gated", builder=build)


async def client_over(store: RunStore, agents: list[ServedAgent]) -> AsyncIterator[httpx.AsyncClient]:
    app = build_app(store, AppSettings(token=TOKEN, agents=agents, instance="views-test"))
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=headers) as client:
        yield client


@pytest.fixture
async def held() -> AsyncIterator[tuple[HeldStore, httpx.AsyncClient]]:
    GATE.clear()
    CALLED.clear()
    store = HeldStore()
    async for client in client_over(store, [gated_agent()]):
        yield store, client
        store.open.set()
        GATE.set()


async def until(check: Callable[[], Awaitable[dict[str, Any] | None]], what: str) -> dict[str, Any]:
    """Await ``check()`` until it gives something (returned); fail after 10 s."""
    try:
        async with asyncio.timeout(10):
            while (value := await check()) is None:  # noqa: ASYNC110  # polls the API, as a client would
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None
    return value


def run_where(
    api: httpx.AsyncClient, run_id: str, holds: Callable[[dict[str, Any]], bool]
) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    async def check() -> dict[str, Any] | None:
        data: dict[str, Any] = (await api.get(f"/v1/runs/{run_id}")).json()
        return data if holds(data) else None

    return check


async def test_a_run_whose_first_event_has_not_reached_the_store_reads_as_accepted_then_from_its_log(
    held: tuple[HeldStore, httpx.AsyncClient],
) -> None:
    store, api = held
    started = await api.post("/v1/runs", json={"agent": "gated", "goal": "wait at the gate"})
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    await asyncio.wait_for(store.reached.wait(), 10)  # begun: its first event is on its way to the store
    assert await store.last_seq(run_id) == 0

    for _ in range(3):  # however often it is asked while the store holds nothing of it
        detail = await api.get(f"/v1/runs/{run_id}")
        assert detail.status_code == 200, detail.text
        assert (detail.json()["status"], detail.json()["plans"], detail.json()["events"]) == ("running", [], 0)
        assert (await api.get(f"/v1/runs/{run_id}/events")).json() == {"events": [], "next": 0}
        assert [r["run_id"] for r in (await api.get("/v1/runs")).json()["runs"]] == [run_id]

    store.open.set()  # the events reach the store: the run reads from its log, as its stream does
    await asyncio.wait_for(CALLED.wait(), 10)  # planned, and its step under way
    planned = await until(run_where(api, run_id, lambda d: bool(d["plans"])), "the run to read from its log")
    events = (await api.get(f"/v1/runs/{run_id}/events")).json()["events"]
    assert "plan_proposed" in [e["event"]["kind"] for e in events[: planned["events"]]]
    assert [r["run_id"] for r in (await api.get("/v1/runs")).json()["runs"]] == [run_id]

    GATE.set()
    done = await until(run_where(api, run_id, lambda d: d["status"] == "finished"), "the run to finish")
    assert done["answer"] == "through"


async def test_a_runs_step_counts_are_its_current_plans(tmp_path: Path) -> None:
    store = MemoryStore()
    async for api in client_over(store, [demo_agent(tmp_path, pace=0)]):
        started = await api.post("/v1/runs", json={"agent": "demo", "goal": "audit run r-4821"})
        run_id = started.json()["run_id"]
        detail = await until(run_where(api, run_id, lambda d: d["status"] == "finished"), "the demo to finish")
        current = {s["id"] for s in detail["plans"][-1]["steps"]}
        stored = [s for s in detail["steps"] if not s["superseded"]]
        replaced = [(s["id"], s["status"]) for s in stored if s["id"] not in current]
        assert replaced == [("collect_logs", "failed")]  # failed, and replaced by a patch
        (listed,) = (await api.get("/v1/runs")).json()["runs"]
        assert listed["steps"] == {"total": len(current), "finished": len(current), "failed": 0}
