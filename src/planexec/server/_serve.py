"""Serving the API with uvicorn on a socket."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from planexec.hosting import LOOPBACK_HOSTS, ConnectionLimits, is_loopback, serve_asgi
from planexec.server._app import AppSettings, build_app
from planexec.server._identity import DEFAULT_PORT
from planexec.server._workers import Workers
from planexec.store import RunStore

__all__ = ["serve"]


async def serve(
    store: RunStore,
    settings: AppSettings,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    limits: ConnectionLimits | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Serve the API over ``store`` until the process is told to stop (SIGINT, SIGTERM); return how
    many runs were still under way. Those are left as they are (not cancelled), to be picked up
    when a server with the same instance id starts: a process that serves should end without
    cancelling its remaining tasks (``os._exit``) when there are any.

    Each connection is held to ``limits`` (timeouts, caps: see
    :class:`~planexec.hosting.ConnectionLimits`). Requests naming a host other than those of
    ``settings.allowed_hosts`` get 421; when it is None, on a loopback ``host`` they are
    ``127.0.0.1``, ``localhost`` and ``[::1]``, and on another address any host is served."""
    if settings.allowed_hosts is None and is_loopback(host):
        settings = dataclasses.replace(settings, allowed_hosts=LOOPBACK_HOSTS)
    agents = {a.name: a for a in settings.agents}
    workers = Workers(store, agents, instance=settings.instance, workers=settings.workers, accepted=settings.accepted)
    app = build_app(store, settings, workers=workers)
    await serve_asgi(app, host=host, port=port, path="/", limits=limits, on_ready=on_ready)
    return workers.under_way()
