"""The ``planexec`` command: ``demo``, ``run`` and ``schema``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from planexec import __version__
from planexec.cli._common import display_for, exit_for, make_console, run_to_end, say
from planexec.cli._report import json_text, print_summary, result_json
from planexec.cli._run import run
from planexec.demo import build_demo
from planexec.plan import PLAN_SCHEMA_VERSION, plan_json_schema

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="planexec", message="%(prog)s %(version)s")
def main() -> None:
    """Planner–executor agents: typed plans, parallel steps, checked results, bounded runs."""


main.add_command(run)


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
@click.pass_context
def demo(ctx: click.Context, workdir: Path | None, no_live: bool, as_json: bool, pace: float) -> None:
    """Run the offline demo: an agent audits a failing customer workflow.

    It collects the logs (the current log turns out to be incomplete, so the plan is patched to
    fetch the archived segment), inspects the failing branch, finds the root cause and writes a
    patch into the work directory. Models and tools are scripted and local: nothing leaves the
    machine.
    """
    console = make_console(as_json=as_json)
    root = (workdir or Path(tempfile.mkdtemp(prefix="planexec-demo-"))).resolve()
    scenario = build_demo(root, pace=pace)
    say(console, f"workdir: {root}")
    display = display_for(console, no_live=no_live, title="planexec demo")
    result = run_to_end(scenario.agent, scenario.goal, scenario.constraints, display)
    fixes = [str(p.relative_to(root)) for p in scenario.fix_files()]
    if as_json:
        click.echo(json_text(result_json(result, workdir=str(root), fixes=fixes)))
    else:
        print_summary(console, result, extra=[("workdir", str(root)), *(("fix", f) for f in fixes)])
    exit_for(ctx, result)
