"""Dispatch: which ready steps start now, and the count of what is under way.

A step starts when the run's concurrency, its tool's and its executor's limits let it, no planning
round holds it (see :mod:`planexec.runtime._planning`) and the step and tool-call budgets allow
it, counting every step committed to but not in the log yet, so that steps started together cannot
overrun a cap together. When a budget refuses a ready step, no more steps start (``blocked``): the
run stops once the steps under way have finished, or a human is asked to raise the cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from planexec.executor import Executor
from planexec.plan import Step
from planexec.runtime._budget import BudgetHit
from planexec.runtime._core import Core
from planexec.runtime._scheduler import ReadyQueue
from planexec.tools import Tool

__all__ = ["DispatchLoop", "Dispatcher", "RunStep"]


RunStep = Callable[[Step, Executor, int, str | None], Coroutine[Any, Any, None]]
"""Carries out a step (or settles a held one) and reports to the loop: ``(step, executor, token, held)``."""


class DispatchLoop(Core, Protocol):
    """What dispatch sees of the loop, beyond :class:`Core`."""

    ready: ReadyQueue

    def clock(self) -> float: ...

    def held_by_planning(self, step: Step) -> bool: ...


class Dispatcher:
    """Starts ready steps within the limits, and counts the steps and tool calls under way."""

    def __init__(self, engine: DispatchLoop, run_step: RunStep) -> None:
        self._engine = engine
        self._run_step = run_step
        self.running: dict[str, tuple[asyncio.Task[None], int]] = {}
        """The tasks of the steps under way, with the token of each one's current attempt."""
        self._tokens: dict[str, int] = {}
        self._per_tool: dict[str, int] = {}
        self._per_executor: dict[str, int] = {}
        self._inner_limits: dict[str, asyncio.Semaphore] = {}
        # Committed to but not in the log yet: counted against the budgets so that work started
        # together cannot overrun a cap together.
        self._unstarted = 0
        self._unstarted_tool_calls = 0
        self._inner_tool_calls_in_flight = 0
        self.blocked: BudgetHit | None = None
        """A step or tool-call cap that refused a ready step: no more steps start, and the run stops
        once the steps already under way have finished (or a human is asked to raise the cap)."""

    def dispatch(self) -> None:
        """Start the ready steps the limits let start now."""
        engine = self._engine
        room = engine.config.limits.max_concurrency - len(self.running)
        if room <= 0 or not engine.ready.has_ready or self.blocked is not None:
            return
        for step in engine.ready.pop(self._reserve, room):
            self.start_step(step)

    def start_step(self, step: Step, *, held: str | None = None) -> None:
        """Run ``step`` as a task (``held``: settle a step held for a human under that question)."""
        token = self._tokens.get(step.id, 0) + 1
        self._tokens[step.id] = token
        if held is not None:
            self._count(step, +1)  # dispatched steps were counted when reserved
        coro = self._run_step(step, self.executor_of(step), token, held)
        self.running[step.id] = (asyncio.create_task(coro, name=f"step:{step.id}"), token)

    def _reserve(self, step: Step) -> bool:
        """Whether the limits let ``step`` start now; if so, count it against them at once.

        A step that may change things outside the run waits while the plan is being replaced
        (``Planning.holds``). When the step or its tool call would go over a budget, no more steps
        start from then on.
        """
        engine = self._engine
        if engine.held_by_planning(step) or not self._has_room(step):
            return False
        if self.blocked is not None:
            return False
        budget = engine.budget
        try:
            budget.check_step(engine.state, in_flight=self._unstarted)
            if step.tool is not None:
                budget.check_tool_call(engine.state, engine.now(), in_flight=self._unstarted_tool_calls)
        except BudgetHit as hit:
            self.blocked = hit  # the steps allowed still start; the run stops once they finish
            return False
        if step.tool is not None:
            self._unstarted_tool_calls += 1
        self._unstarted += 1
        self._count(step, +1)
        return True

    def _has_room(self, step: Step) -> bool:
        """Whether ``step``'s tool and executor take one more call now (their ``max_concurrency``)."""
        tools = self._engine.config.tools
        if step.tool is not None and step.tool in tools:
            cap = tools.get(step.tool).max_concurrency
            if cap is not None and self._per_tool.get(step.tool, 0) >= cap:
                return False
        executor = self.executor_of(step)
        cap = executor.max_concurrency
        return cap is None or self._per_executor.get(executor.name, 0) < cap

    def _count(self, step: Step, delta: int) -> None:
        if step.tool is not None:
            self._per_tool[step.tool] = self._per_tool.get(step.tool, 0) + delta
        name = self.executor_of(step).name
        self._per_executor[name] = self._per_executor.get(name, 0) + delta

    def executor_of(self, step: Step) -> Executor:
        config = self._engine.config
        name = step.executor or ("tools" if step.tool is not None else config.default_executor)
        return config.executors[name or "tools"]

    def is_current(self, step_id: str, token: int) -> bool:
        """Whether ``token`` is the attempt of ``step_id`` under way (not a cancelled or superseded one)."""
        current = self.running.get(step_id)
        return current is not None and current[1] == token

    def release(self, step_id: str) -> None:
        """``step_id`` is no longer under way."""
        self.running.pop(step_id, None)
        self._count(self._engine.state.steps[step_id].step, -1)

    def cancel_step(self, step_id: str) -> None:
        task, _ = self.running[step_id]
        task.cancel()
        self.release(step_id)

    def unreserve(self, step: Step) -> None:
        """``step`` started (or will not): it is no longer counted as committed to."""
        self._unstarted -= 1
        if step.tool is not None:
            self._unstarted_tool_calls -= 1

    def check_inner_tool_call(self) -> None:
        """A model step's tool call is about to be attempted: check it against the tool-call budget,
        with every call committed to or under way, and count it as under way."""
        engine = self._engine
        in_flight = self._unstarted_tool_calls + self._inner_tool_calls_in_flight
        engine.budget.check_tool_call(engine.state, engine.clock(), in_flight=in_flight)
        self._inner_tool_calls_in_flight += 1

    def inner_tool_calls_ended(self, count: int) -> None:
        self._inner_tool_calls_in_flight -= count

    def inner_limit(self, tool: Tool) -> asyncio.Semaphore | None:
        """The limit a tool's calls from model steps share (``Tool.max_concurrency``), if any."""
        if tool.max_concurrency is None:
            return None
        return self._inner_limits.setdefault(tool.name, asyncio.Semaphore(tool.max_concurrency))
