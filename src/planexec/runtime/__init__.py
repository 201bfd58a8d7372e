"""The runtime: agents, runs, events, state, budgets and stop reasons."""

from planexec.runtime._agent import Agent, Run
from planexec.runtime._budget import Budget
from planexec.runtime._events import (
    EVENT_SCHEMA_VERSION,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    ModelCalled,
    PlannerOutputRejected,
    PlanProposed,
    RunFinished,
    RunStarted,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepStarted,
    StepSucceeded,
    ToolCalled,
    dump_event,
    load_event,
)
from planexec.runtime._result import RunResult
from planexec.runtime._settings import ApprovalDecision, ApprovalRequest, Approvals, Approver, Limits, RunContext
from planexec.runtime._state import ApprovalRecord, RunState, StepRecord, StepStatus
from planexec.runtime._stop import BudgetName, StopKind, StopReason

__all__ = [
    "EVENT_SCHEMA_VERSION",
    "Agent",
    "ApprovalDecided",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalRequest",
    "ApprovalRequested",
    "Approvals",
    "Approver",
    "Budget",
    "BudgetExhaustedEvent",
    "BudgetName",
    "Event",
    "Limits",
    "ModelCalled",
    "PlanProposed",
    "PlannerOutputRejected",
    "Run",
    "RunContext",
    "RunFinished",
    "RunResult",
    "RunStarted",
    "RunState",
    "StallDetected",
    "StepAttemptFailed",
    "StepCancelled",
    "StepFailed",
    "StepRecord",
    "StepStarted",
    "StepStatus",
    "StepSucceeded",
    "StopKind",
    "StopReason",
    "ToolCalled",
    "dump_event",
    "load_event",
]
