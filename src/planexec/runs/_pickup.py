"""Picking a stored run up in this process: the agent rebuilt from the spec the run recorded
(changed as the caller says), then on with the run from its log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from planexec.log import Event, RunStarted, RunState
from planexec.memory import PlanMemory
from planexec.models import Providers
from planexec.runs._spec import AgentSpec, build_agent, recorded_spec
from planexec.runs._stored import load_run
from planexec.runtime import Agent, Approvals, Run
from planexec.store import RunStore

__all__ = ["owning", "rebuilt_for", "resume", "still_waiting"]


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
    agent = await rebuilt_for(store, events, approvals=approvals, change=change, providers=providers, memory=memory)
    try:
        run = await agent.resume(run_id)
    except BaseException:
        await agent.aclose()
        raise
    owning(run, agent)
    return run


async def rebuilt_for(
    store: RunStore,
    log: list[Event],
    *,
    approvals: Approvals | None = None,
    change: Callable[[AgentSpec], AgentSpec] | None = None,
    providers: Providers | None = None,
    memory: PlanMemory | None = None,
) -> Agent:
    """The agent a stored run recorded (its spec, turned by ``change``), rebuilt to go on with the
    run whose events are ``log``: scripted models skip the replies the run used, the tools it used
    must be there, and ``memory`` is told how it ends when the run was started with one."""
    first = log[0]
    assert isinstance(first, RunStarted)
    recorded = await recorded_spec(store, first)
    spec = change(recorded.spec) if change is not None else recorded.spec
    agent = build_agent(
        spec,
        store=store,
        approvals=approvals,
        recorded=recorded,
        used=log,
        needs_tools=first.tools,
        providers=providers,
    )
    if memory is not None and "memory" in first.config:
        agent.memory = memory
    return agent


_closing: set[asyncio.Task[None]] = set()


def owning(run: Run, agent: Agent) -> None:
    """``agent`` was built for ``run`` alone: close it (its MCP servers) when the run ends or is
    suspended."""

    async def close() -> None:
        try:
            with contextlib.suppress(Exception):  # detached: closed all the same
                await run.result()
        finally:
            await agent.aclose()

    task = asyncio.create_task(close(), name=f"close:{run.run_id}")
    _closing.add(task)
    task.add_done_callback(_closing.discard)
