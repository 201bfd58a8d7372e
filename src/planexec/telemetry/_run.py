"""One run's telemetry: spans, metrics and log records folded from its events as they are logged,
plus the spans of the calls under way (a model call, a tool call), which must exist while the
call runs so that what the call does itself (an HTTP request, a database query) nests under them.

The trace of a run (OpenTelemetry's GenAI conventions; ``planexec.*`` attributes are planexec's):

    invoke_agent {agent}                the run (one span per process that worked on it; a
    │                                   resumed run's is a child of the first, whose context the
    │                                   run log keeps in ``run_started``)
    ├── plan {agent}                    a planning round (gen_ai.operation.name = plan); a round
    │   └── chat {model}                that patches the plan after failures links to their spans
    ├── execute_tool {tool}             a tool step: its tool call is the step
    │   └── …                           the tool's own instrumented calls
    └── invoke_agent {executor}         a model-driven step
        ├── chat {model}
        └── execute_tool {tool}         a tool the step's model called

Span events: on the run's span ``planexec.replan``, ``planexec.approval.requested``,
``planexec.approval.decided``, ``planexec.budget_exhausted``, ``planexec.stall``,
``planexec.tools_changed``, ``planexec.information``, ``planexec.answer_reviewed``,
``planexec.step_held``, ``planexec.step_requeued``, ``planexec.suspended``; on a step's span
``planexec.retry`` and ``planexec.progress``; on a round's span ``planexec.plan_refused`` and
``planexec.step_streamed``; on a chat span ``planexec.model_retry``.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from planexec._util.clip import clip
from planexec.log import (
    AnswerReviewed,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExhaustedEvent,
    Event,
    InformationAdded,
    ModelAttemptFailed,
    ModelCalled,
    PlannerOutputRejected,
    PlanningStarted,
    PlanProposed,
    RunFinished,
    RunResumed,
    RunStarted,
    RunSuspended,
    StallDetected,
    StepAttemptFailed,
    StepCancelled,
    StepFailed,
    StepHeld,
    StepRequeued,
    StepStarted,
    StepStreamed,
    StepSucceeded,
    ToolCalled,
    ToolProgress,
    ToolsChanged,
)
from planexec.store import Redactor
from planexec.telemetry._logs import EventLogger
from planexec.telemetry._metrics import Instruments
from planexec.telemetry._names import (
    AGENT_NAME,
    CACHE_READ_TOKENS,
    CACHE_WRITE_TOKENS,
    CONVERSATION_ID,
    ERROR_TYPE,
    FINISH_REASONS,
    INPUT_MESSAGES,
    INPUT_TOKENS,
    OPERATION,
    OUTPUT_MESSAGES,
    OUTPUT_TOKENS,
    PROVIDER,
    REQUEST_MODEL,
    RESPONSE_MODEL,
    SPAN_KIND_HINT,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_RESULT,
    TOOL_TYPE,
    provider_and_model,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from planexec.executor import StepError, ToolCallOutcome
    from planexec.log import RunState
    from planexec.models import ModelRequest, ModelResponse
    from planexec.plan import Step
    from planexec.tools import Tool

__all__ = ["LiveCall", "RunTelemetry"]

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(slots=True)
class LiveCall:
    """A model or tool call under way, with its span (current while the call runs)."""

    span: Span
    token: object
    started: float
    own: bool = False
    """The call is the step itself (a tool step): its span is the step's, ended with the step."""


@dataclass(slots=True)
class _Step:
    span: Span
    started: float
    executor: str


@dataclass(slots=True)
class _Fold:
    """What the spans need to remember between events."""

    run: Span | None = None
    round: Span | None = None
    rounds: int = 0
    steps: dict[str, _Step] = field(default_factory=dict)
    failures: list[Span] = field(default_factory=list)
    """Spans of steps that failed since the last planning round: the next round links to them."""


class RunTelemetry:
    """The telemetry of one run in this process. Built by the engine when any signal is on."""

    def __init__(
        self,
        *,
        run_id: str,
        agent: str,
        state: RunState,
        tracer: Tracer | None,
        instruments: Instruments | None,
        logs: bool,
        capture_content: bool,
        max_content_chars: int,
        redactor: Redactor,
    ) -> None:
        self.run_id = run_id
        self.agent = agent
        self._state = state
        self.tracer = tracer
        self.instruments = instruments
        self.capture = capture_content and tracer is not None
        self._max = max_content_chars
        self._redactor = redactor
        self._fold = _Fold()
        self._run_token: object | None = None
        self._run_started_at = 0.0
        self._logger = (
            EventLogger(run_id, redactor, capture_content=capture_content, span_ids=self._current_ids) if logs else None
        )
        self._seq = 0

    # -- the run's span ----------------------------------------------------------------------

    def begin(self, history: Sequence[Event]) -> None:
        """The run starts (or goes on from ``history``) in this process: open its span and make
        it the current one of the task running the loop (and of every task started from it)."""
        self._seq = len(history)
        first = history[0] if history else None
        self._run_started_at = first.at if isinstance(first, RunStarted) else time.time()
        if self.tracer is None:
            return
        parent = None
        links: list[Link] = []
        resumed = bool(history)
        if isinstance(first, RunStarted) and first.trace:
            parent = _PROPAGATOR.extract(first.trace)
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: self.agent,
            CONVERSATION_ID: self.run_id,
            "planexec.run.id": self.run_id,
            SPAN_KIND_HINT: "AGENT",
        }
        if resumed:
            attributes["planexec.run.resumed"] = True
            attributes["planexec.run.segment"] = 2 + sum(isinstance(e, RunResumed) for e in history)
            current = trace.get_current_span().get_span_context()
            if parent is not None and current.is_valid:  # who resumed it, when that is traced too
                links.append(Link(current, {"planexec.link": "resumed_by"}))
        span = self.tracer.start_span(
            f"invoke_agent {self.agent}", context=parent, kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )
        self._fold.run = span
        self._run_token = otel_context.attach(trace.set_span_in_context(span))
        if resumed:  # what humans said while no process worked on it
            last = max((i for i, e in enumerate(history) if isinstance(e, RunSuspended | RunResumed)), default=-1)
            for event in history[last + 1 :]:
                if isinstance(event, ApprovalDecided | InformationAdded):
                    self._apply(event)

    def carrier(self) -> dict[str, str]:
        """The run's trace context (W3C ``traceparent``), for its log: a resumed run continues it."""
        span = self._fold.run
        if span is None or not span.get_span_context().is_valid:
            return {}
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    def end(self) -> None:
        """The engine is done with the run in this process: close whatever is still open."""
        fold = self._fold
        for rec in fold.steps.values():
            rec.span.end()
        fold.steps.clear()
        if fold.round is not None:
            fold.round.end()
            fold.round = None
        if fold.run is not None:
            if fold.run.is_recording():
                fold.run.set_attribute("planexec.run.status", "left")
            fold.run.end()
            fold.run = None
        if self._run_token is not None:
            otel_context.detach(self._run_token)  # type: ignore[arg-type]
            self._run_token = None

    def _current_ids(self) -> tuple[str, str] | None:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            span = self._fold.run
            if span is None:
                return None
            ctx = span.get_span_context()
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"

    # -- contexts for the loop's tasks -------------------------------------------------------

    def planning_context(self) -> contextvars.Context | None:
        """The context a planning task runs in: its round's span is the current one."""
        span = self._fold.round
        if span is None:
            return None
        context = contextvars.copy_context()
        context.run(otel_context.attach, trace.set_span_in_context(span))
        return context

    @contextmanager
    def step(self, step_id: str) -> Iterator[None]:
        """While a step's executor runs: its span is the current one."""
        rec = self._fold.steps.get(step_id)
        if rec is None:
            yield
            return
        token = otel_context.attach(trace.set_span_in_context(rec.span))
        try:
            yield
        finally:
            otel_context.detach(token)

    # -- calls under way ---------------------------------------------------------------------

    def model_call(self, role: str, model: str, request: ModelRequest) -> LiveCall | None:
        """A model call begins: its ``chat`` span, current until ``model_done``."""
        if self.tracer is None:
            return None
        provider, requested = provider_and_model(model)
        settings = request.settings
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: requested,
            "planexec.role": role,
            "planexec.purpose": request.purpose,
            SPAN_KIND_HINT: "LLM",
        }
        if settings.temperature is not None:
            attributes["gen_ai.request.temperature"] = settings.temperature
        if settings.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = settings.max_tokens
        if settings.top_p is not None:
            attributes["gen_ai.request.top_p"] = settings.top_p
        if settings.stop:
            attributes["gen_ai.request.stop_sequences"] = list(settings.stop)
        if settings.seed is not None:
            attributes["gen_ai.request.seed"] = settings.seed
        if self.capture:
            attributes[INPUT_MESSAGES] = self._content(
                [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in request.messages]
            )
        span = self.tracer.start_span(f"chat {requested}", kind=SpanKind.CLIENT, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return LiveCall(span=span, token=token, started=time.monotonic())

    def model_done(self, live: LiveCall | None, record: ModelCalled, response: ModelResponse | None) -> None:
        """The call ended as ``record`` logs it."""
        provider, requested = provider_and_model(record.answered_by or record.model)
        if self.instruments is not None:
            error = None if record.error is None else record.error.split(":", 1)[0]
            self.instruments.model_call(
                self.agent,
                record.role,
                provider,
                requested,
                record.duration,
                error,
                record.usage.input_tokens,
                record.usage.output_tokens,
                record.cost,
            )
        if live is None:
            return
        otel_context.detach(live.token)  # type: ignore[arg-type]
        span = live.span
        if span.is_recording():
            usage = record.usage
            span.set_attributes(
                {
                    INPUT_TOKENS: usage.input_tokens,
                    OUTPUT_TOKENS: usage.output_tokens,
                    CACHE_READ_TOKENS: usage.cached_input_tokens,
                    CACHE_WRITE_TOKENS: usage.cache_write_tokens,
                    "planexec.cost": record.cost,
                }
            )
            if record.answered_by is not None:
                span.set_attribute("planexec.answered_by", self._text(record.answered_by))
            if response is not None:
                if response.model:
                    span.set_attribute(RESPONSE_MODEL, self._text(response.model))
                span.set_attribute(FINISH_REASONS, [response.finish_reason])
                if self.capture:
                    parts: list[dict[str, Any]] = []
                    if response.text:
                        parts.append({"type": "text", "content": response.text})
                    for call in response.tool_calls:
                        parts.append(
                            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
                        )
                    output = [{"role": "assistant", "parts": parts, "finish_reason": response.finish_reason}]
                    span.set_attribute(OUTPUT_MESSAGES, self._content(output))
            if record.error is not None:
                _failed(span, record.error.split(":", 1)[0], self._text(record.error))
        span.end()

    def tool_call(self, tool: Tool, step: Step, args: dict[str, Any], call_id: str | None) -> LiveCall | None:
        """A tool call begins. A tool step's own call is the step's span; a call a step's model
        made gets an ``execute_tool`` span of its own, current until ``tool_done``."""
        started = time.monotonic()
        if self.tracer is None:
            return LiveCall(span=trace.INVALID_SPAN, token=None, started=started, own=True)
        if call_id is None:
            rec = self._fold.steps.get(step.id)
            span = rec.span if rec is not None else trace.INVALID_SPAN
            if self.capture and span.is_recording():
                span.set_attribute(TOOL_ARGUMENTS, self._content(args))
            return LiveCall(span=span, token=None, started=started, own=True)
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: tool.name,
            TOOL_CALL_ID: call_id,
            TOOL_TYPE: "function",
            TOOL_DESCRIPTION: clip(tool.description, 500),
            "planexec.step.id": step.id,
            SPAN_KIND_HINT: "TOOL",
        }
        if self.capture:
            attributes[TOOL_ARGUMENTS] = self._content(args)
        span = self.tracer.start_span(f"execute_tool {tool.name}", kind=SpanKind.INTERNAL, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return LiveCall(span=span, token=token, started=started)

    def tool_done(self, live: LiveCall | None, tool: Tool, outcome: ToolCallOutcome) -> None:
        if live is None:
            return
        error = outcome.error
        if self.instruments is not None and outcome.attempts > 0:
            kind = None if error is None else error.kind
            self.instruments.tool_call(self.agent, tool.name, time.monotonic() - live.started, kind)
        span = live.span
        if live.token is not None:
            otel_context.detach(live.token)  # type: ignore[arg-type]
        if span.is_recording():
            span.set_attribute("planexec.tool.attempts", outcome.attempts)
            if error is not None:
                _failed(span, error.kind, self._text(error.message))
            elif self.capture:
                span.set_attribute(TOOL_RESULT, self._content(outcome.output))
        if not live.own:
            span.end()

    def tool_abandoned(self, live: LiveCall | None) -> None:
        """The call did not end (it was cancelled, or the step's task stopped)."""
        if live is None:
            return
        if live.token is not None:
            otel_context.detach(live.token)  # type: ignore[arg-type]
        if not live.own:
            if live.span.is_recording():
                live.span.set_attribute(ERROR_TYPE, "cancelled")
            live.span.end()

    def model_abandoned(self, live: LiveCall | None) -> None:
        """The model call was cancelled."""
        self.tool_abandoned(live)

    # -- the fold ----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """``event`` was just logged."""
        seq = self._seq
        self._seq = seq + 1
        if self.tracer is not None or self.instruments is not None:
            self._apply(event)
        if self._logger is not None:
            self._logger.log(event, seq)

    def _apply(self, event: Event) -> None:
        fold = self._fold
        run = fold.run
        match event:
            case StepStarted():
                self._step_started(event)
            case StepSucceeded():
                rec = self._step_ended(event.step_id, "succeeded")
                if rec is not None and rec.span.is_recording():
                    span = rec.span
                    span.set_attribute("planexec.step.attempts", event.attempts)
                    span.set_attribute("planexec.step.verdict", "passed" if event.verdict.passed else "failed")
                    if event.confidence is not None:
                        span.set_attribute("planexec.step.confidence", event.confidence)
                    if self.capture:
                        span.set_attribute("planexec.step.output", self._content(event.output))
                    span.end()
            case StepFailed():
                rec = self._step_ended(event.step_id, "failed")
                failed = rec.span if rec is not None else self._unstarted(event.step_id)
                if failed is not None and failed.is_recording():
                    failed.set_attribute("planexec.step.attempts", event.attempts)
                    if event.verdict is not None:
                        failed.set_attribute("planexec.step.verdict", "passed" if event.verdict.passed else "failed")
                    _failed(failed, event.error.kind, self._text(event.error.message))
                    fold.failures.append(failed)
                    failed.end()
            case StepCancelled():
                rec = self._step_ended(event.step_id, "cancelled")
                if rec is not None:
                    if rec.span.is_recording():
                        rec.span.set_attribute("planexec.step.cancelled", self._text(event.reason))
                    rec.span.end()
            case StepAttemptFailed():
                self._on_step(
                    event.step_id,
                    "planexec.retry",
                    {
                        "planexec.step.attempt": event.attempt,
                        ERROR_TYPE: event.error.kind,
                        "planexec.error": self._text(event.error.message),
                        "planexec.retry_in": event.retry_in if event.retry_in is not None else -1.0,
                    },
                )
            case ToolProgress():
                attrs: dict[str, Any] = {"planexec.progress": event.progress}
                if event.total is not None:
                    attrs["planexec.progress.total"] = event.total
                self._on_step(event.step_id, "planexec.progress", attrs)
            case PlanningStarted():
                self._round_started(event)
            case PlanProposed():
                self._plan_proposed(event)
            case PlannerOutputRejected():
                if fold.round is not None:
                    problems = "; ".join(str(p) for p in event.problems)
                    fold.round.add_event(
                        "planexec.plan_refused",
                        {"planexec.attempt": event.attempt, "planexec.problems": self._text(problems)},
                    )
            case StepStreamed():
                if fold.round is not None:
                    fold.round.add_event("planexec.step_streamed", {"planexec.step.id": event.step.id})
            case ToolCalled() if event.attempts == 0 and self.tracer is not None:
                # a call refused before any attempt (an unknown tool, a gated one): a span of no length
                name = self._text(event.tool)[:200]  # a model chose it: anything may be in it
                refused = self.tracer.start_span(
                    f"execute_tool {name}",
                    attributes={
                        OPERATION: "execute_tool",
                        TOOL_NAME: name,
                        TOOL_CALL_ID: event.call_id,
                        "planexec.step.id": event.step_id,
                        "planexec.tool.attempts": 0,
                        SPAN_KIND_HINT: "TOOL",
                    },
                )
                if event.error is not None:
                    _failed(refused, event.error.kind, self._text(event.error.message))
                refused.end()
            case ModelAttemptFailed():
                span = trace.get_current_span()  # the call's own span, in the task making the call
                if span.is_recording():
                    attrs = {"planexec.attempt": event.attempt, "planexec.error": self._text(event.error)}
                    if event.status is not None:
                        attrs["http.response.status_code"] = event.status
                    if event.retry_in is not None:
                        attrs["planexec.retry_in"] = event.retry_in
                    span.add_event("planexec.model_retry", attrs)
            case ApprovalRequested() if run is not None:
                attrs = {"planexec.approval.id": event.approval_id, "planexec.approval.subject": event.subject}
                if event.step_id is not None:
                    attrs["planexec.step.id"] = event.step_id
                if event.reason:
                    attrs["planexec.reason"] = self._text(event.reason)
                run.add_event("planexec.approval.requested", attrs)
            case ApprovalDecided() if run is not None:
                attrs = {
                    "planexec.approval.id": event.approval_id,
                    "planexec.approval.approved": event.approved,
                    "planexec.approval.by": self._text(event.by),
                }
                if event.choice is not None:
                    attrs["planexec.approval.choice"] = event.choice
                if event.reason:
                    attrs["planexec.reason"] = self._text(event.reason)
                run.add_event("planexec.approval.decided", attrs)
            case BudgetExhaustedEvent() if run is not None:
                run.add_event(
                    "planexec.budget_exhausted",
                    {
                        "planexec.budget": event.budget,
                        "planexec.budget.limit": float(event.limit),
                        "planexec.budget.used": float(event.used),
                        "planexec.budget.needed": float(event.needed),
                    },
                )
            case StallDetected() if run is not None:
                run.add_event(
                    "planexec.stall", {"planexec.stall.rule": event.rule, "planexec.detail": self._text(event.detail)}
                )
            case ToolsChanged() if run is not None:
                added = [str(spec.get("name", "")) for spec in event.tools]
                run.add_event(
                    "planexec.tools_changed",
                    {"planexec.tools.added": added, "planexec.tools.removed": list(event.removed)},
                )
            case InformationAdded() if run is not None:
                run.add_event(
                    "planexec.information",
                    {"planexec.by": self._text(event.by), "planexec.constraint": event.constraint},
                )
            case AnswerReviewed() if run is not None:
                run.add_event(
                    "planexec.answer_reviewed", {"planexec.passed": event.passed, "planexec.reviewer": event.reviewer}
                )
            case StepHeld() if run is not None:
                run.add_event(
                    "planexec.step_held", {"planexec.step.id": event.step_id, "planexec.approval.id": event.approval_id}
                )
            case StepRequeued() if run is not None:
                run.add_event(
                    "planexec.step_requeued",
                    {"planexec.step.id": event.step_id, "planexec.reason": self._text(event.reason)},
                )
            case RunStarted() if run is not None:
                run.set_attributes(
                    {
                        "planexec.policy": event.policy,
                        "planexec.replan": event.replan,
                        "planexec.tools": list(event.tools),
                    }
                )
                if self.capture:
                    run.set_attribute(
                        INPUT_MESSAGES,
                        self._content([{"role": "user", "parts": [{"type": "text", "content": event.goal}]}]),
                    )
            case RunSuspended():
                self._close_round()
                if run is not None:
                    run.add_event("planexec.suspended", {"planexec.approvals": list(event.approvals)})
                    run.set_attribute("planexec.run.status", "suspended")
                    run.end()
                    fold.run = None
            case RunFinished():
                self._run_finished(event)

    # -- steps -------------------------------------------------------------------------------

    def _step_started(self, event: StepStarted) -> None:
        if self.tracer is None:
            self._fold.steps[event.step_id] = _Step(span=trace.INVALID_SPAN, started=event.at, executor=event.executor)
            return
        attributes: dict[str, Any] = {
            "planexec.step.id": event.step_id,
            "planexec.executor": event.executor,
        }
        rec = self._state.steps.get(event.step_id)
        if rec is not None:
            attributes["planexec.plan.version"] = rec.plan_version
            attributes["planexec.step.attempt"] = max(1, rec.attempts)
        if event.tool is not None:
            name = f"execute_tool {event.tool}"
            attributes.update(
                {
                    OPERATION: "execute_tool",
                    TOOL_NAME: event.tool,
                    TOOL_CALL_ID: event.step_id,
                    TOOL_TYPE: "function",
                    SPAN_KIND_HINT: "TOOL",
                }
            )
        else:
            name = f"invoke_agent {event.executor}"
            attributes.update({OPERATION: "invoke_agent", AGENT_NAME: event.executor, SPAN_KIND_HINT: "AGENT"})
        if event.idempotency_key is not None:
            attributes["planexec.idempotency_key"] = event.idempotency_key
        parent = self._fold.run
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(name, context=context, kind=SpanKind.INTERNAL, attributes=attributes)
        self._fold.steps[event.step_id] = _Step(span=span, started=event.at, executor=event.executor)

    def _step_ended(self, step_id: str, status: str) -> _Step | None:
        rec = self._fold.steps.pop(step_id, None)
        if self.instruments is not None:
            executor = rec.executor if rec is not None else ""
            duration = None if rec is None else max(0.0, time.time() - rec.started)
            self.instruments.step(self.agent, executor, status, duration)
        if rec is not None and rec.span.is_recording():
            rec.span.set_attribute("planexec.step.status", status)
        return rec

    def _unstarted(self, step_id: str) -> Span | None:
        """A step that failed before it started (its arguments could not be bound): a span of
        no length, so that the failure shows and a patch can link to it."""
        if self.tracer is None:
            return None
        parent = self._fold.run
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(
            f"step {step_id}",
            context=context,
            attributes={"planexec.step.id": step_id, "planexec.step.status": "failed", "planexec.step.started": False},
        )

    def _on_step(self, step_id: str, name: str, attributes: dict[str, Any]) -> None:
        rec = self._fold.steps.get(step_id)
        if rec is not None and rec.span.is_recording():
            rec.span.add_event(name, attributes)

    # -- planning rounds ---------------------------------------------------------------------

    def _round_started(self, event: PlanningStarted) -> None:
        fold = self._fold
        self._close_round()
        fold.rounds += 1
        links = [Link(s.get_span_context(), {"planexec.link": "failure"}) for s in fold.failures]
        fold.failures = []
        if self.tracer is None:
            return
        parent = fold.run
        context = trace.set_span_in_context(parent) if parent is not None else None
        attributes: dict[str, Any] = {
            OPERATION: "plan",
            AGENT_NAME: self.agent,
            "planexec.planning.trigger": event.trigger,
            "planexec.planning.round": fold.rounds,
            SPAN_KIND_HINT: "CHAIN",
        }
        if event.why:
            attributes["planexec.planning.why"] = self._text(event.why)
        fold.round = self.tracer.start_span(
            f"plan {self.agent}", context=context, kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )

    def _plan_proposed(self, event: PlanProposed) -> None:
        fold = self._fold
        plan = event.plan
        span = fold.round
        if span is not None and span.is_recording():
            span.set_attributes(
                {
                    "planexec.plan.version": plan.version,
                    "planexec.plan.steps": len(plan.steps),
                    "planexec.plan.trigger": event.trigger,
                }
            )
            if event.cancelled:
                span.set_attribute("planexec.plan.cancelled", list(event.cancelled))
            if self.capture:
                span.set_attribute("planexec.plan", self._content([s.id for s in plan.steps]))
        if event.trigger != "initial" and fold.run is not None:
            fold.run.add_event(
                "planexec.replan",
                {
                    "planexec.plan.version": plan.version,
                    "planexec.plan.trigger": event.trigger,
                    "planexec.plan.cancelled": list(event.cancelled),
                },
            )
        self._close_round()

    def _close_round(self) -> None:
        fold = self._fold
        if fold.round is not None:
            fold.round.end()
            fold.round = None

    # -- the end -----------------------------------------------------------------------------

    def _run_finished(self, event: RunFinished) -> None:
        fold = self._fold
        self._close_round()
        stop = event.stop
        if self.instruments is not None:
            self.instruments.run(self.agent, stop.kind, stop.code, max(0.0, event.at - self._run_started_at))
        span = fold.run
        if span is None:
            return
        if span.is_recording():
            state = self._state
            attributes: dict[str, Any] = {
                "planexec.stop_reason": stop.kind,
                "planexec.run.status": "finished",
                "planexec.cost": state.cost,
                INPUT_TOKENS: state.usage.input_tokens,
                OUTPUT_TOKENS: state.usage.output_tokens,
                "planexec.model_calls": state.model_calls,
                "planexec.tool_calls": state.tool_calls,
                "planexec.steps": state.steps_started,
                "planexec.replans": state.replans,
            }
            if state.plans:
                attributes["planexec.plan.version"] = state.plans[-1].version
            if stop.code is not None:
                attributes["planexec.stop_code"] = stop.code
            if stop.budget is not None:
                attributes["planexec.stop_budget"] = stop.budget
            if stop.detail:
                attributes["planexec.stop_detail"] = self._text(stop.detail)
            span.set_attributes(attributes)
            if self.capture and event.answer is not None:
                span.set_attribute(
                    OUTPUT_MESSAGES,
                    self._content([{"role": "assistant", "parts": [{"type": "text", "content": event.answer}]}]),
                )
            if stop.kind == "error":
                _failed(span, stop.code or "error", self._text(stop.detail))
        span.end()
        fold.run = None

    # -- values ------------------------------------------------------------------------------

    def _text(self, text: str) -> str:
        """Free text from the run (an error message, a reason), redacted and cut to size."""
        return clip(self._redactor.redact_text(text), self._max)

    def _content(self, value: Any) -> str:
        """Captured content as JSON text, redacted and cut to size."""
        data = self._redactor.redact(value)
        try:
            text = json.dumps(data, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = self._redactor.redact_text(repr(value))
        return clip(text, self._max)


def _failed(span: Span, kind: str, message: str) -> None:
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, message))


def error_kind(error: StepError | None) -> str | None:
    return None if error is None else error.kind
