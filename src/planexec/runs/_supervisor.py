"""The life of runs in one process, over one store: every program that hosts runs — the command
line, the HTTP server, the workers and the MCP host — starts, picks up, follows, cancels, detaches
and ends them here, and keeps only what is its own (arguments, HTTP, leases, MCP framing).

A run is *in hand* from the moment it is launched until its task ends: ``busy`` says so, ``live``
gives the :class:`~planexec.runtime.Run` once it has begun. Runs wait for a free slot when the
supervisor has a limit; a run cancelled while it waits begins only to be recorded as cancelled.
Nothing else outside the run loop appends a run's events: a run that cannot begin is ended with a
typed stop by :meth:`Supervisor.end`, and one that waits for a human is cancelled in the store by
:meth:`Supervisor.cancel`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.log import (
    ErrorCode,
    Event,
    RunFinished,
    RunResult,
    RunStarted,
    RunState,
    StepFailed,
    StepSucceeded,
    StopReason,
)
from planexec.memory import PlanMemory
from planexec.models import Providers
from planexec.runs._build import build_agent
from planexec.runs._spec import AgentSpec, recorded_spec
from planexec.runs._stored import load_run
from planexec.runtime import Agent, Approvals, Budget, Run
from planexec.store import AppendConflict, RunStore, Told

__all__ = ["Begin", "Progress", "Supervisor", "owning", "rebuilt_for"]

Begin = Callable[[], Awaitable[Run]]
"""What begins a launched run once it has a slot: starts, resumes or replays it."""

Progress = Callable[[float, float | None, str], Awaitable[None]]
"""Told ``(steps finished, steps in the current plan, message)`` each time a step finishes."""

CANCEL_WAIT = 10.0
"""Seconds :meth:`Supervisor.cancel` waits for a run in hand to record that it was cancelled."""
CANCEL_TRIES = 5
"""Times a cancellation in the store is tried again when the run's log changes meanwhile."""


@dataclass(eq=False, kw_only=True)
class _InHand:
    run_id: str
    task: asyncio.Task[None] | None = None
    run: Run | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)


def _refused(run_id: str, code: str, message: str) -> UsageError:
    return UsageError(f"cannot cancel run {run_id!r}", [Problem(code=code, where="run_id", message=message)])


class Supervisor:
    """The runs this process hosts, over ``store``; at most ``slots`` under way at once (None: no
    limit). ``providers`` resolve, charge and limit the models of agents rebuilt from a run's spec.
    Without a store, runs are begun and followed only (their agents keep no log to go back to)."""

    def __init__(self, store: RunStore | None, *, slots: int | None = None, providers: Providers | None = None) -> None:
        self._store = store
        self.providers = providers
        self._slots = asyncio.Semaphore(slots) if slots is not None else None
        self._in_hand: dict[str, _InHand] = {}

    @property
    def store(self) -> RunStore:
        """The store the runs are logged in."""
        if self._store is None:
            raise UsageError("these runs keep no log: give the supervisor a store to go back to them")
        return self._store

    # -- what is in hand ----------------------------------------------------------------------------

    def busy(self, run_id: str) -> bool:
        """Whether this process runs ``run_id`` now, or is about to."""
        return run_id in self._in_hand

    def live(self, run_id: str) -> Run | None:
        """The run ``run_id`` under way here, once it has begun."""
        held = self._in_hand.get(run_id)
        return held.run if held is not None else None

    @property
    def in_hand(self) -> list[str]:
        """The runs in hand, begun or not."""
        return sorted(self._in_hand)

    async def settle(self, run_id: str, wait: float) -> None:
        """Wait (``wait`` seconds at most) for this process's part in ``run_id`` to end."""
        held = self._in_hand.get(run_id)
        if held is not None and held.task is not None:
            await asyncio.wait({held.task}, timeout=wait)

    # -- beginning ----------------------------------------------------------------------------------

    async def begin(
        self,
        agent: Agent,
        goal: str,
        *,
        constraints: Sequence[str] = (),
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        told: Iterable[Told] = (),
        session: str | None = None,
        session_budget: Budget | None = None,
    ) -> Run:
        """Open ``agent`` (its MCP servers) and start ``goal`` with it — as the next turn of
        ``session`` when given — telling it what it was ``told`` before it began. The agent is not
        closed here: whoever built it closes it (:meth:`owning` closes it when the run ends)."""
        await agent.open()
        if session is not None:
            turns = await agent.open_session(session, budget=session_budget)
            if turns.unfinished is not None:
                raise UsageError(
                    f"session {session}: its last turn, run {turns.unfinished}, is unfinished: "
                    f"`planexec resume {turns.unfinished}` goes on with it"
                )
            run = turns.start(goal, constraints=constraints, metadata=metadata)
        else:
            run = agent.start(goal, constraints=constraints, run_id=run_id, metadata=metadata)
        for each in told:  # logged right after its first event
            run.tell(each.text, constraint=each.constraint, by=each.by)
        return run

    async def pick_up(
        self,
        run_id: str,
        *,
        log: list[Event] | None = None,
        agent: Agent | None = None,
        approvals: Approvals | None = None,
        change: Callable[[AgentSpec], AgentSpec] | None = None,
        memory: PlanMemory | None = None,
    ) -> Run:
        """Go on with stored run ``run_id``: with ``agent`` when given, else with the agent rebuilt
        from the spec the run recorded (see :func:`rebuilt_for`; closed when the run ends or is
        suspended). Raises :class:`~planexec.UsageError` listing every problem."""
        if agent is not None:
            return await agent.resume(run_id)
        events = log if log is not None else await load_run(self.store, run_id)
        built = await rebuilt_for(
            self.store, events, approvals=approvals, change=change, providers=self.providers, memory=memory
        )
        try:
            run = await built.resume(run_id)
        except BaseException:
            await built.aclose()
            raise
        owning(run, built)
        return run

    # -- hosting in the background ------------------------------------------------------------------

    def launch(
        self,
        run_id: str,
        begin: Begin,
        *,
        on_event: Callable[[int], None] | None = None,
        on_failed: Callable[[Exception], None] | None = None,
        closing: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Host ``run_id`` in a task: once a slot is free, ``begin`` it and follow it to its end
        (``on_event`` is told the count of events seen so far as each arrives). ``on_failed`` hears
        why it could not begin (an MCP server that would not start, say); ``closing`` runs when the
        run's task ends, whatever happened."""
        held = self._in_hand.setdefault(run_id, _InHand(run_id=run_id))
        held.task = asyncio.create_task(
            self._host(held, begin, on_event, on_failed, closing), name=f"supervised:{run_id}"
        )

    def launch_quiet(self, run_id: str, work: Callable[[], Awaitable[None]]) -> None:
        """Host work that writes a run's log itself (a fork replaying into a new run) in a slot."""
        held = self._in_hand.setdefault(run_id, _InHand(run_id=run_id))

        async def quiet() -> None:
            try:
                async with self._slot(held):
                    with contextlib.suppress(Exception):  # the run's own log says how it ended
                        await work()
            finally:
                self._in_hand.pop(run_id, None)

        held.task = asyncio.create_task(quiet(), name=f"supervised:{run_id}")

    async def _host(
        self,
        held: _InHand,
        begin: Begin,
        on_event: Callable[[int], None] | None,
        on_failed: Callable[[Exception], None] | None,
        closing: Callable[[], Awaitable[None]] | None,
    ) -> None:
        try:
            async with self._slot(held):
                try:
                    run = await begin()
                except Exception as e:  # the run never began
                    if on_failed is not None:
                        on_failed(e)
                    return
                held.run = run
                if held.cancel.is_set():
                    run.cancel()
                await _follow_quietly(run, on_event)
        finally:
            self._in_hand.pop(held.run_id, None)
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()

    @contextlib.asynccontextmanager
    async def _slot(self, held: _InHand) -> AsyncIterator[None]:
        """A slot for the run; none for a run cancelled while it waits for one, which then begins
        at once only to be recorded as cancelled (no one waits for a slot to cancel it)."""
        if self._slots is None:
            yield
            return
        acquire = asyncio.ensure_future(self._slots.acquire())
        cancelled = asyncio.ensure_future(held.cancel.wait())
        try:
            await asyncio.wait({acquire, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
            acquire.cancel()
            await asyncio.gather(acquire, cancelled, return_exceptions=True)
        got = not acquire.cancelled() and acquire.exception() is None
        try:
            yield
        finally:
            if got:
                self._slots.release()

    # -- following ----------------------------------------------------------------------------------

    async def follow(self, run: Run, *, since: int = 0, progress: Progress | None = None) -> RunResult:
        """Follow ``run`` in hand until it ends or is suspended, telling ``progress`` as each step
        after event ``since`` finishes; when the caller is cancelled, the run is cancelled with it
        (and given a moment to record that)."""
        mine = run.run_id not in self._in_hand
        if mine:
            self._in_hand[run.run_id] = _InHand(run_id=run.run_id, run=run)
        try:
            await _watch(run, since=since, progress=progress)
            return await run.result()
        except BaseException:
            run.cancel()
            await _settle(run)
            raise
        finally:
            if mine:
                self._in_hand.pop(run.run_id, None)

    # -- stopping -----------------------------------------------------------------------------------

    async def cancel(self, run_id: str) -> None:
        """Cancel ``run_id``: one in hand here stops (its log says ``cancelled``); one that waits
        for a human is finished as cancelled in the store. Raises :class:`~planexec.UsageError`
        (code ``finished``, ``elsewhere`` or ``busy``) when neither can be done."""
        held = self._in_hand.get(run_id)
        if held is not None:
            held.cancel.set()
            if held.run is not None:
                held.run.cancel()
            if held.task is not None:
                await asyncio.wait({held.task}, timeout=CANCEL_WAIT)
            return
        for _ in range(CANCEL_TRIES):
            log = await load_run(self.store, run_id)
            state = RunState.fold(log)
            if state.finished:
                raise _refused(run_id, "finished", f"it has finished already ({state.stop})")
            if state.status != "waiting":
                message = "it is running in another process: cancel it there (or resume it here first)"
                raise _refused(run_id, "elsewhere", message)
            stop = StopReason(kind="cancelled", detail="cancelled while waiting for a human")
            if await self._append_end(run_id, [RunFinished(at=time.time(), stop=stop)], len(log)):
                return
        raise _refused(run_id, "busy", "its log kept changing while it was written")

    async def end(
        self, run_id: str, log: Sequence[Event], *, code: ErrorCode, detail: str, first: RunStarted | None = None
    ) -> bool:
        """End a run that cannot go on (its agent cannot be built, every host that took it died)
        with an ``error`` stop of ``code``, after ``first`` when its log is empty. False when its
        log changed meanwhile (read it again)."""
        events: list[Event] = [first] if first is not None and not log else []
        events.append(RunFinished(at=time.time(), stop=StopReason(kind="error", code=code, detail=detail[:4000])))
        return await self._append_end(run_id, events, len(log))

    async def _append_end(self, run_id: str, events: list[Event], after: int) -> bool:
        try:
            await self.store.append(run_id, events, expected_seq=after)
        except AppendConflict:
            return False
        return True

    async def detach(self, run_id: str) -> None:
        """Stop working on ``run_id`` here and leave it unfinished (a run not begun yet never begins)."""
        held = self._in_hand.get(run_id)
        if held is None:
            return
        if held.run is not None:
            await held.run.detach()
        elif held.task is not None and not held.task.done():
            held.task.cancel()

    async def close(self, *, only: Iterable[str] | None = None, wait: float = CANCEL_WAIT) -> None:
        """Leave every run in hand (or those of ``only``) unfinished — detached, not cancelled: a
        cancelled run would be recorded as finished — for another start to pick up; runs not begun
        never begin. Waits ``wait`` seconds at most for their tasks to end."""
        chosen = set(self._in_hand) if only is None else set(only)
        held = [h for run_id, h in list(self._in_hand.items()) if run_id in chosen]
        await asyncio.gather(*(self.detach(h.run_id) for h in held), return_exceptions=True)
        tasks = [h.task for h in held if h.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=wait)


async def _follow_quietly(run: Run, on_event: Callable[[int], None] | None) -> None:
    seen = 0
    async for _event in run.events():
        seen += 1
        if on_event is not None:
            on_event(seen)
    with contextlib.suppress(UsageError):  # detached: left unfinished
        await run.result()


async def _watch(run: Run, *, since: int, progress: Progress | None) -> None:
    """Tell ``progress`` each time a step finishes, until the run ends or is suspended."""
    finished = sum(1 for rec in run.state.steps.values() if rec.status in ("succeeded", "failed"))
    seen = 0
    async for event in run.events():
        seen += 1
        if seen <= since or progress is None or not isinstance(event, StepSucceeded | StepFailed):
            continue
        finished += 1
        plan = run.state.plan
        total = max(len(plan.steps) if plan is not None else 0, finished)
        verb = "finished" if isinstance(event, StepSucceeded) else "failed"
        try:
            await progress(finished, total, f"step {event.step_id} {verb}")
        except Exception:  # whoever watched went away: the run goes on, unwatched
            progress = None


async def _settle(run: Run) -> None:
    """Give a cancelled run a moment to record its end, whatever cancelled the caller."""
    import anyio

    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT), contextlib.suppress(Exception):
        await run.result()  # a detached run has no result here


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
