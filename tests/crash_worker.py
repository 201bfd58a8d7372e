"""One process's part of a durable run, for the crash tests: a fixed plan over a SQLite store, with
tools whose real effects go to a file the way a deduplicating service would keep them.

    python tests/crash_worker.py --db PATH --effects PATH --run-id ID [--scenario S] [--gate PATH] start
    python tests/crash_worker.py --db PATH --effects PATH --run-id ID [--scenario S] resume
        [--approval ID --output JSON]

Scenarios: ``torture`` (a 34-step plan with parallel branches and 13 idempotent side-effecting
steps) and ``unsafe`` (three steps, one of which sends a message: a side effect that is not safe
to repeat; with ``--gate`` its tool, once the message is sent, waits until that file exists).
``resume --approval ID --output JSON`` marks the uncertain effect ``ID`` done with that output.

The process prints ``ready`` just before it starts or resumes the run, ``event <kind>`` for each
event it adds to the run's log (as the event happens; it is written soon after), and, when the
run stops, a last line of JSON: ``{"stop": <stop kind>, "answer": <final answer or null>}``.

The planner is a function of the request alone, so every process gets the same replies; the
final answer is built from the execution record and depends on every step's output.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import hashlib
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from planexec import Agent, Run, ToolContext, ToolError, tool
from planexec.models import ModelRequest
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel
from planexec.tools import Tool

GOAL = "settle every region's orders and report"
REGIONS = 6
RECORD_LINE = re.compile(r"^- (\S+) .*? → (.*)$", re.MULTILINE)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:10]


def _step(step_id: str, tool_name: str, args: dict[str, Any], *deps: str) -> dict[str, Any]:
    return {"id": step_id, "description": f"{tool_name} {step_id}", "tool": tool_name, "args": args, "depends_on": deps}


def torture_plan() -> list[dict[str, Any]]:
    """Six parallel branches of five steps (fetch, price, charge, ship, confirm), two audits over
    three branches each, a ledger entry over both audits and a report: 34 steps, 13 of them
    side-effecting, bound to earlier outputs whole, in part and inside text."""
    steps: list[dict[str, Any]] = []
    for r in range(REGIONS):
        steps += [
            _step(f"fetch_{r}", "lookup", {"key": f"region-{r}"}),
            _step(f"price_{r}", "lookup", {"key": f"price of ${{fetch_{r}}}"}, f"fetch_{r}"),
            _step(
                f"charge_{r}",
                "charge",
                {"account": f"${{fetch_{r}}}", "amount": 10 + r, "memo": f"${{price_{r}}}"},
                f"fetch_{r}",
                f"price_{r}",
            ),
            _step(f"ship_{r}", "ship", {"receipt": f"${{charge_{r}.receipt}}"}, f"charge_{r}"),
            _step(f"confirm_{r}", "lookup", {"key": f"${{ship_{r}}}"}, f"ship_{r}"),
        ]
    halves = {"audit_a": range(REGIONS // 2), "audit_b": range(REGIONS // 2, REGIONS)}
    for audit, regions in halves.items():
        confirms = [f"confirm_{r}" for r in regions]
        steps.append(_step(audit, "combine", {"parts": [f"${{{c}}}" for c in confirms]}, *confirms))
    steps.append(_step("ledger", "record", {"entry": "${audit_a} + ${audit_b}"}, "audit_a", "audit_b"))
    steps.append(_step("report", "lookup", {"key": "${ledger}"}, "ledger"))
    return steps


def unsafe_plan() -> list[dict[str, Any]]:
    return [
        _step("prepare", "lookup", {"key": "incident 7"}),
        _step("notify", "notify", {"to": "oncall", "body": "${prepare}"}, "prepare"),
        _step("close", "lookup", {"key": "closed after ${notify}"}, "notify"),
    ]


PLANS = {"torture": torture_plan, "unsafe": unsafe_plan}
SIDE_EFFECT_TOOLS = frozenset({"charge", "ship", "record", "notify"})


def side_effecting_steps(scenario: str) -> set[str]:
    return {s["id"] for s in PLANS[scenario]() if s["tool"] in SIDE_EFFECT_TOOLS}


def answer_from_record(record: str, last: str) -> str:
    """How many steps succeeded, the output of step ``last``, and a digest of every step's output."""
    outputs = dict(RECORD_LINE.findall(record))
    return f"{len(outputs)} steps succeeded; {last}: {outputs.get(last)}; digest {_digest(sorted(outputs.items()))}"


def planner(scenario: str) -> FunctionModel:
    def reply(request: ModelRequest) -> Any:
        if request.purpose == "planner.propose":
            return {"steps": PLANS[scenario]()}
        if request.purpose == "planner.finish":
            return {"answer": answer_from_record(request.last_user_text, PLANS[scenario]()[-1]["id"])}
        raise AssertionError(f"unexpected planner request: {request.purpose}")

    return FunctionModel(reply)


class Service:
    """The world outside the run: each effect is one JSON line in ``path`` keyed by idempotency
    key, written and synced before the call returns, so a line means the effect happened. A call
    with a key seen before returns the stored result and changes nothing; ``calls`` logs every call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls = path.with_name(path.name + ".calls")

    def apply(self, key: str, tool_name: str, args: dict[str, Any], result: Any) -> Any:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            done = {e["key"]: e for e in read_effects(self.path)}
            self._log_call(key, tool_name, new=key not in done)
            if key in done:
                if (done[key]["tool"], done[key]["args"]) != (tool_name, args):
                    raise ToolError(f"idempotency key {key} was used before for another request")
                return done[key]["result"]
            line = json.dumps({"key": key, "tool": tool_name, "args": args, "result": result})
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
            return result
        finally:
            os.close(fd)

    def _log_call(self, key: str, tool_name: str, *, new: bool) -> None:
        with self.calls.open("a") as f:
            f.write(json.dumps({"key": key, "tool": tool_name, "new": new}) + "\n")


def read_effects(path: Path) -> list[dict[str, Any]]:
    """The effects in the order they happened."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _jitter() -> None:
    await asyncio.sleep(random.uniform(0.001, 0.005))


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.005)


def build_tools(service: Service, gate: Path | None) -> list[Tool]:
    @tool
    async def lookup(key: str) -> str:
        """Look a value up (no side effect)."""
        await _jitter()
        return f"L{_digest('lookup', key)}"

    @tool
    async def combine(parts: list[str]) -> str:
        """Fold several values into one (no side effect)."""
        await _jitter()
        return f"M{_digest('combine', parts)}"

    @tool(side_effect=True, idempotent=True)
    async def charge(account: str, amount: int, memo: str, ctx: ToolContext) -> dict[str, Any]:
        """Charge an account; the service deduplicates by idempotency key."""
        args = {"account": account, "amount": amount, "memo": memo}
        await _jitter()
        result = {"receipt": f"C{_digest(ctx.idempotency_key, args)}", "amount": amount}
        out: dict[str, Any] = service.apply(ctx.idempotency_key, "charge", args, result)
        await _jitter()
        return out

    @tool(side_effect=True, idempotent=True)
    async def ship(receipt: str, ctx: ToolContext) -> str:
        """Ship a paid order; the service deduplicates by idempotency key."""
        args = {"receipt": receipt}
        await _jitter()
        out = str(service.apply(ctx.idempotency_key, "ship", args, f"S{_digest(ctx.idempotency_key, args)}"))
        await _jitter()
        return out

    @tool(side_effect=True, idempotent=True)
    async def record(entry: str, ctx: ToolContext) -> str:
        """Write a ledger entry; the service deduplicates by idempotency key."""
        args = {"entry": entry}
        await _jitter()
        out = str(service.apply(ctx.idempotency_key, "record", args, f"E{_digest(ctx.idempotency_key, args)}"))
        await _jitter()
        return out

    @tool(side_effect=True)
    async def notify(to: str, body: str, ctx: ToolContext) -> str:
        """Send a message (not safe to repeat)."""
        args = {"to": to, "body": body}
        out = str(service.apply(ctx.idempotency_key, "notify", args, f"N{_digest(ctx.idempotency_key, args)}"))
        if gate is not None:
            await asyncio.to_thread(_wait_for, gate)
        return out

    return [lookup, combine, charge, ship, record, notify]


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--scenario", choices=sorted(PLANS), default="torture")
    parser.add_argument("--gate", type=Path)
    parser.add_argument("command", choices=["start", "resume"])
    parser.add_argument("--approval")
    parser.add_argument("--output", type=json.loads)
    args = parser.parse_args(argv)

    store = SQLiteStore(args.db)
    try:
        agent = Agent(planner(args.scenario), tools=build_tools(Service(args.effects), args.gate), store=store)
        print("ready", flush=True)
        if args.command == "start":
            logged, run = 0, agent.start(GOAL, run_id=args.run_id)
        else:
            logged = await store.last_seq(args.run_id)
            run = await agent.resume(args.run_id)
            if args.approval is not None:
                run.decide(
                    args.approval, approved=True, choice="done", output=args.output, reason="checked the service"
                )
        await report_events(run, after=logged)
        result = await run.result()
    finally:
        await store.close()
    print(json.dumps({"stop": result.stop.kind, "answer": result.answer}), flush=True)


async def report_events(run: Run, *, after: int) -> None:
    """Print ``event <kind>`` for each event this process adds to the log (after the first
    ``after``, which were there before), as it is added."""
    seen = 0
    async for event in run.events():
        seen += 1
        if seen > after:
            print("event", event.kind, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
