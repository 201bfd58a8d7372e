"""``planexec memory``: the plans remembered in the store — list, show, forget, export."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import click
from rich.table import Table

from planexec._util.plural import counted
from planexec.cli._common import make_console, run_command
from planexec.cli._format import cut, money, when
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._report import json_text
from planexec.cli._store_options import StoreChoice, is_memory, store_choice, using_store
from planexec.cli._text import plain, shown
from planexec.memory import MemoryEntry, PlanMemory

__all__ = ["memory"]


@click.group()
@global_options()
def memory() -> None:
    """The plans remembered in the store: list, show, forget, export.

    A run started with `planexec run GOAL --memory` reuses a remembered plan when its goal is like
    one met before, and is remembered itself when it meets its goal."""


@asynccontextmanager
async def _opened(choice: StoreChoice, problems: Problems) -> AsyncIterator[PlanMemory]:
    async with using_store(choice, problems) as store:
        if is_memory(store):
            problems.add("--store", "plans are remembered in a lasting store: name one with --store")
            raise Refused(problems)
        remembered = PlanMemory(store)
        try:
            yield remembered
        finally:
            await remembered.close()


def _row(entry: MemoryEntry) -> dict[str, Any]:
    record = entry.to_record()
    record.pop("vector", None)
    record.pop("version", None)
    record["offered"] = None  # filled by the caller, who knows the memory's rule
    return record


@memory.command("list")
@click.option("--limit", default=50, show_default=True, metavar="N", type=click.IntRange(min=1), help="At most N.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@global_options()
@click.pass_context
def list_entries(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List the remembered plans, the most recently updated first."""
    run_command(ctx, _list(store_choice(ctx), limit, as_json))


async def _list(choice: StoreChoice, limit: int, as_json: bool) -> int:
    problems = Problems()
    async with _opened(choice, problems) as remembered:
        entries = await remembered.entries(limit=limit)
        rows = [_row(e) | {"offered": e.failures < remembered.max_failures} for e in entries]
        unreadable = list(remembered.unreadable)
    if as_json:
        click.echo(json_text({"entries": rows, "unreadable": unreadable}))
        return 0
    console = make_console(as_json=False)
    if unreadable:
        listing = ", ".join(plain(cut(i, 40)) for i in unreadable[:10]) + (", …" if len(unreadable) > 10 else "")
        console.print(
            f"{counted(len(unreadable), 'remembered plan')} could not be read and are never offered: {listing} "
            "(`planexec memory forget ID` deletes one)",
            markup=False,
        )
    if not rows:
        console.print(f"no remembered plans in {choice.describe()}", markup=False)
        return 0
    table = Table(title="remembered plans", title_justify="left", title_style="bold")
    for name in ("id", "steps", "uses", "failures", "offered", "updated", "goal"):
        table.add_column(name, justify="right" if name in ("steps", "uses", "failures") else "left")
    for row in rows:
        table.add_row(
            shown(row["id"]),
            str(len(row["steps"])),
            str(row["uses"]),
            str(row["failures"]),
            "yes" if row["offered"] else "no",
            when(row["updated_at"]),
            shown(cut(row["goal"], 60)),
        )
    console.print(table)
    return 0


@memory.command("show")
@click.argument("entry_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@global_options()
@click.pass_context
def show_entry(ctx: click.Context, entry_id: str, as_json: bool) -> None:
    """Show remembered plan ID: its goal, steps, answer template, uses and failures."""
    run_command(ctx, _show(store_choice(ctx), entry_id, as_json))


async def _show(choice: StoreChoice, entry_id: str, as_json: bool) -> int:
    problems = Problems()
    async with _opened(choice, problems) as remembered:
        entry = await remembered.get(entry_id)
        offered = entry is not None and entry.failures < remembered.max_failures
        damaged = entry_id in remembered.unreadable
    if entry is None:
        asked = plain(cut(entry_id, 80))
        if damaged:
            problems.add("ID", f"remembered plan {asked!r} cannot be read (`planexec memory forget ID` deletes it)")
        else:
            problems.add("ID", f"no remembered plan {asked!r} in {choice.describe()} (`planexec memory list`)")
        raise Refused(problems)
    row = _row(entry) | {"offered": offered}
    if as_json:
        click.echo(json_text(row))
        return 0
    console = make_console(as_json=False)
    lines = [
        f"plan {entry.id}",
        f"goal: {entry.goal}",
        *([f"constraints: {'; '.join(entry.constraints)}"] if entry.constraints else []),
        f"from run {entry.run_id or '-'}: {counted(entry.plan_versions, 'plan version')}, "
        f"{counted(entry.planner_calls, 'planner call')}, cost {money(entry.cost)}",
        f"uses {entry.uses}, failures {entry.failures}"
        + (f" (last: {entry.last_failure})" if entry.last_failure else ""),
        "offered: " + ("yes" if offered else "no") + ("" if entry.direct else " (as an example only: redacted values)"),
        f"answer template: {entry.answer if entry.answer is not None else '(none: the planner writes the answer)'}",
    ]
    for line in lines:
        console.print(shown(line), markup=False)
    table = Table(title="steps", title_justify="left")
    for name in ("id", "tool", "args", "after"):
        table.add_column(name)
    for step in entry.steps:
        table.add_row(
            shown(step.id),
            shown(step.tool or step.executor or "(model)"),
            shown(cut(json.dumps(step.args, ensure_ascii=False), 70)),
            shown(", ".join(step.depends_on)),
        )
    console.print(table)
    return 0


@memory.command("forget")
@click.argument("entry_ids", metavar="ID...", nargs=-1, required=True)
@global_options()
@click.pass_context
def forget(ctx: click.Context, entry_ids: tuple[str, ...]) -> None:
    """Forget remembered plans ID...: they are deleted and never offered again."""
    run_command(ctx, _forget(store_choice(ctx), entry_ids))


async def _forget(choice: StoreChoice, entry_ids: tuple[str, ...]) -> int:
    problems = Problems()
    async with _opened(choice, problems) as remembered:
        missing = [i for i in entry_ids if not await remembered.forget(i)]
    for entry_id in entry_ids:
        if entry_id not in missing:
            click.echo(shown(f"forgot {entry_id}"))
    if missing:
        for entry_id in missing:
            problems.add("ID", f"no remembered plan {entry_id!r} in {choice.describe()}")
        raise Refused(problems)
    return 0


@memory.command("export")
@global_options()
@click.pass_context
def export(ctx: click.Context) -> None:
    """Export every remembered plan as JSON Lines: one entry per line, as it is stored."""
    run_command(ctx, _export(store_choice(ctx)))


async def _export(choice: StoreChoice) -> int:
    problems = Problems()
    async with _opened(choice, problems) as remembered:
        records = await remembered.export()
        unreadable = remembered.unreadable
    for record in records:
        click.echo(json.dumps(record, ensure_ascii=False, sort_keys=True))
    if unreadable:
        click.echo(shown(f"left out {counted(len(unreadable), 'remembered plan')} that cannot be read"), err=True)
    return 0
