"""The runtime: agents and their runs — the loop that plans, dispatches steps, judges results and
stops with a reason — with budgets, limits, humans in the loop, and replays of recorded runs."""

from planexec.runtime._agent import Agent, Run
from planexec.runtime._budget import DEFAULT_CAPS, Budget, BudgetHit, caps_from_json
from planexec.runtime._humans import check_decision, decided_event
from planexec.runtime._model_calls import accepted_reply
from planexec.runtime._recorded_world import Fault
from planexec.runtime._replays import ReplayReport, replay_log
from planexec.runtime._session import Session, check_session_id
from planexec.runtime._settings import (
    AnswerCheck,
    AnswerReview,
    ApprovalDecision,
    ApprovalRequest,
    Approvals,
    Approver,
    Escalation,
    Limits,
    RunContext,
)
from planexec.runtime._turns import RECORD_CHARS, SessionRecord, describe_turns, session_record, turn_budget

__all__ = [
    "DEFAULT_CAPS",
    "RECORD_CHARS",
    "Agent",
    "AnswerCheck",
    "AnswerReview",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "Approver",
    "Budget",
    "BudgetHit",
    "Escalation",
    "Fault",
    "Limits",
    "ReplayReport",
    "Run",
    "RunContext",
    "Session",
    "SessionRecord",
    "accepted_reply",
    "caps_from_json",
    "check_decision",
    "check_session_id",
    "decided_event",
    "describe_turns",
    "replay_log",
    "session_record",
    "turn_budget",
]
