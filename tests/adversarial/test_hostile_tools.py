"""Tools that raise what no tool should, never return, or ignore their cancellation: the run ends
with a typed stop reason naming the tool, its log intact, and the process can still exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from planexec import Agent, Budget, Limits, Tool, ToolContext, tool
from planexec.log import RunState, StepFailed, dump_event
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel
from tests.support import events_of, tool_step

ROOT = Path(__file__).resolve().parents[2]


def raising(error: BaseException) -> Tool:
    async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
        raise error

    return Tool(name="rogue", description="raises", parameters={"type": "object"}, invoke=invoke)


def one_step(tool_name: str = "rogue") -> ScriptedModel:
    return ScriptedModel([{"steps": [tool_step("r", tool_name, {})]}, {"answer": "never"}])


@pytest.mark.parametrize(
    "error",
    [GeneratorExit(), asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(3), BaseException("bare")],
    ids=lambda e: type(e).__name__,
)
async def test_a_tool_raising_a_base_exception_ends_the_run_with_a_typed_error(
    error: BaseException, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    result = await Agent(one_step(), tools=[raising(error)], store=store).run("go", run_id="rogue-run")
    assert result.stop.kind == "error"
    assert result.stop.code == "tool_crashed"
    assert "rogue" in result.stop.detail
    assert type(error).__name__ in result.stop.detail
    logged = [s.event for s in await store.read("rogue-run")]
    assert [dump_event(e) for e in logged] == [dump_event(e) for e in result.events]
    assert RunState.fold(logged).stop == result.stop
    await store.close()
    assert store.closed


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("KeyboardInterrupt()", "async"),
        ("SystemExit(3)", "sync"),
        ("GeneratorExit()", "async"),
        ("BaseException()", "sync"),
    ],
)
def test_the_process_exits_after_a_tool_raises_a_base_exception(error: str, kind: str, tmp_path: Path) -> None:
    body = f"""
        @tool
        {"async " if kind == "async" else ""}def rogue() -> str:
            "Raise."
            raise {error}

        planner = ScriptedModel([{{"steps": [{{"id": "r", "description": "r", "tool": "rogue"}}]}}])
        result = asyncio.run(Agent(planner, tools=[rogue], store=STORE).run("go"))
        print(result.stop.kind, result.stop.code)
    """
    out = run_script(body, tmp_path)
    assert out == "error tool_crashed"


async def test_a_sync_tool_that_never_returns_fails_at_the_wall_time_budget() -> None:
    release = threading.Event()

    @tool
    def stuck() -> str:
        """Never returns (until the test ends)."""
        release.wait()
        return "late"

    try:
        planner = one_step("stuck")
        result = await Agent(planner, tools=[stuck], budget=Budget(wall_time=0.3), store=None).run("wait")
    finally:
        release.set()
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "wall_time"
    (failed,) = events_of(result, StepFailed)
    assert (failed.step_id, failed.error.kind) == ("r", "timeout")


async def test_stuck_sync_tools_do_not_starve_the_others() -> None:
    release = threading.Event()
    stuck_calls = 80

    @tool(timeout=0.2)
    def stuck(n: int) -> str:
        """Never returns (until the test ends)."""
        release.wait()
        return "late"

    @tool
    def quick(n: int) -> int:
        """Returns at once."""
        return n

    plan = {
        "steps": [
            *(tool_step(f"s{i}", "stuck", {"n": i}) for i in range(stuck_calls)),
            *(tool_step(f"q{i}", "quick", {"n": i}, *(f"s{j}" for j in range(0))) for i in range(5)),
        ]
    }
    try:
        agent = Agent(
            ScriptedModel([plan]),
            tools=[stuck, quick],
            budget=Budget(wall_time=30, replans=0),
            limits=Limits(max_concurrency=100),
            store=None,
        )
        result = await agent.run("many")
    finally:
        release.set()
    assert {sid: rec.output for sid, rec in result.steps.items() if sid.startswith("q")} == {
        f"q{i}": i for i in range(5)
    }
    failures = {rec.error.kind for sid, rec in result.steps.items() if sid.startswith("s") and rec.error is not None}
    assert failures <= {"timeout"}
    assert result.stop.kind == "max_replans"


def stubborn_tool(timeout: float | None) -> tuple[Tool, list[str]]:
    seen: list[str] = []

    @tool(timeout=timeout)
    async def stubborn() -> str:
        """Ignores every cancellation."""
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                seen.append("cancelled")

    return stubborn, seen


async def test_an_async_tool_that_ignores_its_timeout_still_fails_as_timed_out() -> None:
    stubborn, seen = stubborn_tool(timeout=0.1)
    planner = one_step("stubborn")
    started = time.monotonic()
    result = await Agent(
        planner, tools=[stubborn], limits=Limits(cancel_grace=0.1), budget=Budget(wall_time=30, replans=0), store=None
    ).run("wait")
    assert time.monotonic() - started < 10  # only a guard against a hang: the wall time is 30 s
    assert result.steps["r"].error is not None
    assert result.steps["r"].error.kind == "timeout"
    assert seen  # it was asked to stop, and did not


async def test_an_async_tool_that_ignores_cancellation_fails_at_the_wall_time_budget() -> None:
    stubborn, seen = stubborn_tool(timeout=None)
    planner = one_step("stubborn")
    result = await Agent(
        planner, tools=[stubborn], limits=Limits(cancel_grace=0.1), budget=Budget(wall_time=0.3), store=None
    ).run("wait")
    assert result.stop.kind == "budget_exhausted"
    assert result.stop.budget == "wall_time"
    (failed,) = events_of(result, StepFailed)
    assert failed.error.kind == "timeout"
    assert seen


@pytest.mark.parametrize("kind", ["sync-stuck", "async-stubborn"])
def test_the_process_exits_after_a_run_leaves_a_tool_behind(kind: str, tmp_path: Path) -> None:
    tool_code = {
        "sync-stuck": """
            @tool
            def hang() -> str:
                "Never returns."
                threading.Event().wait()
                return "late"
        """,
        "async-stubborn": """
            @tool
            async def hang() -> str:
                "Ignores cancellation."
                while True:
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        pass
        """,
    }[kind]
    body = (
        textwrap.dedent(tool_code)
        + """
planner = ScriptedModel([{"steps": [{"id": "h", "description": "h", "tool": "hang"}]}])
agent = Agent(planner, tools=[hang], budget=Budget(wall_time=0.3), limits=Limits(cancel_grace=0.1), store=STORE)
result = asyncio.run(agent.run("go"))
print(result.stop.kind, result.stop.budget)
"""
    )
    out = run_script(body, tmp_path)
    assert out == "budget_exhausted wall_time"


def run_script(body: str, tmp_path: Path) -> str:
    """Run ``body`` in a fresh Python process; it must exit by itself, promptly, with status 0."""
    script = tmp_path / "script.py"
    head = f"""
import asyncio
import threading
from planexec import Agent, Budget, Limits, tool
from planexec.testing import ScriptedModel
from planexec.store import SQLiteStore
STORE = SQLiteStore({str(tmp_path / "runs.db")!r})
"""
    script.write_text(textwrap.dedent(head) + textwrap.dedent(body), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]
