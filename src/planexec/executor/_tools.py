"""The tool executor: a step that names a tool is one call, made the one way tools are called."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from planexec.errors import Problem, UsageError
from planexec.executor._base import StepContext, StepFailure
from planexec.executor._outcome import StepError
from planexec.executor._profile import check_profile
from planexec.executor._tool_calls import checked_call
from planexec.plan import Step

__all__ = ["ToolExecutor"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolExecutor:
    """Runs tool steps. Name extra ones (``ToolExecutor(name="sql", max_concurrency=1)``) to give
    a group of steps its own concurrency limit, and a ``description`` and ``capabilities`` to
    tell the planner what they are for."""

    name: str = "tools"
    max_concurrency: int | None = None
    description: str = ""
    capabilities: Sequence[str] = ()

    def __post_init__(self) -> None:
        problems = []
        most = self.max_concurrency
        if most is not None and (type(most) is not int or most < 1):
            problems.append(Problem(code="executor", where="max_concurrency", message="must be a whole number >= 1"))
        description, capabilities, bad = check_profile(self.description, self.capabilities)
        problems += bad
        if problems:
            raise UsageError(f"invalid tool executor {self.name!r}", problems)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "capabilities", capabilities)

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
