"""``planexec serve``: the HTTP API (and its web page) over the store, with agents registered by
name; the offline demo agent when none is named."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import click

from planexec._util.plural import counted
from planexec.cli._common import problem_exit
from planexec.cli._connection_options import connection_options, take_limits
from planexec.cli._globals import global_options
from planexec.cli._options import Problems, Refused
from planexec.cli._store_options import StoreChoice, is_memory, store_choice, using_store
from planexec.cli._telemetry import TelemetryFlags, exporting, telemetry_options
from planexec.cli._text import plain
from planexec.errors import StoreError, UsageError
from planexec.hosting import LOOPBACK_HOSTS, ConnectionLimits, default_token_path, is_loopback

__all__ = ["serve"]


def _say(text: str) -> None:
    click.echo(plain(f"planexec serve: {text}"), err=True)


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on. Any address but a loopback one is reachable from other machines.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8700,
    show_default=True,
    help="The port to listen on; 0 picks a free one (the URL is printed).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file holding the bearer token every API request must carry. Default: $PLANEXEC_SERVE_TOKEN, else a "
    "token generated on first start into serve-token beside the default store (readable by its owner only).",
)
@click.option(
    "--agent",
    "agents",
    multiple=True,
    metavar="NAME=REF",
    help="Register an agent under NAME: REF is an agent spec file (.json, the fields `planexec run` records) or "
    "module:attr naming an AgentSpec or a function building an Agent from a store. Repeatable. Default: the "
    "offline demo agent, as 'demo'.",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help="A browser origin (https://host:port) allowed to call the API from its pages. Repeatable; none: no CORS.",
)
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name (or address) requests may name in their Host header, besides 127.0.0.1, localhost and "
    "[::1]; any port. Repeatable. Without it, a server on a loopback address answers only those three, and "
    "one on another address answers any.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=4,
    show_default=True,
    help="How many runs execute at once; more wait their turn.",
)
@click.option(
    "--demo-pace",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Scale the simulated latency of the demo agent's models and tools (0: none).",
)
@click.option("--openapi", is_flag=True, help="Print the API's OpenAPI document and exit.")
@connection_options
@telemetry_options
@global_options()
@click.pass_context
def serve(
    ctx: click.Context,
    /,
    host: str,
    port: int,
    token_file: Path | None,
    agents: tuple[str, ...],
    cors_origins: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    workers: int,
    demo_pace: float,
    openapi: bool,
    **observed: Any,
) -> None:
    """Serve the HTTP API and its web page: start runs, follow their events, answer their questions.

    The API is under /v1 (OpenAPI at /v1/openapi.json); every route but /healthz and the page
    needs `Authorization: Bearer TOKEN`. The server listens on 127.0.0.1 unless --host says
    otherwise. Runs started here execute in this process and are logged in the store (see
    --store); when the server stops or crashes, the next start picks up the runs it left under way.

    Connections are held to timeouts and caps (the flags below): idle, half-sent and slow clients
    are closed, and those without the token never crowd out those with it.
    """
    problems = Problems()
    _check_server(ctx, problems, openapi=openapi)
    for origin in cors_origins:
        if not origin.startswith(("http://", "https://")) or origin.count("/") != 2:
            problems.add("--cors-origin", f"{origin!r} is not an origin: scheme://host[:port], no path")
    for name in allowed_hosts:
        if not _is_host(name):
            problems.add("--allow-host", f"{name!r} is not a host name or address: no scheme, port, path or spaces")
    limits = take_limits(observed)
    folder = token_file.resolve().parent if token_file is not None else default_token_path().parent
    flags = TelemetryFlags.take(observed)
    flags.check(problems)
    loop = asyncio.new_event_loop()
    with exporting(flags, problems):
        served = _serve(
            store_choice(ctx),
            host,
            port,
            token_file,
            folder,
            agents,
            cors_origins,
            (*LOOPBACK_HOSTS, *allowed_hosts) if allowed_hosts else None,
            workers,
            demo_pace,
            limits,
            problems,
        )
        left = _until_stopped(ctx, loop, served, problems)
    if left:
        # Runs still under way are not cancelled (that would finish them): the next start goes on with them.
        _say(f"stopped; {counted(left, 'run')} under way go on when the server starts again")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    loop.close()
    ctx.exit(0)


def _check_server(ctx: click.Context, problems: Problems, *, openapi: bool) -> None:
    """Exit with the problem when the ``server`` extra is missing; with ``openapi``, print the
    API's OpenAPI document and exit."""
    from planexec.server import require_server

    try:
        require_server()
    except UsageError as e:
        problems.add_usage_error("", e)
        problem_exit(ctx, problems)
    if openapi:
        from planexec.server import openapi_document

        click.echo(json.dumps(openapi_document(), indent=2))
        ctx.exit(0)


def _until_stopped(
    ctx: click.Context, loop: asyncio.AbstractEventLoop, served: Coroutine[Any, Any, int], problems: Problems
) -> int:
    """Serve on ``loop`` until stopped; how many runs were left under way. A refusal exits."""
    try:
        return loop.run_until_complete(served)
    except Refused as e:
        loop.close()
        problem_exit(ctx, e.problems)
    except UsageError as e:
        loop.close()
        problems.add_usage_error("", e)
        problem_exit(ctx, problems)
    except StoreError as e:
        loop.close()
        problem_exit(ctx, [plain(str(e))])
    except KeyboardInterrupt:
        return 0


async def _serve(
    choice: StoreChoice,
    host: str,
    port: int,
    token_file: Path | None,
    folder: Path,
    agent_options: tuple[str, ...],
    cors_origins: tuple[str, ...],
    allowed_hosts: tuple[str, ...] | None,
    workers: int,
    demo_pace: float,
    limits: ConnectionLimits,
    problems: Problems,
) -> int:
    from planexec.server import (
        AppSettings,
        ServedAgent,
        demo_agent,
        instance_id,
        parse_agent_option,
        serve,
        serve_token,
    )

    token = None
    try:
        token = serve_token(token_file)
    except UsageError as e:
        for p in e.problems:
            problems.add(p.where, p.message)
    registered: list[ServedAgent] = []
    for text in agent_options:
        try:
            agent = parse_agent_option(text)
        except UsageError as e:
            problems.add_usage_error("", e)
            continue
        if any(a.name == agent.name for a in registered):
            problems.add(f"--agent {text}", f"an agent is registered as {agent.name!r} already")
        registered.append(agent)
    if not agent_options:
        registered.append(demo_agent(folder / "serve-demo", pace=demo_pace))
    if problems or token is None:
        raise Refused(problems)
    async with using_store(choice, problems) as store:
        if is_memory(store):
            _say("warning: the store is in memory: runs end with this server; name a lasting one with --store")
        if not is_loopback(host):
            _say(
                f"warning: listening on {host}, which other machines may reach: anyone holding the token can "
                "run the agents; put TLS in front of it"
            )
        settings = AppSettings(
            token=token.value,
            agents=registered,
            instance=instance_id(folder),
            accepted=folder / "serve-accepted.jsonl",
            cors_origins=cors_origins,
            allowed_hosts=allowed_hosts,
            workers=workers,
        )
        names = ", ".join(a.name for a in registered)

        def ready(url: str) -> None:
            _say(f"agents: {names}")
            if token.created:
                _say(f"generated a token into {default_token_path('serve-token')} (shown this once)")
                _say(f"open {url}#token={token.value}")
            else:
                _say(f"API requests need the token in {token.source}")
            click.echo(f"planexec serve: {url}", err=True)

        return await serve(store, settings, host=host, port=port, limits=limits, on_ready=ready)


def _is_host(name: str) -> bool:
    """Whether ``name`` is a host name, an IPv4 address or an IPv6 address (bare or in brackets)."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if ":" in bare:
        try:
            ipaddress.IPv6Address(bare)
        except ValueError:
            return False
        return True
    return re.fullmatch(r"[A-Za-z0-9._-]{1,253}", name) is not None
