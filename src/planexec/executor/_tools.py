"""The tool executor: a step that names a tool is one call, made the one way tools are called."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from planexec.executor._base import StepContext, StepFailure
from planexec.executor._outcome import StepError
from planexec.executor._tool_calls import checked_call
from planexec.plan import Step

__all__ = ["ToolExecutor"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolExecutor:
    """Runs tool steps. Name extra ones (``ToolExecutor(name="sql", max_concurrency=1)``) to give
    a group of steps its own concurrency limit."""

    name: str = "tools"
    max_concurrency: int | None = None

    @property
    def kind(self) -> Literal["tools"]:
        return "tools"

    async def run(self, step: Step, args: dict[str, Any], ctx: StepContext) -> Any:
        if step.tool is None:
            raise StepFailure(StepError(kind="unknown_tool", message="the step names no tool"))
        checked = checked_call(ctx.tools, step.tool, args)
        if isinstance(checked, StepError):
            raise StepFailure(checked)
        tool, validated = checked
        return await ctx.call_tool(tool, validated)
