"""What an attack on the hardened engine still broke, each kept as a test: models and approvers that
raise what they should not, tools that raise StopIteration or leave threads behind, replies of the
wrong shape, bound outputs multiplied, schemas whose cost grows with the output, secrets cut in two
by a message, a model step's parallel calls, parallel model calls against cost caps, and damaged
or incomplete stored logs."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, ApprovalDecision, ApprovalRequest, Approvals, Budget, tool
from planexec.errors import LogUnreadable
from planexec.log import ModelCalled, RunFinished, RunState, StepFailed, ToolCalled, dump_event
from planexec.models import ModelRequest, ModelResponse, ToolCall, Usage
from planexec.store import MemoryStore, SQLiteStore
from planexec.testing import FunctionModel, ScriptedModel, tool_calls
from tests.cli_support import invoke, write_script, write_tools_module
from tests.support import events_of, tool_step

ROOT = Path(__file__).resolve().parents[2]
ANSWER = {"answer": "done"}


@tool
async def echo(text: str = "") -> str:
    """Echo."""
    return text


async def stored_events(store: Any, run_id: str) -> list[Any]:
    return [s.event for s in await store.read(run_id)]


def assert_logged(result: Any, logged: list[Any]) -> None:
    assert [dump_event(e) for e in logged] == [dump_event(e) for e in result.events]
    assert isinstance(logged[-1], RunFinished)
    assert RunState.fold(logged).stop == result.stop


# -- models and approvers that raise what no model should -------------------------------------------


class Odd(BaseException):
    pass


@pytest.mark.parametrize(
    "error",
    [KeyboardInterrupt(), SystemExit(2), GeneratorExit(), asyncio.CancelledError(), Odd("bare")],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("role", ["planner", "executor"])
async def test_a_model_raising_a_base_exception_ends_the_run_typed(error: BaseException, role: str) -> None:
    store = MemoryStore()
    if role == "planner":
        agent = Agent(ScriptedModel([error]), tools=[echo], store=store, budget=Budget(wall_time=None))
    else:
        plan = {"steps": [{"id": "m", "description": "think"}]}
        agent = Agent(
            ScriptedModel([plan]), executor=ScriptedModel([error]), store=store, budget=Budget(wall_time=None)
        )
    result = await asyncio.wait_for(agent.run("go", run_id="crash"), 30)
    assert result.stop.kind == "error"
    assert result.stop.code == "model_crashed"
    assert type(error).__name__ in result.stop.detail
    assert_logged(result, await stored_events(store, "crash"))


@pytest.mark.parametrize(
    "answer",
    ["raise", "keyboard", "no", 0, ApprovalDecision(approved=True, reason=7), ApprovalDecision(approved="yes")],  # type: ignore[arg-type]
    ids=["raises", "keyboard-interrupt", "a-string", "zero", "bad-reason", "bad-approved"],
)
async def test_a_broken_approver_never_approves(answer: Any) -> None:
    ran: list[str] = []

    @tool(sensitive=True, side_effect=True)
    async def pay() -> str:
        """Pay."""
        ran.append("paid")
        return "paid"

    async def approver(request: ApprovalRequest) -> Any:
        if answer == "raise":
            raise RuntimeError("the approval service is down")
        if answer == "keyboard":
            raise KeyboardInterrupt
        return answer

    plan = {"steps": [tool_step("p", "pay", {})]}
    agent = Agent(ScriptedModel([plan]), tools=[pay], approvals=Approvals(approver=approver), store=None)
    result = await asyncio.wait_for(agent.run("pay", run_id="approver"), 30)
    assert ran == []
    assert result.stop.kind == "rejected"


# -- tools -----------------------------------------------------------------------------------------


async def test_a_sync_tool_raising_stop_iteration_fails_its_step() -> None:
    @tool
    def odd() -> str:
        """Raise StopIteration."""
        raise StopIteration("done early")

    agent = Agent(ScriptedModel([{"steps": [tool_step("o", "odd", {})]}]), tools=[odd], store=None)
    result = await asyncio.wait_for(agent.run("go", run_id="stop"), 30)
    (failed,) = events_of(result, StepFailed)
    assert "StopIteration" in failed.error.message


def test_the_command_line_exits_when_a_tool_leaves_a_thread_running(tmp_path: Path) -> None:
    (tmp_path / "threads.py").write_text(
        textwrap.dedent(
            """
            import threading
            from planexec import tool

            @tool
            async def spawn() -> str:
                "Start a thread that never ends (from the main thread: not a daemon)."
                threading.Thread(target=threading.Event().wait, name="forever").start()
                return "started"

            TOOLS = [spawn]
            """
        )
    )
    (tmp_path / "plan.json").write_text(json.dumps([{"steps": [tool_step("s", "spawn", {})]}, ANSWER]))
    done = subprocess.run(
        [
            *(sys.executable, "-m", "planexec", "--store", "memory://", "run", "spawn"),
            *("--planner", "scripted:plan.json", "--tools", "threads:TOOLS", "--no-live"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{ROOT / 'src'}:{tmp_path}", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "exiting anyway" in done.stderr
    assert "forever" in done.stderr


def test_a_tool_that_ignores_its_cancellation_is_left_behind_quietly(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio
            from planexec import Agent, Budget, Limits, tool
            from planexec.testing import ScriptedModel

            @tool(timeout=0.1)
            async def deaf() -> str:
                "Ignore every cancellation."
                while True:
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        pass

            plan = {"steps": [{"id": "d", "description": "d", "tool": "deaf"}]}
            agent = Agent(ScriptedModel([plan]), tools=[deaf], budget=Budget(wall_time=5, replans=0),
                          limits=Limits(cancel_grace=0.1), store=None)
            result = asyncio.run(agent.run("go"))
            print(result.stop.kind, result.steps["d"].error.kind)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["max_replans", "timeout"]
    assert "Exception in callback" not in done.stderr  # planexec's own callbacks raise nothing


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ({1: "a", "1": "b"}, "is not a string"),
        ({(1, 2): 3}, "is not a string"),
        (10**5000, "too large to store"),
        ({"n": [10**5000]}, "too large to store"),
    ],
    ids=["colliding-keys", "tuple-key", "huge-int", "nested-huge-int"],
)
async def test_outputs_that_cannot_be_stored_as_they_are_fail_their_step(output: Any, said: str) -> None:
    @tool
    def give() -> Any:
        """Give something odd."""
        return output

    store = MemoryStore()
    agent = Agent(ScriptedModel([{"steps": [tool_step("g", "give", {})]}]), tools=[give], store=store)
    result = await agent.run("give", run_id="odd-output")
    (failed,) = events_of(result, StepFailed)
    assert failed.error.kind == "invalid_output"
    assert said in failed.error.message
    assert_logged(result, await stored_events(store, "odd-output"))


# -- model replies of the wrong shape --------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        ModelResponse(tool_calls=(ToolCall(id="c", name="echo", arguments=[1, 2]),)),  # type: ignore[arg-type]
        ModelResponse(tool_calls=(ToolCall(id="c", name="echo", arguments=None),)),  # type: ignore[arg-type]
        ModelResponse(text="x", finish_reason="exploded"),  # type: ignore[arg-type]
        ModelResponse(text=7),  # type: ignore[arg-type]
    ],
    ids=["list-arguments", "no-arguments", "unknown-finish-reason", "text-not-text"],
)
async def test_a_reply_of_the_wrong_shape_is_refused_and_the_log_stays_readable(reply: ModelResponse) -> None:
    plan = {"steps": [{"id": "m", "description": "think", "allowed_tools": ["echo"]}]}
    store = MemoryStore()
    agent = Agent(ScriptedModel([plan, ANSWER]), tools=[echo], executor=ScriptedModel([reply]), store=store)
    result = await agent.run("think", run_id="shape", constraints=())
    logged = await stored_events(store, "shape")  # readable: it raised nothing
    assert_logged(result, logged)
    assert any(e.error for e in events_of(result, ModelCalled))


# -- bindings and schemas whose cost grows with what they are given ------------------------------------


async def test_a_large_output_bound_many_times_over_is_refused_before_it_is_built() -> None:
    @tool
    async def big() -> list[int]:
        """A large list."""
        return list(range(60_000))

    text = " ".join(["${a}"] * 1000)
    plan = {"steps": [tool_step("a", "big", {}), tool_step("b", "echo", {"text": text}, "a")]}
    agent = Agent(ScriptedModel([plan]), tools=[big, echo], budget=Budget(replans=0, wall_time=30), store=None)
    started = time.monotonic()
    result = await agent.run("amplify")
    assert time.monotonic() - started < 20  # a guard against a hang, not a measurement
    error = result.steps["b"].error
    assert error is not None
    assert error.kind == "binding"
    assert "add up to more than" in error.message


async def test_a_schema_whose_cost_grows_with_the_output_fails_instead_of_holding_the_loop() -> None:
    @tool
    async def many() -> list[int]:
        """Many items."""
        return list(range(10_000))

    # each item matches only late among the branches: every item costs hundreds of them
    schema = {"type": "array", "items": {"anyOf": [{"const": i} for i in reversed(range(1_000))]}}
    plan = {"steps": [tool_step("m", "many", {}, output_schema=schema)]}
    agent = Agent(ScriptedModel([plan]), tools=[many], budget=Budget(replans=0, wall_time=60), store=None)
    started = time.monotonic()
    result = await agent.run("judge")
    assert time.monotonic() - started < 45  # a guard against a hang: minutes before the work budget
    verdict = result.steps["m"].verdict
    assert verdict is not None
    assert not verdict.passed
    assert "takes more than" in verdict.failures[0].detail


async def test_a_large_enum_is_judged_by_lookup() -> None:
    @tool
    async def many() -> list[int]:
        """Many items."""
        return list(range(5_000))

    schema = {"type": "array", "items": {"enum": list(range(9_000))}}
    plan = {"steps": [tool_step("m", "many", {}, output_schema=schema)]}
    result = await Agent(ScriptedModel([plan, ANSWER]), tools=[many], store=None).run("judge")
    assert result.stop.kind == "goal_met"


async def test_a_model_steps_schema_is_judged_in_bounded_time() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": "^(a|a)*$"}}}
    plan = {"steps": [{"id": "m", "description": "answer", "output_schema": schema}]}
    executor = ScriptedModel([{"v": "a" * 60 + "!"}] * 6)
    agent = Agent(ScriptedModel([plan]), executor=executor, budget=Budget(replans=0, wall_time=30), store=None)
    started = time.monotonic()
    result = await agent.run("answer")
    assert time.monotonic() - started < 20  # exponential backtracking would take hours
    assert result.steps["m"].error is not None


# -- secrets cut in two by a message ----------------------------------------------------------------


async def test_a_message_that_quotes_an_output_never_keeps_part_of_a_secret(tmp_path: Path) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"

    @tool
    async def fetch() -> str:
        """Fetch a document."""
        return "x" * 40 + " " + token + " and then more text"

    plan = {"steps": [tool_step("f", "fetch", {}, output_schema={"type": "string", "pattern": "^NOPE"})]}
    store = SQLiteStore(tmp_path / "runs.db")
    await Agent(ScriptedModel([plan]), tools=[fetch], store=store, budget=Budget(replans=0)).run("f")
    await store.close()
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        text = "\n".join(row[0] for row in conn.execute("SELECT data FROM planexec_events"))
    for start in range(len(token) - 12):
        assert token[start : start + 12] not in text


# -- a model step's parallel calls, parallel model calls ----------------------------------------------


async def test_a_model_steps_parallel_calls_stay_within_the_budget_and_never_outlive_the_run() -> None:
    made: list[int] = []

    @tool(side_effect=True)
    async def send(i: int) -> str:
        """Send a message."""
        made.append(i)
        await asyncio.sleep(0.05)
        return f"sent {i}"

    many = tool_calls(*(("send", {"i": i}) for i in range(20)))
    plan = {"steps": [{"id": "m", "description": "notify", "allowed_tools": ["send"]}]}
    store = MemoryStore()
    agent = Agent(
        ScriptedModel([plan, ANSWER]),
        tools=[send],
        executor=ScriptedModel([many, "done"]),
        budget=Budget(tool_calls=5, wall_time=30),
        store=store,
    )
    result = await agent.run("notify", run_id="parallel")
    await asyncio.sleep(0.3)  # anything left running would finish now
    assert len(made) <= 5
    logged = await stored_events(store, "parallel")
    assert_logged(result, logged)
    assert [e for e in logged if isinstance(e, ToolCalled)] == events_of(result, ToolCalled)


async def test_parallel_model_calls_cannot_overrun_a_cost_cap_many_times_over() -> None:
    async def slow(request: ModelRequest) -> str:
        await asyncio.sleep(0.02)
        return "x" * 400

    price = (1.0, 20.0)  # dollars per million tokens: output is what costs
    executor = FunctionModel(slow, cost_per_million=price, usage=Usage(input_tokens=100, output_tokens=1000))
    plan = {"steps": [{"id": f"m{i}", "description": "think"} for i in range(16)]}
    planner = ScriptedModel([plan, ANSWER], cost_per_million=price, usage=Usage(input_tokens=100, output_tokens=10))
    result = await Agent(planner, executor=executor, budget=Budget(cost=0.05), store=None).run("think")
    assert result.stop.kind == "budget_exhausted"
    assert result.cost <= 0.05 + 0.021  # at most one call's output beyond the cap (was 40 times the cap)


# -- stored logs: gaps and what the command line says ---------------------------------------------------


def recorded(db: Path) -> int:
    async def record() -> int:
        store = SQLiteStore(db)
        plan = {"steps": [tool_step("e", "echo", {"text": "hi"})]}
        result = await Agent(ScriptedModel([plan, ANSWER]), tools=[echo], store=store).run("hi", run_id="gappy")
        await store.close()
        return len(result.events)

    return asyncio.run(record())


def test_events_deleted_from_a_stored_log_are_reported_missing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    total = recorded(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM planexec_events WHERE seq IN (3, 4)")
        conn.execute("DELETE FROM planexec_events WHERE seq = ?", (total,))

    async def read() -> LogUnreadable:
        store = SQLiteStore(db)
        try:
            with pytest.raises(LogUnreadable) as caught:
                await store.read("gappy")
            return caught.value
        finally:
            await store.close()

    error = asyncio.run(read())
    assert [(p.where, p.code) for p in error.problems] == [("events 3-4", "missing"), (f"event {total}", "missing")]
    assert len(error.events) == total - 3


@pytest.mark.parametrize("to", ["stdout", "file"])
def test_export_exits_2_when_events_are_missing(tmp_path: Path, to: str) -> None:
    db = tmp_path / "runs.db"
    recorded(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM planexec_events WHERE seq = 2")
    extra = [] if to == "stdout" else ["-o", str(tmp_path / "out.jsonl")]
    result = invoke(["--store", f"sqlite:///{db}", "export", "gappy", *extra])
    assert result.exit_code == 2
    assert "event 2" in result.stderr


PAYMENTS = """
from planexec import tool


@tool(sensitive=True)
def pay() -> str:
    "Pay."
    return "paid"


TOOLS = [pay]
"""


def test_approve_with_a_deeply_nested_edit_or_output_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    module = write_tools_module(
        tmp_path,
        monkeypatch,
        PAYMENTS,
        "payments",
    )
    planner = write_script(tmp_path, [{"steps": [tool_step("p", "pay", {})]}, ANSWER])
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    ran = invoke(
        [
            "--store",
            store,
            "run",
            "pay",
            "--planner",
            planner,
            "--tools",
            f"{module}:TOOLS",
            "--no-input",
            "--approve-plan",
            "--json",
        ]
    )
    assert ran.exit_code == 3, ran.output
    run_id = json.loads(ran.stdout)["run_id"]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 20_000 + "]" * 20_000)
    edited = invoke(["--store", store, "approve", run_id, "--edit", str(deep), "--no-resume"])
    assert edited.exit_code == 2
    assert "Traceback" not in edited.output
    assert "not JSON" in edited.output
