"""planexec over HTTP: ``planexec serve``, an API under ``/v1`` to start runs with registered
agents, follow their events live (Server-Sent Events), and answer what they ask a human, with a
small web page at ``/``.

```python
store = open_store("runs.db")
settings = AppSettings(token=serve_token().value, agents=[demo_agent(Path("demo"))], instance="local")
await serve(store, settings, port=8700)
```

Every route but ``/healthz`` and the page needs ``Authorization: Bearer TOKEN``. Runs started here
execute in this process, recorded with its instance id: the next start with the same id picks up
what a crash or a stop left unfinished. Needs the ``server`` extra (``pip install 'planexec[server]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planexec.server._agents import AGENT_NAME, DEMO_AGENT, AgentBuilder, ServedAgent, demo_agent, parse_agent_option
from planexec.server._identity import DEFAULT_PORT, TOKEN_ENV, instance_id, require_server, serve_token
from planexec.server._views import RunDetail, RunSummary
from planexec.views import QuestionView

if TYPE_CHECKING:
    from planexec.server._app import AppSettings, build_app
    from planexec.server._serve import serve

__all__ = [
    "AGENT_NAME",
    "DEFAULT_PORT",
    "DEMO_AGENT",
    "TOKEN_ENV",
    "AgentBuilder",
    "AppSettings",
    "QuestionView",
    "RunDetail",
    "RunSummary",
    "ServedAgent",
    "build_app",
    "demo_agent",
    "instance_id",
    "openapi_document",
    "parse_agent_option",
    "require_server",
    "serve",
    "serve_token",
]

_LAZY = {
    "AppSettings": "planexec.server._app",
    "build_app": "planexec.server._app",
    "serve": "planexec.server._serve",
}
"""Names whose modules import FastAPI or uvicorn: imported when first used."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'planexec.server' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI 3.1 document (what ``GET /v1/openapi.json`` returns)."""
    from planexec.server._app import openapi_document as document

    return document()
