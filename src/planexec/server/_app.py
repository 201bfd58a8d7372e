"""The HTTP API as a FastAPI app: routes under ``/v1`` over one store and the server's workers,
behind the bearer token and the body-size limit; ``/healthz`` and the static page need no token.

The routes are in one module for each resource (``_routes_*.py``), what they share in
``_shared.py``; here they are put together, in the order of the OpenAPI document's paths."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from planexec import __version__
from planexec.hosting import App, BearerGuard
from planexec.server._agents import ServedAgent
from planexec.server._contract import completed
from planexec.server._guards import MAX_BODY_BYTES, BodyLimit, HostAllowList, SafeHeaders
from planexec.server._routes_actions import actions_routes
from planexec.server._routes_agents import agents_routes
from planexec.server._routes_events import events_routes
from planexec.server._routes_questions import answer_routes, inbox_routes
from planexec.server._routes_runs import runs_routes
from planexec.server._routes_server import STATIC, add_page, health_routes, is_open
from planexec.server._shared import Served, add_error_handlers, error_body
from planexec.server._workers import Workers
from planexec.store import RunStore

__all__ = ["STATIC", "AppSettings", "build_app", "openapi_document"]


@dataclass(frozen=True, kw_only=True)
class AppSettings:
    """How the API is served: its token, the agents it runs goals with, the browser origins it
    answers (none: no CORS), the largest body it reads and how many runs it executes at once."""

    token: str = field(repr=False)
    agents: Sequence[ServedAgent]
    instance: str
    cors_origins: Sequence[str] = ()
    max_body: int = MAX_BODY_BYTES
    workers: int = 4
    accepted: Path | None = None
    """Where accepted runs are written down before they are acknowledged (beside ``serve-id``)."""
    allowed_hosts: Sequence[str] | None = None
    """The host names a request's ``Host`` header may give (any port; others get 421); None: any.
    :func:`~planexec.server.serve` on a loopback address makes it ``127.0.0.1``, ``localhost`` and
    ``[::1]`` when it is None."""


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document, as ``GET /v1/openapi.json`` serves it."""
    from planexec.store import MemoryStore

    settings = AppSettings(token="-" * 16, agents=(), instance="-")
    document: dict[str, Any] = _assembled(MemoryStore(), settings).openapi()
    return document


def build_app(store: RunStore, settings: AppSettings, *, workers: Workers | None = None) -> App:
    """The API over ``store`` as an ASGI app, guarded as ``settings`` say; its runs execute in
    ``workers`` (made here when None).

    From the outside in: the Host allow-list, CORS (a preflight carries no token), the token
    (checked before any of the body is read, whatever its size), the body-size limit."""
    app: App = BodyLimit(_assembled(store, settings, workers), settings.max_body)
    app = BearerGuard(
        app,
        settings.token,
        unauthorized=error_body("unauthorized", "send the server's token as Authorization: Bearer TOKEN"),
        is_open=is_open,
    )
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app = CORSMiddleware(
            app,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "idempotency-key", "last-event-id"],
        )
    if settings.allowed_hosts is not None:
        app = HostAllowList(app, settings.allowed_hosts)
    return SafeHeaders(app)


def _assembled(store: RunStore, settings: AppSettings, workers: Workers | None = None) -> FastAPI:
    agents = {a.name: a for a in settings.agents}
    if workers is None:
        workers = Workers(
            store, agents, instance=settings.instance, workers=settings.workers, accepted=settings.accepted
        )
    served = Served(store, workers, agents)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await served.workers.recover()
        try:
            yield
        finally:
            await served.workers.close()

    api = FastAPI(
        title="planexec",
        version=__version__,
        summary="Planner–executor agents: start runs, follow their events, answer their questions.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        generate_unique_id_function=lambda route: route.name,
    )
    api.openapi = completed(api.openapi, is_open=is_open)  # type: ignore[method-assign]
    api.state.workers = workers
    api.state.served = served
    add_error_handlers(api)
    # In the order of the OpenAPI document's paths: each path where its first route is.
    for routes in (
        health_routes,
        agents_routes,
        runs_routes,  # GET /v1/runs, GET /v1/runs/{run_id}
        events_routes,
        inbox_routes,
        actions_routes,  # POST /v1/runs, then the run's cancel, resume, tell and fork
        answer_routes,
    ):
        routes.add_to(api)
    add_page(api)
    return api
