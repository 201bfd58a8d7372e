"""The ``planexec`` command group: the global options and every command.

A command's module — and what it needs: the runtime, the store, pydantic, the providers — is
imported only when that command runs (or its help is asked for). ``planexec --help`` lists the
commands from the summaries below, so it starts without importing any of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click

from planexec import __version__
from planexec.cli._globals import PII_HELP, STORE_HELP, remember_store

__all__ = ["COMMANDS", "main"]


@dataclass(frozen=True, slots=True)
class _Command:
    """Where a command is defined, and the summary ``planexec --help`` shows for it (the first
    sentence of its docstring; a test keeps the two the same)."""

    module: str
    attribute: str
    summary: str


COMMANDS: dict[str, _Command] = {
    "answer": _Command(
        "_approvals",
        "answer",
        "Answer the planner's question ID of RUN with TEXT (for an escalation: TEXT is guidance).",
    ),
    "approvals": _Command(
        "_approvals",
        "approvals",
        "List the questions unfinished runs wait for: plans, steps and uncertain effects to approve.",
    ),
    "approve": _Command("_approvals", "approve", "Approve question ID of RUN (with no ID: its only open question)."),
    "demo": _Command("_demo", "demo", "Run the offline demo: an agent audits a failing customer workflow."),
    "eval": _Command(
        "_eval",
        "eval_command",
        "Evaluate an agent on a suite of golden tasks (a YAML file, bfcl:CATEGORY or agentdojo:SUITE).",
    ),
    "export": _Command("_listing", "export", "Export RUN's log as JSON Lines: one event per line, in log order."),
    "gc": _Command(
        "_gc", "gc", "Delete the runs (and their logs) not updated for AGE: finished, waiting or abandoned alike."
    ),
    "queue": _Command(
        "_workers",
        "queue",
        "List the runs submitted to workers, oldest first: their state, the worker holding each, claims.",
    ),
    "reject": _Command(
        "_approvals",
        "reject",
        "Reject question ID of RUN: the plan or step is not run, an escalation stops the run, a step's result "
        "under review fails (the planner patches), a final answer goes back to the planner with the reason and "
        "the failed checklist items (--fail N=NOTE).",
    ),
    "mcp": _Command("_mcp", "mcp", "Serve planexec itself as an MCP server (planexec mcp serve)."),
    "memory": _Command("_memory", "memory", "The plans remembered in the store: list, show, forget, export."),
    "replay": _Command("_replay", "replay", "Replay RUN from its log."),
    "resume": _Command(
        "_resume", "resume", "Go on with RUN from its log: after a crash, or once its questions are answered."
    ),
    "run": _Command("_run", "run", "Run GOAL with a planner model, tools and budgets."),
    "runs": _Command("_listing", "runs", "List the runs in the store, newest first."),
    "schema": _Command("_schema", "schema", "Print the JSON Schema of a plan (versioned)."),
    "sessions": _Command(
        "_sessions", "sessions", "List the sessions in the store, or (with ID) the turns of one, first to last."
    ),
    "serve": _Command(
        "_serve",
        "serve",
        "Serve the HTTP API and its web page: start runs, follow their events, answer their questions.",
    ),
    "show": _Command(
        "_listing",
        "show",
        "Show RUN: goal and outcome, each plan version (who made it, why, and what it changed from the "
        "version before), each step record, usage and cost, and the questions asked with their answers.",
    ),
    "submit": _Command("_workers", "submit", "Queue GOAL for `planexec worker` processes and print the run's id."),
    "worker": _Command(
        "_workers",
        "worker",
        "Run the runs queued in a PostgreSQL store (`planexec submit`), with any number of other workers.",
    ),
    "verify": _Command(
        "_verify", "verify", "Check RUN's hash chain: the first event where it breaks, or intact with its head."
    ),
    "tell": _Command(
        "_approvals",
        "tell",
        "Tell RUN something new, or change a constraint (--constraint): the planner replans with it at the "
        "next safe point, keeping the work already done.",
    ),
}
"""Every command, by name."""


class _Group(click.Group):
    """A group whose commands are imported when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        command = getattr(importlib.import_module(f"planexec.cli.{where.module}"), where.attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"planexec.cli.{where.module}.{where.attribute} is not a command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, _cut(COMMANDS[name].summary, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _cut(text: str, limit: int) -> str:
    """``text``, or as many of its words as fit in ``limit`` characters followed by "..."."""
    if len(text) <= limit:
        return text
    words: list[str] = []
    for word in text.split():
        if len(" ".join([*words, word])) + 3 > limit:
            break
        words.append(word)
    return " ".join(words).rstrip(",:;") + "..."


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="planexec", message="%(prog)s %(version)s")
@click.option("--store", "store", metavar="URL", envvar="PLANEXEC_STORE", help=STORE_HELP)
@click.option("--redact-pii", is_flag=True, envvar="PLANEXEC_REDACT_PII", help=PII_HELP)
@click.pass_context
def main(ctx: click.Context, store: str | None, redact_pii: bool) -> None:
    """Planner–executor agents: typed plans, parallel steps, checked results, bounded runs.

    Runs are logged in a store (--store), where they can be listed (runs, show, export), answered
    (approvals, approve, reject, answer), told something new (tell), picked up again (resume),
    replayed or forked (replay) and deleted when old (gc). The options above may also be given
    after the command.
    """
    remember_store(ctx, store, pii=redact_pii)
