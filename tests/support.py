"""Helpers for the end-to-end tests: planner step builders, an event filter and small tools."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from planexec import Budget, RetryPolicy, RunResult, Tool, ToolError, tool

E = TypeVar("E")

SAFETY = Budget(wall_time=30)
"""A wall-time budget that only turns a hang into a failed run; nothing measures time with it."""


def events_of(result: RunResult, kind: type[E]) -> list[E]:
    """The events of ``result`` that are of type ``kind``, in log order."""
    return [e for e in result.events if isinstance(e, kind)]


def tool_step(step_id: str, tool_name: str, args: dict[str, Any], *deps: str, **extra: Any) -> dict[str, Any]:
    """A planner's JSON for one tool step that depends on ``deps``; ``extra`` adds or overrides fields."""
    return {
        "id": step_id,
        "description": f"{tool_name} {step_id}",
        "tool": tool_name,
        "args": args,
        "depends_on": deps,
        **extra,
    }


def turn(step: dict[str, Any], thought: str, confidence: float = 0.8) -> dict[str, Any]:
    """A step-by-step planner's JSON for a turn that takes ``step`` and does not stop."""
    return {"thought": thought, "confidence": confidence, "stop": False, "step": step}


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class FailingTool:
    """A tool without arguments that counts its calls and fails each with ``error(message)``, once ``after`` is set."""

    def __init__(
        self,
        message: str = "no",
        *,
        name: str = "fails",
        error: type[ToolError] = ToolError,
        retry: RetryPolicy | None = None,
        after: asyncio.Event | None = None,
    ) -> None:
        self.calls = 0

        @tool(name=name, retry=retry)
        async def fails() -> str:
            """Always fails."""
            self.calls += 1
            if after is not None:
                await after.wait()
            raise error(message)

        self.tool = fails


def failing_tool(message: str = "no", *, name: str = "fails", after: asyncio.Event | None = None) -> Tool:
    """A tool without arguments that always fails with ``message``, once ``after`` is set if one is given."""
    return FailingTool(message, name=name, after=after).tool


def failing_tool_of_n(template: str, *, name: str = "fails") -> Tool:
    """A tool taking an integer ``n`` that always fails with ``template.format(n=n)``."""

    @tool(name=name)
    async def fails(n: int) -> str:
        """Always fails."""
        raise ToolError(template.format(n=n))

    return fails


class Blocker:
    """A tool that waits until released or cancelled, recording its calls, its cancellations and whether it finished."""

    def __init__(self, name: str = "block", *, timeout: float | None = None, retry: RetryPolicy | None = None) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0
        self.cancellations = 0
        self.completed = False

        @tool(name=name, timeout=timeout, retry=retry)
        async def block(label: str = "") -> str:
            """Block until released."""
            self.calls += 1
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancellations += 1
                raise
            self.completed = True
            return label

        self.tool = block

    @property
    def cancelled(self) -> bool:
        """Whether a call was cancelled while it waited."""
        return self.cancellations > 0
