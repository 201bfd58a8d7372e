"""The ``planexec`` command group: the global ``--store`` option and every command."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from planexec import UsageError, __version__
from planexec.cli._approvals import answer, approvals, approve, reject, tell
from planexec.cli._common import View, run_command, say, start_and_follow
from planexec.cli._eval import eval_command
from planexec.cli._finish import report_result
from planexec.cli._gc import gc
from planexec.cli._replay import replay
from planexec.cli._resume import resume
from planexec.cli._run import run
from planexec.cli._runs import export, runs, show
from planexec.cli._store_options import STORE_HELP, StoreChoice, remember_store, store_choice, using_store
from planexec.demo import build_demo
from planexec.models import Model, resolve_model
from planexec.plan import PLAN_SCHEMA_VERSION, plan_json_schema

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="planexec", message="%(prog)s %(version)s")
@click.option("--store", "store", metavar="URL", envvar="PLANEXEC_STORE", help=STORE_HELP)
@click.option(
    "--redact-pii",
    is_flag=True,
    envvar="PLANEXEC_REDACT_PII",
    help="Redact personal data (e-mail, phone, card and id numbers) too, in the store and in what is "
    "printed. Secrets are always redacted.",
)
@click.pass_context
def main(ctx: click.Context, store: str | None, redact_pii: bool) -> None:
    """Planner–executor agents: typed plans, parallel steps, checked results, bounded runs.

    Runs are logged in a store (--store), where they can be listed (runs, show, export), answered
    (approvals, approve, reject, answer), told something new (tell), picked up again (resume),
    replayed or forked (replay) and deleted when old (gc).
    """
    remember_store(ctx, store, pii=redact_pii)


for command in (run, resume, runs, show, export, approvals, approve, reject, answer, tell, replay, gc):
    main.add_command(command)
main.add_command(eval_command, name="eval")


@main.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the schema to this file instead of printing it.",
)
def schema(output: Path | None) -> None:
    """Print the JSON Schema of a plan (versioned)."""
    text = json.dumps(plan_json_schema(), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote the plan schema (version {PLAN_SCHEMA_VERSION}) to {output}", err=True)


@main.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write the scenario's files (default: a fresh temporary directory).",
)
@click.option("--no-live", is_flag=True, help="Print one line per event instead of the live task board.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option(
    "--pace",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Scale the simulated latency of the scripted models and tools (0: none).",
)
@click.option("--planner", "planner_spec", metavar="MODEL", help="A real planning model instead of the scripted one.")
@click.option("--executor", "executor_spec", metavar="MODEL", help="A real model for the analyst's step.")
@click.pass_context
def demo(
    ctx: click.Context,
    workdir: Path | None,
    no_live: bool,
    as_json: bool,
    pace: float,
    planner_spec: str | None,
    executor_spec: str | None,
) -> None:
    """Run the offline demo: an agent audits a failing customer workflow.

    It collects the logs (the current log turns out to be incomplete, so the plan is patched to
    fetch the archived segment), inspects the failing branch, finds the root cause and writes a
    patch into the work directory. Models and tools are scripted and local: nothing leaves the
    machine. The run is logged in the store (see --store), so `planexec show` and `planexec
    replay` work on it. With --planner/--executor, real models (e.g. openai:gpt-4o,
    anthropic:claude-sonnet-4-5, ollama:qwen2.5) plan and analyse over the same files and tools.
    """
    view = View.make(as_json=as_json, no_live=no_live, no_input=True, title="planexec demo")
    root = (workdir or Path(tempfile.mkdtemp(prefix="planexec-demo-"))).resolve()
    try:
        models = (
            resolve_model(planner_spec) if planner_spec else None,
            resolve_model(executor_spec) if executor_spec else None,
        )
    except UsageError as e:
        raise click.UsageError(str(e)) from None
    run_command(ctx, _demo(view, root, pace, store_choice(ctx), models))


async def _demo(
    view: View, root: Path, pace: float, choice: StoreChoice, models: tuple[Model | None, Model | None]
) -> int:
    async with using_store(choice) as store:
        scenario = build_demo(root, pace=pace, store=store, planner_model=models[0], executor_model=models[1])
        say(view.console, f"workdir: {root}")
        result = await start_and_follow(scenario.agent, scenario.goal, scenario.constraints, view.display)
        fixes = [str(p.relative_to(root)) for p in scenario.fix_files()]
        return report_result(
            view,
            result,
            choice,
            store,
            extra=[("workdir", str(root)), *(("fix", f) for f in fixes)],
            json_extra={"workdir": str(root), "fixes": fixes},
        )
