"""What telemetry costs a run: W1's framework time per step with tracing on and off.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.telemetry_overhead`` (``--steps`` and
``--rounds`` to change the sizes; ``--against-tree DIR`` also times a checkout of planexec from
before telemetry existed, e.g. ``git worktree add /tmp/before 3680620``).

W1 is a chain of ``--steps`` dependent no-op tool steps (1,000 by default) planned by a scripted
model in one call; a step's figure is the run's wall time ÷ steps. In one process, alternating,
``--rounds`` runs each (after a warm-up run of each) of:

* ``off``: the default ``Telemetry()`` with no OpenTelemetry SDK configured and no log handler:
  the run has no telemetry to do;
* ``off, the SDK's span per step alone``: telemetry off, and the tool itself makes one span of
  the SDK per call (five attributes, the same provider): the floor of tracing one span per step;
* ``traces``: the SDK's ``TracerProvider`` with a ``BatchSpanProcessor`` and an exporter that
  drops every batch (a span per step and per planning round, a chat span per model call);
* ``traces + metrics``: and the SDK's ``MeterProvider`` (an in-memory reader, never read);
* ``traces + metrics + logs``: and the ``planexec`` logger printing INFO records to a stream
  that discards them.

The figure of each is the median over its rounds; ratios are to ``off``. With
``--against-tree``, ``off`` is also measured against that tree in separate processes (the same
W1 script, alternating, ``--rounds`` processes each): the cost of the telemetry hooks when no SDK
is configured.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks.core import W1_BUDGET, _noop_tool, chain_plan
from planexec import Agent, Tool, tool
from planexec.telemetry import Telemetry, log_to_stream
from planexec.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[2]


class _Dropping(SpanExporter):
    """An exporter that sends nothing: what tracing costs the run, not the network."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _spanning_tool(tracer: Any) -> Tool:
    """W1's no-op tool, making one span of the SDK per call itself: what the SDK alone costs for
    the span a step gets, with planexec's telemetry off (the floor of tracing a step)."""

    @tool
    async def noop(x: int = 0) -> int:
        """Return x."""
        tracer.start_span("noop", attributes={"a": "b", "c": "d", "e": "f", "g": "h", "i": 1}).end()
        return x

    return noop


async def _w1(steps: int, telemetry: Telemetry, the_tool: Tool | None = None) -> float:
    agent = Agent(
        ScriptedModel([chain_plan(steps), {"answer": "ok"}]),
        tools=[the_tool or _noop_tool()],
        budget=W1_BUDGET,
        store=None,
        telemetry=telemetry,
    )
    t0 = time.perf_counter()
    result = await agent.run("chain")
    elapsed = time.perf_counter() - t0
    assert result.ok, result.stop
    return elapsed / steps * 1e6


async def in_process(steps: int, rounds: int) -> dict[str, Any]:
    exporter = _Dropping()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=65536))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    floor_tool = _spanning_tool(tracer_provider.get_tracer("floor"))
    configs: dict[str, Telemetry] = {
        "off": Telemetry(),
        "off, the SDK's span per step alone": Telemetry(),
        "traces": Telemetry(tracer_provider=tracer_provider, metrics=False),
        "traces + metrics": Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider),
        "traces + metrics + logs": Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider),
    }
    figures: dict[str, list[float]] = {name: [] for name in configs}

    async def once(name: str) -> float:
        stop = log_to_stream("INFO", io.StringIO()) if name.endswith("logs") else None
        try:
            return await _w1(steps, configs[name], floor_tool if name.endswith("alone") else None)
        finally:
            if stop is not None:
                stop()

    for name in configs:  # warm-up
        await once(name)
    for _ in range(rounds):
        for name in configs:
            figures[name].append(await once(name))
    tracer_provider.force_flush()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    medians = {name: statistics.median(values) for name, values in figures.items()}
    return {"medians_us_per_step": medians, "spans_exported": exporter.spans, "runs": figures}


_W1_SCRIPT = """
import asyncio, json, time
from benchmarks.core import W1_BUDGET, _noop_tool, chain_plan
from planexec import Agent
from planexec.testing import ScriptedModel

async def main(steps):
    values = []
    for _ in range(3):
        agent = Agent(ScriptedModel([chain_plan(steps), {"answer": "ok"}]), tools=[_noop_tool()],
                      budget=W1_BUDGET, store=None)
        t0 = time.perf_counter()
        result = await agent.run("chain")
        values.append((time.perf_counter() - t0) / steps * 1e6)
        assert result.ok
    print(json.dumps(min(values[1:])))

asyncio.run(main(STEPS))
"""


def against_tree(tree: Path, steps: int, rounds: int) -> dict[str, Any]:
    """W1 with no SDK in fresh processes, this tree against ``tree``, alternating."""
    script = _W1_SCRIPT.replace("STEPS", str(steps))
    figures: dict[str, list[float]] = {"this tree": [], "before": []}
    for _ in range(rounds):
        for name, src in (("this tree", ROOT / "src"), ("before", tree / "src")):
            env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
            out = subprocess.run(
                [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, timeout=600
            )
            figures[name].append(float(out.stdout.strip()))
    medians = {name: statistics.median(v) for name, v in figures.items()}
    return {"medians_us_per_step": medians, "runs": figures}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against-tree", type=Path, default=None)
    args = parser.parse_args(argv)
    report = asyncio.run(in_process(args.steps, args.rounds))
    medians = report["medians_us_per_step"]
    off = medians["off"]
    print(f"W1, N = {args.steps}: framework time per step, median of {args.rounds} runs each, alternating")
    for name, value in medians.items():
        print(f"  {name:36} {value:8.1f} µs   ×{value / off:.2f}")
    print(f"  spans exported (dropped): {report['spans_exported']:,}")
    if args.against_tree is not None:
        before = against_tree(args.against_tree.resolve(), args.steps, args.rounds)
        m = before["medians_us_per_step"]
        print(
            f"no SDK, fresh processes ({args.rounds} each): "
            f"this tree {m['this tree']:.1f} µs, before {m['before']:.1f} µs"
        )
        print(f"  ratio this tree / before: ×{m['this tree'] / m['before']:.3f}")
        report["against_tree"] = before
    print(json.dumps(report["medians_us_per_step"]))


if __name__ == "__main__":
    main()
