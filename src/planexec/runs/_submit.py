"""Submitting a run for workers: the goal and the agent's spec are queued in a PostgreSQL store,
and whichever ``planexec worker`` claims the run first builds the agent from the spec and runs it
(see :mod:`planexec.workers`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from planexec.errors import UsageError
from planexec.log import RunState
from planexec.runs._build import build_agent
from planexec.runs._pickup import still_waiting
from planexec.runs._problems import Problems
from planexec.runs._spec import AgentSpec
from planexec.runs._stored import check_run_id
from planexec.store import QueueEntry, RunStore

__all__ = ["give_back", "held_by", "requeue", "submit", "take_from_workers", "worker_entry"]


async def submit(
    store: RunStore,
    spec: AgentSpec,
    goal: str,
    *,
    constraints: Sequence[str] = (),
    run_id: str | None = None,
    check: bool = True,
) -> str:
    """Queue ``goal`` for the workers sharing ``store`` (one with a workers' queue, ``store.queue()``:
    a :class:`~planexec.store.PostgresStore`) and return the run's id (``run_id``, else a new one).

    ``spec`` is recorded as :meth:`AgentSpec.recorded` makes it (scripted model files absolute,
    ``cwd`` filled in): workers import its tool references from ``cwd``. ``check`` builds the
    agent here first, so that a spec that cannot be built is refused now rather than failed by a
    worker (turn it off when the tools exist only on the workers' machines). Raises
    :class:`~planexec.UsageError` listing every problem — a run id taken already among them.
    """
    problems = Problems()
    if not isinstance(goal, str) or not goal.strip():
        problems.add("goal", "the goal is empty", code="goal")
    queue = store.queue()
    if queue is None:
        problems.add(
            "store",
            f"is a {type(store).__name__}: runs are submitted to workers through a PostgreSQL store (postgresql://…)",
            code="store",
        )
    if run_id is not None:
        try:
            check_run_id(run_id)
        except UsageError as e:
            for p in e.problems:
                problems.add(p.where, p.message, code=p.code)
    recorded = spec.recorded()
    every = (*recorded.constraints, *constraints)
    if check and queue is not None:
        try:
            agent = build_agent(recorded, store=store)
        except UsageError as e:
            problems.extend(e.problems)
        else:
            await agent.aclose()
    problems.raise_if_any("cannot submit the run")
    assert queue is not None  # raise_if_any raised otherwise
    chosen = run_id if run_id is not None else uuid.uuid4().hex[:16]
    queued = await queue.submit(chosen, goal=goal, constraints=every, spec=recorded.to_dict())
    if not queued:
        problems.add("run_id", f"a run {chosen!r} was submitted or stored already", code="run_id")
        problems.raise_if_any("cannot submit the run")
    return chosen


async def requeue(store: RunStore, run_id: str) -> bool:
    """Queue a submitted run again for the workers — one that was suspended for a human's answer
    and has been answered since; False when it is not waiting (queued, held or finished)."""
    queue = store.queue()
    if queue is None:
        raise UsageError(f"runs are queued for workers in PostgreSQL, not in a {type(store).__name__}")
    check_run_id(run_id)
    return await queue.requeue(run_id)


async def give_back(store: RunStore, run_id: str) -> bool:
    """Queue ``run_id`` again for the workers when it is a submitted run they left waiting for a
    human and every question it asked has been answered since; False for any other run — not
    submitted, not waiting, still waiting for an answer, finished, or in a store that is not
    PostgreSQL — which whoever answered it may resume itself (:func:`take_from_workers` first)."""
    queue = store.queue()
    if queue is None:
        return False
    check_run_id(run_id)
    entry = await queue.entry(run_id)
    if entry is None or entry.state != "waiting":
        return False
    state = RunState.fold(s.event for s in await store.read(run_id))
    if state.finished or state.pending_approvals or still_waiting(state):
        return False
    return await queue.requeue(run_id)


async def worker_entry(store: RunStore, run_id: str) -> QueueEntry | None:
    """The run's row in the workers' queue while it is in their hands (queued, leased or waiting
    for a human); None when it is not a submitted run, is done, or the store is not PostgreSQL."""
    queue = store.queue()
    if queue is None:
        return None
    check_run_id(run_id)
    entry = await queue.entry(run_id)
    return entry if entry is not None and entry.state != "done" else None


async def take_from_workers(store: RunStore, run_id: str) -> str | None:
    """Before going on with ``run_id`` outside the workers: why it must not be (None: go on). A
    submitted run that a worker holds, or that is queued for them, is theirs; one they left
    waiting for a human is taken out of their queue (its row ``done``), so that no worker takes
    it up as well. Always None for a store that is not PostgreSQL."""
    queue = store.queue()
    if queue is None:
        return None
    check_run_id(run_id)
    entry = await queue.entry(run_id)
    if entry is None or entry.state == "done":
        return None
    holder = await queue.holder(run_id)
    if holder is not None:
        return f"worker {holder} runs it now (its lease is live): resuming it here would run it twice"
    if entry.state == "waiting" and await queue.withdraw(run_id, note="resumed outside the workers"):
        return None
    return "it is queued for the workers, and a worker goes on with it (start one with `planexec worker`)"


async def held_by(store: RunStore, run_id: str) -> str | None:
    """The worker that runs ``run_id`` now — whose lease on it is live — or None (always None
    for a store that is not PostgreSQL: no worker runs runs there). Resume a run only when this
    is None: a worker holding it would otherwise run it in two places."""
    queue = store.queue()
    if queue is None:
        return None
    check_run_id(run_id)
    return await queue.holder(run_id)
