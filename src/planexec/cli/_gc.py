"""``planexec gc --older-than 30d``: delete runs whose newest event is older than an age."""

from __future__ import annotations

import click

from planexec._util.plural import counted
from planexec.cli._common import run_command
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.errors import UsageError
from planexec.runs import gc as gc_runs
from planexec.runs import parse_age

__all__ = ["gc"]


@click.command()
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="e.g. 30d, 12h, 90m, 45s.")
@click.option("--dry-run", is_flag=True, help="Only say which runs would be deleted.")
@global_options()
@click.pass_context
def gc(ctx: click.Context, older_than: str, dry_run: bool) -> None:
    """Delete the runs (and their logs) not updated for AGE: finished, waiting or abandoned alike."""
    problems = Problems()
    age = None
    try:
        age = parse_age(older_than)
    except UsageError as e:
        problems.add_problems(e.problems)
    run_command(ctx, _gc(store_choice(ctx), age, dry_run, problems))


async def _gc(choice: StoreChoice, age: float | None, dry_run: bool, problems: Problems) -> int:
    async with using_store(choice, problems) as store:
        if problems or age is None:
            raise Refused(problems)
        ids = await gc_runs(store, older_than=age, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {counted(len(ids), 'run')} from {choice.describe()}")
    for run_id in ids:
        click.echo(f"  {run_id}")
    return 0
