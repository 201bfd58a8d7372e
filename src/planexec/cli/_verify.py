"""``planexec verify RUN``: check a run's hash chain — the first event where it breaks, or intact
with its head, to keep elsewhere — and, given a head kept earlier (``--head``), that the log up to
it is unchanged."""

from __future__ import annotations

import click

from planexec.cli._common import EXIT_OK, EXIT_STOPPED, make_console, run_command, say
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._report import json_text
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.errors import UsageError
from planexec.store import ChainReport, verify_chain

__all__ = ["chain_lines", "verify"]


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--head",
    "kept",
    metavar="HASH",
    help="A head printed by an earlier verify and kept elsewhere: check that the chain still passes through it "
    "(a rewrite of the log before it, even with every hash recomputed, is then found).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@global_options()
@click.pass_context
def verify(ctx: click.Context, run_id: str, kept: str | None, as_json: bool) -> None:
    """Check RUN's hash chain: the first event where it breaks, or intact with its head.

    Every stored event carries the hash of the log before it. The chain is recomputed from the
    stored bytes: an event edited, removed, moved or inserted behind the store's back breaks it,
    and the report names that event, what the chain expected there and what the store holds.
    Intact, the report gives the head (the last event's hash): keep it elsewhere, and a later
    `planexec verify RUN --head HASH` proves the log up to it unchanged. Events written before the
    store kept a chain are reported as such; the chain begins after them.

    Exit status 0 when the chain is intact, 1 when it is broken, 2 for a usage error (an unknown
    run, a --head that is not 64 hex digits).
    """
    run_command(ctx, _verify(store_choice(ctx), run_id, kept, as_json))


async def _verify(choice: StoreChoice, run_id: str, kept: str | None, as_json: bool) -> int:
    problems = Problems()
    async with using_store(choice, problems) as store:
        try:
            report = await verify_chain(store, run_id, kept=kept)
        except UsageError as e:
            for p in e.problems:
                problems.add("--head", f"{p.message}, as `planexec verify` prints it")
            raise Refused(problems) from None
    if report.events == 0 and report.broken is None:
        raise Refused(Problems.of("RUN", f"no run {run_id!r} in {choice.describe()} (`planexec runs` lists them)"))
    if as_json:
        click.echo(json_text(report.json()))
    else:
        console = make_console(as_json=False)
        for line in chain_lines(report):
            say(console, line)
    return EXIT_OK if report.intact else EXIT_STOPPED


def chain_lines(report: ChainReport) -> list[str]:
    """The report for people: a verdict, then where the chain broke or what to keep."""
    broken = report.broken
    if broken is not None:
        return [
            f"run {report.run_id}: chain broken at event {broken.seq} ({broken.problem})",
            f"  {broken.message}",
            f"  expected {broken.expected}",
            f"  found    {broken.found or '(nothing)'}",
        ]
    lines = [f"run {report.run_id}: chain intact over {report.events} events"]
    if report.begins_at is None:
        lines.append("  none of them is chained: they were written before the store kept a chain")
    elif report.begins_at > 1:
        lines.append(
            f"  events 1-{report.begins_at - 1} were written before the store kept a chain: it begins at "
            f"event {report.begins_at} and covers them as they were then"
        )
    lines.append(f"  head (event {report.events}): {report.head}")
    if report.kept_at is not None:
        lines.append(f"  the kept head is event {report.kept_at}'s: the log up to it is as it was when it was kept")
    return lines
