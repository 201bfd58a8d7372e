"""W4: what durability costs. planexec with its default durable store (a SQLite file) against no
store; LangGraph with its SQLite checkpointer (``AsyncSqliteSaver``) against none.

Figures: the µs a durable run adds per step of a W1 chain (medians, durable minus in-memory,
÷ N), the bytes the database holds per step (file, WAL and shared memory, after closing) at two
run lengths, and the time to resume a run whose steps have all finished but whose answer was not
written yet: planexec reads and folds the log and makes the answer call; LangGraph resumes from the
checkpoint before its answer node (``ainvoke(None, config with checkpoint_id)``).
"""

from __future__ import annotations

import dataclasses
import functools
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import core
from benchmarks.side.common import lc_noop, median, px_noop, timed
from planexec import Agent
from planexec.log import RunStarted, RunState, StepSucceeded
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel

__all__ = ["w4_langgraph", "w4_planexec"]


def _folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


async def _resume_planexec(path: Path, run_id: str, times: int = 3) -> dict[str, float]:
    """Copy a finished run's log up to its last finished step to new runs, as if the process had
    died before the answer; time reading one back and folding it, and whole resumes (medians)."""
    store = SQLiteStore(path)
    try:
        log = [s.event for s in await store.read(run_id)]
        last = max(i for i, e in enumerate(log) if isinstance(e, StepSucceeded))
        first = log[0]
        assert isinstance(first, RunStarted)
        copies = [uuid.uuid4().hex[:16] for _ in range(times)]
        for new_id in copies:
            events = [dataclasses.replace(first, run_id=new_id), *log[1 : last + 1]]
            await store.append(new_id, events, expected_seq=0)
    finally:
        await store.close()
    folds: list[float] = []
    resumes: list[float] = []
    for new_id in copies:
        store = SQLiteStore(path)  # a fresh store, as in a new process
        try:
            start = time.perf_counter()
            state = RunState.fold([s.event for s in await store.read(new_id)])
            folds.append(time.perf_counter() - start)
            assert not state.finished
        finally:
            await store.close()
        store = SQLiteStore(path)
        try:
            agent = Agent(ScriptedModel([{"answer": "ok"}]), tools=[px_noop()], store=store)
            start = time.perf_counter()
            run = await agent.resume(new_id)
            result = await run.result()
            resumes.append(time.perf_counter() - start)
            assert result.ok, result.stop
        finally:
            await store.close()
    return {"read_and_fold_ms": median(folds) * 1e3, "resume_ms": median(resumes) * 1e3}


async def w4_planexec(n: int, repeat: int) -> dict[str, Any]:
    await core.w1_planexec(10)
    with tempfile.TemporaryDirectory(prefix="planexec-w4-") as folder:
        path = Path(folder) / "runs.db"
        store = SQLiteStore(path)
        memory: list[float] = []
        durable: list[float] = []
        for _ in range(repeat):
            memory.append(await core.w1_planexec(n))
            durable.append(await core.w1_planexec(n, store))
        runs = await store.list_runs(limit=1)
        await store.close()
        size = _folder_size(Path(folder))
        resume = await _resume_planexec(path, runs[0].run_id)
    return {
        "memory_us_per_step": median(memory) / n * 1e6,
        "durable_us_per_step": median(durable) / n * 1e6,
        "added_us_per_step": (median(durable) - median(memory)) / n * 1e6,
        "bytes_per_step": size / (repeat * n),
        **resume,
    }


async def w4_langgraph(framework: str, n: int, repeat: int) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from benchmarks.peers.langgraph_plan_execute import PlanExecuteResponder, build_plan_execute
    from benchmarks.peers.langgraph_send import SendResponder, build_send
    from benchmarks.peers.scripted_chat import ScriptedChatModel

    steps = core.chain_plan(n)["steps"]
    send = framework == "langgraph_send"
    responder = SendResponder(steps) if send else PlanExecuteResponder(steps)
    model = ScriptedChatModel(responder=responder)
    build = build_send if send else build_plan_execute
    key = "goal" if send else "input"
    answer_node = "synthesizer" if send else "replan"
    plain = build(model, [lc_noop()])
    await plain.ainvoke({key: "warm up"})
    with tempfile.TemporaryDirectory(prefix="planexec-w4-") as folder:
        memory: list[float] = []
        durable: list[float] = []
        thread = ""
        async with AsyncSqliteSaver.from_conn_string(str(Path(folder) / "checkpoints.db")) as saver:
            graph = build(model, [lc_noop()], checkpointer=saver)
            for _ in range(repeat):
                memory.append(await timed(lambda: plain.ainvoke({key: "chain"})))
                thread = uuid.uuid4().hex
                config: Any = {"configurable": {"thread_id": thread}}
                durable.append(await timed(functools.partial(graph.ainvoke, {key: "chain"}, config)))
        size = _folder_size(Path(folder))
        database = Path(folder) / "checkpoints.db"
        with sqlite3.connect(database) as db:
            query = "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''"
            checkpoints = db.execute(query, (thread,)).fetchone()[0]
        async with AsyncSqliteSaver.from_conn_string(str(database)) as saver:
            graph = build(model, [lc_noop()], checkpointer=saver)
            last = await graph.aget_state({"configurable": {"thread_id": thread}})
            assert last.parent_config is not None
            before_answer = await graph.aget_state(last.parent_config)
            assert before_answer.next == (answer_node,), before_answer.next
            start = time.perf_counter()
            out = await graph.ainvoke(None, before_answer.config)
            resume_s = time.perf_counter() - start
            assert out.get("answer" if send else "response"), "the resumed run did not answer"
    return {
        "memory_us_per_step": median(memory) / n * 1e6,
        "durable_us_per_step": median(durable) / n * 1e6,
        "added_us_per_step": (median(durable) - median(memory)) / n * 1e6,
        "bytes_per_step": size / (repeat * n),
        "checkpoints_per_step": checkpoints / n,
        "resume_ms": resume_s * 1e3,
    }
