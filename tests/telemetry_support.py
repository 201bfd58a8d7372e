"""Telemetry tests' support: the SDK's in-memory exporter and reader, spans as plain data (so that
a process can hand its spans to another), and the run the trace tests follow.

The run (``shop_agent``): two fetches in parallel (each waits until the other has started), a
parse that fails, a patch that looks the price up instead, then a sensitive ``record`` step that
waits for a human's approval; the run is saved and left, and resumed (in another process) once
the approval is in the store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from planexec import Agent, Approvals, ToolError, tool
from planexec.store import RunStore
from planexec.telemetry import Telemetry
from planexec.testing import ScriptedModel
from tests.support import tool_step

SECRET = "sk-proj-Zq4T9wLmPx2Vb7Nc1Rd8Hs3Kf6Jg0Ya5Ue4Io9Pl2Mn7Bv"
"""An API key planted in goals, tool outputs and errors: it must never reach an exporter."""


@dataclass(frozen=True)
class SpanData:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    status: str
    status_message: str
    start: int
    end: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str, dict[str, Any]]]

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SpanData:
        return cls(
            **{
                **data,
                "events": [tuple(e) for e in data["events"]],
                "links": [tuple(link) for link in data["links"]],
            }
        )


def span_data(span: ReadableSpan) -> SpanData:
    ctx = span.context
    assert ctx is not None
    return SpanData(
        name=span.name,
        trace_id=f"{ctx.trace_id:032x}",
        span_id=f"{ctx.span_id:016x}",
        parent_id=None if span.parent is None else f"{span.parent.span_id:016x}",
        kind=span.kind.name,
        status=span.status.status_code.name,
        status_message=span.status.description or "",
        start=span.start_time or 0,
        end=span.end_time or 0,
        attributes=dict(span.attributes or {}),
        events=[(e.name, dict(e.attributes or {})) for e in span.events],
        links=[
            (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}", dict(link.attributes or {}))
            for link in span.links
        ],
    )


@dataclass
class Captured:
    """An SDK tracer and meter provider whose spans and metrics stay in memory."""

    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)

    def __post_init__(self) -> None:
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def telemetry(self, **settings: Any) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **settings)

    def spans(self) -> list[SpanData]:
        return [span_data(s) for s in self.exporter.get_finished_spans()]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Each metric's points: (attributes, value) — a sum's value, or a histogram's (count, sum)."""
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return found
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    points = found.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # type: ignore[union-attr]
                        points.append((dict(point.attributes or {}), value))
        return found

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def tree(spans: Sequence[SpanData]) -> list[tuple[int, str]]:
    """The spans as (depth, name) in start order, children under their parents."""
    by_parent: dict[str | None, list[SpanData]] = {}
    ids = {s.span_id for s in spans}
    for s in spans:
        by_parent.setdefault(s.parent_id if s.parent_id in ids else None, []).append(s)
    out: list[tuple[int, str]] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(by_parent.get(parent, []), key=lambda s: s.start):
            out.append((depth, s.name))
            walk(s.span_id, depth + 1)

    walk(None, 0)
    return out


def named(spans: Sequence[SpanData], name: str) -> list[SpanData]:
    return [s for s in spans if s.name == name]


def all_text(spans: Sequence[SpanData]) -> Iterator[str]:
    """Every piece of text an exporter would send for ``spans``."""
    for s in spans:
        yield json.dumps(s.to_json(), default=str)


# -- the run the trace tests follow --------------------------------------------------------------

PLAN = {
    "reason": "fetch the page and the catalogue together, then parse",
    "steps": [
        tool_step("page", "fetch", {"what": "page"}),
        tool_step("catalogue", "fetch", {"what": "catalogue"}),
        tool_step("parse", "parse", {"page": "${page}", "catalogue": "${catalogue}"}, "page", "catalogue"),
    ],
}
PATCH = {
    "reason": "the page has no price: look it up, then record it",
    "steps": [
        tool_step("lookup", "lookup", {"name": "${page.name}"}, "page"),
        tool_step("record", "record", {"price": "${lookup}"}, "lookup"),
    ],
}
ANSWER = {"answer": "the lamp costs 42"}


def shop_tools(recorded: list[int]) -> list[Any]:
    both = {"n": 0}
    started = asyncio.Event()

    @tool
    async def fetch(what: str) -> dict[str, str]:
        """Fetch a page or the catalogue."""
        both["n"] += 1
        if both["n"] == 2:
            started.set()
        await asyncio.wait_for(started.wait(), 10)  # both fetches run at once, or neither finishes
        return {"name": "lamp", "what": what, "note": f"token={SECRET}"}

    @tool
    async def parse(page: dict[str, str], catalogue: dict[str, str]) -> int:
        """Read the price from the page."""
        raise ToolError(f"no price on the page (the server said api_key={SECRET})")

    @tool
    async def lookup(name: str) -> int:
        """Look the price up in the catalogue."""
        return 42

    @tool(sensitive=True, side_effect=True)
    async def record(price: int) -> str:
        """Record the price in the ledger."""
        recorded.append(price)
        return "recorded"

    return [fetch, parse, lookup, record]


def shop_agent(replies: list[Any], store: RunStore | str, telemetry: Telemetry, recorded: list[int]) -> Agent:
    return Agent(
        ScriptedModel(replies),
        tools=shop_tools(recorded),
        store=store,
        approvals=Approvals(deferred=True),
        name="shop",
        telemetry=telemetry,
    )
