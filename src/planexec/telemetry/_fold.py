"""The spans of a run folded from its events: the run's, each planning round's and each step's,
with the events that happen to them (see :mod:`planexec.telemetry._run` for the tree)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

from planexec.log import (
    Event,
    PlanningStarted,
    PlanProposed,
    RunFinished,
    RunSuspended,
    StepCancelled,
    StepFailed,
    StepStarted,
    StepSucceeded,
    ToolCalled,
)
from planexec.telemetry._marks import MARKS, MAX_NAMES
from planexec.telemetry._metrics import RunMeters
from planexec.telemetry._names import (
    AGENT_NAME,
    INPUT_TOKENS,
    OPERATION,
    OUTPUT_MESSAGES,
    OUTPUT_TOKENS,
    SPAN_KIND_HINT,
    TOOL_CALL_ID,
    TOOL_NAME,
)
from planexec.telemetry._values import Values, failed
from planexec.trust import Provenance

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from planexec.log import RunState

__all__ = ["SpanFold", "StepSpan", "trust_attributes"]


def trust_attributes(labels: Mapping[str, Provenance] | None, name: Callable[[str], str]) -> dict[str, Any]:
    """A call's trust labels as span attributes: whether every argument is trusted, and the names
    of those that are not (none when the run labels nothing)."""
    if labels is None:
        return {}
    untrusted = [name(arg) for arg, label in labels.items() if not label.trusted]
    return {
        "planexec.trust.arguments_trusted": not untrusted,
        "planexec.trust.untrusted_arguments": untrusted[:MAX_NAMES],
    }


@dataclass(slots=True)
class StepSpan:
    span: Span
    started: float
    executor: str


class SpanFold:
    """What the spans need to remember between events, and how each event changes them."""

    def __init__(
        self,
        *,
        agent: str,
        state: RunState,
        tracer: Tracer | None,
        instruments: RunMeters | None,
        values: Values,
        capture: bool,
    ) -> None:
        self.agent = agent
        self.state = state
        self.tracer = tracer
        self.instruments = instruments
        self.values = values
        self.capture = capture
        self.run: Span | None = None
        """The run's span in this process (None before it begins and once it ended)."""
        self.run_started_at = 0.0
        self.round: Span | None = None
        self.rounds = 0
        self.steps: dict[str, StepSpan] = {}
        self.failures: list[Span] = []
        """Spans of steps that failed since the last planning round: the next round links to them."""
        self._run_context: tuple[Span, Context] | None = None

    def run_context(self) -> Context | None:
        """The context whose current span is the run's (made once per run span)."""
        run = self.run
        if run is None:
            return None
        made = self._run_context
        if made is None or made[0] is not run:
            made = self._run_context = (run, trace.set_span_in_context(run))
        return made[1]

    def apply(self, event: Event) -> None:
        """Fold ``event``, just logged, into the spans and metrics."""
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)

    def on_step(self, step_id: str, name: str, attributes: dict[str, Any]) -> None:
        """Add the span event ``name`` to the span of the step, while it runs."""
        rec = self.steps.get(step_id)
        if rec is not None and rec.span.is_recording():
            rec.span.add_event(name, attributes)

    # -- steps -------------------------------------------------------------------------------

    def _step_started(self, event: StepStarted) -> None:
        if self.tracer is None:
            self.steps[event.step_id] = StepSpan(span=trace.INVALID_SPAN, started=event.at, executor=event.executor)
            return
        # few attributes: a span per step is the most telemetry costs a run (the rest is in the log)
        step_id = self.values.name(event.step_id)  # a planner chose it: a key may be in it
        if event.tool is not None:
            name = f"execute_tool {event.tool}"
            attributes: dict[str, Any] = {
                OPERATION: "execute_tool",
                TOOL_NAME: event.tool,
                "planexec.step.id": step_id,
                SPAN_KIND_HINT: "TOOL",
            }
        else:
            name = f"invoke_agent {event.executor}"
            attributes = {
                OPERATION: "invoke_agent",
                AGENT_NAME: event.executor,
                "planexec.step.id": step_id,
                SPAN_KIND_HINT: "AGENT",
            }
        rec = self.state.steps.get(event.step_id)
        if rec is not None:
            attributes["planexec.plan.version"] = rec.plan_version
        attributes.update(trust_attributes(event.provenance, self.values.name))
        span = self.tracer.start_span(name, context=self.run_context(), kind=SpanKind.INTERNAL, attributes=attributes)
        self.steps[event.step_id] = StepSpan(span=span, started=event.at, executor=event.executor)

    def _step_ended(self, step_id: str) -> StepSpan | None:
        return self.steps.pop(step_id, None)

    def _step_succeeded(self, event: StepSucceeded) -> None:
        rec = self._step_ended(event.step_id)
        if rec is not None:
            span = rec.span
            if span.is_recording():
                ended: dict[str, Any] = {"planexec.step.status": "succeeded"}
                if event.attempts > 1:
                    ended["planexec.step.attempts"] = event.attempts
                if event.verdict.checks:
                    ended["planexec.step.verdict"] = "passed" if event.verdict.passed else "failed"
                if event.confidence is not None:
                    ended["planexec.step.confidence"] = event.confidence
                if self.capture:
                    ended["planexec.step.output"] = self.values.content(event.output)
                span.set_attributes(ended)
            span.end()
        if self.instruments is not None:
            self._count_step(rec, "succeeded", event.at)

    def _step_failed(self, event: StepFailed) -> None:
        rec = self._step_ended(event.step_id)
        if self.instruments is not None:
            self._count_step(rec, "failed", event.at)
        failing = rec.span if rec is not None else self._unstarted(event.step_id)
        if failing is not None and failing.is_recording():
            attributes: dict[str, Any] = {"planexec.step.status": "failed", "planexec.step.attempts": event.attempts}
            if event.verdict is not None:
                attributes["planexec.step.verdict"] = "passed" if event.verdict.passed else "failed"
            failing.set_attributes(attributes)
            failed(failing, event.error.kind, self.values.text(event.error.message))
            self.failures.append(failing)
            failing.end()

    def _step_cancelled(self, event: StepCancelled) -> None:
        rec = self._step_ended(event.step_id)
        if self.instruments is not None:
            self._count_step(rec, "cancelled", event.at)
        if rec is not None:
            if rec.span.is_recording():
                rec.span.set_attributes(
                    {"planexec.step.status": "cancelled", "planexec.step.cancelled": self.values.text(event.reason)}
                )
            rec.span.end()

    def _tool_refused(self, event: ToolCalled) -> None:
        """A call refused before any attempt (an unknown tool, a gated one): a span of no length."""
        if event.attempts != 0 or self.tracer is None:
            return
        name = self.values.name(event.tool)  # a model chose it: anything may be in it
        refused = self.tracer.start_span(
            f"execute_tool {name}",
            attributes={
                OPERATION: "execute_tool",
                TOOL_NAME: name,
                TOOL_CALL_ID: self.values.name(event.call_id),
                "planexec.step.id": self.values.name(event.step_id),
                "planexec.tool.attempts": 0,
                SPAN_KIND_HINT: "TOOL",
                **trust_attributes(event.provenance, self.values.name),
            },
        )
        if event.violations:
            refused.set_attribute(
                "planexec.trust.violations", [self.values.text(str(v)) for v in event.violations[:MAX_NAMES]]
            )
        if event.error is not None:
            failed(refused, event.error.kind, self.values.text(event.error.message))
        refused.end()

    def _count_step(self, rec: StepSpan | None, status: str, at: float) -> None:
        """Count a step that ended at ``at`` (the log's time, as its start's: right in replays too)."""
        assert self.instruments is not None
        executor = rec.executor if rec is not None else ""
        duration = None if rec is None else max(0.0, at - rec.started)
        self.instruments.step(self.agent, executor, status, duration)

    def _unstarted(self, step_id: str) -> Span | None:
        """A step that failed before it started (its arguments could not be bound): a span of
        no length, so that the failure shows and a patch can link to it."""
        if self.tracer is None:
            return None
        step_id = self.values.name(step_id)
        return self.tracer.start_span(
            f"step {step_id}",
            context=self.run_context(),
            attributes={"planexec.step.id": step_id, "planexec.step.status": "failed", "planexec.step.started": False},
        )

    # -- planning rounds ---------------------------------------------------------------------

    def _round_started(self, event: PlanningStarted) -> None:
        fold = self
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
            attributes["planexec.planning.why"] = self.values.text(event.why)
        fold.round = self.tracer.start_span(
            f"plan {self.agent}", context=context, kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )

    def _plan_proposed(self, event: PlanProposed) -> None:
        fold = self
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
                span.set_attribute("planexec.plan", self.values.content([s.id for s in plan.steps]))
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
        fold = self
        if fold.round is not None:
            fold.round.end()
            fold.round = None

    # -- the end -----------------------------------------------------------------------------

    def _run_suspended(self, event: RunSuspended) -> None:
        self._close_round()
        if self.instruments is not None:
            self.instruments.flush()
        run = self.run
        if run is not None:
            run.add_event("planexec.suspended", {"planexec.approvals": list(event.approvals)})
            run.set_attribute("planexec.run.status", "suspended")
            run.end()
            self.run = None

    def _run_finished(self, event: RunFinished) -> None:
        fold = self
        run = fold.run
        if run is not None and event.answer_provenance is not None:
            run.set_attribute("planexec.trust.answer_trusted", event.answer_provenance.trusted)
        if run is not None and event.stop.violations:
            run.set_attribute(
                "planexec.trust.violations", [self.values.text(str(v)) for v in event.stop.violations[:MAX_NAMES]]
            )
        self._close_round()
        stop = event.stop
        if self.instruments is not None:
            self.instruments.run(self.agent, stop.kind, stop.code, max(0.0, event.at - self.run_started_at))
        span = fold.run
        if span is None:
            return
        if span.is_recording():
            state = self.state
            attributes: dict[str, Any] = {
                "planexec.stop_reason": stop.kind,
                "planexec.run.status": "finished",
                "planexec.cost": round(state.cost, 9),
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
                attributes["planexec.stop_detail"] = self.values.text(stop.detail)
            span.set_attributes(attributes)
            if self.capture and event.answer is not None:
                span.set_attribute(
                    OUTPUT_MESSAGES,
                    self.values.content([{"role": "assistant", "parts": [{"type": "text", "content": event.answer}]}]),
                )
            if stop.kind == "error":
                failed(span, stop.code or "error", self.values.text(stop.detail))
        span.end()
        fold.run = None

    def end_all(self) -> None:
        """Close whatever is still open (the run ended in this process without a last event)."""
        if self.instruments is not None:
            self.instruments.flush()
        for rec in self.steps.values():
            rec.span.end()
        self.steps.clear()
        self._close_round()
        if self.run is not None:
            if self.run.is_recording():
                self.run.set_attribute("planexec.run.status", "left")
            self.run.end()
            self.run = None


_SPANS: dict[type, Callable[[SpanFold, Any], None]] = {
    StepStarted: SpanFold._step_started,
    StepSucceeded: SpanFold._step_succeeded,
    StepFailed: SpanFold._step_failed,
    StepCancelled: SpanFold._step_cancelled,
    ToolCalled: SpanFold._tool_refused,
    PlanningStarted: SpanFold._round_started,
    PlanProposed: SpanFold._plan_proposed,
    RunSuspended: SpanFold._run_suspended,
    RunFinished: SpanFold._run_finished,
}
"""The events that open or close spans (or count in metrics), each with its method; the marks
others leave on open spans are in :data:`~planexec.telemetry._marks.MARKS`."""

_HANDLERS: dict[type, Callable[[SpanFold, Any], None]] = {**MARKS, **_SPANS}
