"""Running goals in the server's process: each run an asyncio task, at most ``workers`` at once
(the others wait their turn), every one recorded as this server's so that the next start picks
up what a crash or a stop left unfinished. Watchers of a run are woken at each event it adds."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planexec.errors import UsageError
from planexec.log import Event, RunStarted, RunState
from planexec.runs import Supervisor, build_agent, load_run, recorded_spec, still_waiting
from planexec.runtime import Agent, Approvals, Run
from planexec.server._accepted import AcceptedRuns
from planexec.server._agents import ServedAgent
from planexec.store import RunStore, Told

__all__ = ["SERVE_KEY", "Pending", "Workers", "request_digest", "served_by"]

SERVE_KEY = "serve"
"""Where in a run's metadata the server records itself: its instance id, the agent's name, and the
idempotency key and request digest the run was started with."""
RECOVER_SCAN = 10_000
"""At most this many unfinished runs are looked at when the server starts."""


def request_digest(data: Mapping[str, Any]) -> str:
    """A digest of a request's body, to tell a retried request from a different one."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def served_by(first: RunStarted) -> Mapping[str, Any]:
    """What the server recorded with a run (empty for runs started elsewhere)."""
    found = first.config.get(SERVE_KEY)
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A run accepted but not started yet (waiting for a worker): not in the store yet."""

    run_id: str
    agent: str
    goal: str
    constraints: tuple[str, ...]
    accepted_at: float
    idempotency_key: str | None
    digest: str


SETTLE_WAIT = 5.0
"""Seconds a request waits for a suspended run's task here to end before it says the run is busy."""
FORK_WAIT = 10.0
"""Seconds a fork's request waits for the new run's first event to be stored."""
UNTIL_STORED_CHECK = 0.2
"""How often a wait for a run's first event looks whether the run has ended without one."""


class Workers:
    """The runs this server executes, over one store."""

    def __init__(
        self,
        store: RunStore,
        agents: Mapping[str, ServedAgent],
        *,
        instance: str,
        workers: int = 4,
        accepted: Path | None = None,
    ) -> None:
        self.store = store
        self._accepted = AcceptedRuns(accepted, keep=lambda: set(self.pending))
        """A file where each accepted run is written before it is acknowledged (JSON Lines): a run
        accepted and not begun when the process stops or crashes is started by the next start."""
        self.agents = dict(agents)
        self.instance = instance
        self.runs = Supervisor(store, slots=workers)
        """The runs this server hosts, begun or waiting for a worker."""
        self.pending: dict[str, Pending] = {}
        """New runs waiting for a worker."""
        self._keys: dict[str, asyncio.Lock] = {}
        self.failed_starts: dict[str, tuple[Pending, str]] = {}
        """New runs whose agent could not begin (e.g. an MCP server that would not start), and why."""
        self._told: dict[str, list[Told]] = {}
        """What new runs were told while they waited for a worker: they hear it when they begin."""

    # -- watching ---------------------------------------------------------------------------------

    @property
    def live(self) -> Mapping[str, Run]:
        """Runs under way in this process."""
        return {run_id: run for run_id in self.runs.in_hand if (run := self.runs.live(run_id)) is not None}

    def busy(self, run_id: str) -> bool:
        """Whether this server runs ``run_id`` now (or is about to)."""
        return self.runs.busy(run_id)

    async def settle(self, run_id: str, wait: float = SETTLE_WAIT) -> None:
        """Wait (``wait`` seconds at most) for this server's part in ``run_id`` to end: a run whose
        log says it is suspended is left a moment after, when its task has closed its log."""
        await self.runs.settle(run_id, wait)

    # -- starting ---------------------------------------------------------------------------------

    def key_lock(self, key: str) -> asyncio.Lock:
        return self._keys.setdefault(key, asyncio.Lock())

    @staticmethod
    def run_id_for(key: str | None) -> str:
        """A new run's id: derived from its idempotency key (so a retry finds the run), else random."""
        if key is None:
            return uuid.uuid4().hex
        return "k" + hashlib.sha256(f"planexec-serve:{key}".encode()).hexdigest()[:31]

    async def start(
        self,
        agent: ServedAgent,
        goal: str,
        *,
        constraints: Sequence[str],
        budget: Mapping[str, float | None],
        key: str | None,
        digest: str,
        run_id: str | None = None,
        remember: bool = True,
    ) -> Pending:
        """Accept a goal: written down (unless ``remember`` is False), then started as soon as a
        worker is free. Problems building the agent are raised at once
        (:class:`~planexec.UsageError`), before anything is accepted."""
        run_id = run_id or self.run_id_for(key)
        built, every, metadata = agent.build(self.store, run_id, constraints=constraints, budget=budget)
        served = {"instance": self.instance, "agent": agent.name, "digest": digest}
        if key is not None:
            served["idempotency_key"] = key
        metadata = {**metadata, SERVE_KEY: served}
        pending = Pending(
            run_id=run_id,
            agent=agent.name,
            goal=goal,
            constraints=every,
            accepted_at=time.time(),
            idempotency_key=key,
            digest=digest,
        )
        if remember:
            line = {
                "run_id": run_id,
                "agent": agent.name,
                "goal": goal,
                "constraints": list(constraints),
                "budget": dict(budget),
                "key": key,
                "digest": digest,
                "accepted_at": pending.accepted_at,
            }
            await self._accepted.remember(line)
        self.pending[run_id] = pending

        async def begin() -> Run:
            told = self._told.pop(run_id, ())
            return await self.runs.begin(built, goal, constraints=every, run_id=run_id, metadata=metadata, told=told)

        self._launch(run_id, begin, built)
        return pending

    def tell_pending(self, run_id: str, text: str, *, constraint: bool, by: str) -> None:
        """Tell a run that waits for a worker something new: it hears it when it begins."""
        self._told.setdefault(run_id, []).append(Told(text=text, constraint=constraint, by=by))

    def resume(self, run_id: str, log: list[Event]) -> None:
        """Go on with a stored run here, with the agent it was started with (by name when this server
        started it, else from the spec it recorded)."""
        first = log[0]
        assert isinstance(first, RunStarted)
        name = served_by(first).get("agent")
        agent = self.agents.get(name) if isinstance(name, str) else None
        if agent is not None and agent.builder is not None:
            built = agent.builder(self.store, run_id)

            async def again() -> Run:
                return await self.runs.pick_up(run_id, agent=built)

            self._launch(run_id, again, built)
            return

        async def from_log() -> Run:
            return await self.runs.pick_up(run_id, log=log)

        self._launch(run_id, from_log, None)

    def fork(self, run_id: str, log: list[Event], at: int, agent: ServedAgent | None) -> str:
        """Replay run ``run_id`` up to event ``at`` and go on live from there as a new run (returned)."""
        new_id = uuid.uuid4().hex
        first = log[0]
        assert isinstance(first, RunStarted)
        metadata: dict[str, Any] = {SERVE_KEY: {"instance": self.instance, "agent": None, "forked_from": run_id}}

        async def build() -> Agent:
            if agent is not None:
                built, _, spec_record = agent.build(self.store, new_id)
                metadata.update(spec_record)
                metadata[SERVE_KEY]["agent"] = agent.name
                return built
            name = served_by(first).get("agent")
            known = self.agents.get(name) if isinstance(name, str) else None
            if known is not None and known.builder is not None:
                metadata[SERVE_KEY]["agent"] = known.name
                return known.builder(self.store, new_id)
            recorded = await recorded_spec(self.store, first)

            metadata[SERVE_KEY]["agent"] = name
            return build_agent(
                recorded.spec,
                store=self.store,
                approvals=Approvals(deferred=True, plan=recorded.spec.approve_plan),
                recorded=recorded,
                used=log[:at],
                needs_tools=first.tools,
            )

        async def replayed() -> None:
            built = await build()
            try:
                await built.replay(run_id, fork_at=at, new_run_id=new_id, metadata=metadata)
            finally:
                await built.aclose()

        self.runs.launch_quiet(new_id, replayed)
        return new_id

    async def until_stored(self, run_id: str) -> None:
        """Wait until run ``run_id`` (a fork replaying here, or a new run) has its first event in
        the store, so that it reads as any stored run; or until it has ended, or ``FORK_WAIT``
        seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FORK_WAIT
        while self.runs.busy(run_id) and (left := deadline - loop.time()) > 0:
            if await self.store.wait_for_events(run_id, after=0, within=min(left, UNTIL_STORED_CHECK)):
                return

    def _launch(self, run_id: str, begin: Callable[[], Awaitable[Run]], agent: Agent | None) -> None:
        def begun(seen: int) -> None:
            if seen == 2:  # its first event has reached the store: it reads as any stored run
                self.pending.pop(run_id, None)

        def failed(error: Exception) -> None:  # e.g. an MCP server that would not start: it never began
            pending = self.pending.get(run_id)
            if pending is not None:
                self.failed_starts[run_id] = (pending, f"{type(error).__name__}: {error}")

        async def closing() -> None:
            self.pending.pop(run_id, None)
            self._told.pop(run_id, None)
            if agent is not None:
                await agent.aclose()

        self.runs.launch(run_id, begin, on_event=begun, on_failed=failed, closing=closing)

    # -- stopping ---------------------------------------------------------------------------------

    async def cancel(self, run_id: str) -> None:
        """Cancel a run: one this server runs stops (its log says ``cancelled``); a waiting one is
        finished as cancelled. Raises :class:`~planexec.UsageError` (code ``finished``,
        ``elsewhere``) when neither can be done."""
        await self.runs.cancel(run_id)

    # -- accepted, not begun ----------------------------------------------------------------------

    async def _start_accepted(self) -> list[str]:
        """Start the runs accepted before a stop or a crash that never began (not in the store)."""
        started: list[str] = []
        waiting: dict[str, dict[str, Any]] = {}
        for line in self._accepted.read():
            run_id = line["run_id"]
            if self.runs.busy(run_id) or run_id in waiting or await self.store.last_seq(run_id) > 0:
                continue
            agent = self.agents.get(str(line.get("agent")))
            if agent is None:  # no longer registered: nothing can run it
                continue
            try:
                await self.start(
                    agent,
                    str(line.get("goal", "")),
                    constraints=[str(c) for c in line.get("constraints") or []],
                    budget=dict(line.get("budget") or {}),
                    key=line.get("key"),
                    digest=str(line.get("digest", "")),
                    run_id=run_id,
                    remember=False,
                )
            except UsageError:
                continue
            waiting[run_id] = line
            started.append(run_id)
        self._accepted.compact(waiting)
        return started

    # -- recovering -------------------------------------------------------------------------------

    async def recover(self) -> list[str]:
        """Go on with every unfinished run this server owned that waits for no one — what a crash or
        a stop left under way — then begin the runs it accepted and never began. Returns their ids."""
        picked: list[str] = []
        for status in ("running", "waiting"):
            for summary in await self.store.list_runs(status=status, limit=RECOVER_SCAN):
                if self.runs.busy(summary.run_id):
                    continue
                try:
                    log = await load_run(self.store, summary.run_id)
                except UsageError:
                    continue
                first = log[0]
                assert isinstance(first, RunStarted)
                if served_by(first).get("instance") != self.instance:
                    continue
                state = RunState.fold(log)
                if state.finished or still_waiting(state) or state.pending_approvals:
                    continue
                self.resume(summary.run_id, log)
                picked.append(summary.run_id)
        return picked + await self._start_accepted()  # then those accepted and never begun, in order

    def under_way(self) -> int:
        """How many runs this server is still executing (forks replaying when it stops)."""
        return len(self.runs.in_hand)

    async def close(self) -> None:
        """Leave every run under way here unfinished (detached, not cancelled: a cancelled run would
        be recorded as finished), for the next start to pick up; runs not begun yet are begun by the
        next start (they are written down as they are accepted). Forks replaying go on."""
        await self.runs.close(only=[r for r in self.runs.in_hand if r in self.pending or self.runs.live(r)])
