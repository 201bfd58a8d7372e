"""What one run measured, read from its result and event log — the same measures for a
planner–executor run and a ReAct run, so that the two compare.

* ``steps``: steps started (ReAct: tool calls asked for — each is one action).
* ``tool_calls`` / ``tool_calls_ok``: every tool call asked for (a tool step, or a call a model made
  inside a step), and those that succeeded. A retried call counts once, by its final outcome; a call
  refused before it ran (unknown tool, arguments that do not fit) counts as failed.
* ``replans``: plan patches after failures. ``stalls``: ``stall_detected`` events.
* ``escalations``: approvals requested, plus one when the run stopped ``rejected``, ``waiting`` or
  ``escalated``.
* ``latency``: the run's wall time, from its first event to its last (the run's own clock).
* ``spoiled`` (beside ``tools_called``): whether each call's last attempt failed by a fault the
  run's fault profile injected — a tool step's, or a ReAct call's (calls inside model steps are
  never marked). The tool checks leave those calls out: the profile failed them, not the agent.
* ``parallelism``: the sum of the durations of its steps (ReAct: of its tool calls) over its wall
  time — above 1 when work overlapped. None when the run took no measurable time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planexec.log import (
    ApprovalRequested,
    RunFinished,
    RunResult,
    StallDetected,
    StepCancelled,
    StepFailed,
    StepRequeued,
    StepStarted,
    StepSucceeded,
    StopReason,
    ToolCalled,
)
from planexec.react import ReactResult

if TYPE_CHECKING:
    from planexec.faults import FaultProfile

__all__ = ["RunMetrics", "Trace", "joined_trace", "trace_of"]

_ESCALATED_STOPS = ("rejected", "waiting", "escalated")


@dataclass(frozen=True, kw_only=True)
class RunMetrics:
    steps: int
    tool_calls: int
    tool_calls_ok: int
    replans: int
    stalls: int
    escalations: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost: float
    latency: float
    parallelism: float | None


@dataclass(frozen=True, kw_only=True)
class Trace:
    """A run as the checks and the report see it, whichever agent ran it."""

    answer: str | None
    stop: StopReason
    tools_called: tuple[str, ...]
    """Every tool call asked for, in the order the log records it."""
    metrics: RunMetrics
    run_id: str
    spoiled: tuple[bool, ...] = ()
    """For each of ``tools_called``: whether an injected fault failed its last attempt."""

    @property
    def tools_chosen(self) -> tuple[str, ...]:
        """``tools_called`` without the calls an injected fault failed."""
        marks = self.spoiled or (False,) * len(self.tools_called)
        return tuple(tool for tool, spoiled in zip(self.tools_called, marks, strict=True) if not spoiled)


def trace_of(result: RunResult | ReactResult, faults: FaultProfile | None = None) -> Trace:
    """The run's trace; ``faults``: the profile the run met, to tell the calls it failed."""
    if isinstance(result, ReactResult):
        return _react_trace(result, faults)
    return _planexec_trace(result, faults)


def joined_trace(traces: Sequence[Trace]) -> Trace:
    """The turns of one session as one run: counts, tokens, cost and latency added up, the calls
    of every turn in order, the last turn's answer, the first stop that was not ``goal_met`` (else
    the last), the first turn's run id; parallelism over the turns' wall time together."""
    if len(traces) == 1:
        return traces[0]
    if not traces:
        raise ValueError("a session of no turns")
    stop = next((t.stop for t in traces if not t.stop.ok), traces[-1].stop)
    ms = [t.metrics for t in traces]
    wall = sum(m.latency for m in ms)
    busy = sum((m.parallelism or 0.0) * m.latency for m in ms)
    metrics = RunMetrics(
        **{
            name: sum(getattr(m, name) for m in ms)
            for name in (
                "steps",
                "tool_calls",
                "tool_calls_ok",
                "replans",
                "stalls",
                "escalations",
                "model_calls",
                "input_tokens",
                "output_tokens",
                "cost",
            )
        },
        latency=wall,
        parallelism=busy / wall if wall > 0 else None,
    )
    return Trace(
        answer=traces[-1].answer,
        stop=stop,
        tools_called=tuple(tool for t in traces for tool in t.tools_called),
        metrics=metrics,
        run_id=traces[0].run_id,
        spoiled=tuple(mark for t in traces for mark in (t.spoiled or (False,) * len(t.tools_called))),
    )


def _injected(faults: FaultProfile | None, run_id: str, tool: str, key: str | None, attempts: int) -> bool:
    """Whether ``faults`` failed the last attempt of a call with idempotency key ``key``."""
    if faults is None or key is None or attempts < 1:
        return False
    return faults.tool_fault(tool, key.removeprefix(f"{run_id}:"), attempts) is not None


def _planexec_trace(result: RunResult, faults: FaultProfile | None) -> Trace:
    calls: list[tuple[str, bool]] = []
    spoiled: list[bool] = []
    running: dict[str, tuple[float, int | None, str | None]] = {}
    """Steps under way: when each started, its index in ``calls`` when it is a tool step, its key."""
    busy = 0.0
    steps = stalls = approvals = 0

    def close(step_id: str, at: float, ok: bool, attempts: int = 0) -> None:
        nonlocal busy
        started = running.pop(step_id, None)
        if started is None:
            return
        busy += max(0.0, at - started[0])
        index = started[1]
        if index is not None:
            tool = calls[index][0]
            calls[index] = (tool, ok)
            spoiled[index] = not ok and _injected(faults, result.run_id, tool, started[2], attempts)

    for e in result.events:
        if isinstance(e, StepStarted):
            steps += 1
            index = None
            if e.tool is not None:
                index = len(calls)
                calls.append((e.tool, False))
                spoiled.append(False)
            running[e.step_id] = (e.at, index, e.idempotency_key)
        elif isinstance(e, StepSucceeded):
            close(e.step_id, e.at, True)
        elif isinstance(e, StepFailed):
            close(e.step_id, e.at, False, e.attempts)
        elif isinstance(e, StepCancelled | StepRequeued):
            close(e.step_id, e.at, False)
        elif isinstance(e, ToolCalled):
            calls.append((e.tool, e.error is None))
            spoiled.append(False)
        elif isinstance(e, StallDetected):
            stalls += 1
        elif isinstance(e, ApprovalRequested):
            approvals += 1
        elif isinstance(e, RunFinished):
            for step_id in list(running):
                close(step_id, e.at, False)
    wall = result.duration
    metrics = RunMetrics(
        steps=steps,
        tool_calls=len(calls),
        tool_calls_ok=sum(ok for _, ok in calls),
        replans=result.replans,
        stalls=stalls,
        escalations=approvals + (result.stop.kind in _ESCALATED_STOPS),
        model_calls=result.model_calls,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        cost=result.cost,
        latency=wall,
        parallelism=busy / wall if wall > 0 else None,
    )
    return Trace(
        answer=result.answer,
        stop=result.stop,
        tools_called=tuple(name for name, _ in calls),
        metrics=metrics,
        run_id=result.run_id,
        spoiled=tuple(spoiled),
    )


def _react_trace(result: ReactResult, faults: FaultProfile | None) -> Trace:
    wall = result.duration
    busy = sum(c.duration for c in result.calls)
    metrics = RunMetrics(
        steps=len(result.calls),
        tool_calls=len(result.calls),
        tool_calls_ok=sum(c.error is None for c in result.calls),
        replans=0,
        stalls=sum(isinstance(e, StallDetected) for e in result.events),
        escalations=int(result.stop.kind in _ESCALATED_STOPS),
        model_calls=result.model_calls,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        cost=result.cost,
        latency=wall,
        parallelism=busy / wall if wall > 0 else None,
    )
    return Trace(
        answer=result.answer,
        stop=result.stop,
        tools_called=tuple(c.tool for c in result.calls),
        metrics=metrics,
        run_id=result.run_id,
        spoiled=tuple(
            c.error is not None
            and _injected(faults, result.run_id, c.tool, f"{result.run_id}:{c.step_id}:{c.call_id}", c.attempts)
            for c in result.calls
        ),
    )
