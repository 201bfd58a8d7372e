"""``planexec gc --older-than 30d``: delete runs whose newest event is older than an age."""

from __future__ import annotations

import re
import time

import click

from planexec._util.plural import counted
from planexec.cli._common import run_command
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._store_options import StoreChoice, store_choice, using_store

__all__ = ["gc", "parse_age"]

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
SCAN = 1_000_000
"""With --dry-run: at most this many runs are looked at."""


def parse_age(text: str, problems: Problems) -> float | None:
    """Seconds in an age such as ``30d``, ``12h``, ``90m`` or ``0s``."""
    match = _AGE.match(text)
    if match is None:
        problems.add("--older-than", f"{text!r} is not an age: a number and a unit s, m, h or d (e.g. 30d)")
        return None
    return float(match.group(1)) * UNITS[match.group(2)]


@click.command()
@click.option("--older-than", "older_than", required=True, metavar="AGE", help="e.g. 30d, 12h, 90m, 45s.")
@click.option("--dry-run", is_flag=True, help="Only say which runs would be deleted.")
@global_options()
@click.pass_context
def gc(ctx: click.Context, older_than: str, dry_run: bool) -> None:
    """Delete the runs (and their logs) not updated for AGE: finished, waiting or abandoned alike."""
    problems = Problems()
    age = parse_age(older_than, problems)
    run_command(ctx, _gc(store_choice(ctx), age, dry_run, problems))


async def _gc(choice: StoreChoice, age: float | None, dry_run: bool, problems: Problems) -> int:
    async with using_store(choice, problems) as store:
        if problems or age is None:
            raise Refused(problems)
        cutoff = time.time() - age
        if dry_run:
            ids = [s.run_id for s in await store.list_runs(limit=SCAN) if s.updated_at < cutoff]
        else:
            ids = await store.expire(older_than=cutoff)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {counted(len(ids), 'run')} from {choice.describe()}")
    for run_id in ids:
        click.echo(f"  {run_id}")
    return 0
