"""The flags that hold a server's connections to timeouts and caps (``planexec serve`` and
``planexec mcp serve --transport http``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from planexec.hosting import ConnectionLimits

__all__ = ["CONNECTION_FLAGS", "connection_options", "take_limits"]

F = TypeVar("F", bound=Callable[..., Any])

_DEFAULT = ConnectionLimits()
CONNECTION_FLAGS = (
    "header_timeout",
    "idle_timeout",
    "body_timeout",
    "max_connections",
    "max_connections_per_client",
)
"""The keyword names of the flags, as the command receives them."""

_SECONDS = click.FloatRange(min=0, min_open=True, max=86_400)


def connection_options(fn: F) -> F:
    fn = click.option(
        "--max-connections-per-client",
        type=click.IntRange(1, 1_000_000),
        default=_DEFAULT.max_connections_per_client,
        show_default=True,
        metavar="N",
        help="Connections one client address may hold without having shown the token (idle, half-sent, or "
        "asking without it); past it, its oldest is closed. Behind a reverse proxy on this machine every "
        "client has its address: raise it.",
    )(fn)
    fn = click.option(
        "--max-connections",
        type=click.IntRange(1, 1_000_000),
        default=_DEFAULT.max_connections,
        show_default=True,
        metavar="N",
        help="Connections held at once. When full, the oldest one without the token is closed to make room; "
        "one that has shown the token never is.",
    )(fn)
    fn = click.option(
        "--body-timeout",
        type=_SECONDS,
        default=_DEFAULT.body_timeout,
        show_default=True,
        metavar="SECONDS",
        help="How long a request's body may take to arrive after its head (and a request without the token to "
        "be answered); then 408 and the connection is closed.",
    )(fn)
    fn = click.option(
        "--idle-timeout",
        type=_SECONDS,
        default=_DEFAULT.idle_timeout,
        show_default=True,
        metavar="SECONDS",
        help="How long a connection may wait for a request to begin, when it opens and between requests.",
    )(fn)
    return click.option(
        "--header-timeout",
        type=_SECONDS,
        default=_DEFAULT.header_timeout,
        show_default=True,
        metavar="SECONDS",
        help="How long a request's head (its first line and headers) may take to arrive once begun.",
    )(fn)


def take_limits(values: dict[str, Any]) -> ConnectionLimits:
    """The limits the flags give, taken out of a command's keyword arguments."""
    return ConnectionLimits(**{name: values.pop(name) for name in CONNECTION_FLAGS if name in values})
