"""What the run gives the planner for one planning round, and the checks a round's answer meets."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planexec._util.values import replaced
from planexec.errors import Problem
from planexec.models import Model, ModelRequest, ModelResponse
from planexec.plan import CheckContext, Step, changes_world
from planexec.planner._prompt import describe_record
from planexec.tools import Toolset

if TYPE_CHECKING:
    from planexec.log import RunState

__all__ = ["PlanningContext", "with_finished"]


@dataclass(frozen=True, kw_only=True)
class PlanningContext:
    """What the run gives the planner for one planning round."""

    goal: str
    constraints: tuple[str, ...]
    state: RunState
    tools: Toolset
    executors: Mapping[str, str]
    checks: CheckContext
    """What plans are checked against; steps that have finished by the time an answer is checked
    are added to it then (``current_checks``)."""
    step_budget: int | None = None
    """The run's step cap, if any."""
    budget_left: Mapping[str, Any]
    call: Callable[[Model, ModelRequest], Awaitable[ModelResponse]]
    rejected: Callable[[int, list[Problem]], None]
    record: str | None = None
    """The execution record as text, when taken at the start of the round (else read from ``state``)."""
    call_stream: Callable[[Model, ModelRequest, Callable[[str], None]], Awaitable[ModelResponse]] | None = None
    """Call a streaming model, passing each piece of text on as it arrives."""
    on_step: Callable[[Step], None] | None = None
    """Receives each step of a streaming answer the moment it is complete (streaming dispatch)."""
    escalate: Callable[[str, str], Awaitable[str | None]] | None = None
    """Ask a human about an output that cannot be acted on (reason code, detail): returns guidance
    text, or None to let the planner try again; raises :class:`PlannerEscalated` to stop. None:
    nobody can be asked."""
    ask_user: Callable[[str], Awaitable[str]] | None = None
    """Ask the user a clarifying question and wait for the answer. None: nobody can be asked."""
    confidence_floor: float | None = None
    low_confidence_stops: bool = False
    """Under ``confidence_floor``: stop at once rather than ask a human."""
    empty_plan_ok: bool = False
    """Whether a plan with no steps (or a stop before any step) may end the run: only when some
    work has been done, or the final answer passes a review."""
    new_step_id: Callable[[], str] | None = None
    """The id of the next step of a flat turn."""
    heard: str | None = None
    """What people told the run (information, answers, guidance, refused answers), as text."""
    conversation: str | None = None
    """For a session's turn: the record of the turns before it (fixed for the run)."""
    example: str | None = None
    """A remembered plan for a similar goal, shown as a worked example (plan memory's guided reuse)."""
    plan_problems: Callable[[Sequence[Step]], list[Problem]] | None = None
    """The run's own checks of a plan that passed its static checks (its cost forecast against the
    budget): problems the planner repairs like any other."""

    def current_checks(self) -> CheckContext:
        """The check context as of now: the steps finished so far, and the steps the budget still allows."""
        left = None if self.step_budget is None else self.step_budget - self.state.steps_started
        return with_finished(self.checks, self.state, left)

    def record_text(self, limit: int, window: int | None = None) -> str:
        return self.record if self.record is not None else describe_record(self.state, limit, window)


def with_finished(checks: CheckContext, state: RunState, max_steps: int | None) -> CheckContext:
    """The check context for a planning round: finished steps known, running steps that cannot be
    stopped kept, the step budget applied."""
    finished = {sid: rec.step for sid, rec in state.steps.items() if rec.status == "succeeded"}
    running = {
        sid: rec.step
        for sid, rec in state.steps.items()
        if rec.status == "running" and changes_world(rec.step, checks.tools)
    }
    return replaced(checks, finished=tuple(finished), finished_steps=finished, running=running, max_steps=max_steps)
