"""What the commands share: the console, the display, running a command's coroutine, refusing bad
input, and following a run to its end."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import click
from rich.console import Console

from planexec._util.plural import counted
from planexec.cli._board import Board, Display, LineDisplay, LiveDisplay, follow
from planexec.cli._options import Problems, Refused
from planexec.cli._text import plain, redactor_of
from planexec.errors import StoreError, UsageError
from planexec.log import RunResult
from planexec.runs import Supervisor
from planexec.runtime import Agent, Budget, Run
from planexec.store import Redactor, RunStore

__all__ = [
    "EXIT_OK",
    "EXIT_STOPPED",
    "EXIT_USAGE",
    "EXIT_WAITING",
    "View",
    "display_for",
    "exit_code",
    "exit_for",
    "follow_to_end",
    "make_console",
    "problem_exit",
    "run_command",
    "run_to_end",
    "say",
    "start_and_follow",
]

EXIT_OK, EXIT_STOPPED, EXIT_USAGE, EXIT_WAITING = 0, 1, 2, 3


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


@dataclass(frozen=True, kw_only=True)
class View:
    """How a command that runs an agent shows it: where, live or in lines, JSON or not, and
    whether a human at the terminal may be asked."""

    console: Console
    display: Display
    as_json: bool
    no_input: bool

    @classmethod
    def make(cls, *, as_json: bool, no_live: bool, no_input: bool, title: str = "planexec") -> View:
        console = make_console(as_json=as_json)
        return cls(
            console=console,
            display=display_for(console, no_live=no_live, title=title),
            as_json=as_json,
            no_input=no_input,
        )


def say(console: Console, text: str) -> None:
    """Print plain text: no markup, no highlighting, no wrapping, control characters made visible."""
    console.print(plain(text), markup=False, highlight=False, soft_wrap=True)


def problem_exit(ctx: click.Context, problems: Sequence[str]) -> NoReturn:
    """Say everything wrong with the invocation and exit with status 2."""
    names = []
    at: click.Context | None = ctx
    while at is not None and at.parent is not None:  # the command and its groups, not the program
        names.append(at.info_name or "")
        at = at.parent
    path = " ".join(["planexec", *reversed(names)])
    click.echo(f"Error: {path}: {counted(len(problems), 'problem')}:", err=True)
    for p in problems:
        click.echo(f"  - {p}", err=True)
    ctx.exit(EXIT_USAGE)


def run_command(ctx: click.Context, main: Coroutine[Any, Any, int]) -> NoReturn:
    """Run a command's coroutine in a fresh event loop and exit with the status it returns;
    :class:`Refused` becomes the list of problems and exit status 2."""
    try:
        code = asyncio.run(main)
    except Refused as e:
        problem_exit(ctx, e.problems)
    except UsageError as e:  # e.g. a run refused to start: a model has no API key
        problems = Problems()
        problems.add_usage_error("", e)
        problem_exit(ctx, problems)
    except StoreError as e:  # the store failed or holds what cannot be read: say so, no traceback
        problem_exit(ctx, [plain(str(e))])
    ctx.exit(code)


async def follow_to_end(
    run: Run, display: Display, *, since: int = 0, store: RunStore | None = None, redactor: Redactor | None = None
) -> RunResult:
    """Show ``run`` until it ends or is suspended; when cancelled (Ctrl-C), return the cancelled run's result.

    What is shown passes through ``redactor`` (the store's: see :func:`redactor_of`)."""
    try:
        return await follow(run, display, since=since, store=store, redactor=redactor)
    except asyncio.CancelledError:
        # Ctrl-C: the run was cancelled with the display; report what it did instead of a traceback.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return await run.result()


async def start_and_follow(
    agent: Agent,
    goal: str,
    constraints: Sequence[str],
    display: Display,
    *,
    metadata: Mapping[str, Any] | None = None,
    session: str | None = None,
    session_budget: Budget | None = None,
) -> RunResult:
    """Start ``goal`` (as the next turn of ``session``, when given, under ``session_budget`` or the
    caps the session began with) and show it until it ends; when cancelled (Ctrl-C), return the
    cancelled run's result."""
    try:
        run = await Supervisor(agent.store).begin(
            agent, goal, constraints=constraints, metadata=metadata, session=session, session_budget=session_budget
        )
        return await follow_to_end(run, display, redactor=redactor_of(agent.store))
    finally:
        await agent.aclose()  # its MCP servers, if it has any


def run_to_end(agent: Agent, goal: str, constraints: Sequence[str], display: Display) -> RunResult:
    """Run ``goal`` in a fresh event loop, showing it on ``display``; Ctrl-C cancels the run."""
    return asyncio.run(start_and_follow(agent, goal, constraints, display))


def exit_code(result: RunResult) -> int:
    """0 when the goal was met, 3 when the run waits for a human, 1 when it stopped otherwise."""
    if result.ok:
        return EXIT_OK
    return EXIT_WAITING if result.stop.kind == "waiting" else EXIT_STOPPED


def exit_for(ctx: click.Context, result: RunResult) -> None:
    """Exit with :func:`exit_code`, saying why the run stopped when the goal was not met."""
    if not result.ok:
        click.echo(plain(f"stopped: {result.stop}"), err=True)
    ctx.exit(exit_code(result))
