"""``planexec sessions [ID]``: the sessions in the store, or the turns of one."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from planexec.cli._common import make_console, run_command
from planexec.cli._format import cut, money, when
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._report import json_text
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.cli._text import shown
from planexec.errors import UsageError

__all__ = ["sessions"]


@click.command()
@click.argument("session_id", metavar="[ID]", required=False)
@click.option("--limit", default=50, show_default=True, metavar="N", type=click.IntRange(min=1), help="At most N.")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
@global_options()
@click.pass_context
def sessions(ctx: click.Context, session_id: str | None, limit: int, as_json: bool) -> None:
    """List the sessions in the store, or (with ID) the turns of one, first to last.

    Sessions are listed the most recently active first. Each turn is a run: `planexec show RUN`,
    `planexec resume RUN` and `planexec replay RUN` work on it. `planexec run GOAL --session ID`
    runs the next turn of session ID; `planexec replay --session ID` replays all of its turns."""
    run_command(ctx, _sessions(store_choice(ctx), session_id, limit, as_json))


async def _sessions(choice: StoreChoice, session_id: str | None, limit: int, as_json: bool) -> int:
    from planexec.runs import list_sessions, session_turns

    problems = Problems()
    async with using_store(choice, problems) as store:
        try:
            if session_id is not None:
                turns = await session_turns(store, session_id)
            else:
                found = await list_sessions(store, limit=limit)
        except UsageError as e:
            problems.add_usage_error("ID", e)
            raise Refused(problems) from None
    console = make_console(as_json=as_json)
    if session_id is not None:
        rows: list[dict[str, Any]] = [
            {
                "turn": t.turn,
                "run_id": t.run_id,
                "status": t.status,
                "stop": t.stop_kind,
                "cost": t.cost,
                "goal": t.goal,
            }
            for t in turns
        ]
        if as_json:
            click.echo(json_text({"session_id": session_id, "turns": rows}))
            return 0
        if not rows:
            console.print(f"no session {session_id!r} in {choice.describe()}", markup=False)
            return 0
        table = Table(title=shown(f"session {session_id}"), title_justify="left", title_style="bold")
        for name in ("turn", "run", "status", "stop", "cost", "goal"):
            table.add_column(name, justify="right" if name in ("turn", "cost") else "left")
        for row in rows:
            table.add_row(
                str(row["turn"]),
                shown(row["run_id"]),
                row["status"],
                shown(row["stop"] or ""),
                money(row["cost"]),
                shown(cut(row["goal"], 70)),
            )
        console.print(table)
        return 0
    if as_json:
        click.echo(
            json_text(
                [
                    {
                        "session_id": s.session_id,
                        "turns": s.turns,
                        "last_run": s.last_run,
                        "status": s.status,
                        "cost": s.cost,
                        "started_at": s.started_at,
                        "updated_at": s.updated_at,
                        "last_goal": s.last_goal,
                    }
                    for s in found
                ]
            )
        )
        return 0
    if not found:
        console.print(f"no sessions in {choice.describe()}", markup=False)
        return 0
    table = Table(title=shown(f"sessions in {choice.describe()}"), title_justify="left", title_style="bold")
    for name in ("session", "turns", "status", "cost", "active", "last goal"):
        table.add_column(name, justify="right" if name in ("turns", "cost") else "left")
    for s in found:
        table.add_row(
            shown(s.session_id), str(s.turns), s.status, money(s.cost), when(s.updated_at), shown(cut(s.last_goal, 60))
        )
    console.print(table)
    return 0
