"""``planexec mcp serve``: planexec itself as an MCP server, so that any MCP host (a desktop
assistant, an IDE, another agent) can hand it a goal. The agent is configured with the flags of
``planexec run`` and its runs go to the same store, visible to ``planexec runs`` and ``show``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from planexec.cli._agent_options import AgentFlags, agent_options, build
from planexec.cli._connection_options import CONNECTION_FLAGS, connection_options, take_limits
from planexec.cli._globals import global_options
from planexec.cli._options import Problems
from planexec.cli._store_options import StoreChoice, is_memory, store_choice, using_store
from planexec.cli._telemetry import TelemetryFlags, run_observed, telemetry_options
from planexec.cli._text import plain
from planexec.errors import UsageError
from planexec.hosting import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_PORT,
    DEFAULT_SESSION_EXPIRY,
    TOKEN_ENV,
    ConnectionLimits,
    SessionLimits,
    default_token_path,
    is_loopback,
    mcp_server,
    require_mcp,
    serve_http,
    serve_stdio,
    server_token,
)
from planexec.runs import AgentSpec, dropped_settings
from planexec.runtime import Approvals

__all__ = ["mcp"]

_HTTP_ONLY = ("host", "port", "path", "token_file", "max_sessions", "session_expiry", *CONNECTION_FLAGS)
_FLAGS = {"max_sessions": "--max-sessions", "idle_expiry": "--session-expiry"}
"""The flag of each session limit."""


@click.group()
@global_options()
def mcp() -> None:
    """Serve planexec itself as an MCP server (planexec mcp serve).

    Any MCP host — a desktop assistant, an IDE, another agent — can then run goals with the agent
    configured here, follow each step as a progress notification, read the runs and answer what
    they ask a human.
    """


@mcp.command()
@agent_options(for_run=True)
@click.option(
    "--approve-plan",
    is_flag=True,
    help="Ask for each plan version's approval before it runs: the run waits, and the host answers it.",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio: the host starts this command and speaks over its stdin and stdout; http: streamable HTTP.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on (http). Any address but a loopback one is reachable from other machines.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port to listen on (http); 0 picks a free one (the URL is printed).",
)
@click.option("--path", default="/mcp", show_default=True, help="The URL path of the MCP endpoint (http).")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"A file holding the bearer token every HTTP request must carry. Default: ${TOKEN_ENV}, else a token "
    "generated on first start into mcp-token beside the default store (readable by its owner only).",
)
@click.option(
    "--max-sessions",
    type=click.IntRange(1, 1_000_000),
    default=DEFAULT_MAX_SESSIONS,
    show_default=True,
    help="Sessions open at once (http); while that many are open, a client's initialize is refused "
    "with 503 (Too many open sessions) and the open ones go on.",
)
@click.option(
    "--session-expiry",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_SESSION_EXPIRY,
    show_default=True,
    metavar="SECONDS",
    help="Close a session after this many seconds with nothing under way (http): no request being "
    "served, no stream open. A request naming it is then answered 404, and its client initializes anew.",
)
@connection_options
@telemetry_options
@global_options()
@click.pass_context
def serve(
    ctx: click.Context,
    /,
    transport: str,
    host: str,
    port: int,
    path: str,
    token_file: Path | None,
    max_sessions: int,
    session_expiry: float,
    **values: Any,
) -> None:
    """Serve planexec as an MCP server, with the tools run_goal, list_runs, show_run,
    answer_question and resume_run.

    The agent is the one `planexec run` would build from the same flags; each goal a host hands
    over is a run logged in the store (see --store), visible to `planexec runs` and `planexec show`
    and resumable from the command line too. Questions for humans (--approve-plan, sensitive
    steps, the planner's questions) are saved in the run's log and the run waits: the host answers
    with answer_question and goes on with resume_run.

    Over http the server listens on 127.0.0.1 unless --host says otherwise, every request must
    carry `Authorization: Bearer TOKEN` (401 otherwise), and the sessions clients open are bounded
    (--max-sessions, --session-expiry). Connections are held to timeouts and caps (the connection
    flags): idle, half-sent and slow clients are closed, and those without the token never crowd
    out those with it.
    """
    problems = Problems()
    if transport == "stdio":
        for name in _HTTP_ONLY:
            if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
                problems.add(f"--{name.replace('_', '-')}", "applies to --transport http only")
    if not path.startswith("/") or any(c.isspace() for c in path):
        problems.add("--path", f"{path!r} is not a URL path: it begins with / and holds no spaces")
    observed = TelemetryFlags.take(values)
    limits = take_limits(values)
    spec = AgentFlags.take(values).spec_for_run(())
    try:
        sessions = SessionLimits(max_sessions=max_sessions, idle_expiry=session_expiry)
    except UsageError as e:
        for p in e.problems:
            problems.add(_FLAGS.get(p.where, p.where), p.message)
        sessions = SessionLimits()
    settings = (
        _Http(host=host, port=port, path=path, token_file=token_file, sessions=sessions, limits=limits)
        if transport == "http"
        else None
    )
    try:
        run_observed(ctx, observed, _serve(spec, store_choice(ctx), settings, problems))
    except KeyboardInterrupt:  # Ctrl-C: the server stops
        ctx.exit(0)


@dataclass(frozen=True, kw_only=True)
class _Http:
    """Where and how the HTTP transport listens."""

    host: str
    port: int
    path: str
    token_file: Path | None
    sessions: SessionLimits
    limits: ConnectionLimits


def _say(text: str) -> None:
    """A line for the user on stderr (stdout may be the protocol)."""
    click.echo(plain(f"planexec: {text}"), err=True)


async def _serve(spec: AgentSpec, choice: StoreChoice, http: _Http | None, problems: Problems) -> int:
    try:
        require_mcp()
    except UsageError as e:
        problems.add_usage_error("", e)
    token = None
    if http is not None:
        try:
            token = server_token(http.token_file)
        except UsageError as e:
            for p in e.problems:
                problems.add(p.where, p.message)
    async with using_store(choice, problems) as store:
        agent = build(spec, store=store, approvals=Approvals(deferred=True, plan=spec.approve_plan), problems=problems)
        server = mcp_server(spec, store)
        for line in dropped_settings(agent):
            _say(f"note: {line}")
        if is_memory(store):
            _say("warning: the store is in memory: runs end with this server; name a lasting one with --store")
        if http is None or token is None:
            await serve_stdio(server)
            return 0
        if not is_loopback(http.host):
            _say(
                f"warning: listening on {http.host}, which other machines may reach: anyone holding the token "
                "can run the agent; put TLS in front of it"
            )
        if token.created:
            _say(f"generated a token for this server into {default_token_path()} (shown this once): {token.value}")
        else:
            _say(f"HTTP requests need the token in {token.source}")
        await serve_http(
            server,
            token=token.value,
            host=http.host,
            port=http.port,
            path=http.path,
            sessions=http.sessions,
            limits=http.limits,
            on_ready=lambda url: _say(f"serving MCP over streamable HTTP at {url}"),
        )
    return 0
