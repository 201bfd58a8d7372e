"""Picking a stored run up in this process: the agent rebuilt from the spec the run recorded
(changed as the caller says), then on with the run from its log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from planexec.log import Event, RunStarted, RunState
from planexec.memory import PlanMemory
from planexec.models import Providers
from planexec.runs._build import build_agent
from planexec.runs._spec import AgentSpec, recorded_spec
from planexec.runs._stored import load_run
from planexec.runtime import Agent, Approvals, Run
from planexec.store import RunStore

__all__ = ["resume", "still_waiting"]


def still_waiting(state: RunState) -> bool:
    """Suspended for questions, and not one of them has been answered since."""
    suspended = state.suspended
    if suspended is None or not suspended.approvals:
        return False
    return all((rec := state.approvals.get(a)) is not None and rec.approved is None for a in suspended.approvals)


async def resume(
    store: RunStore,
    run_id: str,
    *,
    approvals: Approvals | None = None,
    change: Callable[[AgentSpec], AgentSpec] | None = None,
    log: list[Event] | None = None,
    providers: Providers | None = None,
    memory: PlanMemory | None = None,
) -> Run:
    """Go on with run ``run_id`` in this process, the agent rebuilt from the spec it recorded.

    ``change`` turns the recorded spec into the one to use (e.g. another model string); scripted
    models the run recorded skip the replies the run already used. ``approvals`` default to
    questions saved in the log; ``providers`` resolve, charge and limit its models (the default ones
    when None). ``memory``: the plan memory told how the run ends, when the run was started with
    one (a memory's offer is in the log already). A finished run is returned as it is. Raises
    :class:`~planexec.UsageError` listing every problem (an unknown run, a spec that cannot be
    built, tools the run used that are missing). The agent's MCP servers are stopped when the run
    ends or is suspended.
    """
    events = log if log is not None else await load_run(store, run_id)
    first = events[0]
    assert isinstance(first, RunStarted)
    recorded = await recorded_spec(store, first)
    spec = change(recorded.spec) if change is not None else recorded.spec
    agent = build_agent(
        spec,
        store=store,
        approvals=approvals,
        recorded=recorded,
        used=events,
        needs_tools=first.tools,
        providers=providers,
    )
    if memory is not None and "memory" in first.config:
        agent.memory = memory
    run = await agent.resume(run_id)
    _close_when_done(run, agent)
    return run


_closing: set[asyncio.Task[None]] = set()


def _close_when_done(run: Run, agent: Agent) -> None:
    """The agent was built for this run alone: its MCP servers stop when the run ends (or is
    suspended)."""

    async def close() -> None:
        try:
            await run.result()
        finally:
            await agent.aclose()

    task = asyncio.create_task(close(), name=f"close:{run.run_id}")
    _closing.add(task)
    task.add_done_callback(_closing.discard)
