"""Executors carry out steps. What they may ask of the run is in :class:`StepContext`."""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from planexec.errors import StepFailure
from planexec.executor._outcome import StepError
from planexec.models import Model, ModelRequest, ModelResponse, ToolCall
from planexec.plan import Step
from planexec.tools import Tool, Toolset

__all__ = ["Executor", "StepContext", "StepFailure"]


class StepContext(Protocol):
    """What the run offers an executor while it carries out one step.

    Every call goes through the run: budgets are checked before it, and an event records it.
    """

    @property
    def run_id(self) -> str: ...

    @property
    def step(self) -> Step: ...

    @property
    def tools(self) -> Toolset: ...

    @property
    def cancel_grace(self) -> float:
        """Seconds cancelled work is given to end before it is abandoned (``Limits.cancel_grace``)."""
        ...

    async def call_tool(self, tool: Tool, args: dict[str, Any], *, call_id: str | None = None) -> Any:
        """Call ``tool`` with validated ``args``: timeout, retries and output check included.

        ``call_id`` None means the step's own call (attempts are recorded on the step); a model
        executor passes the model's call id. Raises :class:`StepFailure` when the call fails.
        """
        ...

    def refuse_tool_call(self, call: ToolCall, error: StepError) -> None:
        """Record a model's tool call that was refused (unknown tool, invalid arguments)."""
        ...

    async def call_model(self, model: Model, request: ModelRequest) -> ModelResponse: ...

    @property
    def confidence(self) -> float | None:
        """The confidence reported with the step's result, if any."""
        ...

    def report_confidence(self, confidence: float) -> None:
        """Report how sure the executor is of its result, 0 to 1 (logged with the result; the
        acceptance rules may require a minimum)."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Carries out the steps routed to it by name.

    ``max_concurrency``: at most that many of its steps run at once (None: only the run's
    ``Limits.max_concurrency``). It may also have ``description`` (text) and ``capabilities``
    (short tags), which the planner is shown; they are optional, checked when an agent is made
    (see :class:`ExecutorProfile`).
    """

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> Literal["tools", "model"]: ...

    @property
    def max_concurrency(self) -> int | None: ...

    async def run(self, step: Step, args: dict[str, Any], ctx: StepContext) -> Any: ...
