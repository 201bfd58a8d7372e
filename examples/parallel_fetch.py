"""Parallel fetch: check the health of eight services at once for a status report; a flaky one
is retried, one that hangs times out, and the planner patches the plan to ask its mirror instead.

What it shows: independent steps running concurrently within a tool's ``max_concurrency`` and the
run's ``Limits``; a ``RetryPolicy`` with backoff for ``TransientToolError``; a per-tool timeout
(not retried here: a hung service stays hung); a failed step routed back to the planner, whose
patch keeps every finished result; a ``Budget`` bounding the whole run; each step's attempts and
timings in the result.

    python examples/parallel_fetch.py
    python examples/parallel_fetch.py --model openai:gpt-4.1-mini

With ``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) a real model plans (install the provider's extra
and set its API key); the tools stay the offline ones below.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from planexec import Agent, Budget, Limits, RetryPolicy, TransientToolError, tool
from planexec.models import Model, ModelRequest
from planexec.testing import FunctionModel

SERVICES = ["auth", "billing", "search", "mail", "storage", "queue", "cdn", "reports"]
LATENCY = 0.1  # seconds each health check takes
FLAKY = {"mail": 2}  # mail fails twice before it answers
ATTEMPTS: dict[str, int] = {}


@tool(timeout=0.5, retry=RetryPolicy(max_attempts=3, initial_delay=0.05, on_timeout=False), max_concurrency=4)
async def health(service: str) -> dict[str, object]:
    """Ask a service's health endpoint how it is.

    Args:
        service: the service's name
    """
    ATTEMPTS[service] = ATTEMPTS.get(service, 0) + 1
    if service == "reports":
        await asyncio.sleep(60)  # the reports service hangs; the tool's timeout ends the call
    await asyncio.sleep(LATENCY)
    if ATTEMPTS[service] <= FLAKY.get(service, 0):
        raise TransientToolError(f"{service}: 503 service unavailable")
    return {"service": service, "status": "ok", "p99_ms": 40 + 7 * len(service)}


@tool
async def mirror_health(service: str) -> dict[str, object]:
    """Ask a service's health through its mirror in the other region (slower, always answers).

    Args:
        service: the service's name
    """
    await asyncio.sleep(LATENCY * 2)
    return {"service": service, "status": "degraded", "p99_ms": 900}


def scripted_planner(request: ModelRequest) -> dict[str, object]:
    if request.purpose == "planner.propose":
        return {
            "steps": [
                {"id": f"check_{s}", "description": f"check {s}", "tool": "health", "args": {"service": s}}
                for s in SERVICES
            ]
        }
    if request.purpose == "planner.patch":  # check_reports failed: ask the mirror instead
        return {
            "reason": "reports timed out; its mirror answers from the other region",
            "steps": [
                {"id": "check_reports_mirror", "description": "check reports through its mirror",
                 "tool": "mirror_health", "args": {"service": "reports"}}
            ],
        }  # fmt: skip
    return {"answer": "7 services are up; reports is degraded (answered only through its mirror)."}


def planner_model(name: str | None) -> Model | str:
    return name or FunctionModel(scripted_planner)  # a real one: e.g. "openai:gpt-4.1-mini"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    options = parser.parse_args()
    agent = Agent(
        planner_model(options.model),
        tools=[health, mirror_health],
        budget=Budget(tool_calls=30, wall_time=30, replans=2),
        limits=Limits(max_concurrency=8),
        store=None,  # nothing to keep: no log on disk
    )
    t0 = time.perf_counter()
    result = await agent.run("Write the morning status report: is every service healthy?")
    wall = time.perf_counter() - t0

    for step_id, record in sorted(result.steps.items()):
        error = f" ({record.error.kind}: {record.error.message})" if record.error else ""
        print(f"{step_id:22} {record.status:9} attempts {record.attempts}{error}")
    print(f"plan versions: {[(p.version, p.reason or 'first plan') for p in result.plans]}")
    busy = sum((r.finished_at or 0) - (r.started_at or 0) for r in result.steps.values())
    print(f"{sum(ATTEMPTS.values())} health calls; {busy:.2f} s of step time in {wall:.2f} s of wall time")
    print(f"{result.stop.kind}: {result.answer}")


if __name__ == "__main__":
    asyncio.run(main())
