"""A worker: claims runs submitted to a PostgreSQL store, runs them under a lease it renews, and
releases each when it finishes or is suspended; drains when asked to stop.

Ownership, step by step:

1. ``claim``: one statement takes up to ``concurrency - runs in hand`` rows that are queued or
   whose lease has expired (``FOR UPDATE SKIP LOCKED``), each under a new lease number.
2. A run with no log yet is started with the agent its spec describes; one with a log (a take-over
   after another worker died, or a run drained by a stopping one) is resumed from it: finished
   steps never run again, and the engine's journal and idempotency keys keep every effect to one.
3. Every ``lease_seconds / 3`` one statement renews every lease in hand. A lease found taken over
   detaches its run at once (nothing more is logged from here); when renewals keep failing for
   most of a lease, every run in hand is detached, since another worker may take them over soon.
4. A finished run's lease is released ``done``; a suspended one's ``waiting`` (requeue it once
   answered). A spec that cannot be built ends the run with a typed stop (``error``, code
   ``usage``) and is not tried again; so does a run claimed more than ``max_claims`` times (code
   ``internal``: every worker that took it died with it), and a log no worker can read is left
   ``done`` with a note.
5. ``drain`` (SIGTERM for ``planexec worker``): claim nothing more, give runs in hand
   ``grace_seconds`` to end, then detach the rest and release their leases ``queued`` so that
   another worker takes them up at once.

Whatever a lease misses, the log catches: appends name the sequence number they follow, so two
workers can never both write a run's log past the same event.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

from planexec.errors import LogUnreadable, Problem, StoreError, UsageError
from planexec.log import ErrorCode, Event, RunStarted, RunState
from planexec.memory import PlanMemory
from planexec.models import Providers
from planexec.planner import Upfront
from planexec.runs import AgentSpec, Supervisor, build_agent, still_waiting
from planexec.runtime import Agent, Approvals, Run
from planexec.store import Claim, QueueState, RunStore

__all__ = ["Worker", "WorkerFailed", "WorkerSettings", "WorkerStats"]


class WorkerFailed(StoreError):
    """The worker stopped because its store kept failing: it claimed nothing more and left its runs
    (detached) for other workers to take over when their leases expire."""


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """How a worker shares runs with others.

    ``concurrency``: runs in hand at once. ``lease_seconds``: how long a claim holds without being
    renewed (renewed every third of it): a dead worker's runs are taken over this long after its
    last renewal. ``poll_seconds``: how often an idle worker looks for work. ``grace_seconds``:
    how long a draining worker lets its runs go on before it leaves them to others.
    ``store_patience``: seconds of failing store calls after which the worker gives up (None: one
    lease). ``name``: the worker's id in leases (default: host, pid and a random suffix).
    """

    concurrency: int = 4
    lease_seconds: float = 15.0
    poll_seconds: float = 1.0
    grace_seconds: float = 30.0
    store_patience: float | None = None
    name: str | None = None
    max_claims: int = 10
    """A run claimed more often than this (every worker that took it died or stopped before it
    ended) is ended with a typed stop instead of being taken over again."""

    def check(self) -> None:
        problems = []
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            problems.append(Problem(code="worker", where="concurrency", message="must be a whole number, 1 or more"))
        if isinstance(self.max_claims, bool) or not isinstance(self.max_claims, int) or self.max_claims < 1:
            problems.append(Problem(code="worker", where="max_claims", message="must be a whole number, 1 or more"))
        for where in ("lease_seconds", "poll_seconds", "grace_seconds", "store_patience"):
            value = getattr(self, where)
            if value is None and where == "store_patience":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 86_400:
                problems.append(Problem(code="worker", where=where, message="must be a number of seconds above 0"))
        lease = self.lease_seconds
        if isinstance(lease, int | float) and not isinstance(lease, bool) and 0 < lease < 0.5:
            message = "must be at least 0.5 s (renewed every third)"
            problems.append(Problem(code="worker", where="lease_seconds", message=message))
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            problems.append(Problem(code="worker", where="name", message="must be non-empty text"))
        if problems:
            raise UsageError("invalid worker settings", problems)


@dataclass(kw_only=True)
class WorkerStats:
    """What a worker did: runs it started, took over (resumed) and ended, by how they ended."""

    claimed: int = 0
    started: int = 0
    resumed: int = 0
    finished: int = 0
    waiting: int = 0
    failed_to_build: int = 0
    lost: int = 0
    """Runs whose lease was taken over (or could not be renewed) while this worker ran them."""
    drained: int = 0
    """Runs left to others when the worker stopped."""


@dataclass(kw_only=True, eq=False)
class _Held:
    claim: Claim
    task: asyncio.Task[None] | None = None
    run: Run | None = None
    agent: Agent | None = None
    let_go: bool = False
    """Detached here (lease lost, store gone, drained): the task must not release the lease."""
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class Worker:
    """Runs runs submitted to ``store`` (see :func:`planexec.runs.submit`), sharing them with every
    other worker on the same database. ``await worker.run()`` until :meth:`drain`."""

    def __init__(
        self, store: RunStore, settings: WorkerSettings | None = None, *, providers: Providers | None = None
    ) -> None:
        self.settings = settings if settings is not None else WorkerSettings()
        self.settings.check()
        queue = store.queue()
        if queue is None:
            problem = Problem(
                code="store",
                where="store",
                message=f"a {type(store).__name__} has no queue: workers share runs through a PostgreSQL store",
            )
            raise UsageError("cannot start the worker", [problem])
        self.queue = queue
        self.store = store
        self.providers = providers
        self.runs = Supervisor(store, providers=providers)
        """The runs in hand, as every host runs them."""
        self.id = self.settings.name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stats = WorkerStats()
        self._held: dict[str, _Held] = {}
        self._draining = asyncio.Event()
        self._freed = asyncio.Event()
        self._failure: WorkerFailed | None = None
        self._failing_since: float | None = None
        self._renewed_at = time.monotonic()
        self._memory: PlanMemory | None = None

    @property
    def in_hand(self) -> list[str]:
        """The runs this worker holds now."""
        return sorted(self._held)

    def drain(self) -> None:
        """Claim nothing more; let runs in hand end within the grace period, then leave the rest."""
        self._draining.set()
        self._freed.set()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> WorkerStats:
        """Claim and run runs until :meth:`drain` (then return what was done) or until the store
        keeps failing (then raise :class:`WorkerFailed`)."""
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"worker-heartbeat:{self.id}")
        try:
            await self._claim_loop()
            if self._failure is None:
                await self._wind_down()
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            if self._failure is not None or self._held:
                await self._let_go_all(release=self._failure is None)
            if self._memory is not None:
                await self._memory.close()
        if self._failure is not None:
            raise self._failure
        return self.stats

    async def _claim_loop(self) -> None:
        s = self.settings
        while not self._draining.is_set() and self._failure is None:
            self._freed.clear()  # before counting: a run that ends from here on wakes the wait below
            free = s.concurrency - len(self._held)
            claimed: list[Claim] = []
            if free > 0:
                try:
                    claimed = await self.queue.claim(self.id, limit=free, lease_seconds=s.lease_seconds)
                except StoreError as e:
                    self._store_failed(e)
                else:
                    self._store_ok()
            for claim in claimed:
                self._take(claim)
            if claimed and len(claimed) < free:
                continue  # there may be more to take right away
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(s.poll_seconds):
                    await self._freed.wait()  # a slot came free, or the worker stops

    def _take(self, claim: Claim) -> None:
        held = _Held(claim=claim)
        self._held[claim.run_id] = held
        self.stats.claimed += 1
        held.task = asyncio.create_task(self._execute(held), name=f"worker-run:{claim.run_id}")

    async def _wind_down(self) -> None:
        """Draining: wait up to the grace period for the runs in hand, then leave the rest."""
        tasks = [h.task for h in self._held.values() if h.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.grace_seconds)
        await self._let_go_all(release=True)

    async def _let_go_all(self, *, release: bool) -> None:
        held = list(self._held.values())
        await asyncio.gather(*(self._let_go(h) for h in held), return_exceptions=True)
        for h in held:
            if h.task is not None and not h.task.done():
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(h.task), 5)
            if release:
                self.stats.drained += 1
                with contextlib.suppress(StoreError):
                    await self.queue.release(h.claim.run_id, owner=self.id, lease=h.claim.lease, state="queued")
            self._held.pop(h.claim.run_id, None)

    async def _let_go(self, held: _Held) -> None:
        """Stop working on a run here without ending it (its log stops where it is)."""
        held.let_go = True
        if held.run is not None:
            await held.run.detach()
        elif held.task is not None and not held.task.done():
            held.task.cancel()

    # -- the store's health ----------------------------------------------------------------------

    def _store_ok(self) -> None:
        self._failing_since = None

    def _store_failed(self, error: StoreError) -> None:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        patience = self.settings.store_patience or self.settings.lease_seconds
        if now - self._failing_since >= patience and self._failure is None:
            self._failure = WorkerFailed(
                f"worker {self.id} stopped: the store failed for {now - self._failing_since:.1f} s "
                f"(store_patience {patience:g} s); its runs are left to other workers. Last error: {error}"
            )
            self._freed.set()

    async def _heartbeat(self) -> None:
        s = self.settings
        every = s.lease_seconds / 3
        while True:
            await asyncio.sleep(every)
            leases = {run_id: h.claim.lease for run_id, h in self._held.items() if not h.let_go}
            if not leases:
                self._renewed_at = time.monotonic()
                continue
            try:
                kept = await self.queue.renew(self.id, leases, lease_seconds=s.lease_seconds)
            except StoreError as e:
                self._store_failed(e)
                if time.monotonic() - self._renewed_at >= 0.8 * s.lease_seconds:
                    # the leases may run out before the store answers again: another worker may
                    # then take these runs over, so this one stops working on them now
                    for held in list(self._held.values()):
                        if not held.let_go:
                            self.stats.lost += 1
                            await self._let_go(held)
                continue
            self._store_ok()
            self._renewed_at = time.monotonic()
            for run_id in leases.keys() - kept:
                lost = self._held.get(run_id)
                if lost is not None and not lost.let_go:
                    self.stats.lost += 1
                    await self._let_go(lost)

    # -- one run --------------------------------------------------------------------------------

    async def _execute(self, held: _Held) -> None:
        claim = held.claim
        state: QueueState | None = None
        note: str | None = None
        try:
            for _attempt in range(3):
                state, note = await self._go_on(held)
                if state is not None or held.let_go:
                    break
        except LogUnreadable as e:  # no worker can read it: not to be taken over again and again
            state, note = "done", f"the log cannot be read: {e}"[:1000]
        except StoreError as e:
            self._store_failed(e)  # the lease runs out and another worker takes the run over
            state = None
        except Exception as e:  # a defect: recorded in the queue, never taken over again and again
            state, note = "done", f"internal error in worker {self.id}: {type(e).__name__}: {e}"[:1000]
        finally:
            if held.agent is not None:
                with contextlib.suppress(Exception):
                    await held.agent.aclose()
        if state is not None and not held.let_go:
            try:
                await self.queue.release(claim.run_id, owner=self.id, lease=claim.lease, state=state, note=note)
            except StoreError as e:
                self._store_failed(e)
        self._held.pop(claim.run_id, None)  # its slot is free (a drain releases what it let go itself)
        self._freed.set()

    async def _go_on(self, held: _Held) -> tuple[QueueState | None, str | None]:
        """Start or resume the run, wait for it; what to leave its queue row as (None: try again,
        the log was written by someone else meanwhile)."""
        claim = held.claim
        log = [s.event for s in await self.store.read(claim.run_id)]
        if claim.claims > self.settings.max_claims and not RunState.fold(log).finished:
            detail = (
                f"the run was claimed {claim.claims} times (max_claims {self.settings.max_claims}): every worker "
                "that took it stopped before it ended"
            )
            return await self._end(claim, log, "internal", detail)
        if log:
            state = RunState.fold(log)
            if state.finished:
                return "done", None
            if still_waiting(state):
                return "waiting", None
            try:
                run = await self.runs.pick_up(claim.run_id, log=log, memory=self._plan_memory())
            except UsageError as e:
                return await self._unbuildable(claim, log, e)
            self.stats.resumed += 1
        else:
            try:
                spec = AgentSpec.from_dict(claim.spec, where="spec")
                agent = build_agent(
                    spec,
                    store=self.store,
                    approvals=Approvals(deferred=True, plan=spec.approve_plan),
                    providers=self.providers,
                )
                if spec.memory:
                    agent.memory = self._plan_memory()
                held.agent = agent
                run = await self.runs.begin(
                    agent,
                    claim.goal,
                    constraints=claim.constraints,
                    run_id=claim.run_id,
                    metadata=spec.metadata(),
                    told=claim.told,
                )
            except UsageError as e:
                return await self._unbuildable(claim, log, e)
            except Exception as e:  # an MCP server that would not start, say
                return await self._unbuildable(claim, log, UsageError(f"{type(e).__name__}: {e}"))
            self.stats.started += 1
        held.run = run
        if held.let_go:
            await run.detach()
            return None, None
        try:
            result = await self.runs.follow(run)
        except UsageError:  # detached: the lease was lost, or the worker stops
            return None, None
        if result.stop.kind == "waiting":
            self.stats.waiting += 1
            return "waiting", None
        if result.stop.code == "log_failed":
            stored = RunState.fold(s.event for s in await self.store.read(claim.run_id))
            if not stored.finished:
                held.run = None
                return None, None  # another writer got in (a lease that ran out): read the log again
        self.stats.finished += 1
        return "done", str(result.stop)

    def _plan_memory(self) -> PlanMemory:
        """The plan memory every run of this worker whose spec asks for one shares: in the store's
        own database, so that all workers share its entries."""
        if self._memory is None:
            self._memory = PlanMemory(self.store)
        return self._memory

    async def _unbuildable(
        self, claim: Claim, log: list[Event], error: UsageError
    ) -> tuple[QueueState | None, str | None]:
        """End a run whose agent cannot be built with a typed stop, so that no worker tries again."""
        self.stats.failed_to_build += 1
        detail = f"the agent cannot be built on worker {self.id}: {error}"
        for p in error.problems:
            detail += f"; {p.where}: {p.message}" if p.where else f"; {p.message}"
        return await self._end(claim, log, "usage", detail)

    async def _end(
        self, claim: Claim, log: list[Event], code: ErrorCode, detail: str
    ) -> tuple[QueueState | None, str | None]:
        """End the run with an ``error`` stop of ``code`` (and its first event, when it has none)."""
        first = None
        if not log:
            spec = claim.spec if isinstance(claim.spec, dict) else {}
            first = RunStarted(
                at=time.time(),
                run_id=claim.run_id,
                goal=claim.goal,
                constraints=claim.constraints,
                policy=str(spec.get("policy", Upfront.name)),
                replan=str(spec.get("replan", "on_failure")),
                budget={},
                config={"agent_spec": dict(spec)},
            )
        if not await self.runs.end(claim.run_id, log, code=code, detail=detail, first=first):
            return None, None  # written meanwhile: look again
        return "done", detail[:1000]
