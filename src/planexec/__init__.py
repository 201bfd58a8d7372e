"""planexec: planner–executor agents with typed plans, parallel steps, checked results and
bounded, fully recorded runs.

The names here are the everyday API. The rest lives in the packages that own it:
:mod:`planexec.errors` (every error), :mod:`planexec.testing` (scripted test models),
:mod:`planexec.models`, :mod:`planexec.tools`, :mod:`planexec.plan`, :mod:`planexec.log` (events,
state, results), :mod:`planexec.trust` (trust labels and the rules on effects), :mod:`planexec.store`,
:mod:`planexec.faults` and :mod:`planexec.eval`.

The names below are imported on first use (``planexec.Agent`` loads the runtime then), so that
importing ``planexec`` — and starting the ``planexec`` command — stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planexec.errors import PlanexecError, Problem, RunFailed, ToolError, TransientToolError, UsageError
    from planexec.executor import Acceptance, ModelExecutor, ToolExecutor
    from planexec.log import Event, RunResult, StopReason
    from planexec.models import Model, ModelSettings
    from planexec.plan import Plan, Step
    from planexec.planner import Planner
    from planexec.runtime import (
        Agent,
        AnswerReview,
        ApprovalDecision,
        ApprovalRequest,
        Approvals,
        Budget,
        Escalation,
        Limits,
        Run,
        RunContext,
    )
    from planexec.tools import RetryPolicy, Tool, ToolContext, Toolset, Workflow, tool, workflow
    from planexec.trust import TrustPolicy

__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "PlanexecError": "planexec.errors",
    "UsageError": "planexec.errors",
    "RunFailed": "planexec.errors",
    "ToolError": "planexec.errors",
    "TransientToolError": "planexec.errors",
    "Problem": "planexec.errors",
    "Model": "planexec.models",
    "ModelSettings": "planexec.models",
    "Acceptance": "planexec.executor",
    "ModelExecutor": "planexec.executor",
    "ToolExecutor": "planexec.executor",
    "Plan": "planexec.plan",
    "Step": "planexec.plan",
    "Planner": "planexec.planner",
    "Agent": "planexec.runtime",
    "AnswerReview": "planexec.runtime",
    "ApprovalDecision": "planexec.runtime",
    "ApprovalRequest": "planexec.runtime",
    "Approvals": "planexec.runtime",
    "Budget": "planexec.runtime",
    "Escalation": "planexec.runtime",
    "Limits": "planexec.runtime",
    "Run": "planexec.runtime",
    "RunContext": "planexec.runtime",
    "RunResult": "planexec.log",
    "StopReason": "planexec.log",
    "Event": "planexec.log",
    "RetryPolicy": "planexec.tools",
    "Tool": "planexec.tools",
    "ToolContext": "planexec.tools",
    "Toolset": "planexec.tools",
    "tool": "planexec.tools",
    "Workflow": "planexec.tools",
    "workflow": "planexec.tools",
    "TrustPolicy": "planexec.trust",
}
"""Where each public name lives; ``__getattr__`` imports it from there when first asked for."""

__all__ = [
    "Acceptance",
    "Agent",
    "AnswerReview",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "Budget",
    "Escalation",
    "Event",
    "Limits",
    "Model",
    "ModelExecutor",
    "ModelSettings",
    "Plan",
    "PlanexecError",
    "Planner",
    "Problem",
    "RetryPolicy",
    "Run",
    "RunContext",
    "RunFailed",
    "RunResult",
    "Step",
    "StopReason",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolExecutor",
    "Toolset",
    "TransientToolError",
    "TrustPolicy",
    "UsageError",
    "Workflow",
    "__version__",
    "tool",
    "workflow",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
