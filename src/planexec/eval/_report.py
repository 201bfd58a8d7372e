"""The evaluation report: every run's checks and measures, a summary per task and overall, and its
versioned JSON form (what ``--json`` writes and ``--baseline`` reads).

The JSON form never holds NaN or infinities (JSON has neither): such a measure is written as
``null`` with a line in ``notes`` saying what it was. A report read back as a baseline is held to
the format strictly (a number is a number, not a text or a boolean; every number finite) and to
the bounds of :mod:`planexec.eval._limits` (size, nesting).

Report format changelog (bump ``REPORT_VERSION`` and add a line on every change):
    1: first version.
    2: ``notes``: what was changed to write the report (a measure that was not finite, written as null).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from planexec.errors import Problem, UsageError
from planexec.eval._files import read_json
from planexec.eval._limits import MAX_REPORT_BYTES, MAX_REPORT_VALUES, shape_problems, shown
from planexec.eval._matchers import CheckOutcome
from planexec.eval._metrics import RunMetrics

__all__ = [
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "EvalReport",
    "RunReport",
    "Summary",
    "TaskReport",
    "dump_report",
    "json_text",
    "load_report",
    "read_report",
    "report_text",
    "summarize",
]

REPORT_FORMAT: Literal["planexec.eval.report"] = "planexec.eval.report"
REPORT_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """One run of one task: whether it passed and why not, its checks and its measures."""

    task: str
    index: int
    """Which repetition (0-based)."""
    passed: bool
    reasons: tuple[str, ...]
    """Why it failed: one line per failed check (empty when it passed)."""
    stop: str
    stop_detail: str
    answer: str | None
    tools_called: tuple[str, ...]
    checks: tuple[CheckOutcome, ...]
    disagreement: bool | None
    """Whether the deterministic answer check and the judge disagreed (None: not both ran)."""
    metrics: RunMetrics
    judge_cost: float = 0.0
    fault_seed: int | None = None
    run_id: str | None = None
    """The run's id in the store, when runs were logged to one."""


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Measures over a set of runs (one task's, or all). Rates are None when nothing was counted."""

    runs: int
    passed: int
    pass_rate: float
    steps_mean: float
    tool_calls: int
    tool_calls_ok: int
    tool_success_rate: float | None
    replans: int
    stalls: int
    escalations: int
    judged_both: int
    """Runs whose answer had both a deterministic check and a judge."""
    disagreements: int
    disagreement_rate: float | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost: float
    cost_mean: float
    judge_cost: float
    latency_mean: float
    latency_max: float
    parallelism_mean: float | None


@dataclass(frozen=True, kw_only=True)
class TaskReport:
    id: str
    summary: Summary
    runs: tuple[RunReport, ...]
    faults: str | dict[str, Any] | None = None
    """The fault profile its runs met (the command line's, else the task's own), if any."""


@dataclass(frozen=True, kw_only=True)
class EvalReport:
    """One evaluation of a suite."""

    format: Literal["planexec.eval.report"] = "planexec.eval.report"
    version: int = REPORT_VERSION
    suite: str
    suite_path: str | None = None
    agent: Literal["planexec", "react"] = "planexec"
    seed: int = 0
    faults: str | dict[str, Any] | None = None
    """The fault profile given on the command line, if any (tasks may name their own)."""
    created_at: str = ""
    summary: Summary
    tasks: tuple[TaskReport, ...]
    notes: tuple[str, ...] = ()
    """What was changed to write the report as JSON (each measure that was not finite)."""

    @property
    def failed_runs(self) -> list[RunReport]:
        return [r for t in self.tasks for r in t.runs if not r.passed]

    def task(self, task_id: str) -> TaskReport | None:
        return next((t for t in self.tasks if t.id == task_id), None)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(runs: Iterable[RunReport]) -> Summary:
    runs = list(runs)
    m = [r.metrics for r in runs]
    calls, ok = sum(x.tool_calls for x in m), sum(x.tool_calls_ok for x in m)
    both = [r for r in runs if r.disagreement is not None]
    disagreements = sum(bool(r.disagreement) for r in both)
    parallel = [x.parallelism for x in m if x.parallelism is not None]
    passed = sum(r.passed for r in runs)
    return Summary(
        runs=len(runs),
        passed=passed,
        pass_rate=passed / len(runs) if runs else 0.0,
        steps_mean=_mean([x.steps for x in m]),
        tool_calls=calls,
        tool_calls_ok=ok,
        tool_success_rate=ok / calls if calls else None,
        replans=sum(x.replans for x in m),
        stalls=sum(x.stalls for x in m),
        escalations=sum(x.escalations for x in m),
        judged_both=len(both),
        disagreements=disagreements,
        disagreement_rate=disagreements / len(both) if both else None,
        model_calls=sum(x.model_calls for x in m),
        input_tokens=sum(x.input_tokens for x in m),
        output_tokens=sum(x.output_tokens for x in m),
        cost=sum(x.cost for x in m),
        cost_mean=_mean([x.cost for x in m]),
        judge_cost=sum(r.judge_cost for r in runs),
        latency_mean=_mean([x.latency for x in m]),
        latency_max=max((x.latency for x in m), default=0.0),
        parallelism_mean=_mean(parallel) if parallel else None,
    )


_ADAPTER: TypeAdapter[EvalReport] = TypeAdapter(EvalReport)


def dump_report(report: EvalReport) -> dict[str, Any]:
    """The report as JSON data: a measure that is not finite becomes None, with a note saying so."""
    data: dict[str, Any] = _ADAPTER.dump_python(report, mode="json")
    notes: list[str] = list(data.get("notes") or ())
    finite: dict[str, Any] = _finite(data, "", notes)
    finite["notes"] = list(dict.fromkeys(notes))
    return finite


def _finite(value: Any, path: str, notes: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        notes.append(f"{path}: {value} written as null")
        return None
    if isinstance(value, dict):
        return {key: _finite(item, f"{path}.{key}" if path else str(key), notes) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item, f"{path}[{index}]", notes) for index, item in enumerate(value)]
    return value


def json_text(data: Mapping[str, Any]) -> str:
    """JSON data as the report's text (NaN and infinities refused: ``dump_report`` has replaced them)."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def report_text(report: EvalReport) -> str:
    return json_text(dump_report(report))


def read_report(path: Path) -> EvalReport:
    """The report in the JSON file at ``path``, within the limits of a report; raises ``UsageError``."""
    data = read_json(path, limit=MAX_REPORT_BYTES, what=f"the report {path}")
    return load_report(data, where=str(path))


def load_report(data: Mapping[str, Any], *, where: str = "report") -> EvalReport:
    """A report from JSON data written by any report version so far; raises ``UsageError``.

    Numbers must be numbers of the field's kind (never texts or booleans) and finite; data nested
    too deep or too large to walk safely is refused before it is looked at."""
    if not isinstance(data, Mapping):
        raise UsageError(f'{where} is not an evaluation report (no "format": "{REPORT_FORMAT}")')
    unsafe = shape_problems(data, finite=True, code="report", max_values=MAX_REPORT_VALUES)
    if unsafe:
        raise UsageError(f"{where} cannot be read as a report", unsafe)
    if data.get("format") != REPORT_FORMAT:
        raise UsageError(f'{where} is not an evaluation report (no "format": "{REPORT_FORMAT}")')
    version = data.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise UsageError(f"{where} has report version {shown(version)}; this planexec reads {readable}")
    try:
        text = json.dumps(dict(data), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise UsageError(f"{where} is not JSON data", [Problem(code="report", where="", message=str(e))]) from None
    try:
        return _ADAPTER.validate_json(text, strict=True)
    except ValidationError as e:
        problems = [
            Problem(code="report", where=".".join(map(str, err["loc"])), message=err["msg"]) for err in e.errors()
        ]
        notes = data.get("notes")
        if isinstance(notes, list):
            problems += [Problem(code="report", where="notes", message=n) for n in notes if isinstance(n, str)]
        raise UsageError(f"{where} does not fit the report format", problems) from None
