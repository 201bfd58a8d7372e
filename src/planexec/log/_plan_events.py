"""The planner's events: rounds of planning, plan versions and their forecasts, remembered plans, and
the tools the plans may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from planexec.errors import Problem
from planexec.log._stop import BudgetName
from planexec.plan import Plan, Step
from planexec.trust import Source

__all__ = [
    "Forecast",
    "PlanForecast",
    "PlanProposed",
    "PlanRecalled",
    "PlanTrigger",
    "PlannerOutputRejected",
    "PlanningStarted",
    "PlanningTrigger",
    "StepStreamed",
    "ToolsChanged",
]


PlanTrigger = Literal["initial", "failure", "after_step", "turn", "human", "information", "review"]


PlanningTrigger = Literal["initial", "failure", "after_step", "turn", "finish", "information", "review"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanningStarted:
    """The planner was asked for a plan, a patch, a turn or the final answer, and why."""

    kind: Literal["planning_started"] = "planning_started"
    at: float
    trigger: PlanningTrigger
    why: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannerOutputRejected:
    """The planner's output was invalid; the problems were sent back for repair."""

    kind: Literal["planner_output_rejected"] = "planner_output_rejected"
    at: float
    attempt: int
    problems: tuple[Problem, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanProposed:
    """A new plan version passed its static checks (and approval, where asked) and is in force."""

    kind: Literal["plan_proposed"] = "plan_proposed"
    at: float
    plan: Plan
    trigger: PlanTrigger = "initial"
    cancelled: tuple[str, ...] = ()
    """In-flight steps this version made obsolete."""
    tainted: tuple[str, ...] = ()
    """The steps of this version a planner wrote after reading untrusted text (in this round or
    an earlier one): the values they hold are untrusted, and so is the call each asks for."""
    read: tuple[Source, ...] = ()
    """The untrusted sources the planning round that made this version read (empty: none)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStreamed:
    """A step of a plan still streaming from the planner passed its checks and may start now."""

    kind: Literal["step_streamed"] = "step_streamed"
    at: float
    step: Step
    plan_version: int
    """The plan version the step will belong to once the whole plan has arrived."""
    tainted: bool = False
    """The planner wrote the step after reading untrusted text."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Forecast:
    """What a plan version is expected to cost from the moment it is proposed to the run's end, as
    ranges (``low``, ``high``): the planner's and the executors' model calls, the tool calls, the
    tokens and the money at the providers' prices. ``unpriced`` names models with no known price
    (their calls count as free); ``basis`` says how the figures were made."""

    planner_calls: tuple[int, int]
    executor_calls: tuple[int, int]
    tool_calls: tuple[int, int]
    input_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    cost: tuple[float, float]
    unpriced: tuple[str, ...] = ()
    basis: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanForecast:
    """A plan version's cost forecast, made before it runs (and before a human is asked about it).
    ``over``: the caps the forecast passes, as far as is left of them (the low end of a range
    passing a cap counts)."""

    kind: Literal["plan_forecast"] = "plan_forecast"
    at: float
    plan_version: int
    forecast: Forecast
    over: tuple[BudgetName, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRecalled:
    """Plan memory offered a remembered plan for the run's goal, before the first plan.

    ``entry_id``: the memory entry; ``goal``: the goal it met; ``similarity``: how alike the two
    goals are (0 to 1); ``mode``: ``direct`` (``steps`` run as the first plan, with no planner
    call, and ``answer``, a template over their outputs, is the final answer when it is set) or
    ``guided`` (the planner is shown ``steps`` as a worked example); ``bindings``: each value of
    the remembered goal replaced by the new goal's; ``why_not_direct``: for guided reuse, why the
    plan could not run as it is. A replay takes the recall from here, never from the memory."""

    kind: Literal["plan_recalled"] = "plan_recalled"
    at: float
    entry_id: str
    goal: str
    similarity: float
    mode: Literal["direct", "guided"]
    steps: tuple[Step, ...]
    answer: str | None = None
    bindings: tuple[tuple[str, str], ...] = ()
    why_not_direct: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolsChanged:
    """The tools the run may use changed, between two planning rounds: ``tools`` are the specs of
    the tools that are new or redefined (as ``run_started`` records its tools in ``config``),
    ``removed`` the names of the tools that are gone. The next plan is checked against the tools
    as they are now; a replay uses the same."""

    kind: Literal["tools_changed"] = "tools_changed"
    at: float
    tools: tuple[dict[str, Any], ...] = ()
    removed: tuple[str, ...] = ()
