"""Resumable pipeline: a nightly import whose worker process dies in the middle of loading; a new
process resumes the run from its log, and nothing is done twice.

What it shows: the SQLite store as the run's durable log; a side-effecting, idempotent tool that
receives a stable idempotency key; a real crash (the worker process exits abruptly while a load is
under way); ``Agent.resume`` going on from the log: finished steps are never run again, and the
interrupted load is sent again with the same key, which the warehouse uses to ignore a duplicate.

    python examples/resumable_pipeline.py
    python examples/resumable_pipeline.py --model openai:gpt-4.1-mini

With ``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) a real model plans (install the provider's extra
and set its API key); the tools stay the offline ones below.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from planexec import Agent, ToolContext, tool
from planexec.models import Model, ModelRequest
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel

RUN_ID = "import-2026-11-24"
WORKDIR = Path(".")  # set by main(): where the warehouse and the call journal live
CRASH_IN = ""  # the batch whose load kills the worker process (set with --crash-in)


def journal(line: str) -> None:
    """Every tool call, from every process, in the order they happen."""
    process = "worker " if CRASH_IN else "resumer"
    with (WORKDIR / "calls.log").open("a", encoding="utf-8") as f:
        f.write(f"{process}  {line}\n")


@tool
def extract(source: str) -> list[dict[str, object]]:
    """Read the day's rows from a source system.

    Args:
        source: the source's name
    """
    journal(f"extract {source}")
    return [{"id": i, "amount": 10 * i} for i in range(1, 7)]


@tool
def split(rows: list[dict[str, object]], size: int) -> list[list[dict[str, object]]]:
    """Split rows into batches of at most ``size``.

    Args:
        rows: the rows
        size: the most rows in a batch
    """
    journal(f"split {len(rows)} rows")
    return [rows[i : i + size] for i in range(0, len(rows), size)]


@tool(side_effect=True, idempotent=True, max_concurrency=1)
def load(batch: list[dict[str, object]], name: str, ctx: ToolContext) -> int:
    """Load one batch into the warehouse; the idempotency key makes a repeated load harmless.

    Args:
        batch: the rows to load
        name: the batch's name
    """
    warehouse = WORKDIR / "warehouse.json"
    loaded = json.loads(warehouse.read_text()) if warehouse.exists() else {}
    if ctx.idempotency_key in loaded:  # the warehouse ignores a key it has seen
        journal(f"load {name}: key {ctx.idempotency_key} seen before, ignored")
        return len(batch)
    journal(f"load {name}: key {ctx.idempotency_key}, {len(batch)} rows")
    loaded[ctx.idempotency_key] = batch
    warehouse.write_text(json.dumps(loaded))
    if name == CRASH_IN:
        os._exit(1)  # the worker dies before the result reaches the log: the log has the intent only
    return len(batch)


def scripted_planner(request: ModelRequest) -> dict[str, object]:
    if request.purpose == "planner.propose":
        loads = [
            {"id": f"load_{n}", "description": f"load batch {n}", "tool": "load",
             "args": {"batch": f"${{batches.{i}}}", "name": f"load_{n}"}, "depends_on": ["batches"],
             "effect": "write"}
            for i, n in enumerate("abc")
        ]  # fmt: skip
        return {
            "steps": [
                {"id": "rows", "description": "extract the day's rows", "tool": "extract", "args": {"source": "shop"}},
                {"id": "batches", "description": "split into batches of two", "tool": "split",
                 "args": {"rows": "${rows}", "size": 2}, "depends_on": ["rows"]},
                *loads,
            ]
        }  # fmt: skip
    return {"answer": "Imported 6 rows in 3 batches."}


def build_agent(model: str | None, store: SQLiteStore) -> Agent:
    planner: Model | str = model or FunctionModel(scripted_planner)  # a real one: "openai:gpt-4.1-mini"
    return Agent(planner, tools=[extract, split, load], store=store)


async def worker(options: argparse.Namespace) -> None:
    """The first process: it starts the run, and dies while loading."""
    store = SQLiteStore(WORKDIR / "runs.db")
    await build_agent(options.model, store).run("Import today's shop orders into the warehouse.", run_id=RUN_ID)


async def main() -> None:
    global WORKDIR, CRASH_IN
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--crash-in", default="", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        WORKDIR, CRASH_IN = Path(options.worker), options.crash_in
        await worker(options)
        return

    with tempfile.TemporaryDirectory(prefix="pipeline-") as tmp:
        WORKDIR = Path(tmp)
        command = [sys.executable, __file__, "--worker", tmp, "--crash-in", "load_b"]
        command += ["--model", options.model] if options.model else []
        died = await asyncio.create_subprocess_exec(*command)
        print(f"worker process exited with status {await died.wait()} while loading")

        store = SQLiteStore(WORKDIR / "runs.db")
        run = await build_agent(options.model, store).resume(RUN_ID)
        print("resumed; already done:", sorted(s for s, r in run.state.steps.items() if r.status == "succeeded"))
        result = await run.result()
        await store.close()

        print(f"{result.stop.kind}: {result.answer}")
        print("tool calls, both processes:")
        for line in (WORKDIR / "calls.log").read_text().splitlines():
            print("  " + line)
        loaded = json.loads((WORKDIR / "warehouse.json").read_text())
        print(f"warehouse: {len(loaded)} batches, {sum(len(b) for b in loaded.values())} rows")


if __name__ == "__main__":
    asyncio.run(main())
