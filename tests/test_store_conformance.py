"""The store conformance suite: every backend (memory, SQLite, PostgreSQL) passes the same tests."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from planexec import StopReason, UsageError
from planexec.errors import LogUnreadable, StoreError
from planexec.executor import Verdict
from planexec.log import (
    BudgetExhaustedEvent,
    Event,
    ModelCalled,
    RunFinished,
    RunResumed,
    RunStarted,
    RunSuspended,
    StepStarted,
    StepSucceeded,
)
from planexec.store import AppendConflict, Fresh, Redactor, RunStore, RunSummary, StoredEvent, verify_chain
from tests.test_store_support import (
    BACKENDS,
    DURABLE,
    Backend,
    assert_whole_batches,
    fold,
    full_run,
    make_backend,
    rewrite_events,
    step_batch,
    stored_text,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


@pytest.fixture(params=DURABLE)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[RunStore]:
    s = backend.open()
    try:
        yield s
    finally:
        await s.close()


def events_of(stored: list[StoredEvent]) -> list[Event]:
    return [s.event for s in stored]


def seqs_of(stored: list[StoredEvent]) -> list[int]:
    return [s.seq for s in stored]


# -- appending and reading ----------------------------------------------------------------------------


async def test_is_a_run_store(store: RunStore) -> None:
    assert isinstance(store, RunStore)


async def test_every_event_kind_round_trips(store: RunStore) -> None:
    events = full_run("r1")
    last = 0
    for start in range(0, len(events), 4):  # batches of up to 4
        last = await store.append("r1", events[start : start + 4], expected_seq=last)
    assert last == len(events)
    stored = await store.read("r1")
    assert seqs_of(stored) == list(range(1, len(events) + 1))
    assert events_of(stored) == events


async def test_any_text_round_trips(store: RunStore) -> None:
    """Non-ASCII text, control characters, NUL and a lone surrogate (undecodable bytes) read back the same;
    so do the largest and smallest floats and negative zero."""
    output = {
        "text": "naïve café — 日本語 🚀",
        "control": "a\x00b\x1fc\n",
        "undecodable": b"ok\xff".decode(errors="surrogateescape"),
        "lone": "\ud800 and \udfff",
    }
    events: list[Event] = [
        RunStarted(at=1.0, run_id="r", goal="Überprüfe die Bestellungen", budget={"cost": 1.7976931348623157e308}),
        StepSucceeded(at=2.0, step_id="s", output=output, verdict=Verdict(passed=True)),
    ]
    events.append(BudgetExhaustedEvent(at=2.5, budget="cost", limit=5e-324, used=-0.0))
    events.append(RunFinished(at=3.0, stop=StopReason(kind="error", detail="bad\x00byte")))
    await store.append("r", events, expected_seq=0)
    assert events_of(await store.read("r")) == events
    summary = await store.get_run("r")
    assert summary is not None
    assert summary.goal == "Überprüfe die Bestellungen"
    assert summary.stop_detail in ("bad\x00byte", "bad\ufffdbyte"), "PostgreSQL text cannot hold NUL"


async def test_append_returns_the_new_last_seq(store: RunStore) -> None:
    assert await store.append("r", step_batch("a", size=3), expected_seq=0) == 3
    assert await store.append("r", step_batch("b", size=1), expected_seq=3) == 4
    assert await store.last_seq("r") == 4


@pytest.mark.parametrize("wrong", [0, 1, 3, -1])
async def test_append_after_the_wrong_seq_conflicts_and_changes_nothing(store: RunStore, wrong: int) -> None:
    await store.append("r", step_batch("a"), expected_seq=0)
    with pytest.raises(AppendConflict) as caught:
        await store.append("r", step_batch("b"), expected_seq=wrong)
    assert (caught.value.run_id, caught.value.expected, caught.value.actual) == ("r", wrong, 2)
    assert {getattr(e, "step_id", None) for e in events_of(await store.read("r"))} == {"a"}
    assert await store.last_seq("r") == 2


async def test_a_new_run_must_start_at_zero(store: RunStore) -> None:
    with pytest.raises(AppendConflict) as caught:
        await store.append("new", step_batch("a"), expected_seq=5)
    assert caught.value.actual == 0
    assert await store.get_run("new") is None
    assert await store.read("new") == []


async def test_an_empty_append_checks_and_writes_nothing(store: RunStore) -> None:
    assert await store.append("r", [], expected_seq=0) == 0
    assert await store.get_run("r") is None
    await store.append("r", step_batch("a"), expected_seq=0)
    assert await store.append("r", [], expected_seq=2) == 2
    with pytest.raises(AppendConflict):
        await store.append("r", [], expected_seq=1)


async def test_read_after(store: RunStore) -> None:
    events = full_run("r")
    await store.append("r", events, expected_seq=0)
    n = len(events)
    assert seqs_of(await store.read("r", after=0)) == list(range(1, n + 1))
    assert events_of(await store.read("r", after=5)) == events[5:]
    assert seqs_of(await store.read("r", after=n - 1)) == [n]
    assert await store.read("r", after=n) == []
    assert await store.read("r", after=n + 10) == []


async def test_an_unknown_run(store: RunStore) -> None:
    assert await store.read("nope") == []
    assert await store.last_seq("nope") == 0
    assert await store.get_run("nope") is None
    assert await store.delete("nope") is False


async def test_runs_are_separate(store: RunStore) -> None:
    await store.append("a", step_batch("a1"), expected_seq=0)
    await store.append("b", step_batch("b1", size=3), expected_seq=0)
    await store.append("a", step_batch("a2"), expected_seq=2)
    assert {getattr(e, "step_id", None) for e in events_of(await store.read("b"))} == {"b1"}
    assert await store.last_seq("a") == 4
    assert await store.last_seq("b") == 3


async def test_a_run_id_must_be_a_non_empty_string(store: RunStore) -> None:
    with pytest.raises(UsageError):
        await store.append("", step_batch("a"), expected_seq=0)


# -- what cannot be written, and what cannot be read back -------------------------------------------------

_NOT_JSON = [
    pytest.param(
        lambda: ModelCalled(at=5.0, role="planner", purpose="plan", model="m", cost=float("nan")),
        "model_called",
        "cost",
        "NaN",
        id="nan",
    ),
    pytest.param(
        lambda: RunStarted(at=5.0, run_id="r", goal="g", budget={"steps": 3, "cost": float("inf")}),
        "run_started",
        "budget.cost",
        "Infinity",
        id="infinity",
    ),
    pytest.param(
        lambda: BudgetExhaustedEvent(at=5.0, budget="cost", limit=1.0, used=float("-inf")),
        "budget_exhausted",
        "used",
        "-Infinity",
        id="minus-infinity",
    ),
]


@pytest.mark.parametrize(("make", "kind", "path", "shown"), _NOT_JSON)
async def test_a_value_json_cannot_hold_is_refused_and_nothing_of_the_append_is_written(
    store: RunStore, make: Any, kind: str, path: str, shown: str
) -> None:
    await store.append("r", step_batch("a"), expected_seq=0)
    before = await store.get_run("r")
    with pytest.raises(StoreError) as caught:
        await store.append("r", [*step_batch("b", size=1), make()], expected_seq=2)
    message = str(caught.value)
    assert kind in message
    assert f"at {path} is {shown}" in message
    assert not isinstance(caught.value, LogUnreadable)
    assert await store.last_seq("r") == 2
    assert [s.seq for s in await store.read("r")] == [1, 2]
    assert await store.get_run("r") == before
    assert await store.append("r", step_batch("b"), expected_seq=2) == 4, "the store still works"


async def test_a_log_with_unreadable_events_keeps_the_readable_ones(backend: Backend, store: RunStore) -> None:
    """Damaged JSON text, an event of an unknown kind and an envelope of a future schema version: read()
    raises LogUnreadable with every other event and one problem per unreadable one; the rest works."""
    events = full_run("r")
    n = len(events)
    await store.append("r", events, expected_seq=0)
    fourth = json.loads(stored_text(backend, store, "r", 4))
    sixth = json.loads(stored_text(backend, store, "r", 6))
    rewrite_events(
        backend,
        store,
        "r",
        {
            2: '{"v":3,"event":{"kind":"planning_star',
            4: json.dumps({**fourth, "event": {**fourth["event"], "kind": "from_the_future"}}),
            6: json.dumps({**sixth, "v": 99}),
        },
    )
    with pytest.raises(LogUnreadable) as caught:
        await store.read("r")
    error = caught.value
    assert isinstance(error, StoreError)
    assert error.run_id == "r"
    assert [(p.where, p.code) for p in error.problems] == [
        ("event 2", "damaged"),
        ("event 4", "unknown_kind"),
        ("event 6", "unknown_version"),
    ]
    assert "from_the_future" in error.problems[1].message
    assert "99" in error.problems[2].message
    assert "upgrade planexec" in error.problems[2].message
    readable = [seq for seq in range(1, n + 1) if seq not in (2, 4, 6)]
    assert [s.seq for s in error.events] == readable
    assert [s.event for s in error.events] == [events[seq - 1] for seq in readable]
    assert "3 events" in str(error)
    # everything else keeps working
    assert await store.last_seq("r") == n
    summary = await store.get_run("r")
    assert summary is not None
    assert summary.events == n
    assert summary.status == "finished"
    assert [r.run_id for r in await store.list_runs()] == ["r"]
    assert events_of(await store.read("r", after=6)) == events[6:]
    assert await store.append("r", step_batch("more"), expected_seq=n) == n + 2
    with pytest.raises(LogUnreadable) as again:
        await store.read("r", after=3)
    assert [p.where for p in again.value.problems] == ["event 4", "event 6"]
    assert [s.seq for s in again.value.events] == [5, *range(7, n + 3)]
    assert await store.delete("r") is True


# -- the hash chain --------------------------------------------------------------------------------------


def _by_hand(run_id: str, stored: list[bytes]) -> list[str]:
    """Each event's hash, computed from its stored bytes as the documented format says."""
    link = hashlib.sha256(b"planexec chain v1\x00" + run_id.encode()).digest()
    hashes = []
    for data in stored:
        link = hashlib.sha256(link + data).digest()
        hashes.append(link.hex())
    return hashes


async def test_every_event_carries_its_place_in_the_chain(backend: Backend, store: RunStore) -> None:
    """Each event's hash covers its stored bytes and everything before it, from the run's genesis
    value; batches of any size chain on; read() returns each event's hash; the head is the last."""
    events = full_run("r")
    last = 0
    for start in range(0, len(events), 3):
        last = await store.append("r", events[start : start + 3], expected_seq=last)
    stored = await store.read("r")
    texts = [stored_text(backend, store, "r", seq).encode() for seq in range(1, len(events) + 1)]
    expected = _by_hand("r", texts)
    assert [s.hash for s in stored] == expected
    raw = await store.read_raw("r")
    assert [e.data for e in raw.events] == texts
    assert raw.events[0].link == hashlib.sha256(b"planexec chain v1\x00r").digest()
    assert all(e.link == p.hash for p, e in zip(raw.events, raw.events[1:], strict=False))
    assert raw.head is not None
    assert (raw.last_seq, raw.head.hex()) == (len(events), expected[-1])
    report = await verify_chain(store, "r")
    assert report.intact
    assert (report.events, report.begins_at, report.unchained, report.head) == (len(events), 1, 0, expected[-1])
    assert report.kept_at is None
    assert [s.hash for s in await store.read("r", after=5)] == expected[5:]


async def test_the_chain_covers_what_is_stored_after_redaction(backend: Backend) -> None:
    store = backend.open(redactor=Redactor(pii=True))
    try:
        secret = "sk-proj-" + "A1b2" * 12
        events: list[Event] = [
            RunStarted(at=1.0, run_id="r", goal=f"use {secret} to mail ops@example.com", budget={}),
            *step_batch("a"),
        ]
        await store.append("r", events, expected_seq=0)
        first = stored_text(backend, store, "r", 1)
        assert secret not in first
        assert "ops@example.com" not in first
        assert "[REDACTED:" in first
        texts = [stored_text(backend, store, "r", seq).encode() for seq in (1, 2, 3)]
        assert [s.hash for s in await store.read("r")] == _by_hand("r", texts)
        assert (await verify_chain(store, "r")).intact
    finally:
        await store.close()


async def test_each_run_has_a_chain_of_its_own(store: RunStore) -> None:
    """Runs with the same events have different chains (the genesis value is the run's); an empty
    append leaves the head as it was; a deleted run's id starts a new chain from its genesis."""
    await store.append("a", step_batch("x"), expected_seq=0)
    await store.append("b", step_batch("x"), expected_seq=0)
    a, b = await verify_chain(store, "a"), await verify_chain(store, "b")
    assert a.intact
    assert b.intact
    assert a.head != b.head
    assert await store.append("a", [], expected_seq=2) == 2
    assert (await verify_chain(store, "a")).head == a.head
    await store.delete("a")
    assert await verify_chain(store, "a") == verify_empty("a")
    await store.append("a", step_batch("x"), expected_seq=0)
    again = await verify_chain(store, "a")
    assert again.intact
    assert again.head == a.head, "the same events of the same run id: the same chain"


def verify_empty(run_id: str) -> Any:
    from planexec.store import ChainReport

    return ChainReport(run_id=run_id, events=0, begins_at=None, head=None)


async def test_an_unknown_run_has_an_empty_chain(store: RunStore) -> None:
    report = await verify_chain(store, "nope")
    assert report == verify_empty("nope")
    assert report.intact
    raw = await store.read_raw("nope")
    assert (raw.events, raw.last_seq, raw.head) == ((), 0, None)


async def test_a_kept_head_is_found_where_it_was_kept(store: RunStore) -> None:
    await store.append("r", step_batch("a", size=3), expected_seq=0)
    kept = (await verify_chain(store, "r")).head
    assert kept is not None
    await store.append("r", step_batch("b"), expected_seq=3)
    report = await verify_chain(store, "r", kept=kept)
    assert report.intact
    assert report.kept_at == 3
    assert (await verify_chain(store, "r", kept=kept.upper())).kept_at == 3
    stranger = await verify_chain(store, "r", kept="ab" * 32)
    assert stranger.broken is not None
    assert (stranger.broken.problem, stranger.broken.seq, stranger.broken.expected) == ("kept", 5, "ab" * 32)
    assert stranger.broken.found == report.head
    for wrong in ("xyz", "ab" * 31, "", "g" * 64):
        with pytest.raises(UsageError):
            await verify_chain(store, "r", kept=wrong)


async def test_two_stores_appending_in_turn_keep_one_chain(durable: Backend) -> None:
    """Each store object appends after the other's events: the head each one builds on is the one in
    the database, never one it remembers."""
    first, second = durable.open(), durable.open()
    try:
        last = 0
        for i in range(6):
            writer = first if i % 2 == 0 else second
            last = await writer.append("r", step_batch(f"s{i}", size=1 + i % 3), expected_seq=last)
        await first.delete("r")  # the same run id, written again: the new chain must not reuse the old head
        last = 0
        for i in range(4):
            writer = second if i % 2 == 0 else first
            last = await writer.append("r", step_batch(f"t{i}"), expected_seq=last)
        for store in (first, second):
            report = await verify_chain(store, "r")
            assert report.intact, report.describe()
            assert report.events == 8
    finally:
        await first.close()
        await second.close()


# -- summaries ------------------------------------------------------------------------------------------


async def test_the_summary_agrees_with_the_run_state_after_every_append(store: RunStore) -> None:
    events = full_run("r", goal="count the orders")
    for i, event in enumerate(events):
        await store.append("r", [event], expected_seq=i)
        prefix = events[: i + 1]
        state = fold(prefix)
        summary = await store.get_run("r")
        assert summary is not None
        assert summary.run_id == "r"
        assert summary.goal == "count the orders"
        assert summary.status == state.status, event.kind
        assert summary.cost == pytest.approx(state.cost)
        assert summary.model_calls == state.model_calls
        assert summary.pending_approvals == len(state.pending_approvals), event.kind
        assert summary.started_at == events[0].at
        assert summary.updated_at == event.at
        assert summary.events == i + 1
        assert summary.stop_kind == (state.stop.kind if state.stop else None)
        assert summary.stop_detail == (state.stop.detail if state.stop else None)
        assert summary.finished_at == state.finished_at


async def test_status_transitions(store: RunStore) -> None:
    async def status() -> tuple[str, float | None]:
        summary = await store.get_run("r")
        assert summary is not None
        return summary.status, summary.duration

    await store.append("r", [RunStarted(at=10.0, run_id="r", goal="g", budget={})], expected_seq=0)
    assert await status() == ("running", None)
    await store.append("r", [RunSuspended(at=11.0, reason="a human must answer")], expected_seq=1)
    assert await status() == ("waiting", None)
    await store.append("r", [RunResumed(at=12.0, events=2)], expected_seq=2)
    assert await status() == ("running", None)
    await store.append("r", [RunSuspended(at=13.0, reason="again")], expected_seq=3)
    assert await status() == ("waiting", None)
    await store.append(
        "r", [RunFinished(at=14.5, stop=StopReason(kind="cancelled", detail="by a human"))], expected_seq=4
    )
    assert await status() == ("finished", 4.5)
    summary = await store.get_run("r")
    assert summary is not None
    assert (summary.stop_kind, summary.stop_detail, summary.finished_at) == ("cancelled", "by a human", 14.5)


async def test_a_log_that_does_not_start_with_run_started(store: RunStore) -> None:
    await store.append("r", step_batch("a", at=50.0), expected_seq=0)
    summary = await store.get_run("r")
    assert summary is not None
    assert (summary.goal, summary.started_at, summary.status, summary.events) == ("", 50.0, "running", 2)


def _started(run_id: str, at: float) -> list[Event]:
    return [RunStarted(at=at, run_id=run_id, goal=f"goal of {run_id}", budget={})]


async def _make_listing(store: RunStore) -> None:
    await store.append("r1", full_run("r1", t0=100.0), expected_seq=0)  # finished, updated at 120
    await store.append("r2", [*_started("r2", 200.0), RunSuspended(at=201.0, reason="ask")], expected_seq=0)
    await store.append("r3", _started("r3", 300.0), expected_seq=0)
    await store.append("r4", _started("r4", 400.0), expected_seq=0)
    await store.append("r5", _started("r5", 400.0), expected_seq=0)


async def test_list_runs_newest_first_with_filters(store: RunStore) -> None:
    await _make_listing(store)

    def ids(runs: list[RunSummary]) -> list[str]:
        return [r.run_id for r in runs]

    assert ids(await store.list_runs()) == ["r5", "r4", "r3", "r2", "r1"]
    assert ids(await store.list_runs(status="running")) == ["r5", "r4", "r3"]
    assert ids(await store.list_runs(status="waiting")) == ["r2"]
    assert ids(await store.list_runs(status="finished")) == ["r1"]
    assert ids(await store.list_runs(started_after=200.0)) == ["r5", "r4", "r3"]
    assert ids(await store.list_runs(started_after=200.0, status="running", limit=2)) == ["r5", "r4"]
    assert ids(await store.list_runs(limit=1)) == ["r5"]
    assert ids(await store.list_runs(limit=0)) == []
    listed = {r.run_id: r for r in await store.list_runs()}
    assert listed["r1"] == await store.get_run("r1")
    assert listed["r2"].goal == "goal of r2"


@pytest.mark.parametrize("kwargs", [{"status": "done"}, {"limit": -1}])
async def test_list_runs_refuses_bad_arguments(store: RunStore, kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        await store.list_runs(**kwargs)


# -- deleting and expiring ----------------------------------------------------------------------------


async def test_delete(store: RunStore) -> None:
    await _make_listing(store)
    assert await store.delete("r3") is True
    assert await store.delete("r3") is False
    assert await store.get_run("r3") is None
    assert await store.read("r3") == []
    assert await store.last_seq("r3") == 0
    assert [r.run_id for r in await store.list_runs()] == ["r5", "r4", "r2", "r1"]
    assert len(await store.read("r1")) == len(full_run("r1"))
    # the id can be used again, from the start
    assert await store.append("r3", _started("r3", 500.0), expected_seq=0) == 1


async def test_expire_deletes_runs_whose_newest_event_is_older(store: RunStore) -> None:
    await _make_listing(store)
    await store.append("r3", [RunSuspended(at=450.0, reason="later")], expected_seq=1)  # r3 now updated at 450
    assert sorted(await store.expire(older_than=201.0)) == ["r1"]
    assert sorted(await store.expire(older_than=400.5)) == ["r2", "r4", "r5"]
    assert await store.expire(older_than=400.5) == []
    assert [r.run_id for r in await store.list_runs()] == ["r3"]
    assert await store.read("r2") == []
    assert await store.last_seq("r3") == 2


# -- closing ---------------------------------------------------------------------------------------------


async def test_a_closed_store_refuses_work(backend: Backend) -> None:
    store = backend.open()
    await store.append("r", step_batch("a"), expected_seq=0)
    await store.close()
    await store.close()  # closing twice is fine
    with pytest.raises(UsageError):
        await store.append("r", step_batch("b"), expected_seq=2)
    with pytest.raises(UsageError):
        await store.read("r")


async def test_a_store_that_was_never_used_closes(backend: Backend) -> None:
    store = backend.open()
    await store.close()


async def test_the_log_survives_close_and_reopen(durable: Backend) -> None:
    events = full_run("r")
    first = durable.open()
    await first.append("r", events[:10], expected_seq=0)
    before = await first.get_run("r")
    await first.close()

    second = durable.open()
    try:
        assert events_of(await second.read("r")) == events[:10]
        assert await second.get_run("r") == before
        assert await second.append("r", events[10:], expected_seq=10) == len(events)
    finally:
        await second.close()

    third = durable.open()
    try:
        assert events_of(await third.read("r")) == events
        summary = await third.get_run("r")
        assert summary is not None
        assert summary.status == "finished"
    finally:
        await third.close()


def test_a_store_outlives_an_event_loop(backend: Backend) -> None:
    """A program may drive one store from several ``asyncio.run`` calls, one after another."""
    store = backend.open()
    assert asyncio.run(store.append("r", step_batch("a"), expected_seq=0)) == 2
    assert asyncio.run(store.append("r", step_batch("b"), expected_seq=2)) == 4
    assert seqs_of(asyncio.run(store.read("r"))) == [1, 2, 3, 4]
    asyncio.run(store.close())


# -- concurrency -----------------------------------------------------------------------------------------


async def _append_with_retry(store: RunStore, run_id: str, events: list[Event]) -> int:
    """Append after whatever the log holds; on a conflict read again and retry. Returns the conflicts."""
    conflicts = 0
    while True:
        last = await store.last_seq(run_id)
        try:
            await store.append(run_id, events, expected_seq=last)
            return conflicts
        except AppendConflict:
            conflicts += 1
        await asyncio.sleep(0)


async def test_exactly_one_of_many_tasks_appending_after_the_same_seq_wins(store: RunStore) -> None:
    await store.append("r", step_batch("seed"), expected_seq=0)
    results = await asyncio.gather(
        *(store.append("r", step_batch(f"t{i}"), expected_seq=2) for i in range(12)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, int)]
    losers = [r for r in results if isinstance(r, AppendConflict)]
    assert winners == [4]
    assert len(losers) == 11
    assert all(c.expected == 2 and c.actual == 4 for c in losers)
    assert await store.last_seq("r") == 4
    assert (await verify_chain(store, "r")).intact, "a losing append left nothing of itself in the chain"


async def test_many_tasks_appending_to_one_run_leave_no_gap_and_no_duplicate(store: RunStore) -> None:
    tasks, batches = 8, 6

    async def writer(name: str) -> None:
        for k in range(batches):
            await _append_with_retry(store, "r", step_batch(f"{name}-{k}"))

    await asyncio.gather(*(writer(f"w{i}") for i in range(tasks)))
    stored = await store.read("r")
    assert seqs_of(stored) == list(range(1, tasks * batches * 2 + 1))
    assert_whole_batches(events_of(stored), 2)
    report = await verify_chain(store, "r")
    assert report.intact, report.describe()
    assert (report.events, report.begins_at, report.head) == (len(stored), 1, stored[-1].hash)


def _check_snapshot(stored: list[StoredEvent], size: int) -> None:
    assert seqs_of(stored) == list(range(1, len(stored) + 1)), "a gap or a duplicate"
    assert_whole_batches(events_of(stored), size)


async def test_readers_during_writes_see_whole_batches_and_no_gap(backend: Backend) -> None:
    """Writer tasks append batches of 3 while a reader task (and, for durable backends, a reader thread
    with its own store and connections) reads the log over and over."""
    writers, batches, size = 4, 8, 3
    total = writers * batches * size
    store = backend.open()
    writing_done = asyncio.Event()
    thread_done = threading.Event()
    snapshots: list[int] = []

    async def writer(name: str) -> None:
        for k in range(batches):
            await _append_with_retry(store, "r", step_batch(f"{name}-{k}", size=size))

    async def reader(s: RunStore) -> None:
        while True:
            finished = writing_done.is_set() or thread_done.is_set()
            stored = await s.read("r")
            _check_snapshot(stored, size)
            snapshots.append(len(stored))
            if len(stored) == total or finished:
                return
            await asyncio.sleep(0)

    def thread_reader() -> None:
        async def run() -> None:
            own = backend.open()
            try:
                await reader(own)
            finally:
                await own.close()

        try:
            asyncio.run(run())
        finally:
            thread_done.set()

    async def write_all() -> None:
        try:
            await asyncio.gather(*(writer(f"w{i}") for i in range(writers)))
        finally:
            writing_done.set()

    try:
        jobs = [write_all(), reader(store)]
        if backend.durable:
            jobs.append(asyncio.to_thread(thread_reader))
        await asyncio.gather(*jobs)
        final = await store.read("r")
        _check_snapshot(final, size)
        assert len(final) == total
        assert snapshots
        assert (await verify_chain(store, "r")).intact
    finally:
        await store.close()


_WORKER = r"""
import asyncio, sys
from planexec.executor import Verdict
from planexec.log import StepStarted, StepSucceeded
from planexec.store import AppendConflict, open_store

url, run_id, name, batches = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def batch(tag):
    return [
        StepStarted(at=3000.0, step_id=tag, executor="tools", tool="noop", args={"tag": tag}),
        StepSucceeded(at=3000.0, step_id=tag, output={"tag": tag}, verdict=Verdict(passed=True)),
    ]

async def main():
    store = open_store(url)
    try:
        await store.last_seq(run_id)  # connect before the race
        print("ready", flush=True)
        expected = int(sys.stdin.readline().split()[1])
        try:
            await store.append(run_id, batch(name + "-race"), expected_seq=expected)
            print("won", flush=True)
        except AppendConflict as e:
            print("lost", e.actual, flush=True)
        conflicts = done = 0
        while done < batches:
            last = await store.last_seq(run_id)
            try:
                await store.append(run_id, batch(f"{name}-{done}"), expected_seq=last)
                done += 1
            except AppendConflict:
                conflicts += 1
        print("done", conflicts, flush=True)
    finally:
        await store.close()

asyncio.run(main())
"""


async def test_processes_appending_to_one_run(durable: Backend) -> None:
    """Several OS processes, each with its own store: exactly one wins a race after the same seq, and
    their appends with retries leave no gap and no duplicate, while a reader thread sees whole batches."""
    workers, batches = 4, 12
    store = durable.open()
    await store.append("r", step_batch("seed"), expected_seq=0)
    total = 2 + 2 + workers * batches * 2
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WORKER,
            durable.store_url,
            "r",
            f"p{i}",
            str(batches),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        for i in range(workers)
    ]
    stop_reading = threading.Event()
    snapshots: list[int] = []

    def thread_reader() -> None:
        async def run() -> None:
            own = durable.open()
            try:
                while True:
                    finished = stop_reading.is_set()
                    stored = await own.read("r")
                    _check_snapshot(stored, 2)
                    snapshots.append(len(stored))
                    if len(stored) == total or finished:
                        return
            finally:
                await own.close()

        asyncio.run(run())

    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await proc.stdout.readline()
            if line.strip() != b"ready":
                _, err = await proc.communicate()
                pytest.fail(f"a worker did not start: {line!r}\n{err.decode()}")
        reading = asyncio.create_task(asyncio.to_thread(thread_reader))
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go 2\n")
            await proc.stdin.drain()
        outputs = []
        for proc in procs:
            out, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()
            outputs.append(out.decode().split("\n"))
        stop_reading.set()
        await reading
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.communicate()

    race = [lines[0] for lines in outputs]
    assert race.count("won") == 1
    # a loser saw at least the winner's batch (and maybe more: the winner goes on appending)
    assert all(line == "won" or (line.startswith("lost ") and int(line.split()[1]) >= 4) for line in race)
    assert all(lines[1].startswith("done ") for lines in outputs)
    try:
        stored = await store.read("r")
        _check_snapshot(stored, 2)
        assert len(stored) == total
        tags = {getattr(s.event, "step_id", None) for s in stored if isinstance(s.event, StepStarted)}
        assert len([t for t in tags if str(t).endswith("-race")]) == 1
        assert {f"p{i}-{k}" for i in range(workers) for k in range(batches)} <= tags
        assert snapshots
        summary = await store.get_run("r")
        assert summary is not None
        assert summary.events == total
        report = await verify_chain(store, "r")
        assert report.intact, report.describe()
        assert (report.events, report.head) == (total, stored[-1].hash)
    finally:
        await store.close()


# -- sessions ------------------------------------------------------------------------------------------


async def test_runs_of_a_session_are_listed_with_their_turns(store: RunStore) -> None:
    def started(run_id: str, at: float, session: Any) -> RunStarted:
        config = {} if session is None else {"session": session}
        return RunStarted(at=at, run_id=run_id, goal=f"goal {run_id}", budget={}, config=config)

    await store.append("a1", [started("a1", 1.0, {"id": "chat-a", "turn": 1})], expected_seq=0)
    await store.append("a2", [started("a2", 2.0, {"id": "chat-a", "turn": 2})], expected_seq=0)
    await store.append("b1", [started("b1", 3.0, {"id": "chat-b", "turn": 1})], expected_seq=0)
    await store.append("solo", [started("solo", 4.0, None)], expected_seq=0)
    for odd, session in (("x1", {"id": "", "turn": 1}), ("x2", {"id": "chat-a", "turn": 0}), ("x3", "chat-a")):
        await store.append(odd, [started(odd, 5.0, session)], expected_seq=0)  # not a session record
    turns = await store.list_runs(session="chat-a")
    assert [(r.run_id, r.session, r.turn) for r in turns] == [("a2", "chat-a", 2), ("a1", "chat-a", 1)]
    assert [r.run_id for r in await store.list_runs(session="chat-b")] == ["b1"]
    assert await store.list_runs(session="nobody") == []
    everything = {r.run_id: (r.session, r.turn) for r in await store.list_runs()}
    assert everything["solo"] == (None, None)
    assert everything["x1"] == everything["x2"] == everything["x3"] == (None, None)
    summary = await store.get_run("a2")
    assert summary is not None
    assert (summary.session, summary.turn) == ("chat-a", 2)
    with pytest.raises(UsageError):
        await store.list_runs(session="")


# -- following: woken when a batch is stored, not by reading again and again --------------------------

_STARTED = RunStarted(at=1.0, run_id="f", goal="g", budget={})
_FINISHED = RunFinished(at=2.0, stop=StopReason(kind="goal_met", detail="done"), answer="a")


async def test_a_follower_is_told_at_once_what_is_already_stored(store: RunStore) -> None:
    await store.append("f", [_STARTED], expected_seq=0)
    assert await store.wait_for_events("f", after=0, within=30) is True
    assert await store.wait_for_events("f", after=1, within=0.05) is False  # nothing after 1
    assert await store.wait_for_events("unknown", after=0, within=0.05) is False


async def test_a_follower_is_woken_by_the_next_batch(store: RunStore) -> None:
    await store.append("f", [_STARTED], expected_seq=0)
    waiters = [asyncio.create_task(store.wait_for_events("f", after=1, within=60)) for _ in range(3)]
    other = asyncio.create_task(store.wait_for_events("g", after=0, within=60))
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters)
    await store.append("f", [_FINISHED], expected_seq=1)
    # woken by the append itself: a memory store is never read again unasked, so without the wake-up
    # these would wait the whole minute (bounded here so that a failure does not hang the suite)
    assert await asyncio.wait_for(asyncio.gather(*waiters), 10) == [True, True, True]
    assert not other.done()  # another run's waiter sleeps on
    other.cancel()
    await asyncio.gather(other, return_exceptions=True)


async def test_a_follower_hears_another_processs_append(durable: Backend) -> None:
    # another store on the same file or database stands for another process: PostgreSQL wakes the
    # follower through LISTEN/NOTIFY, a SQLite file is looked at every quarter of a second
    follower, writer = durable.open(), durable.open()
    try:
        await writer.append("f", [_STARTED], expected_seq=0)
        assert await follower.wait_for_events("f", after=0, within=30)
        waiting = asyncio.create_task(follower.wait_for_events("f", after=1, within=60))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await writer.append("f", [_FINISHED], expected_seq=1)
        assert await asyncio.wait_for(waiting, 10) is True
    finally:
        await follower.close()
        await writer.close()


async def test_a_feed_hands_over_each_batch_as_it_was_stored(store: RunStore) -> None:
    batches: list[list[Fresh]] = []
    with store.feed("f") as feed:
        await store.append("f", [_STARTED], expected_seq=0)
        await store.append("f", [_FINISHED], expected_seq=1)
        while len(batches) < 2:
            got = await asyncio.wait_for(feed.next(10), 10)
            assert got is not None
            if got:  # an empty one asks for a read: PostgreSQL also hears its own appends' notifications
                batches.append(got)
        assert not await feed.next(0.05)  # nothing more
    fed = [f for batch in batches for f in batch]
    assert [len(b) for b in batches] == [1, 1]
    assert [(f.seq, f.event) for f in fed] == [(1, _STARTED), (2, _FINISHED)]
    raw = await store.read_raw("f")
    assert [f.data.encode() for f in fed] == [e.data for e in raw.events]  # the very bytes stored


async def test_a_feed_is_for_its_run_and_tells_of_another_processs_batch(durable: Backend) -> None:
    follower, writer = durable.open(), durable.open()
    try:
        with follower.feed("f") as feed:
            await follower.append("g", [_STARTED], expected_seq=0)  # another run: not in this feed
            await writer.append("f", [_STARTED], expected_seq=0)  # another process: "read the store"
            assert await asyncio.wait_for(feed.next(30), 10) == []  # "read the store", nothing of "g"
    finally:
        await follower.close()
        await writer.close()


async def test_a_closed_store_refuses_to_wait_and_wakes_its_waiters(backend: Backend) -> None:
    store = backend.open()
    await store.append("f", [_STARTED], expected_seq=0)
    waiting = asyncio.create_task(store.wait_for_events("f", after=1, within=60))
    await asyncio.sleep(0.05)
    await store.close()
    done = await asyncio.wait_for(asyncio.gather(waiting, return_exceptions=True), 10)
    assert isinstance(done[0], UsageError)  # it looked at the store again, which is closed
    with pytest.raises(UsageError, match="closed"):
        await store.wait_for_events("f", after=0, within=1)
