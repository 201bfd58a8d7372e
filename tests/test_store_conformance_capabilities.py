"""The store conformance suite, part two: what a store offers besides its logs — its redactor,
whether it is durable, its workers' queue and where plan memory keeps its entries — for every
backend (memory, SQLite, PostgreSQL). The logs themselves: ``test_store_conformance.py``."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from planexec.errors import StoreError
from planexec.store import PlanMemoryBackend, Redactor, RunQueue, RunStore, Told, plan_memory_at
from tests.test_store_support import BACKENDS, DURABLE, QUEUED, Backend, make_backend, run_sql, step_batch


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


@pytest.fixture(params=DURABLE)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


@pytest.fixture(params=QUEUED)
async def queued(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    """A store with a workers' queue."""
    with make_backend(request.param, tmp_path) as b:
        s = b.open()
        try:
            yield s
        finally:
            await s.close()


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[RunStore]:
    s = backend.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def entries(store: RunStore) -> AsyncIterator[PlanMemoryBackend]:
    rows = store.plan_memory()
    try:
        yield rows
    finally:
        await rows.close()


def record(entry_id: str, **more: Any) -> dict[str, Any]:
    return {"id": entry_id, "goal": f"the goal of {entry_id}", "updated_at": 5.0, **more}


class Put:
    """A change that writes ``new`` whatever was there, keeping what it was given in ``seen``."""

    def __init__(self, new: dict[str, Any] | None) -> None:
        self.new = new
        self.seen: list[dict[str, Any] | None] = []

    def __call__(self, old: dict[str, Any] | None) -> dict[str, Any] | None:
        self.seen.append(old)
        return self.new


# -- what every store says about itself -----------------------------------------------------------------


async def test_its_redactor_is_the_one_it_was_given(backend: Backend) -> None:
    given = Redactor(pii=True)
    store = backend.open(redactor=given)
    try:
        assert store.redactor is given
    finally:
        await store.close()
    default = backend.open()
    try:
        assert isinstance(default.redactor, Redactor)
    finally:
        await default.close()


async def test_it_says_whether_its_runs_outlive_it(backend: Backend, store: RunStore) -> None:
    assert store.durable is backend.durable
    await store.append("r", step_batch("a"), expected_seq=0)
    await store.close()
    again = backend.open()
    try:
        assert await again.last_seq("r") == (2 if store.durable else 0)
    finally:
        await again.close()


# -- the workers' queue -------------------------------------------------------------------------------


async def test_it_has_a_workers_queue_or_says_it_has_none(backend: Backend, store: RunStore) -> None:
    queue = store.queue()
    if backend.kind not in QUEUED:
        assert queue is None
        return
    assert isinstance(queue, RunQueue)
    assert queue.store is store
    assert await queue.submit("q1", goal="g", constraints=["c"], spec={"model": "m"})
    assert await queue.tell("q1", Told(text="it is Friday"))
    [claim] = await queue.claim("w1", limit=5, lease_seconds=30)
    assert (claim.run_id, claim.goal, claim.constraints, claim.spec) == ("q1", "g", ("c",), {"model": "m"})
    assert [t.text for t in claim.told] == ["it is Friday"]
    assert await queue.holder("q1") == "w1"
    assert await queue.renew("w1", {"q1": claim.lease}, lease_seconds=30) == {"q1"}
    assert await queue.release("q1", owner="w1", lease=claim.lease, state="done")
    entry = await queue.entry("q1")
    assert entry is not None
    assert entry.state == "done"


async def test_a_stored_run_is_not_submitted_and_a_submitted_one_not_twice(queued: RunStore) -> None:
    store, queue = queued, queued.queue()
    assert queue is not None
    await store.append("taken", step_batch("a"), expected_seq=0)
    assert not await queue.submit("taken", goal="g", constraints=(), spec={})
    assert await queue.submit("fresh", goal="g", constraints=(), spec={})
    assert not await queue.submit("fresh", goal="g", constraints=(), spec={})


async def test_a_queue_with_more_connections_shares_the_database(queued: RunStore) -> None:
    store, queue = queued, queued.queue()
    assert queue is not None
    wider = queue.with_connections(6)
    try:
        assert wider.store is not store
        assert wider.store.redactor is store.redactor
        assert await wider.submit("w", goal="g", constraints=(), spec={})
        assert [e.run_id for e in await queue.entries()] == ["w"]
    finally:
        await wider.store.close()
    assert await store.last_seq("w") == 0  # the first store is still open


# -- plan memory's entries ------------------------------------------------------------------------------


async def test_plan_memory_entries_are_written_changed_and_deleted(entries: PlanMemoryBackend) -> None:
    assert isinstance(entries.name, str)
    assert "plan memory" in entries.name
    start = await entries.version()
    assert await entries.load() == []
    nothing = Put(None)
    assert await entries.update("m-1", nothing) == start  # a change that writes nothing changes nothing
    assert nothing.seen == [None]
    written = await entries.update("m-1", Put(record("m-1", uses=1)))
    assert written == await entries.version() != start
    again = Put(record("m-1", uses=2))
    assert await entries.update("m-1", again) != written
    assert again.seen == [record("m-1", uses=1)]  # the change is given what is stored
    [(entry_id, text)] = await entries.load()
    assert (entry_id, json.loads(text)) == ("m-1", record("m-1", uses=2))
    before = await entries.version()
    assert await entries.delete("m-1") is True
    assert await entries.version() != before
    assert await entries.delete("m-1") is False
    assert await entries.load() == []


async def test_an_entry_json_cannot_hold_is_refused_and_nothing_is_written(entries: PlanMemoryBackend) -> None:
    before = await entries.version()
    with pytest.raises(StoreError):
        await entries.update("m-nan", Put(record("m-nan", cost=math.nan)))
    assert await entries.version() == before
    assert await entries.load() == []


async def test_plan_memory_is_shared_by_every_handle_on_a_durable_store(durable: Backend) -> None:
    store, other = durable.open(), durable.open()  # another process, the same database
    first, second = store.plan_memory(), other.plan_memory()
    try:
        seen = await second.version()
        await first.update("m-1", Put(record("m-1")))
        assert await second.version() != seen
        assert [i for i, _ in await second.load()] == ["m-1"]
        assert await second.delete("m-1")
        assert await first.load() == []
    finally:
        for closing in (first, second, store, other):
            await closing.close()


async def test_plan_memory_at_the_store_url_is_the_stores(backend: Backend, store: RunStore) -> None:
    by_url = plan_memory_at(backend.store_url)
    own = store.plan_memory()
    try:
        await own.update("m-1", Put(record("m-1")))
        expected = ["m-1"] if store.durable else []  # in memory, each handle keeps its own entries
        assert [i for i, _ in await by_url.load()] == expected
    finally:
        await by_url.close()
        await own.close()


OLD_TABLES = {
    "sqlite": (
        "CREATE TABLE plan_memory (id TEXT PRIMARY KEY, updated_at REAL NOT NULL, record TEXT NOT NULL)",
        "CREATE TABLE plan_memory_changes (one INTEGER PRIMARY KEY CHECK (one = 1), n INTEGER NOT NULL)",
    ),
    "postgres": (
        "CREATE TABLE plan_memory (id TEXT PRIMARY KEY, updated_at DOUBLE PRECISION NOT NULL, record TEXT NOT NULL)",
        "CREATE TABLE plan_memory_changes (one INTEGER PRIMARY KEY CHECK (one = 1), n BIGINT NOT NULL)",
    ),
}
"""The plan memory tables as planexec has always made them."""


async def test_plan_memory_reads_the_entries_kept_before(durable: Backend) -> None:
    stored = json.dumps(record("m-old", uses=3), sort_keys=True)
    marker = "?" if durable.kind == "sqlite" else "%s"
    for statement in OLD_TABLES[durable.kind]:
        run_sql(durable, statement)
    run_sql(durable, "INSERT INTO plan_memory_changes (one, n) VALUES (1, 7)")
    run_sql(
        durable,
        f"INSERT INTO plan_memory (id, updated_at, record) VALUES ({marker}, 5.0, {marker})",
        ("m-old", stored),
    )
    store = durable.open()
    rows = store.plan_memory()
    try:
        assert await rows.version() == 7
        assert await rows.load() == [("m-old", stored)]
        assert await rows.update("m-old", Put(record("m-old", uses=4))) == 8
    finally:
        await rows.close()
        await store.close()
    [(text,)] = run_sql(durable, "SELECT record FROM plan_memory")
    assert json.loads(str(text)) == record("m-old", uses=4)


async def test_a_damaged_entry_is_given_to_a_change_as_none(durable: Backend) -> None:
    store = durable.open()
    rows = store.plan_memory()
    try:
        await rows.update("m-1", Put(record("m-1")))
        run_sql(durable, "UPDATE plan_memory SET record = 'not json {'")
        change = Put(record("m-1", uses=9))
        await rows.update("m-1", change)
        assert change.seen == [None]
        assert json.loads((await rows.load())[0][1]) == record("m-1", uses=9)
    finally:
        await rows.close()
        await store.close()
