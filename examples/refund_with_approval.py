"""Refund with approval: the agent checks an order and proposes a refund; the refund waits for a
supervisor, who answers from another process, and the run picks up where it stopped.

What it shows: a sensitive, side-effecting tool; deferred approvals saved in the run's log; the
run suspending (``stop.kind == "waiting"``) instead of blocking; the question answered by a
separate ``planexec approve`` (or ``planexec reject``) process against the same SQLite store; the
run resumed from its log, the refund made exactly once.

    python examples/refund_with_approval.py                      # the supervisor approves
    python examples/refund_with_approval.py --reject             # ... or refuses
    python examples/refund_with_approval.py --model openai:gpt-4.1-mini

With ``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) a real model plans (install the provider's extra
and set its API key); the tools stay the offline ones below.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from planexec import Agent, Approvals, ToolContext, ToolError, tool
from planexec.log import RunState
from planexec.models import Model, ModelRequest
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel

ORDERS = {"A-1042": {"customer": "ada@example.com", "total": 84.5, "status": "delivered damaged"}}
REFUNDS: list[tuple[str, float, str]] = []  # what the payment service was asked to do


@tool
def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up: its customer, total and status.

    Args:
        order_id: the order's id, such as A-1042
    """
    if order_id not in ORDERS:
        raise ToolError(f"no order {order_id}")
    return ORDERS[order_id]


@tool(sensitive=True, side_effect=True, idempotent=True)
def refund(order_id: str, amount: float, ctx: ToolContext) -> str:
    """Refund money to the customer of an order.

    Args:
        order_id: the order to refund
        amount: how much, in euros
    """
    REFUNDS.append((order_id, amount, ctx.idempotency_key))
    return f"refunded {amount:.2f} EUR for {order_id}"


def scripted_planner(request: ModelRequest) -> dict[str, object]:
    """A planner that reads its prompt the way a model would: first a plan, then the answer."""
    if request.purpose == "planner.propose":
        return {
            "steps": [
                {"id": "order", "description": "look the order up", "tool": "lookup_order",
                 "args": {"order_id": "A-1042"}},
                {"id": "refund", "description": "refund the whole order", "tool": "refund",
                 "args": {"order_id": "A-1042", "amount": "${order.total}"}, "depends_on": ["order"],
                 "effect": "write"},
            ]
        }  # fmt: skip
    return {"answer": "Order A-1042 was refunded in full (84.50 EUR)."}


def planner_model(name: str | None) -> Model | str:
    return name or FunctionModel(scripted_planner)  # a real one: e.g. "openai:gpt-4.1-mini"


async def supervisor(command: str, store_path: Path, run_id: str, question_id: str) -> None:
    """Answer the question from another process, as a supervisor at another desk would."""
    args = [command, run_id, question_id, "--store", str(store_path), "--by", "supervisor", "--no-resume"]
    args += ["--reason", "the damage is not documented"] if command == "reject" else []
    answering = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "planexec", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, errors = await answering.communicate()
    if answering.returncode != 0:
        raise SystemExit(f"planexec {command} failed: {errors.decode()}")
    print(f"supervisor: planexec {command} {run_id} {question_id}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reject", action="store_true", help="the supervisor refuses the refund")
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="refunds-") as workdir:
        store_path = Path(workdir) / "runs.db"
        store = SQLiteStore(store_path)
        agent = Agent(
            planner_model(options.model),
            tools=[lookup_order, refund],
            store=store,
            approvals=Approvals(deferred=True),  # questions wait in the log; nobody is asked here
        )
        first = await agent.run("Customer ada@example.com got order A-1042 damaged: refund it.", run_id="refund-A-1042")
        print(f"agent: {first.stop.kind} — {first.stop.detail}")
        print(f"agent: refunds made so far: {len(REFUNDS)}")

        # The open question is in the run's log, for anyone who reads it (`planexec approvals` lists it).
        state = RunState.fold([stored.event for stored in await store.read("refund-A-1042")])
        (question,) = state.pending_approvals
        print(f"question {question.approval_id}: {question.reason}")

        await supervisor("reject" if options.reject else "approve", store_path, "refund-A-1042", question.approval_id)

        run = await agent.resume("refund-A-1042")
        result = await run.result()
        print(f"agent: {result.stop.kind} — {result.answer or result.stop.detail}")
        print(f"payment service calls: {REFUNDS}")
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
