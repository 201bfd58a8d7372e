"""Replay a run: triage the support inbox once, then replay that run from its log with no model and
no tool called, fork it with a failure injected to see how the planner copes, and show that a log
edited after the fact no longer replays.

What it shows: every model answer and tool result is in the run's log, so ``Agent.replay``
re-executes the run offline and checks that the engine decides exactly what the log records;
``fault=Fault(step_id=...)`` replays up to a step, fails it, and goes on live as a new run (the
planner patches the plan); ``replay_log`` reports where a log and the engine part ways.

    python examples/replay_a_run.py
    python examples/replay_a_run.py --model openai:gpt-4.1-mini

With ``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) a real model plans the recorded run and the fork
(install the provider's extra and set its API key); the replay itself never calls a model.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import tempfile
from collections import Counter
from pathlib import Path

from planexec import Agent, tool
from planexec.log import StepSucceeded
from planexec.models import Model, ModelRequest
from planexec.runtime import Fault, replay_log
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel

CALLS: Counter[str] = Counter()  # tool calls actually made, by tool
INBOX = [
    {"id": "T-1", "text": "I was charged twice for my subscription"},
    {"id": "T-2", "text": "The app crashes when I upload a photo"},
    {"id": "T-3", "text": "How do I change my invoice address?"},
]


@tool
def open_tickets() -> list[dict[str, str]]:
    """The support tickets nobody has picked up yet."""
    CALLS["open_tickets"] += 1
    return INBOX


@tool
def classify(tickets: list[dict[str, str]]) -> dict[str, str]:
    """Sort tickets into teams with the trained classifier: ticket id -> team.

    Args:
        tickets: the tickets to sort
    """
    CALLS["classify"] += 1
    return {t["id"]: "billing" if "charge" in t["text"] or "invoice" in t["text"] else "mobile" for t in tickets}


@tool
def keyword_rules(tickets: list[dict[str, str]]) -> dict[str, str]:
    """Sort tickets into teams with simple keyword rules (the fallback when the classifier is down).

    Args:
        tickets: the tickets to sort
    """
    CALLS["keyword_rules"] += 1
    return {t["id"]: "billing" if "invoice" in t["text"] else "general" for t in tickets}


def scripted_planner(request: ModelRequest) -> dict[str, object]:
    if request.purpose == "planner.propose":
        return {
            "steps": [
                {"id": "inbox", "description": "read the open tickets", "tool": "open_tickets"},
                {"id": "teams", "description": "sort them into teams", "tool": "classify",
                 "args": {"tickets": "${inbox}"}, "depends_on": ["inbox"]},
            ]
        }  # fmt: skip
    if request.purpose == "planner.patch":
        return {
            "reason": "the classifier failed; keyword rules are good enough for today",
            "steps": [
                {"id": "teams_by_rules", "description": "sort the tickets by keyword rules", "tool": "keyword_rules",
                 "args": {"tickets": "${inbox}"}, "depends_on": ["inbox"]}
            ],
        }  # fmt: skip
    return {"answer": "3 tickets sorted into teams."}


def planner_model(name: str | None) -> Model | str:
    return name or FunctionModel(scripted_planner)  # a real one: e.g. "openai:gpt-4.1-mini"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="triage-") as tmp:
        store = SQLiteStore(Path(tmp) / "runs.db")
        agent = Agent(planner_model(options.model), tools=[open_tickets, classify, keyword_rules], store=store)

        recorded = await agent.run("Triage the support inbox.", run_id="triage-monday")
        print(f"recorded: {recorded.stop.kind}, {len(recorded.events)} events, teams {recorded.outputs['teams']}")
        print(f"  tool calls so far: {dict(CALLS)}")

        exact = await agent.replay("triage-monday")
        print(f"replayed: matched={exact.matched}, {exact.compared} events compared")
        print(f"  tool calls so far: {dict(CALLS)} (the replay called none)")

        fork = await agent.replay("triage-monday", fault=Fault(step_id="teams", kind="tool_error"))
        result = fork.result
        if result is None:
            raise SystemExit("a fork always produces a new run")
        print(f"fork with 'teams' failing: new run {result.run_id}, {result.stop.kind}")
        print(f"  plan v{result.plans[-1].version}: {result.plans[-1].reason}")
        print(f"  teams by rules: {result.outputs['teams_by_rules']}")
        print(f"  tool calls so far: {dict(CALLS)} (only the fork's new step ran)")

        # Someone edits the log after the fact: the inbox now reads differently.
        log = [stored.event for stored in await store.read("triage-monday")]
        edited = [
            dataclasses.replace(e, output=INBOX[:2]) if isinstance(e, StepSucceeded) and e.step_id == "inbox" else e
            for e in log
        ]
        tampered = await replay_log(edited)
        print(f"edited log: matched={tampered.matched}")
        print(f"  divergence: {tampered.divergence}")
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
