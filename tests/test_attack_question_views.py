"""Hostile input to what a human is shown and answers: arguments that try to restyle or hide what a
reviewer reads, answers that try to raise caps wrongly, approvers that keep raising or answer
nonsense, huge plans to forecast, and every old log's questions."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, ApprovalDecision, ApprovalRequest, Approvals, Budget, tool
from planexec.log import ApprovalRecord, RunState, load_event
from planexec.runs import open_questions
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel
from planexec.views import question_lines, question_view

from .cli_support import invoke
from .support import SAFETY, tool_step

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ESCAPES = "\x1b[2J\x1b[1;32mAPPROVED\x1b[0m \u202eevil\u202c \r overwritten"


@tool(side_effect=True, sensitive=True)
async def send(to: str, text: str) -> str:
    """Send a message."""
    return f"sent to {to}"


def test_arguments_that_restyle_the_terminal_are_shown_as_escapes(tmp_path: Path) -> None:
    plan = {"steps": [tool_step("tell", "send", {"to": ESCAPES, "text": "[bold red]markup[/]"})]}

    async def waiting() -> Any:
        store = SQLiteStore(tmp_path / "runs.db")
        try:
            approvals = Approvals(deferred=True)
            agent = Agent(ScriptedModel([plan]), tools=[send], store=store, approvals=approvals, budget=SAFETY)
            assert (await agent.run("tell them")).stop.kind == "waiting"
            return (await open_questions(store))[0]
        finally:
            await store.close()

    view = asyncio.run(waiting())
    assert view.step is not None
    assert view.step.arguments[0].value == ESCAPES  # the view keeps the value; renderers make it safe
    listed = invoke(["--store", f"sqlite:///{tmp_path / 'runs.db'}", "approvals"])
    assert listed.exit_code == 0, listed.output
    assert "\x1b" not in listed.stdout
    assert "\u202e" not in listed.stdout
    assert "\\x1b[2J" in listed.stdout
    assert "[bold red]markup[/]" in listed.stdout  # shown as written, never read as markup


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        ({"tool_calls": math.nan}, "must be a whole number or None (no cap), not nan"),
        ({"tool_calls": math.inf}, "must be a whole number or None (no cap), not inf"),
        ({"cost": math.nan, "tool_calls": 10}, "must be a finite number, not nan"),
        ({"tool_calls": True}, "must be a number or None"),
        ({"tool_calls": "10"}, "must be a number or None"),
        ({"tool_calls": {"nested": 1}}, "must be a number or None"),
        ({"tool_calls": 2}, "not above what the run has used (2)"),
        ({"cost": 5.0}, "give a higher one"),
        ({"steps\u202e": 10, "tool_calls": 10}, "is not a budget"),
        ({}, "a yes to a budget question gives the caps to raise"),
        ([("tool_calls", 10)], "a yes to a budget question gives the caps to raise"),
    ],
)
async def test_an_approver_that_raises_wrongly_refuses_the_raise(caps: Any, expected: str) -> None:
    chain = {
        "steps": [
            tool_step("a", "add", {"a": 1, "b": 1}),
            tool_step("b", "add", {"a": "${a}", "b": 1}, "a"),
            tool_step("c", "add", {"a": "${b}", "b": 1}, "b"),
        ]
    }

    @tool
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    async def wrong(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=True, budget=caps)

    result = await Agent(
        ScriptedModel([chain]),
        tools=[add],
        budget=Budget(tool_calls=2, wall_time=30),
        approvals=Approvals(approver=wrong),
    ).run("count")
    assert (result.stop.kind, result.stop.budget) == ("budget_exhausted", "tool_calls")
    assert "the approver's decision is invalid" in result.stop.detail
    assert expected in result.stop.detail
    assert result.tool_calls == 2


async def test_an_approver_that_raises_by_one_each_time_is_asked_each_time_and_the_run_still_ends() -> None:
    steps = [tool_step("s0", "add", {"a": 0, "b": 1})]
    steps += [tool_step(f"s{i}", "add", {"a": f"${{s{i - 1}}}", "b": 1}, f"s{i - 1}") for i in range(1, 6)]

    @tool
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    asked: list[int] = []

    async def stingy(request: ApprovalRequest) -> ApprovalDecision:
        view = request.view
        assert view is not None
        assert view.budget is not None
        asked.append(int(view.budget.limit))
        return ApprovalDecision(approved=True, budget={"tool_calls": int(view.budget.limit) + 1})

    result = await Agent(
        ScriptedModel([{"steps": steps}, {"answer": "6"}]),
        tools=[add],
        budget=Budget(tool_calls=2, wall_time=30),
        approvals=Approvals(approver=stingy),
    ).run("count to six")
    assert (result.stop.kind, result.answer) == ("goal_met", "6")
    assert asked == [2, 3, 4, 5]
    assert result.tool_calls == 6
    assert RunState.fold(result.events).budget["tool_calls"] == 6


async def test_a_plan_of_hundreds_of_steps_with_large_arguments_is_forecast_and_shown() -> None:
    big = "x" * 12_000

    @tool
    async def echo(text: str) -> int:
        """Measure a text."""
        return len(text)

    steps = [tool_step(f"s{i}", "echo", {"text": big}) for i in range(60)]
    seen: list[ApprovalRequest] = []

    async def look(request: ApprovalRequest) -> bool:
        seen.append(request)
        return False

    result = await Agent(
        ScriptedModel([{"steps": steps}]), tools=[echo], approvals=Approvals(approver=look, plan=True), budget=SAFETY
    ).run("measure")
    assert result.stop.kind == "rejected"
    [request] = seen
    assert request.view is not None
    assert request.view.plan is not None
    plan = request.view.plan
    assert len(plan.steps) == 60
    assert plan.forecast is not None
    assert plan.forecast.tool_calls.low == 60
    assert all(s.arguments[0].cut for s in plan.steps)  # every argument cut, its size kept
    assert {s.arguments[0].size for s in plan.steps} == {12_000}


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("events_v*.jsonl")))
def test_every_question_of_every_old_log_has_a_view(fixture: str) -> None:
    events = [load_event(json.loads(line)) for line in (FIXTURES / fixture).read_text().splitlines() if line.strip()]
    state = RunState.fold(events)
    records: list[ApprovalRecord] = list(state.approvals.values())
    for rec in records:
        view = question_view(state, rec)
        assert view.question_id == rec.approval_id
        assert view.rule
        assert view.why
        assert view.answers
        assert question_lines(view)
