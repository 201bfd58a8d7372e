"""Hostile input to what runs go on with on workers: answered runs given back to the workers
(:func:`planexec.runs.give_back`, ``planexec approve``/``tell``), agent specs naming executors and a
plan memory (spec version 6) and the validation of Ray executors' options.

Every wait is for a state the database shows, with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planexec import UsageError
from planexec.log import RunFinished, RunStarted
from planexec.runs import AgentSpec, build_agent, give_back, submit
from planexec.store import MemoryStore, PostgresStore, RunQueue

from .test_store_support import postgres_schema
from .test_workers import Setup, _cli, _state_is, wait_for

HOSTILE = '''
from typing import Any


class _Tools:
    kind = "tools"
    max_concurrency = None

    async def run(self, step, args, ctx):
        return None


class Raising:
    """Raises on every attribute it is asked for."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")


class ListName(_Tools):
    name = ["not", "text"]


class IntName(_Tools):
    name = 5


class NameRaises(_Tools):
    @property
    def name(self) -> str:
        raise ValueError("no name")


class Fine(_Tools):
    name = "fine"


class Holder:
    @property
    def inner(self) -> Any:
        raise KeyError("inner")


raising = Raising()
list_name = ListName()
int_name = IntName()
name_raises = NameRaises()
fine = Fine()
fine_twice = [fine, fine]
two_list_names = [ListName(), ListName()]
holder = Holder()


def __getattr__(name: str) -> Any:
    if name == "lazy":
        raise ValueError("the module cannot make it")
    raise AttributeError(name)
'''

TWO_GATED = """
from planexec.testing import FunctionModel


def _two(request):
    if request.purpose != "planner.propose":
        return {"answer": "published"}
    return {
        "steps": [
            {"id": "a", "description": "publish one", "tool": "publish", "args": {"item": "one"}},
            {"id": "b", "description": "publish two", "tool": "publish", "args": {"item": "two"}},
        ]
    }


TWO_GATED = FunctionModel(_two, name="planner-two-gated")
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "hostile_executors.py").write_text(HOSTILE)
    (tmp_path / "import_raises.py").write_text('raise RuntimeError("importing fails")\n')
    (tmp_path / "import_exits.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "replies.json").write_text("[]")
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("hostile_executors", "import_raises", "import_exits"):
            sys.modules.pop(name, None)


def _spec(home: Path, *executors: str) -> AgentSpec:
    return AgentSpec(planner=f"scripted:{home / 'replies.json'}", executors=executors, cwd=str(home))


def _refused(home: Path, *executors: str) -> UsageError:
    with pytest.raises(UsageError) as refused:
        build_agent(_spec(home, *executors), store=MemoryStore())
    return refused.value


# -- executors named by a spec --------------------------------------------------------------------


def test_an_executor_module_whose_import_raises_is_a_usage_error(home: Path) -> None:
    error = _refused(home, "import_raises:thing", "hostile_executors:missing", "no_such_module_here:x")
    wheres = [p.where for p in error.problems]
    assert wheres == [
        "executors 'import_raises:thing'",
        "executors 'hostile_executors:missing'",
        "executors 'no_such_module_here:x'",
    ]


def test_the_same_executor_listed_twice_is_a_usage_error(home: Path) -> None:
    error = _refused(home, "hostile_executors:fine_twice")
    assert any("fine" in p.message for p in error.problems)


def test_an_executor_that_raises_on_attribute_access_is_a_usage_error(home: Path) -> None:
    """Was: the RuntimeError of ``isinstance(item, Executor)`` escapes (a traceback from
    ``planexec run --executors``)."""
    error = _refused(home, "hostile_executors:raising", "import_raises:thing")
    assert [p.where for p in error.problems][:1] == ["executors 'hostile_executors:raising'"]
    assert len(error.problems) == 2  # every problem, not only the first


def test_an_executor_whose_name_raises_is_a_usage_error(home: Path) -> None:
    """Was: the ValueError of ``e.name`` escapes build_agent."""
    error = _refused(home, "hostile_executors:name_raises")
    assert error.problems


@pytest.mark.parametrize("ref", ["hostile_executors:list_name", "hostile_executors:int_name"])
def test_an_executor_whose_name_is_not_text_is_a_usage_error(home: Path, ref: str) -> None:
    """Was: a list name is a TypeError (unhashable) from Agent; an int name is accepted and the
    agent routes steps to the executor ``5``."""
    error = _refused(home, ref)
    assert error.problems


def test_two_executors_with_unhashable_names_are_a_usage_error(home: Path) -> None:
    """Was: load_executors' duplicate check raises TypeError (unhashable type: 'list')."""
    error = _refused(home, "hostile_executors:two_list_names")
    assert error.problems


@pytest.mark.parametrize("ref", ["hostile_executors:lazy", "hostile_executors:holder.inner"])
def test_an_attribute_that_raises_while_imported_is_a_usage_error(home: Path, ref: str) -> None:
    """Was: only AttributeError is caught while walking ``module:attr``; a module ``__getattr__``
    or a property raising anything else escapes."""
    error = _refused(home, ref)
    assert [p.where for p in error.problems] == [f"executors {ref!r}"]


def test_an_executor_module_that_exits_while_imported_is_a_usage_error(home: Path) -> None:
    """Was: SystemExit raised by the import ends the
    process that builds the agent — a ``planexec worker`` with it."""
    try:
        error = _refused(home, "import_exits:thing")
    except SystemExit:
        pytest.fail("SystemExit escaped build_agent")
    assert error.problems


@pytest.mark.parametrize(
    ("data", "bad"),
    [
        ({"version": 6, "executors": "hostile_executors:fine"}, ["executors"]),
        ({"version": 6, "executors": [1, None]}, ["executors"]),
        ({"version": 6, "executors": [["a:b"]]}, ["executors"]),
        ({"version": 6, "executors": {"a": "b:c"}}, ["executors"]),
        ({"version": 6, "memory": "yes"}, ["memory"]),
        ({"version": 6, "memory": 1}, ["memory"]),
        ({"version": 6, "memory": None}, ["memory"]),
        ({"version": 6, "memory": 1, "executors": 7, "tools": "x"}, ["memory", "tools", "executors"]),
        ({"version": 6, "executors": list(range(100_000))}, ["executors"]),
        ({"version": 99, "memory": True}, ["version"]),
        ({"version": True}, ["version"]),
        ({"version": 6.0}, ["version"]),
    ],
)
def test_a_hostile_spec_lists_every_unreadable_field(data: dict[str, Any], bad: list[str]) -> None:
    with pytest.raises(UsageError) as refused:
        AgentSpec.from_dict(data)
    messages = " ".join(p.message for p in refused.value.problems)
    for key in bad:
        assert repr(key) in messages
    assert len(refused.value.problems) == len(bad)


@pytest.mark.parametrize("data", [[], "spec", 5, None])
def test_a_spec_that_is_not_an_object_is_a_usage_error(data: Any) -> None:
    with pytest.raises(UsageError):
        AgentSpec.from_dict(data)


# -- workers given hostile specs ------------------------------------------------------------------


@pytest.fixture
def setup(home: Path) -> Iterator[Setup]:
    with postgres_schema() as url:
        workdir = home / "w"
        workdir.mkdir()
        made = Setup(url, workdir)
        (workdir / "hostile_executors.py").write_text(HOSTILE)
        (workdir / "import_raises.py").write_text('raise RuntimeError("importing fails")\n')
        (workdir / "attack_planners.py").write_text(TWO_GATED)
        try:
            yield made
        finally:
            made.stop_all()


async def _entry_state(queue: RunQueue, run_id: str) -> str | None:
    entry = await queue.entry(run_id)
    return entry.state if entry is not None else None


async def test_submit_refuses_a_hostile_executor_with_a_usage_error(setup: Setup) -> None:
    """Was: submit (which builds the agent to check it) lets the executor's RuntimeError escape;
    ``planexec submit --executors`` prints a traceback."""
    store = PostgresStore(setup.url)
    try:
        spec = AgentSpec(
            planner="object:workers_test_tools:QUICK",
            tools=("workers_test_tools:TOOLS",),
            executors=("hostile_executors:raising",),
            cwd=str(setup.home),
        )
        with pytest.raises(UsageError):
            await submit(store, spec, "a hostile executor")
    finally:
        await store.close()


async def test_a_worker_ends_runs_of_hostile_specs_with_usage_stops_and_goes_on(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        base = setup.spec()
        hostile = [
            ("hostile_executors:raising",),
            ("hostile_executors:list_name",),
            ("hostile_executors:name_raises",),
            ("hostile_executors:lazy",),
            ("hostile_executors:fine_twice",),
            ("import_raises:thing", "hostile_executors:int_name"),
        ]
        bad_ids = []
        for refs in hostile:
            spec = AgentSpec(planner=base.planner, tools=base.tools, executors=refs, cwd=base.cwd, memory=True)
            bad_ids.append(await submit(store, spec, f"hostile {refs}", check=False))
        good = await submit(store, AgentSpec(**{**base.__dict__, "memory": True}), "a good run after them")
        worker = setup.start_worker("w0", "--concurrency", "2")
        for run_id in [*bad_ids, good]:
            await wait_for(functools.partial(_done, queue, run_id), f"run {run_id} to be done")
        for run_id in bad_ids:
            log = [s.event for s in await store.read(run_id)]
            assert isinstance(log[0], RunStarted)
            last = log[-1]
            assert isinstance(last, RunFinished), (run_id, log)
            assert (last.stop.kind, last.stop.code) == ("error", "usage"), (run_id, last.stop)
        last = [s.event for s in await store.read(good)][-1]
        assert isinstance(last, RunFinished)
        assert last.stop.kind == "goal_met", last.stop
        assert worker.poll() is None, "the worker stopped"
    finally:
        await store.close()


async def _done(queue: RunQueue, run_id: str) -> bool:
    return await _entry_state(queue, run_id) == "done"


# -- give_back ------------------------------------------------------------------------------------


async def test_give_back_refuses_hostile_run_ids_and_leaves_the_queue_alone(setup: Setup) -> None:
    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(), "a queued run", check=False)
        for hostile in [
            "x" * 100_000,
            "'; DROP TABLE planexec_queue; --",
            "run\u0000id",
            "ünï\u202ecödé",
            "",
            "../../etc/passwd",
        ]:
            with contextlib.suppress(UsageError):
                assert await give_back(store, hostile) is False
        assert await _entry_state(queue, run_id) == "queued"
        assert not await give_back(store, run_id)  # queued: nothing to give back
        assert not await give_back(MemoryStore(), "'; DROP TABLE planexec_queue; --")
    finally:
        await store.close()


async def test_give_back_of_a_leased_run_is_refused(setup: Setup) -> None:
    store = PostgresStore(setup.url)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(), "held", check=False)
        [claim] = await queue.claim("busy-worker", limit=1, lease_seconds=60)
        assert not await give_back(store, run_id)
        entry = await queue.entry(run_id)
        assert entry is not None
        assert (entry.state, entry.owner) == ("leased", "busy-worker")
        assert await queue.release(run_id, owner="busy-worker", lease=claim.lease, state="done")
        assert not await give_back(store, run_id)
        assert await _entry_state(queue, run_id) == "done"
    finally:
        await store.close()


async def test_two_concurrent_give_backs_requeue_once(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=4)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(), "waiting", check=False)
        [claim] = await queue.claim("w", limit=1, lease_seconds=60)
        assert await queue.release(run_id, owner="w", lease=claim.lease, state="waiting")
        results = await asyncio.gather(*(give_back(store, run_id) for _ in range(8)))
        assert sorted(results) == [False] * 7 + [True]
        assert await _entry_state(queue, run_id) == "queued"
    finally:
        await store.close()


def _gated_spec(setup: Setup, planner: str = "workers_test_tools:GATED") -> AgentSpec:
    return AgentSpec(planner=f"object:{planner}", tools=("workers_test_tools:TOOLS",), cwd=str(setup.home))


async def test_a_run_asked_again_after_answers_is_not_ended_by_max_claims(setup: Setup) -> None:
    """Was: every give-back is a new claim, and claims count against ``max_claims``: a run that a
    worker left waiting and a human answered is ended with code ``internal`` ("every worker that
    took it stopped before it ended") once it was answered ``max_claims`` times, although no worker
    ever stopped."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, _gated_spec(setup), "publish the news", check=False)
        setup.start_worker("w0", "--max-claims", "1")
        await wait_for(lambda: _state_is(lambda: _entry_state(queue, run_id), "waiting"), "the run to wait")
        questions = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approvals", "--json")
        [question] = json.loads(questions.stdout)
        approved = await asyncio.to_thread(
            _cli, setup, "--store", setup.url, "approve", run_id, question["question_id"], "--json"
        )
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["requeued"] is True
        await wait_for(lambda: _done(queue, run_id), "a worker to finish the answered run")
        last = [s.event for s in await store.read(run_id)][-1]
        assert isinstance(last, RunFinished)
        assert last.stop.kind == "goal_met", last.stop
    finally:
        await store.close()


async def test_telling_a_run_that_waits_for_an_approval_does_not_requeue_it(setup: Setup) -> None:
    """Was: ``planexec tell`` gives a run back to the workers whenever it is waiting, even when its
    approval is still unanswered (the server and ``approve`` check for pending questions; ``tell``
    does not): a worker claims it for nothing, and each tell uses up one of its ``max_claims``."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, _gated_spec(setup), "publish the news", check=False)
        setup.start_worker("w0")
        await wait_for(lambda: _state_is(lambda: _entry_state(queue, run_id), "waiting"), "the run to wait")
        told = await asyncio.to_thread(_cli, setup, "--store", setup.url, "tell", run_id, "it is Friday", "--json")
        assert told.returncode == 0, told.stderr
        assert json.loads(told.stdout)["requeued"] is False
        assert await _entry_state(queue, run_id) == "waiting"
    finally:
        await store.close()


async def test_answering_one_of_two_questions_leaves_the_run_waiting(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        spec = _gated_spec(setup, "attack_planners:TWO_GATED")
        run_id = await submit(store, spec, "publish two things", check=False)
        setup.start_worker("w0")
        await wait_for(lambda: _state_is(lambda: _entry_state(queue, run_id), "waiting"), "the run to wait")

        async def two_questions() -> list[dict[str, Any]] | None:
            out = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approvals", "--json")
            found = [q for q in json.loads(out.stdout) if q["run_id"] == run_id]
            return found if len(found) == 2 else None

        first, _second = await wait_for(two_questions, "two open questions")
        approved = await asyncio.to_thread(
            _cli, setup, "--store", setup.url, "approve", run_id, first["question_id"], "--json"
        )
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["requeued"] is False
        assert await _entry_state(queue, run_id) == "waiting"
        # answering the same question again is refused, and still requeues nothing
        again = await asyncio.to_thread(
            _cli, setup, "--store", setup.url, "approve", run_id, first["question_id"], "--json"
        )
        assert again.returncode != 0
        assert "Traceback" not in again.stderr
        assert await _entry_state(queue, run_id) == "waiting"
    finally:
        await store.close()


async def test_give_back_of_a_run_with_an_unanswered_question_is_refused(setup: Setup) -> None:
    """Was: give_back reads only the queue, not the log — a run whose
    question nobody answered is requeued, claimed for nothing and counted against max_claims."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, _gated_spec(setup), "publish the news", check=False)
        setup.start_worker("w0")
        await wait_for(lambda: _state_is(lambda: _entry_state(queue, run_id), "waiting"), "the run to wait")
        assert not await give_back(store, run_id)
    finally:
        await store.close()


async def _waiting_gated_run(setup: Setup, store: PostgresStore, queue: RunQueue) -> tuple[str, str]:
    """A submitted run a worker left waiting for its approval, and the approval's id."""
    run_id = await submit(store, _gated_spec(setup), "publish the news", check=False)
    setup.start_worker("w0", "--concurrency", "2")
    await wait_for(lambda: _state_is(lambda: _entry_state(queue, run_id), "waiting"), "the run to wait")
    questions = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approvals", "--json")
    [question] = [q for q in json.loads(questions.stdout) if q["run_id"] == run_id]
    return run_id, str(question["question_id"])


async def test_two_concurrent_approvals_run_the_step_once(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id, approval_id = await _waiting_gated_run(setup, store, queue)
        args = ("--store", setup.url, "approve", run_id, approval_id, "--json")
        one, two = await asyncio.gather(*(asyncio.to_thread(_cli, setup, *args) for _ in range(2)))
        codes = sorted([one.returncode, two.returncode])
        assert codes[0] == 0, (one.stderr, two.stderr)
        for done in (one, two):
            assert "Traceback" not in done.stderr, done.stderr
        await wait_for(lambda: _done(queue, run_id), "a worker to finish the answered run")
        log = [s.event for s in await store.read(run_id)]
        last = log[-1]
        assert isinstance(last, RunFinished)
        assert last.stop.kind == "goal_met", last.stop
        assert setup.applied() == [(run_id, "a")]
        assert sum(isinstance(e, RunFinished) for e in log) == 1
    finally:
        await store.close()


async def test_approving_without_resuming_leaves_it_waiting_and_resume_finishes_it(setup: Setup) -> None:
    """Was: ``approve --no-resume`` then ``planexec resume`` runs the submitted run to its end in
    the resuming process, but its queue row stays ``waiting`` for ever (``planexec queue`` and
    ``RunQueue.entries(state="waiting")`` list a finished run as waiting for a human)."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id, approval_id = await _waiting_gated_run(setup, store, queue)
        recorded = await asyncio.to_thread(
            _cli, setup, "--store", setup.url, "approve", run_id, approval_id, "--no-resume", "--json"
        )
        assert recorded.returncode == 0, recorded.stderr
        assert json.loads(recorded.stdout)["requeued"] is False
        assert await _entry_state(queue, run_id) == "waiting"
        resumed = await asyncio.to_thread(_cli, setup, "--store", setup.url, "resume", run_id, "--no-live")
        assert resumed.returncode == 0, resumed.stderr
        assert "Traceback" not in resumed.stderr
        last = [s.event for s in await store.read(run_id)][-1]
        assert isinstance(last, RunFinished), resumed.stderr
        assert last.stop.kind == "goal_met", last.stop
        assert setup.applied() == [(run_id, "a")]
        # the run finished here; its queue row must not say it still waits for a human
        assert await _entry_state(queue, run_id) != "waiting"
    finally:
        await store.close()


async def test_answering_a_finished_run_or_a_hostile_id_is_refused_plainly(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id, approval_id = await _waiting_gated_run(setup, store, queue)
        approved = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approve", run_id, approval_id)
        assert approved.returncode == 0, approved.stderr
        await wait_for(lambda: _done(queue, run_id), "a worker to finish the answered run")
        cases: list[tuple[str, ...]] = [
            ("approve", run_id, approval_id),
            ("reject", run_id, approval_id),
            ("tell", run_id, "one more thing"),
            ("answer", run_id, "yes"),
            ("approve", "x" * 20_000),
            ("approve", "'; DROP TABLE planexec_queue; --"),
            ("tell", "ünï\u202ecödé", "text"),
        ]
        for args in cases:
            refused = await asyncio.to_thread(_cli, setup, "--store", setup.url, *args)
            assert "Traceback" not in refused.stderr, (args[:2], refused.stderr[-2000:])
            assert refused.returncode != 0, (args[:2], refused.stdout, refused.stderr)
        assert await _entry_state(queue, run_id) == "done"
        assert setup.applied() == [(run_id, "a")]
    finally:
        await store.close()


async def test_a_run_given_back_to_the_workers_is_not_resumed_elsewhere(setup: Setup) -> None:
    """Was: once an answer gives a run back to the workers (queue row ``queued``),
    ``planexec resume`` still runs it in its own process — ``held_by`` only looks at live leases —
    so a worker claiming it meanwhile runs it in a second place. Shown here with no worker
    running: resume goes on locally, and the queue row stays ``queued`` for a finished run."""
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id, approval_id = await _waiting_gated_run(setup, store, queue)
        setup.stop_all()  # the only worker, started by this test
        approved = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approve", run_id, approval_id, "--json")
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["requeued"] is True
        assert await _entry_state(queue, run_id) == "queued"
        resumed = await asyncio.to_thread(_cli, setup, "--store", setup.url, "resume", run_id, "--no-live")
        assert "Traceback" not in resumed.stderr
        log = [s.event for s in await store.read(run_id)]
        ran_here = isinstance(log[-1], RunFinished)
        assert not ran_here, "resumed here although the workers may claim it at any moment"
        assert resumed.returncode != 0
    finally:
        await store.close()


async def test_both_questions_answered_at_once_give_the_run_back_once(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, _gated_spec(setup, "attack_planners:TWO_GATED"), "publish two", check=False)
        setup.start_worker("w0")

        async def two_questions() -> list[dict[str, Any]] | None:
            out = await asyncio.to_thread(_cli, setup, "--store", setup.url, "approvals", "--json")
            found = [q for q in json.loads(out.stdout) if q["run_id"] == run_id]
            return found if len(found) == 2 else None

        questions = await wait_for(two_questions, "two open questions")
        await wait_for(lambda: _state_is(lambda: _entry_state(queue, run_id), "waiting"), "the run to wait")
        answers = await asyncio.gather(
            *(
                asyncio.to_thread(_cli, setup, "--store", setup.url, "approve", run_id, q["question_id"], "--json")
                for q in questions
            )
        )
        for done in answers:
            assert done.returncode == 0, done.stderr
        requeued = [json.loads(done.stdout)["requeued"] for done in answers]
        assert sorted(requeued) == [False, True], requeued
        await wait_for(lambda: _done(queue, run_id), "a worker to finish the run")
        last = [s.event for s in await store.read(run_id)][-1]
        assert isinstance(last, RunFinished)
        assert last.stop.kind == "goal_met", last.stop
        assert sorted(setup.applied()) == [(run_id, "a"), (run_id, "b")]
    finally:
        await store.close()


async def test_telling_a_run_a_worker_holds_leaves_it_with_the_worker(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=2)
    queue = RunQueue(store)
    try:
        run_id = await submit(store, setup.spec(seconds=1.5), "a slow run", check=False)
        setup.start_worker("w0")
        await wait_for(lambda: any(a[0] == run_id for a in setup.attempts()), "the worker to call the tool")
        told = await asyncio.to_thread(_cli, setup, "--store", setup.url, "tell", run_id, "it is Friday", "--json")
        assert told.returncode == 0, told.stderr
        assert json.loads(told.stdout)["requeued"] is False
        assert await give_back(store, run_id) is False  # leased: not given back
        await wait_for(lambda: _done(queue, run_id), "the worker to finish the run")
        log = [s.event for s in await store.read(run_id)]
        assert isinstance(log[-1], RunFinished)  # how it ends is the test planner's (it does not replan)
        assert sum(isinstance(e, RunFinished) for e in log) == 1
        assert sum(isinstance(e, RunStarted) for e in log) == 1
        assert not any(e.kind == "run_resumed" for e in log)  # never picked up anywhere else
    finally:
        await store.close()


# -- Ray options ----------------------------------------------------------------------------------


def _ray_refused(**kwargs: Any) -> list[str]:
    from planexec.executor import RayExecutor

    with pytest.raises(UsageError) as refused:
        RayExecutor(**kwargs)
    return [p.where for p in refused.value.problems]


def test_ray_options_refuse_bad_whole_numbers_listing_every_problem() -> None:
    from planexec.executor import RayOptions

    bads: list[Any] = [math.nan, math.inf, True, False, -1, 1.5, "2", 2.0]
    for bad in bads:
        where = _ray_refused(options=RayOptions(actors=bad, actor_concurrency=bad), kill_after=-1, resends=-1)
        assert where == ["options.actors", "options.actor_concurrency", "resends", "kill_after"], (bad, where)
    for bad in [math.nan, math.inf, -math.inf, True, -0.5, "5"]:
        assert _ray_refused(kill_after=bad) == ["kill_after"], bad
    assert _ray_refused(options=RayOptions(actor_concurrency=0)) == ["options.actor_concurrency"]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_ray_options_refuse_resources_that_are_not_finite(bad: float) -> None:
    """Was: ``value < 0`` lets NaN and infinity through as CPUs, GPUs and custom resources."""
    from planexec.executor import RayOptions

    where = _ray_refused(options=RayOptions(num_cpus=bad, num_gpus=bad, resources={"sql": bad}))
    assert where == ["options.num_cpus", "options.num_gpus", "options.resources.sql"]


def test_ray_options_refuse_an_absurd_actor_pool() -> None:
    """Was: 10**100 actors, or 10**100 calls at once on one actor (Ray's
    ``max_concurrency`` is a C int), are accepted and fail only when the pool is made."""
    from planexec.executor import RayOptions

    where = _ray_refused(options=RayOptions(actors=10**100, actor_concurrency=10**100))
    assert where == ["options.actors", "options.actor_concurrency"]


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"options": None}, "options"),
        ({"tool_options": [1]}, "tool_options"),
        ({"options_resources": None}, "options.resources"),
        ({"options_resources": [("sql", 1)]}, "options.resources"),
        ({"name": 5}, "name"),
        ({"address": 5}, "address"),
        ({"init_options": 5}, "init_options"),
    ],
)
def test_ray_executor_refuses_fields_of_the_wrong_type(kwargs: dict[str, Any], where: str) -> None:
    """Was: these are AttributeErrors (options, tool_options, resources) or accepted (name,
    address, init_options — an address of 5 fails only in ``connect``)."""
    from planexec.executor import RayOptions

    if "options_resources" in kwargs:
        kwargs = {"options": RayOptions(resources=kwargs["options_resources"])}
    try:
        found = _ray_refused(**kwargs)
    except UsageError:
        raise
    except Exception as e:
        pytest.fail(f"{type(e).__name__}: {e}")
    assert any(w.startswith(where) for w in found), found


@pytest.mark.parametrize(
    "address",
    ["a" * 100 + ":6379", "x" * 100_000 + ":6379", "..:6379", "a\x00b:6379"],
)
def test_another_clusters_address_check_survives_hostile_hosts(address: str) -> None:
    """Was: ``_same_place`` catches only OSError; ``socket.gethostbyname`` raises UnicodeError (a
    label over 63 characters, an empty label) or TypeError (a NUL) — so ``connect`` raises those
    rather than a UsageError or going on."""
    from planexec.executor._ray import _other_cluster

    class Context:
        gcs_address = "127.0.0.1:6379"

    class FakeRay:
        @staticmethod
        def get_runtime_context() -> Context:
            return Context()

    found = _other_cluster(FakeRay(), address)  # type: ignore[arg-type]
    assert found is None or isinstance(found, str)


def test_another_clusters_address_with_a_padded_port_is_the_same_place() -> None:
    """Was: ports are compared as text, so 127.0.0.1:06379 is "another cluster"."""
    from planexec.executor._ray import _same_place

    assert _same_place("127.0.0.1:6379", "127.0.0.1:06379")
    assert _same_place("127.0.0.1:6379", "localhost:6379")
    assert not _same_place("127.0.0.1:6379", "127.0.0.1:6380")
