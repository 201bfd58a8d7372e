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

import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from planexec._util.clip import clip
from planexec.log import (
    ApprovalDecided,
    Event,
    InformationAdded,
    ModelCalled,
    RunResumed,
    RunStarted,
    RunSuspended,
)
from planexec.store import Redactor
from planexec.telemetry._fold import SpanFold, trust_attributes
from planexec.telemetry._logs import LOGGER_NAME, EventLogger
from planexec.telemetry._metrics import RunMeters
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
from planexec.telemetry._values import Values, failed
from planexec.trust import Provenance

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from planexec.executor import ToolCallOutcome
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


F = TypeVar("F", bound=Callable[..., Any])


def _guarded(fallback: Any) -> Callable[[F], F]:
    """Telemetry never breaks a run: a method that fails (a broken SDK, exporter or handler) turns
    the run's telemetry off, says so once on the ``planexec`` logger, and returns ``fallback``."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def guarded(self: RunTelemetry, *args: Any, **kwargs: Any) -> Any:
            if self._broken:
                return fallback
            try:
                return method(self, *args, **kwargs)
            except Exception as e:
                self._break(e)
                return fallback

        return cast(F, guarded)

    return wrap


def _release(live: LiveCall | None) -> None:
    """``live``'s span is no longer the current one of the task that made the call: done first,
    and also when telemetry broke during the call, so that the task's context is as it was."""
    if live is not None and live.token is not None:
        token, live.token = live.token, None
        otel_context.detach(token)  # type: ignore[arg-type]


class _Current:
    """A span made the current one for a block (and no longer after it)."""

    __slots__ = ("_owner", "_span", "_token")

    def __init__(self, owner: RunTelemetry, span: Span) -> None:
        self._owner = owner
        self._span = span
        self._token: object | None = None

    def __enter__(self) -> None:
        try:
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        except Exception as e:
            self._owner._break(e)

    def __exit__(self, *_exc: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]


class RunTelemetry:
    """The telemetry of one run in this process. Built by the engine when any signal is on."""

    def __init__(
        self,
        *,
        run_id: str,
        agent: str,
        state: RunState,
        tracer: Tracer | None,
        instruments: RunMeters | None,
        logs: bool,
        capture_content: bool,
        max_content_chars: int,
        redactor: Redactor,
    ) -> None:
        self.run_id = run_id
        self.agent = agent
        self.tracer = tracer
        self.instruments = instruments
        self.capture = capture_content and tracer is not None
        self._values = Values(redactor, max_content_chars)
        self._fold = SpanFold(
            agent=agent, state=state, tracer=tracer, instruments=instruments, values=self._values, capture=self.capture
        )
        self._run_token: object | None = None
        self._logger = (
            EventLogger(
                run_id,
                self._values,
                capture_content=capture_content,
                span_ids=self._current_ids,
            )
            if logs
            else None
        )
        self._seq = 0
        self._broken = False

    def _break(self, error: Exception) -> None:
        """Something telemetry uses failed: no more telemetry for this run; the run goes on. The
        spans still open are ended (if the SDK still can), so that the trace sent so far has them."""
        if self._broken:
            return
        self._broken = True
        self.tracer = self.instruments = None
        self._fold.tracer = self._fold.instruments = None
        self._logger = None
        with contextlib.suppress(Exception):
            self._fold.end_all()
        with contextlib.suppress(Exception):
            logging.getLogger(LOGGER_NAME).warning(
                "run %s: telemetry turned off for the rest of the run: %s: %s", self.run_id, type(error).__name__, error
            )

    # -- the run's span ----------------------------------------------------------------------

    @_guarded(None)
    def begin(self, history: Sequence[Event]) -> None:
        """The run starts (or goes on from ``history``) in this process: open its span and make
        it the current one of the task running the loop (and of every task started from it)."""
        self._seq = len(history)
        first = history[0] if history else None
        self._fold.run_started_at = first.at if isinstance(first, RunStarted) else time.time()
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
                    self._fold.apply(event)

    @_guarded({})
    def carrier(self) -> dict[str, str]:
        """The run's trace context (W3C ``traceparent``), for its log: a resumed run continues it."""
        span = self._fold.run
        if span is None or not span.get_span_context().is_valid:
            return {}
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    def end(self) -> None:
        """The engine is done with the run in this process: close whatever is still open. (The
        run's span stops being the current one even when telemetry broke meanwhile.)"""
        token, self._run_token = self._run_token, None
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]
        self._end_spans()

    @_guarded(None)
    def _end_spans(self) -> None:
        self._fold.end_all()

    def _current_ids(self) -> tuple[str, str] | None:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            span = self._fold.run
            if span is None:
                return None
            ctx = span.get_span_context()
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"

    # -- contexts for the loop's tasks -------------------------------------------------------

    @_guarded(None)
    def planning_context(self) -> contextvars.Context | None:
        """The context a planning task runs in: its round's span is the current one."""
        span = self._fold.round
        if span is None:
            return None
        context = contextvars.copy_context()
        context.run(otel_context.attach, trace.set_span_in_context(span))
        return context

    def step(self, step_id: str) -> AbstractContextManager[None]:
        """While a step's executor runs: its span is the current one."""
        rec = None if self._broken else self._fold.steps.get(step_id)
        if rec is None or self.tracer is None:
            return nullcontext()
        return _Current(self, rec.span)

    # -- calls under way ---------------------------------------------------------------------

    def _provider_and_model(self, name: str) -> tuple[str, str]:
        """The provider and the model a model's name says, as spans and metrics show them (a
        name is configuration, or a fallback's answer: it may hold a key, and be of any length)."""
        provider, model = provider_and_model(name)
        return self._values.name(provider), self._values.name(model)

    @_guarded(None)
    def model_call(self, role: str, model: str, request: ModelRequest) -> LiveCall | None:
        """A model call begins: its ``chat`` span, current until ``model_done``."""
        if self.tracer is None:
            return None
        provider, requested = self._provider_and_model(model)
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
            attributes[INPUT_MESSAGES] = self._values.content(
                [{"role": m.role, "parts": [{"type": "text", "content": m.content}]} for m in request.messages]
            )
        span = self.tracer.start_span(f"chat {requested}", kind=SpanKind.CLIENT, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return LiveCall(span=span, token=token, started=time.monotonic())

    def model_done(self, live: LiveCall | None, record: ModelCalled, response: ModelResponse | None) -> None:
        """The call ended as ``record`` logs it."""
        _release(live)
        self._model_ended(live, record, response)

    @_guarded(None)
    def _model_ended(self, live: LiveCall | None, record: ModelCalled, response: ModelResponse | None) -> None:
        provider, requested = self._provider_and_model(record.answered_by or record.model)
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
        span = live.span
        if span.is_recording():
            usage = record.usage
            span.set_attributes(
                {
                    INPUT_TOKENS: usage.input_tokens,
                    OUTPUT_TOKENS: usage.output_tokens,
                    CACHE_READ_TOKENS: usage.cached_input_tokens,
                    CACHE_WRITE_TOKENS: usage.cache_write_tokens,
                    "planexec.cost": round(record.cost, 9),
                }
            )
            if record.answered_by is not None:
                span.set_attribute("planexec.answered_by", self._values.text(record.answered_by))
            if response is not None:
                if response.model:
                    span.set_attribute(RESPONSE_MODEL, self._values.text(response.model))
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
                    span.set_attribute(OUTPUT_MESSAGES, self._values.content(output))
            if record.error is not None:
                failed(span, record.error.split(":", 1)[0], self._values.text(record.error))
        span.end()

    @_guarded(None)
    def tool_call(
        self,
        tool: Tool,
        step: Step,
        args: dict[str, Any],
        call_id: str | None,
        labels: Mapping[str, Provenance] | None = None,
    ) -> LiveCall | None:
        """A tool call begins. A tool step's own call is the step's span; a call a step's model
        made gets an ``execute_tool`` span of its own, current until ``tool_done``, with its
        arguments' trust labels (``labels``) as attributes."""
        started = time.monotonic()
        if self.tracer is None:
            return LiveCall(span=trace.INVALID_SPAN, token=None, started=started, own=True)
        if call_id is None:
            rec = self._fold.steps.get(step.id)
            span = rec.span if rec is not None else trace.INVALID_SPAN
            if self.capture and span.is_recording():
                span.set_attribute(TOOL_ARGUMENTS, self._values.content(args))
            return LiveCall(span=span, token=None, started=started, own=True)
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: tool.name,
            TOOL_CALL_ID: self._values.name(call_id),  # the model's: anything may be in it
            TOOL_TYPE: "function",
            TOOL_DESCRIPTION: clip(tool.description, 500),
            "planexec.step.id": step.id,
            SPAN_KIND_HINT: "TOOL",
            **trust_attributes(labels, self._values.name),
        }
        if self.capture:
            attributes[TOOL_ARGUMENTS] = self._values.content(args)
        span = self.tracer.start_span(f"execute_tool {tool.name}", kind=SpanKind.INTERNAL, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return LiveCall(span=span, token=token, started=started)

    def tool_done(self, live: LiveCall | None, tool: Tool, outcome: ToolCallOutcome) -> None:
        """The call ended with ``outcome``."""
        _release(live)
        self._tool_ended(live, tool, outcome)

    @_guarded(None)
    def _tool_ended(self, live: LiveCall | None, tool: Tool, outcome: ToolCallOutcome) -> None:
        if live is None:
            return
        error = outcome.error
        if self.instruments is not None and outcome.attempts > 0:
            kind = None if error is None else error.kind
            self.instruments.tool_call(self.agent, tool.name, time.monotonic() - live.started, kind)
        span = live.span
        if span.is_recording():
            if not live.own:  # a tool step's attempts are the step's
                span.set_attribute("planexec.tool.attempts", outcome.attempts)
            if error is not None:
                failed(span, error.kind, self._values.text(error.message))
            elif self.capture:
                span.set_attribute(TOOL_RESULT, self._values.content(outcome.output))
        if not live.own:
            span.end()

    def tool_abandoned(self, live: LiveCall | None) -> None:
        """The call did not end (it was cancelled, or the step's task stopped)."""
        _release(live)
        self._abandoned(live)

    @_guarded(None)
    def _abandoned(self, live: LiveCall | None) -> None:
        if live is None:
            return
        if not live.own:
            if live.span.is_recording():
                live.span.set_attribute(ERROR_TYPE, "cancelled")
            live.span.end()

    def model_abandoned(self, live: LiveCall | None) -> None:
        """The model call was cancelled."""
        self.tool_abandoned(live)

    # -- the fold ----------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """``event`` was just logged. (Guarded as the other methods are, written out: it is the
        one called for every event.)"""
        seq = self._seq
        self._seq = seq + 1
        try:
            if self.tracer is not None or self.instruments is not None:
                self._fold.apply(event)
            if self._logger is not None:
                self._logger.log(event, seq)
        except Exception as e:
            self._break(e)
