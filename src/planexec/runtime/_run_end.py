"""How a run ends: stopped with a reason (its last events flushed, ``run_finished`` logged, plan
memory told), suspended while only humans can move it on, cancelled, handed off to a workflow, or
as the world says the stretch of it ended outside the loop (a record's wall-time stop or stopped
process). Whatever happens on the way out, the log
is closed, and a log that could not be saved never looks as if the run ended well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any, Protocol

from planexec._util.tasks import abandon
from planexec.errors import BindingError
from planexec.log import (
    Event,
    RunFinished,
    RunStarted,
    RunState,
    RunSuspended,
    StepCancelled,
    StopReason,
)
from planexec.plan import render_text
from planexec.runtime._core import Core
from planexec.runtime._dispatch import Dispatcher
from planexec.runtime._humans import Humans
from planexec.runtime._journal import Journal, JournalFailed
from planexec.runtime._planning import Planning
from planexec.runtime._recall import report_to_memory
from planexec.runtime._stops import Stop, error_stop
from planexec.runtime._trust import Trust

__all__ = ["EndLoop", "EndedOutside", "RunEnd", "Suspend", "handoff_answer"]


class Suspend(Exception):
    """Only humans can move the run on, and it is to be saved and left."""


class EndedOutside(Exception):
    """The world says the rest of this stretch of the run happened outside the loop (a record's
    wall-time stop, cancellation or stopped process): ``rest`` logs it."""

    def __init__(self, rest: Callable[[], None]) -> None:
        self.rest = rest
        super().__init__("the stretch of the run ended outside the loop")


def handoff_answer(output: Any) -> str:
    """A workflow's output as the run's final answer: text as it is, other data as JSON."""
    try:
        return render_text(output)
    except BindingError as e:
        return f"(the workflow's output cannot be shown as text: {e})"


class EndLoop(Core, Protocol):
    """What ending a run sees of the loop, beyond :class:`Core`."""

    goal: str
    constraints: tuple[str, ...]
    events: list[Event]
    journal: Journal | None
    detaching: bool
    dispatcher: Dispatcher
    planning: Planning
    humans: Humans
    trust: Trust
    helpers: set[asyncio.Task[None]]


class RunEnd:
    """Ends the run it is given, once."""

    def __init__(self, engine: EndLoop) -> None:
        self._engine = engine
        self.finished = engine.state.finished
        """Whether the run's ``run_finished`` is logged (or the loop is leaving it as recorded)."""

    def started(self) -> RunStarted:
        """The run's first event."""
        engine = self._engine
        cfg = engine.config
        return RunStarted(
            at=engine.now(),
            run_id=engine.run_id,
            goal=engine.goal,
            constraints=engine.constraints,
            policy=cfg.planner.policy,
            replan=cfg.planner.replan,
            budget=cfg.budget.as_dict(),
            tools=cfg.tools.names,
            config=dict(cfg.metadata),
            trace=engine.telemetry.carrier() if engine.telemetry is not None else {},
        )

    def unstarted(self) -> None:
        """Close the log of a run cancelled before its loop ever ran."""
        engine = self._engine
        if not engine.events:
            engine.emit(self.started())
        self._finish(Stop(StopReason(kind="cancelled", detail="the run was cancelled before it started")))

    def handed_off(self) -> Stop | None:
        """The run's end, when the plan's hand-off to a workflow has succeeded: the workflow's
        output, as text, is the final answer, with no further planner call. With an answer review
        set, the planner writes the answer from the record instead, and it is reviewed as usual."""
        engine = self._engine
        plan = engine.state.plan
        workflows = engine.config.workflows
        if plan is None or not workflows or engine.config.review is not None:
            return None
        for step in reversed(plan.steps):
            rec = engine.state.steps.get(step.id)
            if step.tool in workflows and rec is not None and rec.status == "succeeded":
                detail = f"workflow {step.tool} finished the work (step {step.id})"
                label = rec.output_provenance if engine.trust.on else None
                return Stop(StopReason(kind="goal_met", detail=detail), handoff_answer(rec.output), label)
        return None

    async def stopped(self, stop: Stop) -> RunState:
        """End the run with ``stop``: what is under way cancelled, the log flushed (a log that
        cannot be written ends it ``log_failed``), ``run_finished`` logged, plan memory told."""
        engine = self._engine
        try:
            await self.shutdown(f"run stopped: {stop.reason.kind}")
            if engine.journal is not None and stop.reason.code != "log_failed":
                try:
                    await engine.journal.flush()  # a run whose log is incomplete cannot report success
                except JournalFailed as e:
                    stop = error_stop("log_failed", str(e))
        except asyncio.CancelledError:  # cancelled while ending: it ended as decided, and its log says so
            self._finish(stop)
            await self.close_journal()
            raise
        self._finish(stop)
        await self.close_journal()
        if engine.config.memory is not None and engine.state.finished:
            await report_to_memory(engine.config, engine.run_id, engine.state, engine.events)
        return engine.state

    async def cancelled(self) -> None:
        """The run's task was cancelled: the run ends ``cancelled`` — unless this process is only
        leaving it (``Run.detach``), when the log stops here, as a stopped process's would."""
        if self._engine.detaching:
            await self.shutdown("", log=False)
            await self.close_journal()
            return
        await self.shutdown("run cancelled")
        self._finish(Stop(StopReason(kind="cancelled", detail="the run was cancelled")))
        await self.close_journal()

    async def ended_outside(self, rest: Callable[[], None]) -> RunState:
        """The world says this stretch of the run ended outside the loop: stop what is under way
        without logging it, have ``rest`` log what happened, and leave the run."""
        engine = self._engine
        await self.shutdown("", log=False)
        rest()
        self.finished = engine.state.finished
        await self.close_journal()
        return engine.state

    async def suspend(self) -> RunState:
        """Save the run and leave it: only humans can move it on."""
        engine = self._engine
        questions = tuple(a.approval_id for a in engine.state.pending_approvals)
        suspended = RunSuspended(at=engine.now(), reason="waiting for a human's answer", approvals=questions)
        try:
            await self.shutdown("", log=False)
            if engine.journal is not None:
                await engine.journal.flush()  # the questions must be saved before the process may go
        except JournalFailed as e:
            self._finish(error_stop("log_failed", str(e)))
            await self.close_journal()
            return engine.state
        except asyncio.CancelledError:  # cancelled while suspending: the questions are saved all the same
            engine.emit(replace(suspended, at=engine.now()))
            await self.close_journal()
            raise
        engine.emit(replace(suspended, at=engine.now()))
        await self.close_journal()
        return engine.state

    def _finish(self, stop: Stop) -> None:
        if not self.finished:
            self.finished = True
            label = stop.provenance if stop.answer is not None else None
            self._engine.emit(
                RunFinished(
                    at=self._engine.now(),
                    stop=stop.reason,
                    answer=stop.answer,
                    answer_provenance=label,
                    withheld=stop.withheld,
                )
            )

    async def shutdown(self, reason: str, *, log: bool = True) -> None:
        """Cancel the steps under way (logging each as cancelled for ``reason``) and the planning round."""
        engine = self._engine
        tasks: list[asyncio.Task[None]] = []
        running = engine.dispatcher.running
        for sid, (task, _token) in list(running.items()):
            task.cancel()
            tasks.append(task)
            if log and not self.finished and engine.state.steps[sid].status == "running":
                engine.emit(StepCancelled(at=engine.now(), step_id=sid, reason=reason))
        running.clear()
        planning = engine.planning
        if planning.task is not None:
            planning.task.cancel()
            tasks.append(planning.task)
            planning.task = None
        if tasks:
            await self._settle(tasks)

    async def _settle(self, tasks: Collection[asyncio.Task[None]]) -> None:
        """Wait for cancelled tasks to finish; one that ignores its cancellation is abandoned after
        ``Limits.cancel_grace`` seconds, so that no tool can keep the run from ending."""
        _done, stuck = await asyncio.wait(tasks, timeout=self._engine.config.limits.cancel_grace)
        for task in stuck:
            abandon(task)

    async def close_journal(self) -> None:
        engine = self._engine
        try:
            await engine.humans.close()
            for task in engine.helpers:
                task.cancel()
            if engine.helpers:
                await self._settle(engine.helpers)
                engine.helpers.clear()
        finally:  # cancelled on the way, the log is closed all the same
            await self._close_log()

    async def _close_log(self) -> None:
        engine = self._engine
        if engine.journal is None:
            return
        try:
            await engine.journal.close()
        except JournalFailed as e:
            # The last events could not be saved: the run must not look as if it had ended well.
            last = engine.events[-1] if engine.events else None
            if isinstance(last, RunFinished):
                if last.stop.code != "log_failed":
                    stop = StopReason(kind="error", code="log_failed", detail=str(e))
                    last = engine.events[-1] = replace(last, stop=stop, answer=None)
                    engine.state.stop, engine.state.answer = stop, None
                await engine.journal.close_failed(last)
