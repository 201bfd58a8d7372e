"""The routes about the server itself, served without the token: ``GET /healthz``, and the web
page at ``/`` with its files under ``/assets``."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles

from planexec import __version__
from planexec.server._bodies import Health
from planexec.server._contract import refusals
from planexec.server._shared import ApiError, Routes

__all__ = ["STATIC", "add_page", "health_routes", "is_open"]

STATIC = Path(__file__).with_name("static")
"""The web page's files, shipped in the package."""

health_routes = Routes()


@health_routes.get("/healthz", tags=["server"], responses=refusals(token=False))
async def healthz() -> Health:
    """Whether the server is up (no token needed)."""
    return Health(ok=True, version=__version__)


_page = Routes()


@_page.get("/", include_in_schema=False)
async def page() -> Response:
    index = STATIC / "index.html"
    if not index.is_file():
        raise ApiError(404, "no_page", "the web page is not installed with this planexec")
    return FileResponse(index, headers={"cache-control": "no-cache"})


def add_page(api: FastAPI) -> None:
    """Serve the web page at ``/`` and its files under ``/assets`` (after the API's routes)."""
    _page.add_to(api)
    api.mount("/assets", StaticFiles(directory=STATIC / "assets", check_dir=False), name="assets")


def is_open(path: str) -> bool:
    """The paths served without the token: the health check and the static page (no data)."""
    return path in ("/", "/healthz") or path.startswith("/assets/")
