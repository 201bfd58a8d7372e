"""Events: the one source of truth of a run. Every state change is appended here first.

Events are frozen, keyword-only values tagged by ``kind`` and serialized by one shared adapter,
so that the store, the API, the CLI and replay all read the same thing. Each kind is declared
once: its class, in the module of its area (``_run_events``, ``_model_events``, ``_plan_events``,
``_step_events``, ``_human_events``), is a member of the ``Event`` union below, and everything
else — ``EVENT_KINDS``, the codec, the state fold, telemetry, views — is derived from that.

Event schema changelog (bump ``EVENT_SCHEMA_VERSION`` and add a line on every change; keep a
fixture log of every version loadable in the tests):
    1: first version.
    2: run_suspended, run_resumed, step_requeued and step_held (durable runs, crash recovery and
       humans); step_started records the idempotency key; approval_requested carries the proposed
       plan and may concern an uncertain effect; approval_decided may carry a choice, an output or
       an edited plan. Version 1 logs load unchanged.
    3: step_streamed (a step started while its plan was still streaming). Older logs load unchanged.
    4: run_finished's stop may carry an error code; budget_exhausted records what the refused call
       or step needed (``used`` is what was actually spent); stall_detected has the rules
       repeated_success and ping_pong; plans may be plan schema 2 (``allowed_tools``); values that
       are not JSON (NaN, Infinity) are refused, never written as null. Older logs load unchanged.
    5: questions to humans gain the subjects question (the planner asks the user), escalation
       (a reason ``code``: unknown_tool, low_confidence, planner_gave_up), review (a step's result
       that failed its checks, with ``output`` and ``verdict``) and answer (the final answer, with
       a ``checklist``); approval_decided may carry ``text`` (an answer, or guidance) and checklist
       results, and the choices guidance and replan; information_added (the user told the run
       something new); answer_reviewed (a final answer judged); step_succeeded may carry the
       executor's ``confidence``; planning rounds may be triggered by information or a review;
       runs may stop ``escalated``; plans may be plan schema 3 (``on_fail``). Older logs load
       unchanged.
    6: model_attempt_failed (each failed attempt of a model call: its status, its error, the wait
       before the next attempt and the wait the provider asked for); model_called may name the
       model that answered for a fallback list (``answered_by``); usage counts failed requests
       (``failed_requests``), reasoning tokens (``reasoning_tokens``) and tokens written to a
       prompt cache (``cache_write_tokens``). Older logs load unchanged.
    7: tool_progress (a tool said how far it has come: an MCP server's progress notifications,
       or a tool calling ``ToolContext.report``). Older logs load unchanged.
    8: tools_changed (the tools a run may use changed while it ran: an MCP server said its tools
       changed and listed them again; the event holds the new or redefined tools' specs and the
       names of the tools gone). Older logs load unchanged.
    9: run_started may carry ``trace``, the run's trace context (W3C ``traceparent``) when it was
       traced, so that a run resumed elsewhere continues the same trace. Older logs load unchanged.
    10: plan_recalled (plan memory offered a remembered plan for the goal: the entry, the
       similarity, ``direct`` or ``guided`` reuse, the steps re-bound to the goal and the answer
       template); plan versions may be authored by ``memory``. Older logs load unchanged.
    11: approval_requested names the ``rule`` that asks (a reason code), carries a step's
       ``args`` as they will be sent (bindings resolved), and may be about a ``budget`` (the run
       reached a cap: raise it or stop); approval_decided may carry the raised ``budget`` caps;
       plan_forecast (what a plan version is expected to cost, and which caps it would pass).
       Older logs load unchanged.
    12: plans may be plan schema 4 (``answer``: a sealed plan's answer template); a run may stop
       with the error code ``answer_template`` (a sealed plan's answer could not be filled in from
       the outputs). Older logs load unchanged.
    13: trust labels (see :mod:`planexec.trust`): model_called records, for a planner's request,
       the untrusted sources it carried (``read``); step_started records each argument's label
       (``provenance``); step_succeeded and step_failed the label of the output (or the error's
       text); tool_called the labels of a model-driven step's call's arguments and of its output;
       plan_proposed the steps a planner wrote after reading untrusted text (``tainted``) and the
       untrusted sources that round read (``read``), step_streamed whether the step is tainted;
       approval_requested the labels of a step's arguments and the rules they break
       (``violations``, with the rules ``argument_rule`` and ``untrusted_effect``); step_failed
       and tool_called the rules a refused call broke (error kind ``untrusted``); run_finished the
       answer's label (``answer_provenance``) and may stop ``refused`` (a call broke a rule; its
       stop names the violations). Older logs load unchanged; their values carry no label.
    14: approval_requested may ask about an untrusted final answer (rule ``untrusted_answer``,
       ``TrustPolicy(answer="ask")``); run_finished names the steps whose untrusted output was
       withheld from the answer (``withheld``; ``*``: the whole answer). Older logs load unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, TypeAlias, get_args

from pydantic import ConfigDict, Field, TypeAdapter

from planexec.log._human_events import (
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    ApprovalSubject,
    ChecklistResult,
    EffectChoice,
    QuestionRule,
)
from planexec.log._model_events import ModelAttemptFailed, ModelCalled
from planexec.log._plan_events import (
    Forecast,
    PlanForecast,
    PlannerOutputRejected,
    PlanningStarted,
    PlanningTrigger,
    PlanProposed,
    PlanRecalled,
    PlanTrigger,
    StepStreamed,
    ToolsChanged,
)
from planexec.log._run_events import (
    BudgetExhaustedEvent,
    InformationAdded,
    RunFinished,
    RunResumed,
    RunStarted,
    RunSuspended,
    StallDetected,
    StallRule,
)
from planexec.log._step_events import (
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
)
from planexec.log._stop import EscalationCode

__all__ = [
    "EVENT_KINDS",
    "EVENT_SCHEMA_VERSION",
    "READABLE_VERSIONS",
    "AnswerReviewed",
    "ApprovalDecided",
    "ApprovalRequested",
    "ApprovalSubject",
    "BudgetExhaustedEvent",
    "ChecklistResult",
    "EffectChoice",
    "EscalationCode",
    "Event",
    "Forecast",
    "InformationAdded",
    "ModelAttemptFailed",
    "ModelCalled",
    "PlanForecast",
    "PlanProposed",
    "PlanRecalled",
    "PlanTrigger",
    "PlannerOutputRejected",
    "PlanningStarted",
    "PlanningTrigger",
    "QuestionRule",
    "RunFinished",
    "RunResumed",
    "RunStarted",
    "RunSuspended",
    "StallDetected",
    "StallRule",
    "StepAttemptFailed",
    "StepCancelled",
    "StepFailed",
    "StepHeld",
    "StepRequeued",
    "StepStarted",
    "StepStreamed",
    "StepSucceeded",
    "ToolCalled",
    "ToolProgress",
    "ToolsChanged",
    "dump_event",
    "load_event",
]

EVENT_SCHEMA_VERSION = 14
READABLE_VERSIONS: tuple[int, ...] = tuple(range(1, EVENT_SCHEMA_VERSION + 1))
"""Every schema version so far: logs of each keep loading."""


Event: TypeAlias = Annotated[
    RunStarted
    | ModelCalled
    | ModelAttemptFailed
    | PlanningStarted
    | PlannerOutputRejected
    | PlanProposed
    | PlanRecalled
    | PlanForecast
    | StepStreamed
    | ApprovalRequested
    | ApprovalDecided
    | StepStarted
    | StepAttemptFailed
    | ToolProgress
    | ToolsChanged
    | ToolCalled
    | StepRequeued
    | StepHeld
    | StepSucceeded
    | StepFailed
    | StepCancelled
    | BudgetExhaustedEvent
    | StallDetected
    | RunSuspended
    | RunResumed
    | InformationAdded
    | AnswerReviewed
    | RunFinished,
    Field(discriminator="kind"),
]

EVENT_KINDS: Mapping[str, type[Event]] = MappingProxyType(
    {cls.__dataclass_fields__["kind"].default: cls for cls in get_args(get_args(Event)[0])}
)
"""Every event kind and its class, in the order of the ``Event`` union: what code that handles
each kind (or lists them) derives from, instead of spelling the kinds again."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(ser_json_inf_nan="constants"))
"""Keeps NaN and Infinity as they are when dumping, so that the store refuses them instead of
silently writing null."""
EVENTS_ADAPTER: TypeAdapter[list[Event]] = TypeAdapter(list[Event])


def dump_event(event: Event) -> dict[str, Any]:
    """An event as JSON data, in an envelope that names the schema version."""
    return {"v": EVENT_SCHEMA_VERSION, "event": EVENT_ADAPTER.dump_python(event, mode="json")}


def load_event(data: dict[str, Any]) -> Event:
    """Load an event dumped by any schema version so far."""
    version = data.get("v")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ValueError(f"unknown event schema version {version!r} (this planexec reads {readable})")
    return EVENT_ADAPTER.validate_python(data["event"])
