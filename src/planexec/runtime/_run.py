"""A Run: one running goal, whose events stream and whose result is awaited."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from planexec.errors import UsageError
from planexec.log import ChecklistResult, EffectChoice, Event, RunFinished, RunResult, RunState, RunSuspended
from planexec.plan import Plan
from planexec.runtime._engine import Engine
from planexec.runtime._settings import ApprovalDecision

__all__ = ["Run"]


class Run:
    """One running goal. ``await run.result()`` for the outcome; ``async for e in run.events()``
    to watch it; ``run.cancel()`` to stop it (the result then says ``cancelled``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._watchers: list[asyncio.Queue[Event | None]] = []
        self._task: asyncio.Task[RunState] = asyncio.create_task(engine.run(), name=f"run:{engine.run_id}")
        self._task.add_done_callback(self._closed)

    def _closed(self, task: asyncio.Task[RunState]) -> None:
        if task.cancelled() and not self._engine.state.finished and not self._engine.detaching:
            self._engine.finish_unstarted()  # cancelled before its loop started

    @property
    def run_id(self) -> str:
        return self._engine.run_id

    @property
    def state(self) -> RunState:
        """The state so far (folded from the events so far)."""
        return self._engine.state

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the run, from the first, live until the run finishes."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        for e in self._engine.events:
            queue.put_nowait(e)
        if self._engine.detaching and self._task.done():
            queue.put_nowait(None)
        self._engine.subscribe(queue.put_nowait)
        self._watchers.append(queue)
        earlier = self._engine.history_length  # a resumed run's log holds earlier suspensions
        try:
            seen = 0
            while True:
                event = await queue.get()
                if event is None:  # detached: no more events in this process
                    return
                seen += 1
                yield event
                if isinstance(event, RunFinished) or (isinstance(event, RunSuspended) and seen > earlier):
                    return
        finally:
            self._engine.unsubscribe(queue.put_nowait)
            self._watchers.remove(queue)

    async def result(self) -> RunResult:
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.done():
                raise  # the caller was cancelled, not the run
        state = self._engine.state
        if self._engine.detaching and not state.finished and state.suspended is None:
            raise UsageError(f"run {self.run_id} was detached from this process unfinished: resume it to go on")
        if self._task.cancelled() and not state.finished:
            self._engine.finish_unstarted()
        return RunResult.from_state(state, self._engine.events)

    def cancel(self) -> None:
        """Cancel the run: its log ends ``cancelled``. Asking again changes nothing: a second
        cancellation landing while the run writes the end of its log could cut that end off."""
        if not self._task.done() and not self._task.cancelling():
            self._task.cancel()

    async def detach(self) -> None:
        """Stop working on the run in this process and leave it unfinished, as a process that
        stops would: steps under way are cancelled without an outcome and nothing more is logged
        (what was logged is saved first). Any process can ``resume`` it later; steps that were
        under way are then handled as after a crash — re-run when that is safe (a read, an
        idempotent call with the same key), otherwise asked about. A finished run is left as it
        is. For a server that shuts down with runs under way, and a restart that picks them up."""
        if self._task.done():
            return
        self._engine.detaching = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for queue in self._watchers:
            queue.put_nowait(None)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError

    def decide(
        self,
        approval_id: str,
        *,
        approved: bool,
        reason: str = "",
        by: str = "human",
        choice: EffectChoice | None = None,
        output: Any = None,
        edited_plan: Plan | None = None,
        text: str | None = None,
        checklist: Sequence[ChecklistResult] = (),
    ) -> None:
        """Answer one of the run's open questions (see ``state.pending_approvals``): approve or
        refuse it, with what its subject needs (see :class:`ApprovalDecision`)."""
        self._engine.decide(
            approval_id,
            ApprovalDecision(
                approved=approved,
                reason=reason,
                by=by,
                choice=choice,
                output=output,
                edited_plan=edited_plan,
                text=text,
                checklist=tuple(checklist),
            ),
        )

    def answer(self, question_id: str, text: str, *, by: str = "user") -> None:
        """Answer the planner's question ``question_id`` with ``text`` (or, for an escalation, give
        ``text`` as guidance). The planner hears it at once and goes on."""
        record = self._engine.state.approvals.get(question_id)
        if record is not None and record.subject == "escalation":
            self.decide(question_id, approved=True, by=by, choice="guidance", text=text)
        elif record is not None and record.subject != "question":
            raise UsageError(
                f"approval {question_id} is about a {record.subject}, not a question: use decide(...) to answer it"
            )
        else:
            self.decide(question_id, approved=True, by=by, text=text)

    def tell(self, text: str, *, constraint: bool = False, by: str = "user") -> None:
        """Tell the running run something new (``constraint=True``: a constraint the plan must meet
        from now on). It is logged at once; the planner replans with it at the next safe point,
        keeping the work already done."""
        self._engine.tell(text, by=by, constraint=constraint)

    @property
    def done(self) -> bool:
        return self._task.done()
