"""Planted secrets, end to end: a real run carries one secret of each kind in its goal, a constraint,
a step's arguments, a tool's output, a tool's error, the planner's reasoning and the final answer,
and not one of them reaches the SQLite file or its WAL — the run's summary row included — while
ordinary values that look a little like secrets come back as they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planexec import Agent, Planner, RunResult, ToolError, tool
from planexec.log import Event, StepSucceeded
from planexec.models import ModelRequest
from planexec.store import RunSummary, SQLiteStore
from planexec.testing import FunctionModel
from tests.support import SAFETY, tool_step, turn
from tests.test_store_redaction import LOOKALIKES, PEM_BODY, SAMPLE_SECRETS, carrying_every_secret

PLACEHOLDERS = ("jwt", "aws_secret_key", "private_key", "password", "github_token", "api_key")
"""The labels the planted secrets must leave behind."""

SECRET_PIECES = [*SAMPLE_SECRETS.values(), *(PEM_BODY[i : i + 64] for i in range(0, len(PEM_BODY), 64))]
"""Every planted secret, and every line of the planted private key's body."""


@tool
async def fetch(query: str) -> dict[str, Any]:
    """Fetch a record.

    Args:
        query: what to look up
    """
    return {"body": carrying_every_secret("tool output"), "lookalikes": LOOKALIKES, "asked": len(query)}


@tool
async def explode(detail: str) -> str:
    """Call a service that refuses.

    Args:
        detail: what to send
    """
    raise ToolError(f"the service refused {detail}: {carrying_every_secret('tool error')}")


def planner(replies: list[dict[str, Any]]) -> FunctionModel:
    """A planning model that gives ``replies`` in order and fails a call it has no reply for."""
    pending = list(replies)

    def reply(request: ModelRequest) -> dict[str, Any]:
        if not pending:
            raise AssertionError(f"unexpected planner call: {request.purpose}")
        return pending.pop(0)

    return FunctionModel(reply, name="planted-planner")


GOAL = f"{carrying_every_secret('goal')}\nlook-alikes: {' '.join(LOOKALIKES)}"
CONSTRAINTS = [carrying_every_secret("constraint"), "answer in English"]
FETCH = tool_step("fetch", "fetch", {"query": carrying_every_secret("arguments")})
EXPLODE = tool_step("boom", "explode", {"detail": "the quarterly totals"})


def database_files(path: Path) -> dict[str, bytes]:
    """The raw bytes of the database file and of its WAL, those that exist, by suffix."""
    files = {suffix: Path(f"{path}{suffix}") for suffix in ("", "-wal")}
    return {suffix: f.read_bytes() for suffix, f in files.items() if f.exists()}


async def run_and_read(agent: Agent, path: Path) -> tuple[RunResult, list[bytes], RunSummary, list[Event]]:
    """Run the goal; return the result, the raw bytes of the database and its WAL (read while the store
    is open, then after it is closed), the run's summary and its events as the store gives them back."""
    store = agent.store
    assert isinstance(store, SQLiteStore)
    try:
        result = await agent.run(GOAL, constraints=CONSTRAINTS)
        files = database_files(path)
        assert files.get("-wal"), "while the store is open, the run is in the WAL"
        while_open = b"".join(files.values())
        summary = await store.get_run(result.run_id)
        assert summary is not None
        events = [s.event for s in await store.read(result.run_id)]
    finally:
        await store.close()
    return result, [while_open, b"".join(database_files(path).values())], summary, events


def assert_lookalikes_kept(events: list[Event]) -> None:
    outputs = [e.output for e in events if isinstance(e, StepSucceeded) and e.step_id in ("fetch", "again")]
    assert outputs, "the fetch tool's output is in the log"
    for output in outputs:
        assert output["lookalikes"] == LOOKALIKES, "ordinary values that look like secrets are kept"


def assert_no_secret_in(raw: bytes, places: list[str]) -> None:
    """No planted secret in ``raw``; every placeholder is, and each of ``places`` was written redacted."""
    for piece in SECRET_PIECES:
        assert piece.encode() not in raw, f"a planted secret was written: {piece[:16]}…"
        assert json.dumps(piece)[1:-1].encode() not in raw
    for label in PLACEHOLDERS:
        assert f"[REDACTED:{label}]".encode() in raw, label
    for place in places:
        assert f"{place}: the session token [REDACTED:jwt]".encode() in raw, f"the {place} was written, redacted"


COMMON_PLACES = ["goal", "constraint", "arguments", "tool output", "tool error"]


def assert_summary_redacted(summary: RunSummary) -> None:
    for text in (summary.goal, summary.stop_detail or ""):
        for piece in SECRET_PIECES:
            assert piece not in text
    for label in PLACEHOLDERS:
        assert f"[REDACTED:{label}]" in summary.goal, label
    for value in LOOKALIKES:
        assert value in summary.goal, value


async def test_a_step_by_step_run_writes_no_secret(tmp_path: Path) -> None:
    model = planner(
        [
            turn(FETCH, carrying_every_secret("thought")),
            turn(EXPLODE, "now the totals"),
            {
                "thought": carrying_every_secret("final thought"),
                "confidence": 0.9,
                "stop": True,
                "answer": carrying_every_secret("answer"),
            },
        ]
    )
    path = tmp_path / "runs.db"
    agent = Agent(Planner(model=model, policy="step"), tools=[fetch, explode], budget=SAFETY, store=SQLiteStore(path))
    result, raws, summary, events = await run_and_read(agent, path)

    assert result.stop.kind == "goal_met", result.stop
    assert result.steps["fetch"].status == "succeeded"
    assert result.steps["boom"].status == "failed"
    assert SAMPLE_SECRETS["jwt"] in (result.answer or ""), "the run itself is not redacted: only what is written"
    for raw in raws:
        assert_no_secret_in(raw, [*COMMON_PLACES, "thought", "final thought", "answer"])
    assert_summary_redacted(summary)
    assert summary.stop_kind == "goal_met"
    assert "[REDACTED:jwt]" in (summary.stop_detail or ""), "the stop detail (the final thought) is redacted"
    assert_lookalikes_kept(events)


async def test_an_upfront_run_that_replans_writes_no_secret(tmp_path: Path) -> None:
    model = planner(
        [
            {"reason": carrying_every_secret("reason"), "steps": [FETCH, EXPLODE]},
            {"reason": carrying_every_secret("patch"), "steps": [tool_step("again", "fetch", {"query": "again"})]},
            {"answer": carrying_every_secret("answer")},
        ]
    )
    path = tmp_path / "runs.db"
    agent = Agent(Planner(model=model), tools=[fetch, explode], budget=SAFETY, store=SQLiteStore(path))
    result, raws, summary, events = await run_and_read(agent, path)

    assert result.stop.kind == "goal_met", result.stop
    assert result.replans == 1
    assert result.plans[0].reason == carrying_every_secret("reason")
    for raw in raws:
        assert_no_secret_in(raw, [*COMMON_PLACES, "reason", "patch", "answer"])
    assert_summary_redacted(summary)
    assert_lookalikes_kept(events)


async def test_a_failed_run_keeps_the_secrets_out_of_its_stop_detail(tmp_path: Path) -> None:
    model = planner([{"reason": carrying_every_secret("reason"), "steps": [FETCH, EXPLODE]}])
    path = tmp_path / "runs.db"
    agent = Agent(Planner(model=model, replan="never"), tools=[fetch, explode], budget=SAFETY, store=SQLiteStore(path))
    result, raws, summary, _ = await run_and_read(agent, path)

    assert result.stop.kind == "error", result.stop
    assert SAMPLE_SECRETS["jwt"] in result.stop.detail, "the tool's error is in the stop detail"
    for raw in raws:
        assert_no_secret_in(raw, ["goal", "constraint", "arguments", "tool error", "reason"])
    assert_summary_redacted(summary)
    assert "[REDACTED:jwt]" in (summary.stop_detail or "")
