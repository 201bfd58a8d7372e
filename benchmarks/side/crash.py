"""W6, second half: a 20-step run killed mid-way (SIGKILL) and resumed from its durable record.

The run is a chain of 20 steps; each step's tool writes ``start`` and, 20 ms later, ``done`` lines
to an effects file (with the planexec idempotency key when there is one) and prints ``done <i>``.
The victim process is killed ``delay`` ms after step 10's tool is done, then a new process resumes
the run: planexec with ``Agent.resume`` over its SQLite store; LangGraph's plan-and-execute graph
with its SQLite checkpointer, ``ainvoke(None, config)`` on the same thread, as LangGraph's
persistence documentation resumes a run. Models answer at once (latency 0).

Counted per kill: steps the framework had recorded as finished before the kill (planexec: a
``step_succeeded`` event in the log; LangGraph: the step in ``past_steps`` of the last checkpoint)
whose tool ran again after the resume — the figure that must be 0 — and tool calls that had
returned before the kill and ran again (at-least-once), with planexec's idempotency key the same or
not; and the time from the resume call to the first step the resumed process starts.

    python -m benchmarks.side.crash victim --framework F --db PATH --effects PATH start|resume
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from planexec import Agent, ToolContext, tool
from planexec.log import StepSucceeded
from planexec.models import ModelRequest
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel

STEPS = 20
KILL_AFTER = 9
"""The kill comes after the tool of step s9 (the 10th) is done."""
TOOL_MS = 20.0
RUN_ID = "w6-crash"
DELAYS_MS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0)


def _steps() -> list[dict[str, Any]]:
    return [
        {
            "id": f"s{i}",
            "description": f"post entry {i}",
            "tool": "work",
            "args": {"i": i},
            "depends_on": [f"s{i - 1}"] if i else [],
        }
        for i in range(STEPS)
    ]


def _effect(effects: Path, phase: str, what: str, i: int, key: str) -> None:
    with effects.open("a") as f:
        f.write(json.dumps({"phase": phase, "what": what, "step": f"s{i}", "key": key, "at": time.time()}) + "\n")


async def _work(effects: Path, phase: str, i: int, key: str) -> str:
    _effect(effects, phase, "start", i, key)
    await asyncio.sleep(TOOL_MS / 1000)
    _effect(effects, phase, "done", i, key)
    print(f"done {i}", flush=True)
    return f"entry {i} posted"


async def _victim_planexec(db: Path, effects: Path, phase: str) -> dict[str, Any]:
    @tool(side_effect=True, idempotent=True)
    async def work(i: int, ctx: ToolContext) -> str:
        """Post entry i (a side effect; the idempotency key makes a repeat harmless)."""
        return await _work(effects, phase, i, ctx.idempotency_key)

    def reply(request: ModelRequest) -> Any:
        if request.purpose == "planner.propose":
            return {"steps": _steps()}
        return {"answer": "posted"}

    store = SQLiteStore(db)
    try:
        agent = Agent(FunctionModel(reply), tools=[work], store=store)
        began = time.time()
        start = time.perf_counter()
        run = agent.start("post every entry", run_id=RUN_ID) if phase == "start" else await agent.resume(RUN_ID)
        result = await run.result()
        seconds = time.perf_counter() - start
    finally:
        await store.close()
    return {"ok": result.ok, "seconds": seconds, "began": began, "succeeded": len(result.outputs)}


async def _victim_langgraph(db: Path, effects: Path, phase: str) -> dict[str, Any]:
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from benchmarks.peers.langgraph_plan_execute import PlanExecuteResponder, build_plan_execute
    from benchmarks.peers.scripted_chat import ScriptedChatModel

    async def work(i: int) -> str:
        """Post entry i."""
        return await _work(effects, phase, i, "")

    model = ScriptedChatModel(responder=PlanExecuteResponder(_steps(), answer="posted"))
    config: Any = {"configurable": {"thread_id": RUN_ID}}
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = build_plan_execute(
            model, [StructuredTool.from_function(coroutine=work, name="work")], checkpointer=saver
        )
        began = time.time()
        start = time.perf_counter()
        out = await graph.ainvoke({"input": "post every entry"} if phase == "start" else None, config)
        seconds = time.perf_counter() - start
    return {
        "ok": out.get("response") == "posted",
        "seconds": seconds,
        "began": began,
        "succeeded": len(out["past_steps"]),
    }


def victim(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=["planexec", "langgraph_plan_execute"], required=True)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("phase", choices=["start", "resume"])
    args = parser.parse_args(argv)
    run = _victim_planexec if args.framework == "planexec" else _victim_langgraph
    print("ready", flush=True)
    result = asyncio.run(run(args.db, args.effects, args.phase))
    print(json.dumps(result), flush=True)


# -- the parent: start, kill, inspect, resume, count ----------------------------------------------


def _spawn(framework: str, db: Path, effects: Path, phase: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "benchmarks.side.crash", "victim", "--framework", framework]
    command += ["--db", str(db), "--effects", str(effects), phase]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])


async def _recorded_finished(framework: str, db: Path) -> set[str]:
    """The steps the framework's durable record holds as finished."""
    if framework == "planexec":
        store = SQLiteStore(db)
        try:
            return {s.event.step_id for s in await store.read(RUN_ID) if isinstance(s.event, StepSucceeded)}
        finally:
            await store.close()
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        saved = await saver.aget_tuple({"configurable": {"thread_id": RUN_ID}})
        if saved is None:
            return set()
        past = saved.checkpoint["channel_values"].get("past_steps", [])
        return {str(task).split(":", 1)[0] for task, _ in past}


def kill_and_resume(framework: str, delay_ms: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="planexec-w6-") as folder:
        db, effects = Path(folder) / "run.db", Path(folder) / "effects.jsonl"
        victim = _spawn(framework, db, effects, "start")
        assert victim.stdout is not None
        for line in victim.stdout:
            if line.strip() == f"done {KILL_AFTER}":
                time.sleep(delay_ms / 1000)
                os.kill(victim.pid, signal.SIGKILL)
                break
        victim.wait()
        if not db.exists():
            raise RuntimeError(f"the {framework} victim process failed before its run began")
        killed = victim.returncode == -signal.SIGKILL
        finished = asyncio.run(_recorded_finished(framework, db))
        resumed = _spawn(framework, db, effects, "resume")
        out, _ = resumed.communicate(timeout=120)
        result = json.loads(out.strip().splitlines()[-1])
        lines = [json.loads(x) for x in effects.read_text().splitlines()]
    before = {e["step"]: e["key"] for e in lines if e["phase"] == "start" and e["what"] == "done"}
    after = [e for e in lines if e["phase"] == "resume" and e["what"] == "start"]
    again = [e for e in after if e["step"] in before]
    return {
        "delay_ms": delay_ms,
        "killed_mid_run": killed,
        "recorded_finished_at_kill": len(finished),
        "finished_steps_rerun": sum(1 for e in after if e["step"] in finished),
        "completed_calls_repeated": len(again),
        "repeated_with_same_key": sum(1 for e in again if e["key"] and e["key"] == before[e["step"]]),
        "resume_to_first_step_ms": (min(e["at"] for e in after) - result["began"]) * 1e3,
        "resumed_run_ms": result["seconds"] * 1e3,
        "resumed_ok": bool(result["ok"]) and result["succeeded"] >= STEPS,
    }


def w6_crash(framework: str, delays: tuple[float, ...] = DELAYS_MS) -> list[dict[str, Any]]:
    return [kill_and_resume(framework, d) for d in delays]


if __name__ == "__main__":
    if sys.argv[1:2] == ["victim"]:
        victim(sys.argv[2:])
    else:
        for fw in ("planexec", "langgraph_plan_execute"):
            for row in w6_crash(fw):
                print(fw, json.dumps(row))
