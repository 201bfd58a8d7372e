"""Durable operations on stored runs, for any process: list the runs, read one (as far as it can
be read), export its log, answer its questions or tell it something new, pick it up again with the
agent rebuilt from the spec it recorded, submit a run for workers, list sessions and replay one
whole, host runs in a process (:class:`Supervisor`: start, pick up, follow, cancel, detach and end them —
the one way the command line, the server, the workers and the MCP host run runs), show the
receipts of a run's side effects (plan version → approval → effect, each named by
its place and hash in the run's chain), and delete old runs.

Every operation takes a :class:`~planexec.store.RunStore` and raises
:class:`~planexec.UsageError` listing every problem when it is used wrongly; ``where`` in each
problem names the argument or spec field at fault.
"""

from planexec.runs._answers import answer, check_edited_plan, pick_question, question_about, tell
from planexec.runs._build import build_agent, dropped_settings, read_mcp_servers
from planexec.runs._pickup import resume, still_waiting
from planexec.runs._receipts import (
    ApprovalReceipt,
    LoggedEvent,
    PlanReceipt,
    Receipt,
    ReceiptOutcome,
    Receipts,
    fold_receipts,
    read_receipts,
)
from planexec.runs._scripted import absolute_model_string
from planexec.runs._session_replays import Check, SessionReplay, TurnReplay, TurnStatus, replay_session
from planexec.runs._sessions import SessionSummary, list_sessions, session_turns
from planexec.runs._spec import SPEC_VERSION, AgentSpec, Recorded, recorded_spec
from planexec.runs._spec_texts import RULE_FLAGS, RULE_LISTS, RULE_TEXTS
from planexec.runs._spec_values import (
    EnsembleRule,
    ImportRef,
    LimitRule,
    MCPCommand,
    MCPHeader,
    MCPServerRef,
    MCPUrl,
    ModelRef,
    ReviewRule,
    Rules,
    TrustRule,
)
from planexec.runs._stored import (
    STATUSES,
    StoredRun,
    export_lines,
    gc,
    list_runs,
    load_run,
    open_questions,
    parse_age,
    read_run,
)
from planexec.runs._submit import give_back, held_by, requeue, submit, take_from_workers, worker_entry
from planexec.runs._supervisor import Progress, Supervisor, owning

__all__ = [
    "RULE_FLAGS",
    "RULE_LISTS",
    "RULE_TEXTS",
    "SPEC_VERSION",
    "STATUSES",
    "AgentSpec",
    "ApprovalReceipt",
    "Check",
    "EnsembleRule",
    "ImportRef",
    "LimitRule",
    "LoggedEvent",
    "MCPCommand",
    "MCPHeader",
    "MCPServerRef",
    "MCPUrl",
    "ModelRef",
    "PlanReceipt",
    "Progress",
    "Receipt",
    "ReceiptOutcome",
    "Receipts",
    "Recorded",
    "ReviewRule",
    "Rules",
    "SessionReplay",
    "SessionSummary",
    "StoredRun",
    "Supervisor",
    "TrustRule",
    "TurnReplay",
    "TurnStatus",
    "absolute_model_string",
    "answer",
    "build_agent",
    "check_edited_plan",
    "dropped_settings",
    "export_lines",
    "fold_receipts",
    "gc",
    "give_back",
    "held_by",
    "list_runs",
    "list_sessions",
    "load_run",
    "open_questions",
    "owning",
    "parse_age",
    "pick_question",
    "question_about",
    "read_mcp_servers",
    "read_receipts",
    "read_run",
    "recorded_spec",
    "replay_session",
    "requeue",
    "resume",
    "session_turns",
    "still_waiting",
    "submit",
    "take_from_workers",
    "tell",
    "worker_entry",
]
