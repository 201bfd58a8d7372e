"""Phoenix as the tests' trace backend: a small trace exported with the OpenTelemetry SDK over
OTLP/HTTP arrives whole, and reads back through Phoenix's REST API in the shape that
tests/phoenix_support.py describes."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, format_span_id, format_trace_id
from opentelemetry.util.types import AttributeValue

from tests.phoenix_support import Phoenix, PhoenixSpan

ROOT_ATTRIBUTES: dict[str, AttributeValue] = {
    "planexec.run.id": "run-1",
    "planexec.plan.steps": 2,
    "planexec.budget.seconds": 12.5,
    "planexec.dry_run": False,
    "planexec.tools": ("search", "fetch"),
    "planexec.payload": '{"goal": "x"}',
}


def _project() -> str:
    return f"planexec-test-{uuid.uuid4().hex[:12]}"


def _export_tree(phoenix: Phoenix, project: str) -> dict[str, SpanContext]:
    """Export plan → (step-a → tool-call, step-b) to ``project``; the spans' contexts by name."""
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(BatchSpanProcessor(phoenix.exporter()))
    tracer = provider.get_tracer("planexec.tests")
    with tracer.start_as_current_span(
        "plan", attributes={**ROOT_ATTRIBUTES, "openinference.span.kind": "CHAIN"}
    ) as root:
        with tracer.start_as_current_span("step-a", attributes={"planexec.step.id": "a"}) as step_a:
            step_a.add_event("retry", {"planexec.reason": "timeout", "planexec.delay_ms": 250, "planexec.last": True})
            with tracer.start_as_current_span(
                "tool-call",
                attributes={"planexec.tool": "search", "planexec.score": 0.75},
                links=[Link(root.get_span_context(), {"planexec.link": "plan"})],
            ) as tool_call:
                pass
        with tracer.start_as_current_span("step-b", attributes={"planexec.step.id": "b"}) as step_b:
            step_b.set_status(Status(StatusCode.ERROR, "tool failed"))
        root.set_status(Status(StatusCode.OK))
    assert provider.force_flush(10_000)
    provider.shutdown()
    return {
        "plan": root.get_span_context(),
        "step-a": step_a.get_span_context(),
        "step-b": step_b.get_span_context(),
        "tool-call": tool_call.get_span_context(),
    }


def _by_name(spans: list[PhoenixSpan]) -> dict[str, PhoenixSpan]:
    named = {s.name: s for s in spans}
    assert len(named) == len(spans), [s.name for s in spans]
    return named


def test_a_trace_arrives_whole(phoenix: Phoenix) -> None:
    project = _project()
    sent = _export_tree(phoenix, project)
    trace_id = format_trace_id(sent["plan"].trace_id)

    got = _by_name(phoenix.wait_for_trace(project, trace_id, 4))

    assert set(got) == {"plan", "step-a", "step-b", "tool-call"}
    assert {s.trace_id for s in got.values()} == {trace_id}
    for name, context in sent.items():
        assert got[name].span_id == format_span_id(context.span_id)
    plan, step_a, step_b, tool_call = got["plan"], got["step-a"], got["step-b"], got["tool-call"]
    assert plan.parent_id is None
    assert step_a.parent_id == plan.span_id
    assert step_b.parent_id == plan.span_id
    assert tool_call.parent_id == step_a.span_id

    # attributes keep their keys and JSON types; a JSON string stays a string; tuples come back as lists;
    # openinference.span.kind becomes span_kind
    assert plan.attributes == {**ROOT_ATTRIBUTES, "planexec.tools": ["search", "fetch"]}
    assert type(plan.attributes["planexec.plan.steps"]) is int
    assert type(plan.attributes["planexec.budget.seconds"]) is float
    assert type(plan.attributes["planexec.dry_run"]) is bool
    assert plan.span_kind == "CHAIN"
    assert step_a.span_kind == "UNKNOWN"
    assert tool_call.attributes == {"planexec.tool": "search", "planexec.score": 0.75}
    assert step_a.attributes == {"planexec.step.id": "a"}

    assert (plan.status_code, plan.status_message) == ("OK", "")
    assert (step_b.status_code, step_b.status_message) == ("ERROR", "tool failed")
    assert step_a.status_code == "UNSET"

    assert len(step_a.events) == 1
    event = step_a.events[0]
    assert event.name == "retry"
    assert event.attributes == {"planexec.reason": "timeout", "planexec.delay_ms": 250, "planexec.last": True}
    assert event.timestamp.endswith("+00:00")
    assert all(not s.events for s in (plan, step_b, tool_call))
    assert plan.start_time <= step_a.start_time <= tool_call.start_time <= tool_call.end_time <= plan.end_time

    # Phoenix keeps no span links: the REST items have no such field
    assert "links" not in tool_call.raw
    assert set(tool_call.raw) == {
        "id",
        "name",
        "context",
        "span_kind",
        "parent_id",
        "start_time",
        "end_time",
        "status_code",
        "status_message",
        "attributes",
        "events",
    }


def test_reading_a_project_page_by_page(phoenix: Phoenix) -> None:
    project = _project()
    assert phoenix.spans(project) == []  # a project with no span yet
    first = _export_tree(phoenix, project)
    second = _export_tree(phoenix, project)

    every = phoenix.wait_for_spans(project, 8)
    assert len(every) == 8
    assert [s.span_id for s in phoenix.spans(project, page_size=3)] == [s.span_id for s in every]
    for sent in (first, second):
        trace_id = format_trace_id(sent["plan"].trace_id)
        assert {s.name for s in phoenix.spans(project, trace_id=trace_id)} == {"plan", "step-a", "step-b", "tool-call"}


def test_spans_without_a_project_name_go_to_the_default_project(phoenix: Phoenix) -> None:
    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(BatchSpanProcessor(phoenix.exporter()))
    with provider.get_tracer("planexec.tests").start_as_current_span("unnamed") as span:
        context = span.get_span_context()
    assert provider.force_flush(10_000)
    provider.shutdown()
    (got,) = phoenix.wait_for_trace("default", format_trace_id(context.trace_id), 1)
    assert (got.name, got.span_id, got.parent_id) == ("unnamed", format_span_id(context.span_id), None)
