"""``planexec submit GOAL`` queues a run for workers; ``planexec worker`` runs queued runs, sharing
them with every other worker on the same PostgreSQL store (see :mod:`planexec.workers`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
from typing import Any

import click

from planexec.cli._agent_options import AgentFlags, agent_options
from planexec.cli._common import run_command
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._store_options import StoreChoice, store_choice, using_store
from planexec.cli._text import plain
from planexec.errors import StoreError, UsageError
from planexec.store import safe_url

__all__ = ["queue", "submit", "worker"]

POSTGRES_ONLY = "workers share runs through a PostgreSQL store: give --store postgresql://… (or $PLANEXEC_STORE)"


@click.command()
@click.argument("goal")
@agent_options(for_run=True)
@click.option(
    "--constraint", "constraints", multiple=True, metavar="TEXT", help="A constraint on the goal (repeatable)."
)
@click.option("--approve-plan", is_flag=True, help="Approve each plan version before it runs (saved in the log).")
@click.option("--run-id", "run_id", metavar="ID", default=None, help="The run's id (default: a new one).")
@click.option(
    "--memory",
    "use_memory",
    is_flag=True,
    help="The worker reuses a plan remembered in the store when GOAL is like a goal met before, and remembers "
    "this run's plan when it meets its goal (as `planexec run --memory`; every worker shares the memory).",
)
@click.option(
    "--no-check",
    is_flag=True,
    help="Do not build the agent here first (its tools exist only on the workers' machines).",
)
@global_options()
@click.pass_context
def submit(
    ctx: click.Context,
    /,
    goal: str,
    constraints: tuple[str, ...],
    run_id: str | None,
    use_memory: bool,
    no_check: bool,
    **values: Any,
) -> None:
    """Queue GOAL for `planexec worker` processes and print the run's id.

    Takes the agent flags of `planexec run`; they are recorded with the run, so that any worker
    builds the same agent. The store must be PostgreSQL. Follow the run with `planexec show RUN`
    once a worker has started it.

    Exit status: 0 queued, 2 wrong command line (every problem is listed).
    """
    spec = dataclasses.replace(AgentFlags.take(values).spec_for_run(constraints), memory=use_memory)
    run_command(ctx, _submit(goal, spec, run_id, not no_check, store_choice(ctx)))


async def _submit(goal: str, spec: Any, run_id: str | None, check: bool, choice: StoreChoice) -> int:
    from planexec.runs import submit as submit_run

    problems = Problems()
    if not goal.strip():
        problems.add("GOAL", "the goal is empty")
    async with using_store(choice, problems) as store:
        if store.queue() is None:
            problems.add("--store", POSTGRES_ONLY)
        if problems:
            raise Refused(problems)
        try:
            chosen = await submit_run(store, spec, goal, run_id=run_id, check=check)
        except UsageError as e:
            problems.add_problems(e.problems)
            raise Refused(problems) from None
    click.echo(chosen)
    return 0


@click.command()
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=4, show_default=True, help="Runs at once.")
@click.option(
    "--lease-seconds",
    type=click.FloatRange(0.5, 86_400),
    default=15.0,
    show_default=True,
    help="How long a claim holds without renewal (renewed every third): a dead worker's runs are "
    "taken over this long after its last renewal.",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(0.01, 3600),
    default=1.0,
    show_default=True,
    help="How often an idle worker looks for queued runs.",
)
@click.option(
    "--grace-seconds",
    type=click.FloatRange(0.01, 86_400),
    default=30.0,
    show_default=True,
    help="On SIGTERM: how long runs in hand may go on before they are left to other workers.",
)
@click.option(
    "--store-patience",
    type=click.FloatRange(0.01, 86_400),
    default=None,
    help="Seconds of store failures after which the worker stops (exit 1). Default: one lease.",
)
@click.option(
    "--max-claims",
    type=click.IntRange(1, 1_000_000),
    default=10,
    show_default=True,
    help="A run claimed more often (every worker that took it died) is ended with a typed stop.",
)
@click.option("--name", default=None, metavar="TEXT", help="The worker's id in leases (default: host:pid:random).")
@global_options()
@click.pass_context
def worker(
    ctx: click.Context,
    /,
    concurrency: int,
    lease_seconds: float,
    poll_seconds: float,
    grace_seconds: float,
    store_patience: float | None,
    max_claims: int,
    name: str | None,
) -> None:
    """Run the runs queued in a PostgreSQL store (`planexec submit`), with any number of other workers.

    Each run is held under a lease the worker renews; when a worker dies, another takes its runs
    over once their leases expire and resumes them from the log (finished steps never run again).
    SIGTERM or SIGINT drains: nothing more is claimed, runs in hand get --grace-seconds to end,
    the rest are left for other workers.

    Exit status: 0 drained, 1 the store kept failing, 2 wrong command line.
    """
    from planexec.workers import WorkerSettings

    settings = WorkerSettings(
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        poll_seconds=poll_seconds,
        grace_seconds=grace_seconds,
        store_patience=store_patience,
        max_claims=max_claims,
        name=name,
    )
    run_command(ctx, _work(settings, store_choice(ctx)))


async def _work(settings: Any, choice: StoreChoice) -> int:
    from planexec.workers import Worker, WorkerFailed

    problems = Problems()
    async with using_store(choice, problems) as opened:
        opened_queue = opened.queue()
        if opened_queue is None:
            problems.add("--store", POSTGRES_ONLY)
            raise Refused(problems)
        # connections enough for every run in hand, the heartbeat and the claims
        store = opened_queue.with_connections(settings.concurrency + 2).store
        try:
            try:
                the_worker = Worker(store, settings)
            except UsageError as e:
                problems.add_problems(e.problems)
                raise Refused(problems) from None
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, the_worker.drain)
            shown = plain(safe_url(store.url))
            click.echo(
                f"worker {the_worker.id}: taking runs from {shown} "
                f"(concurrency {settings.concurrency}, lease {settings.lease_seconds:g} s)",
                err=True,
            )
            try:
                stats = await the_worker.run()
            except WorkerFailed as e:
                click.echo(plain(f"planexec worker: {e}"), err=True)
                return 1
            except StoreError as e:
                click.echo(plain(f"planexec worker: the store failed: {e}"), err=True)
                return 1
            click.echo(
                f"worker {the_worker.id}: drained; started {stats.started}, resumed {stats.resumed}, "
                f"finished {stats.finished}, waiting {stats.waiting}, failed to build {stats.failed_to_build}, "
                f"lost {stats.lost}, left to others {stats.drained}",
                err=True,
            )
            return 0
        finally:
            await store.close()


@click.command()
@click.option(
    "--state",
    type=click.Choice(["queued", "leased", "waiting", "done"]),
    default=None,
    help="Only runs in this state.",
)
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=50, show_default=True, help="At most N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON list.")
@global_options()
@click.pass_context
def queue(ctx: click.Context, /, state: str | None, limit: int, as_json: bool) -> None:
    """List the runs submitted to workers, oldest first: their state, the worker holding each, claims.

    States: queued (waiting for a worker), leased (a worker runs it; `owner` holds the lease until
    `expires_at`, database clock), waiting (suspended for a human's answer), done.
    """
    run_command(ctx, _queue(state, limit, as_json, store_choice(ctx)))


async def _queue(state: str | None, limit: int, as_json: bool, choice: StoreChoice) -> int:
    problems = Problems()
    async with using_store(choice, problems) as store:
        queue = store.queue()
        if queue is None:
            problems.add("--store", POSTGRES_ONLY)
            raise Refused(problems)
        chosen: Any = state
        rows = await queue.entries(state=chosen, limit=limit)
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
        return 0
    click.echo(f"{len(rows)} submitted run{'' if len(rows) == 1 else 's'} in {choice.describe()}")
    for row in rows:
        holder = f" held by {row.owner}" if row.owner else ""
        note = f" — {row.note}" if row.note else ""
        click.echo(plain(f"  {row.run_id}  {row.state}{holder}  claims {row.claims}{note}"))
    return 0
