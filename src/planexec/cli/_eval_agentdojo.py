"""``planexec eval agentdojo:SUITE``: AgentDojo's suites under planexec's defence settings, as a
table per setting (utility, utility under attack, attack success, calls held for a human, planning
cost per task), optionally written as JSON.

AgentDojo is imported only here, when such a suite is asked for: the provider SDKs it imports
take seconds, which no other command should pay.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from planexec._util.plural import counted
from planexec.cli._common import EXIT_OK, make_console, problem_exit, say
from planexec.cli._options import Problems
from planexec.errors import UsageError

__all__ = ["AGENTDOJO_OPTIONS", "AGENTDOJO_PREFIX", "OTHER_OPTIONS", "agentdojo_eval"]

AGENTDOJO_PREFIX = "agentdojo:"

AGENTDOJO_OPTIONS = ("defence", "attack", "injection_ids")
"""Options that shape only a suite of AgentDojo's tasks."""

OTHER_OPTIONS = (
    "baseline",
    "faults",
    "seed",
    "store_url",
    "tolerance_pass_rate",
    "tolerance_cost",
    "tolerance_latency",
    "fail_on_task_failure",
    "react_model",
    "escalate_to",
    "escalate_on",
    "confidence_below",
    "fail_one",
)
"""Options of ``planexec eval`` that an AgentDojo suite does not take (given, they are refused)."""

REPORT_FORMAT = "planexec.agentdojo"
REPORT_VERSION = 1


def _flag(name: str) -> str:
    return "--store" if name == "store_url" else f"--{name.replace('_', '-')}"


def agentdojo_eval(ctx: click.Context, suite: str, given: Mapping[str, Any]) -> None:
    """Run the suite as the options ``given`` (None: not given) ask; exit 0, or 2 listing every
    problem with them."""
    from planexec.agentdojo import DojoSettings, run_suite, settings_problems

    problems = Problems()
    for name in OTHER_OPTIONS:
        if given.get(name) not in (None, (), False):
            problems.add(_flag(name), "does not apply to AgentDojo's suites (agentdojo:SUITE)")
    if given.get("agent") not in (None, "planexec"):
        problems.add("--agent", "AgentDojo's suites run with the planexec agent")
    json_out = given.get("json_out")
    if json_out not in (None, "-") and Path(str(json_out)).is_dir():
        problems.add("--json", f"{json_out} is a folder")

    def ids(key: str) -> list[str] | None:
        raw = given.get(key)
        return None if raw is None else [i.strip() for i in str(raw).split(",") if i.strip()]

    settings = DojoSettings(
        defences=list(given["defence"]) if given.get("defence") else None,
        attack=str(given.get("attack") or "important_instructions"),
        planner=given.get("planner"),
        executor=given.get("executor"),
        policy=given.get("policy"),
        user_tasks=ids("ids"),
        injection_tasks=ids("injection_ids"),
        limit=given.get("limit"),
        concurrency=given.get("concurrency") or 4,
    )
    flags = {
        "suite": "SUITE",
        "defences": "--defence",
        "attack": "--attack",
        "policy": "--policy",
        "limit": "--limit",
        "concurrency": "--concurrency",
        "user_tasks": "--ids",
        "injection_tasks": "--injection-ids",
        "planner": "--planner",
        "executor": "--executor",
        "agentdojo": "agentdojo",
    }
    try:
        found = settings_problems(suite, settings)
    except UsageError as e:  # AgentDojo is not installed
        found = list(e.problems)
    for p in found:
        where = p.where.split("[", 1)[0]
        problems.add(flags.get(where, where), p.message)
    if problems:
        problem_exit(ctx, problems)
    console = make_console(as_json=json_out == "-")
    progress = _progress(console, suite, no_live=bool(given.get("no_live")))
    try:
        report = asyncio.run(run_suite(suite, settings, progress=progress))
    finally:
        progress.close()
    _show(report, console, json_out)
    ctx.exit(EXIT_OK)


def _show(report: Any, console: Console, json_out: object) -> None:
    from planexec.agentdojo import dump_report, report_table

    console.print(report_table([report]))
    say(console, f"{report.suite}: {counted(len(report.cases), 'run')} in {report.seconds:.1f}s")
    if report.not_injectable:
        say(console, f"run with no attack only (no injection vector read): {', '.join(report.not_injectable)}")
    for case in report.cases:
        if case.error is not None:
            say(console, f"ERROR {case.defence} {case.user_task} {case.injection_task or ''}: {case.error}")
    if json_out is None:
        return
    text = json.dumps(
        {"format": REPORT_FORMAT, "version": REPORT_VERSION, **dump_report(report)}, indent=2, ensure_ascii=False
    )
    if json_out == "-":
        click.echo(text)
        return
    Path(str(json_out)).write_text(text + "\n", encoding="utf-8")
    say(console, f"wrote the report to {json_out}")


def _progress(console: Console, suite: str, *, no_live: bool) -> _Lines | _Bar:
    if no_live or not console.is_terminal:
        return _Lines(console)
    return _Bar(console, suite)


class _Lines:
    """One plain line per finished run."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def planned(self, runs: int) -> None:
        say(self._console, f"{counted(runs, 'run')} to make")

    def finished(self, outcome: Any) -> None:
        attack = f" ← {outcome.injection_task}" if outcome.injection_task else ""
        verdicts = f"utility {'yes' if outcome.utility else 'no'}"
        if outcome.injection_task:
            verdicts += f", attack {'met its goal' if outcome.unaided else 'held' if outcome.attack_held else 'failed'}"
        say(self._console, f"{outcome.defence} {outcome.user_task}{attack}: {outcome.stop}; {verdicts}")

    def close(self) -> None:
        return None


class _Bar:
    """A progress bar over the suite's runs."""

    def __init__(self, console: Console, suite: str) -> None:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self._bar = Progress(*columns, console=console, transient=True)
        self._suite = suite
        self._task: Any = None

    def planned(self, runs: int) -> None:
        self._bar.start()
        self._task = self._bar.add_task(f"agentdojo:{self._suite}", total=runs)

    def finished(self, outcome: Any) -> None:
        self._bar.advance(cast(Any, self._task))

    def close(self) -> None:
        self._bar.stop()
