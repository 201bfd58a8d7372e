"""planexec: planner–executor agents with typed plans, parallel steps, checked results and
bounded, fully recorded runs.

The names below are imported on first use (``planexec.Agent`` loads the runtime then), so that
importing ``planexec`` — and starting the ``planexec`` command — stays quick.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planexec._errors import (
        BudgetExhausted,
        Escalated,
        LogUnreadable,
        MaxReplans,
        ModelNotFound,
        PlanexecError,
        PlanInvalid,
        Problem,
        Rejected,
        RunCancelled,
        RunFailed,
        Stalled,
        StoreError,
        ToolDefinitionError,
        ToolError,
        TransientToolError,
        UnexpectedModelCall,
        UnknownToolError,
        UnrecoverableError,
        UsageError,
    )
    from planexec.executor import Acceptance, ModelExecutor, StepError, ToolExecutor, Verdict
    from planexec.models import (
        FunctionModel,
        Message,
        Model,
        ModelRequest,
        ModelResponse,
        ModelSettings,
        ScriptedModel,
        ToolCall,
        Usage,
        resolve_model,
        tool_calls,
    )
    from planexec.plan import Plan, Step, plan_json_schema
    from planexec.planner import Planner
    from planexec.runtime import (
        Agent,
        AnswerReview,
        ApprovalDecision,
        ApprovalRequest,
        Approvals,
        Budget,
        ChecklistResult,
        Escalation,
        Event,
        Limits,
        Run,
        RunContext,
        RunResult,
        RunState,
        StepRecord,
        StopReason,
    )
    from planexec.tools import RetryPolicy, Tool, ToolContext, Toolset, tool

__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "BudgetExhausted": "planexec._errors",
    "Escalated": "planexec._errors",
    "LogUnreadable": "planexec._errors",
    "MaxReplans": "planexec._errors",
    "ModelNotFound": "planexec._errors",
    "PlanexecError": "planexec._errors",
    "PlanInvalid": "planexec._errors",
    "Problem": "planexec._errors",
    "Rejected": "planexec._errors",
    "RunCancelled": "planexec._errors",
    "RunFailed": "planexec._errors",
    "Stalled": "planexec._errors",
    "StoreError": "planexec._errors",
    "ToolDefinitionError": "planexec._errors",
    "ToolError": "planexec._errors",
    "TransientToolError": "planexec._errors",
    "UnexpectedModelCall": "planexec._errors",
    "UnknownToolError": "planexec._errors",
    "UnrecoverableError": "planexec._errors",
    "UsageError": "planexec._errors",
    "Acceptance": "planexec.executor",
    "ModelExecutor": "planexec.executor",
    "StepError": "planexec.executor",
    "ToolExecutor": "planexec.executor",
    "Verdict": "planexec.executor",
    "FunctionModel": "planexec.models",
    "Message": "planexec.models",
    "Model": "planexec.models",
    "ModelRequest": "planexec.models",
    "ModelResponse": "planexec.models",
    "ModelSettings": "planexec.models",
    "ScriptedModel": "planexec.models",
    "ToolCall": "planexec.models",
    "Usage": "planexec.models",
    "resolve_model": "planexec.models",
    "tool_calls": "planexec.models",
    "Plan": "planexec.plan",
    "Step": "planexec.plan",
    "plan_json_schema": "planexec.plan",
    "Planner": "planexec.planner",
    "Agent": "planexec.runtime",
    "AnswerReview": "planexec.runtime",
    "ChecklistResult": "planexec.runtime",
    "Escalation": "planexec.runtime",
    "ApprovalDecision": "planexec.runtime",
    "ApprovalRequest": "planexec.runtime",
    "Approvals": "planexec.runtime",
    "Budget": "planexec.runtime",
    "Event": "planexec.runtime",
    "Limits": "planexec.runtime",
    "Run": "planexec.runtime",
    "RunContext": "planexec.runtime",
    "RunResult": "planexec.runtime",
    "RunState": "planexec.runtime",
    "StepRecord": "planexec.runtime",
    "StopReason": "planexec.runtime",
    "RetryPolicy": "planexec.tools",
    "Tool": "planexec.tools",
    "ToolContext": "planexec.tools",
    "Toolset": "planexec.tools",
    "tool": "planexec.tools",
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
    "BudgetExhausted",
    "ChecklistResult",
    "Escalated",
    "Escalation",
    "Event",
    "FunctionModel",
    "Limits",
    "LogUnreadable",
    "MaxReplans",
    "Message",
    "Model",
    "ModelExecutor",
    "ModelNotFound",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "Plan",
    "PlanInvalid",
    "PlanexecError",
    "Planner",
    "Problem",
    "Rejected",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunContext",
    "RunFailed",
    "RunResult",
    "RunState",
    "ScriptedModel",
    "Stalled",
    "Step",
    "StepError",
    "StepRecord",
    "StopReason",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolExecutor",
    "Toolset",
    "TransientToolError",
    "UnexpectedModelCall",
    "UnknownToolError",
    "UnrecoverableError",
    "Usage",
    "UsageError",
    "Verdict",
    "__version__",
    "plan_json_schema",
    "resolve_model",
    "tool",
    "tool_calls",
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
