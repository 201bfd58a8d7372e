"""Shared by the store tests: realistic events, the backends under test, and PostgreSQL set-up.

PostgreSQL cases need a real server: ``scripts/postgres start`` starts a throwaway one and prints
``PLANEXEC_TEST_POSTGRES=…``. Without that variable they are skipped, unless
``PLANEXEC_REQUIRE_POSTGRES=1`` (as in CI), when they fail.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from planexec import Plan, Problem, Step, StopReason
from planexec.executor import CheckResult, StepError, Verdict
from planexec.log import (
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    Forecast,
    InformationAdded,
    ModelAttemptFailed,
    ModelCalled,
    PlanForecast,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    PlanRecalled,
    RunFinished,
    RunResumed,
    RunStarted,
    RunState,
    RunSuspended,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepStreamed,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    ToolsChanged,
)
from planexec.models import ModelResponse, ToolCall, Usage
from planexec.plan import NonEmpty
from planexec.store import MemoryStore, PostgresStore, Redactor, RunStore, SQLiteStore

BACKENDS = ("memory", "sqlite", "postgres")
DURABLE = ("sqlite", "postgres")
"""The backends whose runs outlive the store (``RunStore.durable``)."""
QUEUED = ("postgres",)
"""The backends with a workers' queue (``RunStore.queue()``)."""


# -- events ---------------------------------------------------------------------------------------

PLAN = Plan(
    version=1,
    steps=(
        Step(id="fetch", description="fetch rows", tool="fetch", args={"q": "orders"}, checks=(NonEmpty(),)),
        Step(
            id="sum",
            description="add them up",
            executor="model",
            args={"rows": "${fetch}"},
            depends_on=("fetch",),
            effect="write",
            approval="always",
        ),
    ),
    reason="first plan",
)


def full_run(run_id: str, *, t0: float = 1_000.0, goal: str = "total the orders") -> list[Event]:
    """One event of every kind, in an order a real run could produce (suspended, resumed, finished)."""
    usage = Usage(input_tokens=120, output_tokens=30, requests=1)
    error = StepError(kind="transient", message="rate limited", problems=(Problem(code="x", where="q", message="m"),))
    return [
        RunStarted(at=t0, run_id=run_id, goal=goal, budget={"model_calls": 10, "cost": 1.5, "steps": None}),
        PlanningStarted(at=t0 + 1, trigger="initial", why="start"),
        ModelAttemptFailed(
            at=t0 + 1.5,
            role="planner",
            purpose="plan",
            model="scripted",
            attempt=1,
            status=429,
            error="scripted answered 429: slow down",
            retry_in=0.5,
            retry_after=0.5,
        ),
        ModelCalled(
            at=t0 + 2,
            role="planner",
            purpose="plan",
            model="scripted",
            request_chars=512,
            response=ModelResponse(
                text="",
                tool_calls=(ToolCall(id="call_1", name="fetch", arguments={"q": "orders", "n": [1, 2]}),),
                parsed={"steps": [{"id": "fetch"}], "note": None},
                usage=usage,
                cost=0.25,
                model="scripted-1",
                finish_reason="tool_calls",
            ),
            usage=usage,
            cost=0.25,
            duration=0.5,
        ),
        PlannerOutputRejected(at=t0 + 3, attempt=1, problems=(Problem(code="cycle", where="step 'a'", message="a"),)),
        PlanRecalled(
            at=t0 + 3.5,
            entry_id="m-0011223344556677",
            goal="sum the orders of May",
            similarity=0.62,
            mode="guided",
            steps=PLAN.steps,
            why_not_direct="the goals differ by 'May', which is no value of the plan",
        ),
        PlanForecast(
            at=t0 + 3.9,
            plan_version=1,
            forecast=Forecast(
                planner_calls=(1, 4),
                executor_calls=(0, 0),
                tool_calls=(2, 2),
                input_tokens=(400, 3_000),
                output_tokens=(90, 700),
                cost=(0.001, 0.009),
                basis=("planner requests as this run's",),
            ),
        ),
        PlanProposed(at=t0 + 4, plan=PLAN, trigger="initial"),
        StepStreamed(
            at=t0 + 4.5, step=Step(id="early", description="started while streaming", tool="fetch"), plan_version=2
        ),
        ApprovalRequested(at=t0 + 5, approval_id="ap-plan", subject="plan", plan_version=1, reason="review", plan=PLAN),
        ApprovalRequested(at=t0 + 6, approval_id="ap-sum", subject="step", step_id="sum", reason="writes"),
        RunSuspended(at=t0 + 7, reason="waiting for a human", approvals=("ap-plan", "ap-sum")),
        RunResumed(at=t0 + 8, events=8),
        ApprovalDecided(at=t0 + 9, approval_id="ap-plan", approved=True, by="ops"),
        StepStarted(at=t0 + 10, step_id="fetch", executor="tools", tool="fetch", args={"q": "orders"}),
        StepAttemptFailed(at=t0 + 11, step_id="fetch", attempt=1, error=error, retry_in=0.25),
        ToolProgress(at=t0 + 11.5, step_id="fetch", progress=1, total=2, message="half the orders"),
        ToolsChanged(at=t0 + 11.75, tools=({"name": "count", "description": "Count.", "parameters": {}},), removed=()),
        StepSucceeded(
            at=t0 + 12,
            step_id="fetch",
            output=[{"id": 1, "total": 30}, {"id": 2, "total": 12}],
            verdict=Verdict(passed=True, checks=(CheckResult(name="non_empty", passed=True),)),
            attempts=2,
        ),
        StepStarted(at=t0 + 13, step_id="sum", executor="model", idempotency_key="k-sum-1"),
        StepHeld(at=t0 + 13.25, step_id="sum", approval_id="ap-effect", reason="the call may have happened"),
        ApprovalRequested(at=t0 + 13.5, approval_id="ap-effect", subject="effect", step_id="sum", reason="uncertain"),
        ApprovalDecided(at=t0 + 13.75, approval_id="ap-effect", approved=True, choice="retry"),
        StepRequeued(at=t0 + 13.875, step_id="sum", reason="retry chosen"),
        StepStarted(at=t0 + 13.9375, step_id="sum", executor="model", idempotency_key="k-sum-1"),
        ToolCalled(
            at=t0 + 14, step_id="sum", call_id="c1", tool="fetch", args={"q": "more"}, output={"rows": []}, duration=0.1
        ),
        StepFailed(at=t0 + 15, step_id="sum", error=error, verdict=Verdict(passed=False), attempts=1),
        StepCancelled(at=t0 + 16, step_id="sum", reason="obsolete"),
        StallDetected(at=t0 + 17, rule="repeated_failure", detail="same call failed twice"),
        BudgetExhaustedEvent(at=t0 + 18, budget="cost", limit=1.5, used=1.75),
        InformationAdded(at=t0 + 18.25, text="orders from May only", constraint=True),
        ModelCalled(at=t0 + 19, role="planner", purpose="finish", model="scripted", cost=0.5, usage=usage),
        AnswerReviewed(at=t0 + 19.5, answer="42", passed=True, reviewer="checks"),
        RunFinished(at=t0 + 20, stop=StopReason(kind="budget_exhausted", detail="cost", budget="cost"), answer="42"),
    ]


def step_batch(tag: str, *, at: float = 2_000.0, size: int = 2) -> list[Event]:
    """``size`` events that name ``tag``, so a reader can tell batches apart."""
    events: list[Event] = [StepStarted(at=at, step_id=tag, executor="tools", tool="noop", args={"tag": tag})]
    events += [
        StepSucceeded(at=at, step_id=tag, output={"tag": tag, "part": i}, verdict=Verdict(passed=True))
        for i in range(1, size)
    ]
    return events


def batch_tag(event: Event) -> str:
    tag = getattr(event, "step_id", None)
    if not isinstance(tag, str):
        raise AssertionError(f"not a batch event: {event!r}")
    return tag


def assert_whole_batches(events: list[Event], size: int) -> None:
    """Every run of ``size`` events is one batch, in order, and no batch appears twice."""
    assert len(events) % size == 0, len(events)
    seen: set[str] = set()
    for start in range(0, len(events), size):
        tags = {batch_tag(e) for e in events[start : start + size]}
        assert len(tags) == 1, f"a batch was split or interleaved at {start}: {tags}"
        (tag,) = tags
        assert tag not in seen, f"batch {tag} appears twice"
        seen.add(tag)
        assert isinstance(events[start], StepStarted)


def fold(events: list[Event]) -> RunState:
    return RunState.fold(events)


# -- backends ---------------------------------------------------------------------------------------


def postgres_url() -> str:
    """The test server's URL, or skip (fail when PLANEXEC_REQUIRE_POSTGRES=1)."""
    url = os.environ.get("PLANEXEC_TEST_POSTGRES", "")
    if url:
        return url
    reason = "no PostgreSQL server: PLANEXEC_TEST_POSTGRES is not set (scripts/postgres start prints it)"
    if os.environ.get("PLANEXEC_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason}, but PLANEXEC_REQUIRE_POSTGRES=1")
    pytest.skip(reason)


def with_search_path(url: str, schema: str) -> str:
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh schema on the test server, dropped afterwards; yields a URL whose tables live in it."""
    import psycopg

    url = postgres_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_search_path(url, schema)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


class Backend:
    """One backend at one place: ``open()`` gives a new store there (a reopen, for durable ones)."""

    def __init__(self, kind: str, *, path: Path | None = None, url: str | None = None) -> None:
        self.kind = kind
        self.path = path
        self.url = url
        self._memory: MemoryStore | None = None

    @property
    def durable(self) -> bool:
        return self.kind in DURABLE

    @property
    def store_url(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite://{self.path}"
        if self.kind == "postgres" and self.url is not None:
            return self.url
        return "memory://"

    def open(self, *, redactor: Redactor | None = None) -> RunStore:
        if self.kind == "memory":
            return MemoryStore(redactor=redactor)
        if self.kind == "sqlite":
            assert self.path is not None
            return SQLiteStore(self.path, redactor=redactor)
        assert self.url is not None
        return PostgresStore(self.url, redactor=redactor)


def rewrite_events(backend: Backend, store: RunStore, run_id: str, rows: dict[int, str | bytes]) -> None:
    """Overwrite the stored data of some of a run's events (by seq) behind the store's back, as a
    damaged disk, a faulty tool or a newer planexec might leave them. For SQLite, bytes are stored
    as they are (not necessarily UTF-8)."""
    if backend.kind == "memory":
        assert isinstance(store, MemoryStore)
        for seq, data in rows.items():
            store._logs[run_id][seq - 1] = data if isinstance(data, str) else data.decode("utf-8", "replace")
    elif backend.kind == "sqlite":
        assert backend.path is not None
        with closing(sqlite3.connect(backend.path, isolation_level=None)) as conn:
            for seq, data in rows.items():
                value = f"CAST(X'{data.hex()}' AS TEXT)" if isinstance(data, bytes) else "?"
                conn.execute(
                    f"UPDATE planexec_events SET data = {value} "
                    "WHERE run = (SELECT id FROM planexec_runs WHERE run_id = ?) AND seq = ?",
                    (run_id, seq) if isinstance(data, bytes) else (data, run_id, seq),
                )
    else:
        import psycopg

        assert backend.url is not None
        with psycopg.connect(backend.url, autocommit=True) as pg:
            for seq, data in rows.items():
                text = data if isinstance(data, str) else data.decode("utf-8", "replace")
                pg.execute("UPDATE planexec_events SET data = %s WHERE run_id = %s AND seq = %s", (text, run_id, seq))


def run_sql(backend: Backend, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run one statement on a durable backend's database behind the store's back; its rows."""
    if backend.kind == "sqlite":
        assert backend.path is not None
        with closing(sqlite3.connect(backend.path, isolation_level=None)) as conn:
            return conn.execute(sql, params).fetchall()
    import psycopg

    assert backend.kind == "postgres"
    assert backend.url is not None
    with psycopg.connect(backend.url, autocommit=True) as pg:
        cur = pg.execute(sql.encode(), params)
        return cur.fetchall() if cur.description else []


def stored_text(backend: Backend, store: RunStore, run_id: str, seq: int) -> str:
    """The stored data of one event, as the store wrote it."""
    if backend.kind == "memory":
        assert isinstance(store, MemoryStore)
        return store._logs[run_id][seq - 1]
    if backend.kind == "sqlite":
        assert backend.path is not None
        with closing(sqlite3.connect(backend.path, isolation_level=None)) as conn:
            row = conn.execute(
                "SELECT data FROM planexec_events WHERE run = (SELECT id FROM planexec_runs WHERE run_id = ?) "
                "AND seq = ?",
                (run_id, seq),
            ).fetchone()
    else:
        import psycopg

        assert backend.url is not None
        with psycopg.connect(backend.url, autocommit=True) as pg:
            row = pg.execute(
                "SELECT data FROM planexec_events WHERE run_id = %s AND seq = %s", (run_id, seq)
            ).fetchone()
    assert row is not None
    return str(row[0])


@contextmanager
def make_backend(kind: str, tmp_path: Path) -> Iterator[Backend]:
    if kind == "postgres":
        with postgres_schema() as url:
            yield Backend(kind, url=url)
    else:
        yield Backend(kind, path=tmp_path / "runs.db")


# -- checks of the helpers themselves -----------------------------------------------------------------


def test_full_run_has_every_event_kind_and_folds() -> None:
    from typing import get_args

    union = get_args(Event)[0]
    kinds = {cls.__dataclass_fields__["kind"].default for cls in get_args(union)}
    events = full_run("r")
    assert {e.kind for e in events} == kinds
    state = fold(events)
    assert state.status == "finished"
    assert len(state.pending_approvals) == 1


def test_whole_batches_check_catches_a_split_batch() -> None:
    events = step_batch("a") + step_batch("b")
    assert_whole_batches(events, 2)
    with pytest.raises(AssertionError):
        assert_whole_batches([events[0], events[2], events[1], events[3]], 2)
    with pytest.raises(AssertionError):
        assert_whole_batches(events + step_batch("a"), 2)
