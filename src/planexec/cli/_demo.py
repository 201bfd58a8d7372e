"""``planexec demo``: the offline support-team scenario, with a live task board."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from planexec.cli._common import View, say, start_and_follow
from planexec.cli._finish import report_result
from planexec.cli._globals import global_options
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.cli._telemetry import TelemetryFlags, run_observed, telemetry_options
from planexec.demo import build_demo
from planexec.errors import UsageError
from planexec.models import Model, resolve_model

__all__ = ["demo"]


@click.command()
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
@telemetry_options
@global_options()
@click.pass_context
def demo(
    ctx: click.Context,
    /,
    workdir: Path | None,
    no_live: bool,
    as_json: bool,
    pace: float,
    planner_spec: str | None,
    executor_spec: str | None,
    **observed: Any,
) -> None:
    """Run the offline demo: an agent audits a failing customer workflow.

    It collects the logs (the current log turns out to be incomplete, so the plan is patched to
    fetch the archived segment), inspects the failing branch, finds the root cause and writes a
    patch into the work directory. Its final answer is reviewed before the run may end: the first
    draft does not name the patch, a check sends it back, the second passes. Models and tools are
    scripted and local: nothing leaves the machine. The run is logged in the store (see --store),
    so `planexec show` and `planexec replay` work on it. With --planner/--executor, real models (e.g. openai:gpt-4o,
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
    run_observed(ctx, TelemetryFlags.take(observed), _demo(view, root, pace, store_choice(ctx), models))


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
