"""The hash chain against tampering: a real SQLite file and a real PostgreSQL database are changed
behind the store's back — an event edited, deleted, moved, inserted, a link or the head changed, a
whole chain recomputed by a forger — and ``verify_chain`` names where; logs written before the
chain existed still load, and the chain begins where a newer store first appended."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from planexec.errors import LogUnreadable
from planexec.log import RunStarted
from planexec.store import RunStore, verify_chain
from tests.test_store_support import DURABLE, Backend, full_run, make_backend, step_batch, stored_text

RUN = "r"


@pytest.fixture(params=DURABLE)
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with make_backend(request.param, tmp_path) as b:
        yield b


def sql(backend: Backend, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the backend's database outside the store. ``{run}`` in it selects the
    run's event rows (one ``?`` parameter: the run id); parameters are written ``?``."""
    if backend.kind == "sqlite":
        assert backend.path is not None
        text = statement.replace("{run}", "run = (SELECT id FROM planexec_runs WHERE run_id = ?)")
        with closing(sqlite3.connect(backend.path, isolation_level=None)) as conn:
            return conn.execute(text, params).fetchall()
    import psycopg

    assert backend.url is not None
    text = statement.replace("{run}", "run_id = ?").replace("?", "%s")
    with psycopg.connect(backend.url, autocommit=True) as pg:
        cur = pg.execute(text.encode(), params)
        return cur.fetchall() if cur.description else []


async def written(backend: Backend) -> tuple[RunStore, int]:
    store = backend.open()
    events = full_run(RUN)
    await store.append(RUN, events[:10], expected_seq=0)
    await store.append(RUN, events[10:], expected_seq=10)
    report = await verify_chain(store, RUN)
    assert report.intact, report.describe()
    return store, len(events)


async def broken(store: RunStore) -> tuple[int, str, str, str | None]:
    report = await verify_chain(store, RUN)
    assert report.broken is not None, "the change went unseen"
    assert not report.intact
    assert report.describe().startswith(f"run {RUN}: its chain is broken at event {report.broken.seq}: ")
    b = report.broken
    assert report.head is None, "a chain broken before its end has no head"
    return b.seq, b.problem, b.expected, b.found


def set_data(backend: Backend, seq: int, text: str) -> None:
    sql(backend, "UPDATE planexec_events SET data = ? WHERE {run} AND seq = ?", (text, RUN, seq))


def own_hash(backend: Backend, seq: int) -> str:
    ((value,),) = sql(backend, "SELECT hash FROM planexec_events WHERE {run} AND seq = ?", (RUN, seq))
    return bytes(value).hex()


async def test_an_edited_event_is_named(durable: Backend) -> None:
    """One value in one event's JSON changed directly in the database: the log still reads (the
    edit is silent there), and the chain names that event."""
    store, _ = await written(durable)
    try:
        at = next(
            n
            for n in range(1, 40)
            if '"step_started"' in (t := stored_text(durable, store, RUN, n)) and '"q":"orders"' in t
        )
        original = stored_text(durable, store, RUN, at)
        assert '"q":"orders"' in original
        edited = original.replace('"q":"orders"', '"q":"refunds"')
        set_data(durable, at, edited)
        assert (await store.read(RUN))[at - 1].event.args == {"q": "refunds"}  # type: ignore[union-attr]
        seq, problem, expected, found = await broken(store)
        assert (seq, problem) == (at, "changed")
        assert found == own_hash(durable, at)
        link = bytes.fromhex(own_hash(durable, at - 1))
        assert expected == hashlib.sha256(link + edited.encode()).hexdigest()
        set_data(durable, at, original)
        assert (await verify_chain(store, RUN)).intact, "undoing the edit mends the chain"
    finally:
        await store.close()


async def test_an_edited_last_event_is_named(durable: Backend) -> None:
    store, n = await written(durable)
    try:
        data = json.loads(stored_text(durable, store, RUN, n))
        data["event"]["answer"] = "43"
        set_data(durable, n, json.dumps(data, separators=(",", ":")))
        assert (await broken(store))[:2] == (n, "changed")
    finally:
        await store.close()


async def test_an_event_made_unreadable_is_still_checked(durable: Backend) -> None:
    store, _ = await written(durable)
    try:
        set_data(durable, 5, '{"v":10,"event":{"kind":"model_ca')
        with pytest.raises(LogUnreadable):
            await store.read(RUN)
        assert (await broken(store))[:2] == (5, "changed")
    finally:
        await store.close()


async def test_a_deleted_event_is_named(durable: Backend) -> None:
    store, _ = await written(durable)
    try:
        sql(durable, "DELETE FROM planexec_events WHERE {run} AND seq = ?", (RUN, 7))
        seq, problem, _, found = await broken(store)
        assert (seq, problem, found) == (7, "missing", None)
    finally:
        await store.close()


async def test_a_deleted_event_with_the_rest_renumbered_is_named(durable: Backend) -> None:
    """The gap closed and the summary's count fixed, as a careful forger would: the event now at 7
    does not link to event 6."""
    store, n = await written(durable)
    try:
        sql(durable, "DELETE FROM planexec_events WHERE {run} AND seq = ?", (RUN, 7))
        for seq in range(8, n + 1):
            sql(durable, "UPDATE planexec_events SET seq = ? WHERE {run} AND seq = ?", (seq - 1, RUN, seq))
        sql(durable, "UPDATE planexec_runs SET last_seq = ? WHERE run_id = ?", (n - 1, RUN))
        assert len(await store.read(RUN)) == n - 1, "the log reads without a gap"
        seq, problem, expected, _ = await broken(store)
        assert (seq, problem) == (7, "out_of_place")
        assert expected == own_hash(durable, 6)
    finally:
        await store.close()


async def test_reordered_events_are_named(durable: Backend) -> None:
    store, _ = await written(durable)
    try:
        sql(durable, "UPDATE planexec_events SET seq = -1 WHERE {run} AND seq = ?", (RUN, 9))
        sql(durable, "UPDATE planexec_events SET seq = 9 WHERE {run} AND seq = ?", (RUN, 10))
        sql(durable, "UPDATE planexec_events SET seq = 10 WHERE {run} AND seq = -1", (RUN,))
        assert (await broken(store))[:2] == (9, "out_of_place")
    finally:
        await store.close()


async def test_a_removed_last_event_is_named(durable: Backend) -> None:
    store, n = await written(durable)
    try:
        sql(durable, "DELETE FROM planexec_events WHERE {run} AND seq = ?", (RUN, n))
        assert (await broken(store))[:2] == (n, "missing")
        # the summary made to agree: the head it records is the one event n left behind
        sql(durable, "UPDATE planexec_runs SET last_seq = ? WHERE run_id = ?", (n - 1, RUN))
        seq, problem, expected, found = await broken(store)
        assert (seq, problem, expected) == (n - 1, "head", own_hash(durable, n - 1))
        assert found is not None
        assert found != expected
    finally:
        await store.close()


async def test_an_inserted_event_is_named(durable: Backend) -> None:
    store, n = await written(durable)
    try:
        text = stored_text(durable, store, RUN, n)
        if durable.kind == "sqlite":
            statement = (
                "INSERT INTO planexec_events (run, seq, kind, at, data) "
                "SELECT id, ?, 'run_finished', 0, ? FROM planexec_runs WHERE run_id = ?"
            )
            sql(durable, statement, (n + 1, text, RUN))
        else:
            statement = "INSERT INTO planexec_events (run_id, seq, kind, at, data) VALUES (?, ?, 'run_finished', 0, ?)"
            sql(durable, statement, (RUN, n + 1, text))
        assert (await broken(store))[:2] == (n + 1, "extra")
    finally:
        await store.close()


async def test_a_changed_link_and_a_removed_link_are_named(durable: Backend) -> None:
    store, _ = await written(durable)
    try:
        sql(durable, "UPDATE planexec_events SET link = ? WHERE {run} AND seq = ?", (b"\x00" * 32, RUN, 12))
        seq, problem, _, found = await broken(store)
        assert (seq, problem, found) == (12, "out_of_place", "00" * 32)
        link = bytes.fromhex(own_hash(durable, 11))
        sql(durable, "UPDATE planexec_events SET link = ? WHERE {run} AND seq = ?", (link, RUN, 12))
        assert (await verify_chain(store, RUN)).intact
        sql(durable, "UPDATE planexec_events SET link = NULL, hash = NULL WHERE {run} AND seq = ?", (RUN, 12))
        assert (await broken(store))[:2] == (12, "unlinked")
    finally:
        await store.close()


async def test_a_recomputed_chain_is_exposed_by_a_kept_head(durable: Backend) -> None:
    """A forger who knows the format edits event 3 and recomputes every hash after it: the chain is
    consistent again, but a head kept elsewhere before the edit is no longer in it."""
    store, n = await written(durable)
    try:
        kept = (await verify_chain(store, RUN)).head
        assert kept is not None
        rows = sql(durable, "SELECT seq, data FROM planexec_events WHERE {run} ORDER BY seq", (RUN,))
        texts = {int(seq): str(data) for seq, data in rows}
        texts[3] = texts[3].replace('"status":429', '"status":500')
        link = hashlib.sha256(b"planexec chain v1\x00" + RUN.encode()).digest()
        for seq in range(1, n + 1):
            own = hashlib.sha256(link + texts[seq].encode()).digest()
            sql(
                durable,
                "UPDATE planexec_events SET data = ?, link = ?, hash = ? WHERE {run} AND seq = ?",
                (texts[seq], link, own, RUN, seq),
            )
            link = own
        sql(durable, "UPDATE planexec_runs SET chain_head = ? WHERE run_id = ?", (link, RUN))
        forged = await verify_chain(store, RUN)
        assert forged.intact, "a recomputed chain is consistent: the head kept elsewhere is what exposes it"
        assert forged.head != kept
        report = await verify_chain(store, RUN, kept=kept)
        assert report.broken is not None
        assert (report.broken.problem, report.broken.expected, report.broken.found) == ("kept", kept, forged.head)
    finally:
        await store.close()


async def test_tampering_with_one_run_leaves_the_others_intact(durable: Backend) -> None:
    store, _ = await written(durable)
    try:
        await store.append("other", step_batch("a"), expected_seq=0)
        set_data(durable, 2, stored_text(durable, store, RUN, 2).replace("start", "begin"))
        assert (await broken(store))[:2] == (2, "changed")
        assert (await verify_chain(store, "other")).intact
    finally:
        await store.close()


# -- logs written before the chain ----------------------------------------------------------------------


def make_unchained(backend: Backend) -> None:
    """Take the chain's columns away and set the store schema back, as an older planexec left it."""
    if backend.kind == "sqlite":
        for statement in (
            "ALTER TABLE planexec_events DROP COLUMN link",
            "ALTER TABLE planexec_events DROP COLUMN hash",
            "ALTER TABLE planexec_runs DROP COLUMN chain_head",
            "UPDATE planexec_schema SET version = 2 WHERE component = 'store'",
        ):
            sql(backend, statement)
    else:
        for statement in (
            "ALTER TABLE planexec_events DROP COLUMN link, DROP COLUMN hash",
            "ALTER TABLE planexec_runs DROP COLUMN chain_head",
            "ALTER TABLE planexec_queue DROP COLUMN told",
            "UPDATE planexec_schema SET version = 3 WHERE component = 'store'",
        ):
            sql(backend, statement)


async def test_an_older_log_loads_and_its_chain_begins_where_a_newer_store_appends(durable: Backend) -> None:
    store, n = await written(durable)
    events = full_run(RUN)
    await store.append("later", [RunStarted(at=1.0, run_id="later", goal="g", budget={})], expected_seq=0)
    await store.close()
    make_unchained(durable)
    upgraded = durable.open()
    try:
        stored = await upgraded.read(RUN)
        assert [s.event for s in stored] == events, "the older log reads as it was"
        assert {s.hash for s in stored} == {None}
        before = await verify_chain(upgraded, RUN)
        assert before.intact
        assert (before.begins_at, before.unchained, before.events) == (None, n, n)
        assert "none of its" in before.describe()
        await upgraded.append(RUN, step_batch("after"), expected_seq=n)
        report = await verify_chain(upgraded, RUN)
        assert report.intact, report.describe()
        assert (report.begins_at, report.unchained, report.events) == (n + 1, n, n + 2)
        assert f"events 1-{n} were written before the store kept a chain" in report.describe()
        stored = await upgraded.read(RUN)
        assert [s.hash is None for s in stored] == [True] * n + [False, False]
        assert report.head == stored[-1].hash
        # the first chained event links to the chain over the older events as they were
        assert (await upgraded.read_raw(RUN)).events[n].link == bytes.fromhex(before.head or "")
        # so changing one of them now breaks the chain where it began
        set_data(durable, 4, stored_text(durable, upgraded, RUN, 4).replace("scripted", "forged"))
        seq, problem, _, _ = await broken(upgraded)
        assert (seq, problem) == (n + 1, "out_of_place")
        broke = await verify_chain(upgraded, RUN)
        assert broke.broken is not None
        assert "written before the store kept a chain" in broke.broken.message
        # a run never appended to since the upgrade stays unchained, and intact
        later = await verify_chain(upgraded, "later")
        assert (later.intact, later.begins_at, later.events) == (True, None, 1)
    finally:
        await upgraded.close()


# -- what a broken database or an attacker may leave --------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("link", "not a hash", "out_of_place"),
        ("link", b"\x01" * 5, "out_of_place"),
        ("hash", "", "changed"),
        ("hash", 12345, "changed"),
    ],
)
async def test_links_of_the_wrong_type_or_size_are_breaks_not_crashes(
    durable: Backend, column: str, value: object, problem: str
) -> None:
    if durable.kind == "postgres" and not isinstance(value, bytes):
        value = str(value).encode()  # a bytea column holds bytes only
    store, _ = await written(durable)
    try:
        sql(durable, f"UPDATE planexec_events SET {column} = ? WHERE {{run}} AND seq = ?", (value, RUN, 8))
        assert (await broken(store))[:2] == (8, problem)
    finally:
        await store.close()


async def test_bytes_that_are_not_text_and_a_damaged_head(durable: Backend) -> None:
    store, n = await written(durable)
    try:
        sql(durable, "UPDATE planexec_runs SET chain_head = ? WHERE run_id = ?", (b"\xff" * 3, RUN))
        seq, problem, _, found = await broken(store)
        assert (seq, problem, found) == (n, "head", "ffffff")
        # the next append builds on the chain of the stored events, not on what the head became
        await store.append(RUN, step_batch("after"), expected_seq=n)
        report = await verify_chain(store, RUN)
        assert report.intact, "only the head was damaged, and the head is the last event's hash"
        sql(durable, "UPDATE planexec_runs SET chain_head = ? WHERE run_id = ?", ("text, not bytes", RUN))
        await store.append(RUN, step_batch("later"), expected_seq=n + 2)
        assert (await verify_chain(store, RUN)).intact
        if durable.kind == "sqlite":  # PostgreSQL text cannot hold bytes that are not UTF-8
            sql(
                durable,
                "UPDATE planexec_events SET data = CAST(X'ff00fe' AS TEXT) WHERE {run} AND seq = ?",
                (RUN, 2),
            )
            assert (await broken(store))[:2] == (2, "changed")
            await store.append(RUN, step_batch("last"), expected_seq=n + 4)  # still appends
            assert (await broken(store))[:2] == (2, "changed")
    finally:
        await store.close()


async def test_an_event_numbered_before_the_first_is_an_insertion(durable: Backend) -> None:
    store, _ = await written(durable)
    try:
        sql(durable, "UPDATE planexec_events SET seq = 0 WHERE {run} AND seq = ?", (RUN, 1))
        seq, problem, _, _ = await broken(store)
        assert (seq, problem) == (0, "extra")
    finally:
        await store.close()


async def test_verify_refuses_what_is_not_a_run_id(durable: Backend) -> None:
    from planexec import UsageError

    store = durable.open()
    try:
        for wrong in ("", None, 3):
            with pytest.raises(UsageError):
                await verify_chain(store, wrong)  # type: ignore[arg-type]
    finally:
        await store.close()
