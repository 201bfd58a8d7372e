"""What a client does to runs: start one (``POST /v1/runs``), and cancel, resume, tell or fork
one (``POST /v1/runs/{run_id}/cancel``, ``/resume``, ``/tell``, ``/fork``)."""

from __future__ import annotations

import time

from fastapi import Header
from fastapi.responses import Response

from planexec.errors import Problem
from planexec.log import RunStarted, RunState
from planexec.runs import read_run, still_waiting, take_from_workers, tell
from planexec.server._bodies import MAX_KEY_CHARS, Fork, StartRun, Tell
from planexec.server._contract import RUN_LINKS, refusals
from planexec.server._shared import ANSWERED_BY, ApiError, Routes, RunId, ServedHere, checked_id
from planexec.server._views import RunSummary, agent_of, pending_summary, summary
from planexec.server._workers import request_digest, served_by

__all__ = ["actions_routes"]

actions_routes = Routes()


@actions_routes.post(
    "/v1/runs",
    tags=["runs"],
    status_code=201,
    responses={
        201: {"description": "The run started", "links": RUN_LINKS},
        200: {"model": RunSummary, "description": "The run this idempotency key started", "links": RUN_LINKS},
        **refusals("bad_json", "unknown_agent", "idempotency_conflict", "invalid"),
    },
)
async def start_run(
    body: StartRun,
    response: Response,
    served: ServedHere,
    idempotency_key: str | None = Header(default=None, min_length=1, max_length=MAX_KEY_CHARS),
) -> RunSummary:
    """Start a goal with a registered agent. With an idempotency key (in the body or the
    ``Idempotency-Key`` header), a retried request gets the run the first one started."""
    key = body.idempotency_key or idempotency_key
    agents, workers = served.agents, served.workers
    agent = agents.get(body.agent)
    if agent is None:
        raise ApiError(
            404,
            "unknown_agent",
            f"no agent {body.agent!r}",
            [Problem(code="unknown_agent", where="agent", message=f"registered: {', '.join(sorted(agents))}")],
        )
    caps = body.budget.given()
    asked = {"agent": body.agent, "goal": body.goal, "constraints": body.constraints, "budget": caps}
    digest = request_digest(asked)
    if key is None:
        pending = await workers.start(
            agent, body.goal, constraints=body.constraints, budget=caps, key=None, digest=digest
        )
        return pending_summary(pending.run_id, agent.name, body.goal, pending.accepted_at)
    async with workers.key_lock(key):
        run_id = workers.run_id_for(key)
        earlier = workers.pending.get(run_id)
        before = earlier.digest if earlier is not None else None
        if earlier is None:
            stored = await read_run(served.store, run_id)
            if stored.found:
                first = stored.events[0] if stored.events else None
                before = served_by(first).get("digest") if isinstance(first, RunStarted) else ""
        if before is not None:
            if before != digest:
                raise ApiError(
                    409,
                    "idempotency_conflict",
                    "this idempotency key started a run with another request",
                    [Problem(code="idempotency_conflict", where="idempotency_key", message=f"run {run_id}")],
                )
            response.status_code = 200
            return await served.summary_of(run_id)
        pending = await workers.start(
            agent, body.goal, constraints=body.constraints, budget=caps, key=key, digest=digest
        )
        return pending_summary(pending.run_id, agent.name, body.goal, pending.accepted_at)


@actions_routes.post(
    "/v1/runs/{run_id}/cancel",
    tags=["runs"],
    status_code=202,
    responses=refusals("bad_id", "unknown_run", "finished", "elsewhere", "busy", "invalid"),
)
async def cancel_run(run_id: RunId, served: ServedHere) -> RunSummary:
    """Cancel a run: one this server executes stops; a waiting one is finished as cancelled."""
    checked_id(run_id, "run_id")
    if not served.workers.busy(run_id):
        await served.run_log(run_id)
    await served.workers.cancel(run_id)
    return await served.summary_of(run_id)


@actions_routes.post(
    "/v1/runs/{run_id}/resume",
    tags=["runs"],
    status_code=202,
    responses=refusals("bad_id", "unknown_run", "finished", "waiting", "running", "invalid"),
)
async def resume_run(run_id: RunId, served: ServedHere) -> RunSummary:
    """Go on with a run here: after a crash, or once its questions are answered."""
    # Whether this server runs it is asked before the log is read (a run that ends here while
    # the log is read would otherwise be resumed from a log that no longer says the whole
    # story) and again after (another request may have resumed it meanwhile).
    workers = served.workers
    busy = workers.busy(run_id)
    checked_id(run_id, "run_id")
    if busy and run_id in workers.pending:
        raise ApiError(
            409,
            "running",
            f"cannot resume run {run_id!r}",
            [Problem(code="running", where="run_id", message="this server runs it: it waits for a worker")],
        )
    early = served.not_begun(run_id, "resume")
    if early is not None:
        raise early
    log = await served.run_log(run_id)
    state = RunState.fold(log)
    if (busy or workers.busy(run_id)) and state.status == "waiting":
        await workers.settle(run_id)  # suspended: its part here is ending (the log says so first)
        busy = workers.busy(run_id)
        log = await served.run_log(run_id)
        state = RunState.fold(log)
    why = None
    if busy or workers.busy(run_id):
        why = ("running", "this server runs it now")
    elif state.finished:
        why = ("finished", f"it has finished ({state.stop})")
    elif still_waiting(state) or state.pending_approvals:
        why = ("waiting", "it waits for an answer: answer its questions first")
    else:
        theirs = await take_from_workers(workers.store, run_id)  # last: it takes a waiting run over
        if theirs is not None:
            why = ("running", theirs)
    if why is not None:
        raise ApiError(
            409, why[0], f"cannot resume run {run_id!r}", [Problem(code=why[0], where="run_id", message=why[1])]
        )
    workers.resume(run_id, log)
    return summary(state, agent_of(log[0]))


@actions_routes.post(
    "/v1/runs/{run_id}/tell",
    tags=["runs"],
    status_code=202,
    responses=refusals("bad_json", "bad_id", "unknown_run", "finished", "conflict", "busy", "invalid"),
)
async def tell_run(run_id: RunId, body: Tell, served: ServedHere) -> RunSummary:
    """Tell a run something new, or a new constraint: its planner replans with it at the next
    safe point, keeping the work done. A run waiting for a worker hears it when it begins,
    before it plans."""
    checked_id(run_id, "run_id")
    workers = served.workers
    live = workers.live.get(run_id)
    if live is None and run_id in workers.pending:
        workers.tell_pending(run_id, body.text, constraint=body.constraint, by=ANSWERED_BY)
        pending = workers.pending[run_id]
        return pending_summary(run_id, pending.agent, pending.goal, pending.accepted_at)
    if live is not None and not live.done:  # before its first event too: it is logged right after it
        live.tell(body.text, constraint=body.constraint, by=ANSWERED_BY)
        return await served.summary_of(run_id)
    early = served.not_begun(run_id, "tell")
    if early is not None:
        raise early
    log = await served.run_log(run_id)
    state = await tell(served.store, run_id, body.text, constraint=body.constraint, by=ANSWERED_BY, log=log)
    idle = state.status == "waiting" and not state.pending_approvals and not workers.busy(run_id)
    if idle and not await served.back_to_workers(run_id):
        workers.resume(run_id, log)
    return summary(state, agent_of(log[0]))


@actions_routes.post(
    "/v1/runs/{run_id}/fork",
    tags=["runs"],
    status_code=201,
    responses={
        201: {"description": "The new run", "links": RUN_LINKS},
        **refusals("bad_json", "bad_id", "unknown_run", "unknown_agent", "finished", "not_started", "invalid"),
    },
)
async def fork_run(run_id: RunId, body: Fork, served: ServedHere) -> RunSummary:
    """A new run: this one's log replayed up to event ``at`` (no model or tool called), then
    live with the agent (the run's own, or the one named). A run that waits for a worker
    has no event to fork from yet: the request waits a moment for its first ones."""
    checked_id(run_id, "run_id")
    workers = served.workers
    if run_id in workers.pending:
        await workers.until_stored(run_id)
    early = served.not_begun(run_id, "fork")
    if early is not None:
        raise early
    log = await served.run_log(run_id)
    if body.at > len(log):
        message = f"{body.at} must be from 1 to {len(log)} (the events to keep)"
        raise ApiError(422, "invalid", "cannot fork the run", [Problem(code="at", where="at", message=message)])
    agent = None
    if body.agent is not None:
        agent = served.agents.get(body.agent)
        if agent is None:
            raise ApiError(404, "unknown_agent", f"no agent {body.agent!r}")
    new_id = workers.fork(run_id, log, body.at, agent)
    await workers.until_stored(new_id)  # once answered, the new run reads as any stored run
    first = log[0]
    assert isinstance(first, RunStarted)
    name = agent.name if agent is not None else agent_of(first)
    return pending_summary(new_id, name or "", first.goal, time.time())
