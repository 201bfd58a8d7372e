"""What the commands share: the console to show a run on, the display, and running to the end."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import click
from rich.console import Console

from planexec.cli._board import Board, Display, LineDisplay, LiveDisplay, follow
from planexec.runtime import Agent, RunResult

__all__ = ["display_for", "exit_for", "make_console", "run_to_end", "say", "start_and_follow"]


def make_console(*, as_json: bool) -> Console:
    """Where progress goes: the terminal's stdout, or stderr when stdout carries JSON.

    Output that is not a terminal (a pipe, a log file) gets 120 columns unless COLUMNS says otherwise.
    """
    console = Console(stderr=as_json)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=as_json, width=120)
    return console


def display_for(console: Console, *, no_live: bool, title: str) -> Display:
    """The live board on a terminal, plain lines otherwise (or when asked)."""
    if no_live or not console.is_terminal:
        return LineDisplay(console)
    return LiveDisplay(console, Board(title=title))


def say(console: Console, text: str) -> None:
    """Print plain text: no markup, no highlighting, no wrapping."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


async def start_and_follow(agent: Agent, goal: str, constraints: Sequence[str], display: Display) -> RunResult:
    """Start ``goal`` and show it until it ends; when cancelled (Ctrl-C), return the cancelled run's result."""
    run = agent.start(goal, constraints=constraints)
    try:
        return await follow(run, display)
    except asyncio.CancelledError:
        # Ctrl-C: the run was cancelled with the display; report what it did instead of a traceback.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return await run.result()


def run_to_end(agent: Agent, goal: str, constraints: Sequence[str], display: Display) -> RunResult:
    """Run ``goal`` in a fresh event loop, showing it on ``display``; Ctrl-C cancels the run."""
    return asyncio.run(start_and_follow(agent, goal, constraints, display))


def exit_for(ctx: click.Context, result: RunResult) -> None:
    """Exit 0 when the goal was met; otherwise say why the run stopped and exit 1."""
    if result.ok:
        ctx.exit(0)
    click.echo(f"stopped: {result.stop}", err=True)
    ctx.exit(1)
