"""``planexec eval SUITE.yaml``: run a suite of golden tasks, show and write the report, and
compare it with a baseline report. ``agentdojo:SUITE`` is handed to ``_eval_agentdojo``.

Exit status: 0 when nothing regressed (and, with --fail-on-task-failure, every run passed), 1 when
something regressed beyond its tolerance or a run failed under --fail-on-task-failure, 2 when the
suite, the fault profile, the baseline or the command line is wrong (every problem is listed) —
including a file beyond the limits planexec reads (size, aliases, nesting, counts).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from planexec._util.plural import counted
from planexec.cli._common import EXIT_OK, EXIT_STOPPED, make_console, problem_exit, say
from planexec.cli._eval_agentdojo import AGENTDOJO_PREFIX, agentdojo_eval
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.errors import UsageError
from planexec.eval import (
    AGENT_KINDS,
    MAX_CONCURRENCY,
    MAX_SEED,
    MAX_TOLERANCE,
    AgentKind,
    EvalReport,
    EvalSettings,
    FaultSpec,
    RunReport,
    Suite,
    SuiteInvalid,
    Tolerances,
    compare_reports,
    dump_report,
    failure_lines,
    fault_problems,
    json_text,
    load_suite,
    read_faults_option,
    read_report,
    report_tables,
    run_suite,
    suite_from_mapping,
)
from planexec.planner import ENSEMBLE_TRIGGERS, PLANNER_POLICIES, Upfront
from planexec.store import Redactor, RunStore

__all__ = ["eval_command"]


def _tolerance(maximum: float) -> Callable[[click.Context, click.Parameter, float | None], float | None]:
    """A check that a tolerance is a finite number from 0 to ``maximum`` (click's FloatRange lets NaN through)."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or not 0 <= value <= maximum):
            raise click.BadParameter(f"{value} is not a finite number from 0 to {maximum:g}", ctx, param)
        return value

    return check


@click.command(name="eval")
@click.argument("suite_path", metavar="SUITE.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=MAX_CONCURRENCY),
    help=f"Runs at once, at most {MAX_CONCURRENCY} (default: the suite's, else 4).",
)
@click.option("--json", "json_out", metavar="FILE", help="Write the report as JSON to FILE ('-': stdout).")
@click.option(
    "--baseline", type=click.Path(dir_okay=False, path_type=Path), help="A report to compare with (from --json)."
)
@click.option(
    "--faults",
    metavar="PROFILE|FILE",
    help="Inject faults into every task: a profile's name (e.g. flaky-tools, chaos) or a YAML/JSON file of its fields.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0, max=MAX_SEED),
    help="The seed of the fault profiles (default: the suite's, else 0).",
)
@click.option(
    "--agent",
    type=click.Choice(AGENT_KINDS),
    default="planexec",
    show_default=True,
    help="Run the tasks with planexec, or with the ReAct baseline (each task's react_model, else its executor).",
)
@click.option("--store", "store_url", metavar="URL", help="Log planexec runs in this store (default: not logged).")
@click.option(
    "--tolerance-pass-rate",
    type=float,
    callback=_tolerance(1.0),
    help="Allowed drop of a pass rate, 0 to 1 (default 0.0).",
)
@click.option(
    "--tolerance-cost",
    type=float,
    callback=_tolerance(MAX_TOLERANCE),
    help="Allowed relative rise of cost per run (default 0.1).",
)
@click.option(
    "--tolerance-latency",
    type=float,
    callback=_tolerance(MAX_TOLERANCE),
    help="Allowed relative rise of latency per run (default 0.25).",
)
@click.option("--fail-on-task-failure", is_flag=True, help="Exit 1 when any run of any task fails.")
@click.option(
    "--sealed",
    is_flag=True,
    help="Sealed planning for every task: the planner never reads an output, an error's text or a check's detail "
    "(each task's extractor, if it names one, pulls values out of outputs).",
)
@click.option(
    "--planner", metavar="MODEL", help="bfcl: suites: the planner (default: the oracle that plans BFCL's answers)."
)
@click.option("--executor", metavar="MODEL", help="bfcl: suites: the executor of model-driven steps.")
@click.option(
    "--react-model", metavar="MODEL", help="bfcl: suites with --agent react: the model (default: the oracle)."
)
@click.option(
    "--policy",
    type=click.Choice(PLANNER_POLICIES.names()),
    help=f"bfcl: suites: the planner's policy (default: {Upfront.name}).",
)
@click.option(
    "--escalate-to",
    multiple=True,
    metavar="MODEL",
    help="bfcl: suites: a model the planner hands planning to (repeatable, strongest last); --planner plans first.",
)
@click.option(
    "--escalate-on",
    multiple=True,
    metavar="[" + "|".join(ENSEMBLE_TRIGGERS) + "]",
    help="bfcl: suites: when the planner's ensemble hands planning on (repeatable; default: all of them).",
)
@click.option(
    "--confidence-below",
    metavar="0..1",
    help="bfcl: suites: the confidence under which the ensemble hands a plan on (default 0.5).",
)
@click.option("--limit", type=click.IntRange(min=1), help="bfcl: suites: only the first N tasks.")
@click.option("--ids", metavar="ID,ID", help="bfcl: suites: only these tasks (comma-separated).")
@click.option(
    "--fail-one",
    type=click.IntRange(min=0, max=MAX_SEED),
    metavar="SEED",
    help="bfcl: suites: one call of each task (chosen by SEED) fails once, not transiently.",
)
@click.option(
    "--defence",
    multiple=True,
    metavar="SETTING",
    help="agentdojo: suites: a defence setting to run under (repeatable; default: every one this version has).",
)
@click.option(
    "--attack", metavar="NAME", help="agentdojo: suites: AgentDojo's attack (default: important_instructions)."
)
@click.option("--injection-ids", metavar="ID,ID", help="agentdojo: suites: only these injection tasks.")
@click.option("--no-live", is_flag=True, help="Print a line per finished run instead of a progress bar.")
@global_options(store=False)
@click.pass_context
def eval_command(ctx: click.Context, /, suite_path: Path, **given: Any) -> None:
    """Evaluate an agent on a suite of golden tasks (a YAML file, bfcl:CATEGORY or agentdojo:SUITE).

    bfcl:CATEGORY runs BFCL's multi-turn tasks (bfcl:multi_turn_base, bfcl:multi_turn_miss_func,
    ...; needs the bfcl-eval package), shaped by --planner, --executor, --react-model, --policy,
    the planner's ensemble (--escalate-to, --escalate-on, --confidence-below), --limit, --ids and
    --fail-one.

    agentdojo:SUITE runs AgentDojo's prompt-injection suites (agentdojo:banking, agentdojo:slack,
    agentdojo:travel, agentdojo:workspace; needs the agentdojo package) under planexec's defence
    settings (--defence), attacked by AgentDojo's --attack, shaped by --planner, --executor,
    --policy, --limit, --ids and --injection-ids; it prints utility, utility under attack, attack
    success and the calls held for a human, per setting. With no --planner, offline models play:
    an oracle of each task's ground truth that falls for every injection it reads.

    Each task runs as many times as it asks (repeat), concurrently, each run with fresh models.
    A run passes when its goal was met, it called the tools the task expects and its answer
    passes the task's checks. The report shows, per task and overall: pass rate, steps, tool
    success rate, replans, stalls, escalations, judge disagreement, tokens, cost, latency and
    achieved parallelism.

    With --baseline, each regression beyond its tolerance (options, else the suite's
    `tolerances:`, else the defaults) is named and the exit status is 1. Tolerances: pass rate
    as an absolute drop; cost and latency as a relative rise of the mean per run.
    """
    if str(suite_path).startswith(AGENTDOJO_PREFIX):
        agentdojo_eval(ctx, str(suite_path).removeprefix(AGENTDOJO_PREFIX), given)
    options = _options(ctx, suite_path, given)
    suite, fault_spec, base = _prepare(ctx, options)
    settings = replace(options.settings, faults=fault_spec)
    console = make_console(as_json=options.json_out == "-")
    if options.store is not None and settings.agent == "react":
        click.echo("note: ReAct runs are not logged in a store; --store is ignored", err=True)
    try:
        report = asyncio.run(_run(suite, settings, options.store, console, no_live=options.no_live))
    except Refused as e:
        problem_exit(ctx, e.problems)
    except SuiteInvalid as e:  # its MCP servers cannot start, or their tools do not fit the tasks
        problem_exit(ctx, _suite_problems(options.suite_path, e))
    ctx.exit(_finish(report, suite, base, options, console))


_BFCL_OPTIONS = (
    "planner",
    "executor",
    "react_model",
    "policy",
    "escalate_to",
    "escalate_on",
    "confidence_below",
    "limit",
    "ids",
    "fail_one",
)
"""The options that shape a ``bfcl:`` suite."""


def _options(ctx: click.Context, suite_path: Path, given: dict[str, Any]) -> _Options:
    """What the command line asked for, from its options (None, or empty: not given)."""
    tolerances = {key: given[f"tolerance_{key}"] for key in ("pass_rate", "cost", "latency")}
    return _Options(
        suite_path=suite_path,
        settings=EvalSettings(
            agent=cast(AgentKind, given["agent"]),
            concurrency=given["concurrency"],
            seed=given["seed"],
            redactor=Redactor(pii=store_choice(ctx).pii),
            sealed=True if given["sealed"] else None,
        ),
        faults=given["faults"],
        json_out=given["json_out"],
        baseline=given["baseline"],
        tolerances={k: v for k, v in tolerances.items() if v is not None},
        fail_on_task_failure=given["fail_on_task_failure"],
        no_live=given["no_live"],
        store=_store(ctx, given["store_url"]),
        bfcl={key: None if given[key] == () else given[key] for key in _BFCL_OPTIONS},
        agentdojo_only=tuple(
            flag
            for flag, key in (("--defence", "defence"), ("--attack", "attack"), ("--injection-ids", "injection_ids"))
            if given[key]
        ),
    )


@dataclass(frozen=True, kw_only=True)
class _Options:
    """What the command line asked for."""

    suite_path: Path
    settings: EvalSettings
    faults: str | None
    json_out: str | None
    baseline: Path | None
    tolerances: dict[str, float]
    fail_on_task_failure: bool
    no_live: bool
    store: StoreChoice | None
    bfcl: dict[str, Any]
    """The options that shape a ``bfcl:`` suite (None: not given)."""
    agentdojo_only: tuple[str, ...] = ()
    """The options given that shape only an ``agentdojo:`` suite (refused here)."""


def _store(ctx: click.Context, url: str | None) -> StoreChoice | None:
    """The store runs are logged in: this command's --store, else the group's when typed; else none."""
    if url:
        return StoreChoice(url=url, typed=True, pii=store_choice(ctx).pii)
    outer = store_choice(ctx)
    return outer if outer.typed and outer.url else None


def _prepare(ctx: click.Context, options: _Options) -> tuple[Suite, FaultSpec | None, EvalReport | None]:
    """The suite, the fault profile and the baseline; every problem with any of them exits with status 2."""
    problems = Problems()
    for flag in options.agentdojo_only:
        problems.add(flag, f"shapes a suite of AgentDojo's tasks (agentdojo:SUITE), not {options.suite_path}")
    suite = _read_suite(options, problems)
    faults = _read_faults(options.faults, problems)
    base = _read_baseline(options.baseline, problems)
    if options.json_out not in (None, "-") and Path(options.json_out).is_dir():
        problems.add("--json", f"{options.json_out} is a folder")
    if suite is not None and options.settings.sealed and options.settings.agent == "planexec":
        for task in suite.tasks:
            if PLANNER_POLICIES.unsealable(task.policy) is not None:
                plans = PLANNER_POLICIES.get(task.policy).plans
                sealed = PLANNER_POLICIES.how_sealed()
                problems.add("--sealed", f"task {task.id!r} plans {plans}; a sealed planner plans {sealed}")
    if problems or suite is None:
        problem_exit(ctx, problems)
    return suite, faults, base


def _finish(report: EvalReport, suite: Suite, base: EvalReport | None, options: _Options, console: Console) -> int:
    """Show the report, write it, compare it with the baseline; the exit status."""
    for table in report_tables(report):
        console.print(table)
    for line in failure_lines(report):
        say(console, line)
    _write(report, options.json_out, console)
    code = EXIT_OK
    if base is not None:
        code = _compare(report, base, replace(suite.tolerances, **options.tolerances), console)
    if options.fail_on_task_failure and report.failed_runs:
        say(console, f"{counted(len(report.failed_runs), 'run')} failed")
        code = EXIT_STOPPED
    return code


def _read_suite(options: _Options, problems: Problems) -> Suite | None:
    given = {k: v for k, v in options.bfcl.items() if v is not None}
    text = str(options.suite_path)
    try:
        if text.startswith(BFCL_PREFIX):
            agent = options.settings.agent
            misplaced = sorted(given.keys() & _OTHER_AGENTS_OPTIONS.get(agent, frozenset()))
            for key in misplaced:
                problems.add(f"--{key.replace('_', '-')}", f"does not apply to the {agent} agent (--agent)")
            ensemble = _ensemble_problems(given)
            problems += ensemble
            if ensemble:
                return None
            suite = suite_from_mapping(_bfcl_suite(text.removeprefix(BFCL_PREFIX), given), root=Path.cwd(), agent=agent)
            return None if misplaced else suite
        for key in given:
            problems.add(f"--{key.replace('_', '-')}", f"shapes a suite of BFCL's tasks (bfcl:CATEGORY), not {text}")
        if given:
            return None
        return load_suite(options.suite_path, agent=options.settings.agent)
    except SuiteInvalid as e:
        problems += _suite_problems(options.suite_path, e)
    return None


BFCL_PREFIX = "bfcl:"

_OTHER_AGENTS_OPTIONS: dict[str, frozenset[str]] = {
    "planexec": frozenset({"react_model"}),
    "react": frozenset({"planner", "policy", "escalate_to", "escalate_on", "confidence_below"}),
}
"""The options that shape a BFCL suite for the other agent only (given, they would be ignored and
the oracle would play the model the user meant to evaluate)."""


def _bfcl_suite(category: str, given: dict[str, Any]) -> dict[str, Any]:
    """A suite of BFCL's tasks of ``category`` from the command line's options."""
    spec: dict[str, Any] = {"category": category or "multi_turn_base"}
    for key in ("limit", "fail_one"):
        if key in given:
            spec[key] = given[key]
    if "ids" in given:
        spec["ids"] = [i.strip() for i in str(given["ids"]).split(",") if i.strip()]
    defaults: dict[str, Any] = {
        key: given[key] for key in ("planner", "executor", "react_model", "policy") if key in given
    }
    if "escalate_to" in given:
        ensemble: dict[str, Any] = {"escalate_to": list(given["escalate_to"])}
        if "escalate_on" in given:
            ensemble["escalate_on"] = list(given["escalate_on"])
        if "confidence_below" in given:
            ensemble["confidence_below"] = float(given["confidence_below"])
        defaults["ensemble"] = ensemble
    return {"name": f"bfcl-{spec['category']}", "bfcl": spec, "defaults": defaults}


def _ensemble_problems(given: dict[str, Any]) -> Problems:
    """What is wrong with the ensemble's options (their models are checked with the suite)."""
    problems = Problems()
    if "escalate_to" not in given:
        for key in ("escalate_on", "confidence_below"):
            if key in given:
                flag = f"--{key.replace('_', '-')}"
                problems.add(flag, "applies to the planner's ensemble: name a model to escalate to too")
    for trigger in given.get("escalate_on", ()):
        if trigger not in ENSEMBLE_TRIGGERS:
            problems.add("--escalate-on", f"{trigger!r} is not one of {', '.join(ENSEMBLE_TRIGGERS)}")
    raw = given.get("confidence_below")
    if raw is not None:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            problems.add("--confidence-below", f"{raw!r} is not a number from 0 to 1")
    return problems


def _suite_problems(path: Path, error: SuiteInvalid) -> Problems:
    """Every problem of a suite, under its file."""
    problems = Problems()
    where = str(path)
    if not error.problems:
        problems.add(where, error.summary)
    for p in error.problems:
        problems.add(where, str(p))
    return problems


def _read_faults(value: str | None, problems: Problems) -> FaultSpec | None:
    if value is None:
        return None
    try:
        spec = read_faults_option(value)
    except UsageError as e:
        problems.add_usage_error("--faults", e)
        return None
    found = fault_problems(spec, "--faults")
    for p in found:
        problems.add(p.where, p.message)
    return None if found else spec


def _read_baseline(path: Path | None, problems: Problems) -> EvalReport | None:
    if path is None:
        return None
    try:
        return read_report(path)
    except UsageError as e:
        problems.add_usage_error("--baseline", e)
        return None


@contextlib.asynccontextmanager
async def _opened(choice: StoreChoice | None, settings: EvalSettings) -> AsyncIterator[RunStore | None]:
    """The store planexec runs are logged in, open for the evaluation (None: not logged)."""
    if choice is None or settings.agent == "react":
        yield None
        return
    async with using_store(choice) as store:
        yield store


async def _run(
    suite: Suite, settings: EvalSettings, choice: StoreChoice | None, console: Console, *, no_live: bool
) -> EvalReport:
    async with _opened(choice, settings) as store:
        settings = replace(settings, store=store)
        total = sum(t.repeat for t in suite.tasks)
        if no_live or not console.is_terminal:
            say(
                console,
                f"{suite.name}: {counted(total, 'run')} of {counted(len(suite.tasks), 'task')}, {settings.agent} agent",
            )
            return await run_suite(suite, settings, progress=_Lines(console))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            sink = _Bar(bar, bar.add_task(f"{suite.name} ({settings.agent})", total=total))
            return await run_suite(suite, settings, progress=sink)


class _Lines:
    """One plain line per finished run."""

    def __init__(self, console: Console) -> None:
        self._console = console

    def started(self, task: str, index: int) -> None:
        return None

    def finished(self, run: RunReport) -> None:
        verdict = "pass" if run.passed else "FAIL"
        say(self._console, f"{verdict} {run.task}#{run.index} ({run.stop}, {run.metrics.latency:.2f}s)")


class _Bar:
    """A progress bar, with the count of failed runs so far."""

    def __init__(self, bar: Progress, task_id: Any) -> None:
        self._bar = bar
        self._task = task_id
        self._failed = 0

    def started(self, task: str, index: int) -> None:
        return None

    def finished(self, run: RunReport) -> None:
        self._failed += not run.passed
        self._bar.advance(self._task)
        if self._failed:
            description = self._bar.tasks[0].description.split(" — ")[0]
            self._bar.update(self._task, description=f"{description} — {self._failed} failed")


def _write(report: EvalReport, target: str | None, console: Console) -> None:
    if target is None:
        return
    data = dump_report(report)
    for note in data["notes"]:
        say(console, f"note: {note}")
    text = json_text(data)
    if target == "-":
        click.echo(text, nl=False)
        return
    Path(target).write_text(text, encoding="utf-8")
    say(console, f"wrote the report (format version {report.version}) to {target}")


def _compare(report: EvalReport, baseline: EvalReport, tolerances: Tolerances, console: Console) -> int:
    comparison = compare_reports(report, baseline, tolerances)
    for note in comparison.notes:
        say(console, f"note: {note}")
    if comparison.ok:
        say(console, "no regression against the baseline")
        return EXIT_OK
    say(console, f"{counted(len(comparison.regressions), 'regression')} against the baseline:")
    for regression in comparison.regressions:
        say(console, f"  REGRESSION {regression.message}")
    return EXIT_STOPPED
