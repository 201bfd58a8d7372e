"""``planexec runs``, ``show`` and ``export``: what the store holds, one run in detail, and a run's
log as JSON Lines."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from planexec._util.plural import counted
from planexec.cli._common import EXIT_USAGE, make_console, run_command
from planexec.cli._format import cut, money, seconds, when
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused, parse_choice
from planexec.cli._report import json_text
from planexec.cli._show import fold_readable, print_run, run_json
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.cli._text import plain, shown
from planexec.errors import UsageError
from planexec.runs import STATUSES, export_lines, list_runs, read_run, worker_entry
from planexec.store import QueueEntry, RunSummary

__all__ = ["export", "runs", "show"]


def _duration(s: RunSummary) -> float:
    """Start to finish, or to the newest event for a run that has not finished."""
    return (s.finished_at if s.finished_at is not None else s.updated_at) - s.started_at


def _summary_json(s: RunSummary) -> dict[str, Any]:
    return {
        "run_id": s.run_id,
        "status": s.status,
        "stop": s.stop_kind,
        "stop_detail": s.stop_detail,
        "cost": s.cost,
        "model_calls": s.model_calls,
        "duration": _duration(s),
        "started_at": s.started_at,
        "updated_at": s.updated_at,
        "finished_at": s.finished_at,
        "events": s.events,
        "pending_approvals": s.pending_approvals,
        "goal": s.goal,
    }


@click.command()
@click.option("--status", metavar="[running|waiting|finished]", help="Only runs with this status.")
@click.option("--limit", "limit_text", default="50", show_default=True, metavar="N", help="At most N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as a JSON list.")
@global_options()
@click.pass_context
def runs(ctx: click.Context, status: str | None, limit_text: str, as_json: bool) -> None:
    """List the runs in the store, newest first.

    Status: running (or stopped without finishing), waiting (suspended until a human answers),
    finished.
    """
    problems = Problems()
    chosen = parse_choice("--status", status, STATUSES, problems) if status is not None else None
    limit = None
    try:
        limit = int(limit_text)
        if limit < 1:
            problems.add("--limit", f"{limit_text!r} must be at least 1")
    except ValueError:
        problems.add("--limit", f"{limit_text!r} is not a whole number")
    run_command(ctx, _runs(store_choice(ctx), chosen, limit or 0, as_json, problems))


async def _runs(choice: StoreChoice, status: str | None, limit: int, as_json: bool, problems: Problems) -> int:
    async with using_store(choice, problems) as store:
        if problems:
            raise Refused(problems)
        try:
            found = await list_runs(store, status=status, limit=limit)
        except UsageError as e:
            problems.add_problems(e.problems)
            raise Refused(problems) from None
    if as_json:
        click.echo(json_text([_summary_json(s) for s in found]))
        return 0
    console = make_console(as_json=False)
    if not found:
        console.print(f"no runs in {choice.describe()}", markup=False)
        return 0
    table = Table(title=shown(f"runs in {choice.describe()}"), title_justify="left", title_style="bold")
    for name in ("run", "status", "stop", "cost", "time", "started", "goal", "open questions"):
        right = name in ("cost", "time", "open questions")
        table.add_column(name, justify="right" if right else "left", no_wrap=name != "goal")
    for s in found:
        table.add_row(
            shown(s.run_id),
            s.status,
            shown(s.stop_kind or ""),
            money(s.cost),
            seconds(_duration(s)),
            when(s.started_at),
            shown(cut(s.goal, 60)),
            str(s.pending_approvals) if s.pending_approvals else "",
        )
    console.print(table)
    return 0


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--receipts",
    is_flag=True,
    help="Show instead a receipt for every side-effecting tool call: its plan version, the human approval "
    "behind it (who, when, and the seq and hash of what they were shown) or why there was none, and the "
    "effect (arguments as sent, idempotency key, outcome, its events); exit status 1 when the run's hash "
    "chain is broken.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as one JSON document.")
@global_options()
@click.pass_context
def show(ctx: click.Context, run_id: str, receipts: bool, as_json: bool) -> None:
    """Show RUN: goal and outcome, each plan version (who made it, why, and what it changed from the
    version before), each step record, usage and cost, and the questions asked with their answers."""
    if receipts:
        from planexec.cli._receipts import show_receipts

        run_command(ctx, show_receipts(store_choice(ctx), run_id, as_json))
    run_command(ctx, _show(store_choice(ctx), run_id, as_json))


async def _show(choice: StoreChoice, run_id: str, as_json: bool) -> int:
    async with using_store(choice) as store:
        stored = await read_run(store, run_id)
        queued = await worker_entry(store, run_id) if not stored.found else None
    log, unreadable = list(stored.events), [plain(line) for line in stored.unreadable]
    if queued is not None:  # submitted, not begun: known from its id on
        return _show_queued(queued, as_json)
    if not stored.found:
        raise Refused(Problems.of("RUN", f"no run {run_id!r} in {choice.describe()} (`planexec runs` lists them)"))
    state, skipped = fold_readable(log)
    unreadable += [plain(f"run {run_id}: {line}") for line in skipped]
    if as_json:
        data = run_json(log, state)
        if unreadable:
            data["unreadable"] = unreadable
        click.echo(json_text(data))
    else:
        print_run(make_console(as_json=False), log, state)
    if unreadable:
        return _unreadable(run_id, unreadable, shown=len(log) - len(skipped))
    return 0


def _show_queued(entry: QueueEntry, as_json: bool) -> int:
    """A run submitted to workers that none has begun: it has no log yet."""
    holder = f", held by {entry.owner}" if entry.state == "leased" and entry.owner else ""
    if as_json:
        data = {
            "run_id": entry.run_id,
            "status": "queued",
            "queue": {"state": entry.state, "owner": entry.owner, "claims": entry.claims},
            "submitted_at": entry.submitted_at,
            "events": 0,
        }
        click.echo(json_text(data))
    else:
        line = f"run {entry.run_id}: submitted to the workers at {when(entry.submitted_at)}, not begun yet"
        click.echo(plain(f"{line} ({entry.state}{holder}); it has no log yet"))
    return 0


def _unreadable(run_id: str, lines: list[str], *, shown: int) -> int:
    """Say what could not be read (after what could), and exit with status 2."""
    click.echo(
        f"Error: run {run_id}: {counted(len(lines), 'problem')} reading its log; {counted(shown, 'event')} shown:",
        err=True,
    )
    for line in lines:
        click.echo(f"  - {line}", err=True)
    return EXIT_USAGE


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write to FILE instead of stdout.",
)
@global_options()
@click.pass_context
def export(ctx: click.Context, run_id: str, output: Path | None) -> None:
    """Export RUN's log as JSON Lines: one event per line, in log order.

    Each line is an envelope {"v": EVENT_SCHEMA_VERSION, "event": {...}} with the event tagged by
    its "kind"; planexec.runtime.load_event reads each line back (older schema versions too).
    """
    run_command(ctx, _export(store_choice(ctx), run_id, output))


async def _export(choice: StoreChoice, run_id: str, output: Path | None) -> int:
    async with using_store(choice) as store:
        stored = await read_run(store, run_id)
    log, unreadable = list(stored.events), [plain(line) for line in stored.unreadable]
    if not stored.found:
        raise Refused(Problems.of("RUN", f"no run {run_id!r} in {choice.describe()} (`planexec runs` lists them)"))
    text = "".join(export_lines(log))
    if output is None:
        click.echo(text, nl=False)
    else:
        try:
            await asyncio.to_thread(output.write_text, text, encoding="utf-8")
        except OSError as e:
            raise Refused(Problems.of(f"--output {str(output)!r}", f"cannot write it: {e.strerror or e}")) from e
        click.echo(f"wrote {counted(len(log), 'event')} of run {run_id} to {output}", err=True)
    if unreadable:
        return _unreadable(run_id, unreadable, shown=len(log))
    return 0
