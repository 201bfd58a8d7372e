"""planexec served to other programs: an MCP server whose tools run goals with an agent and
operate on the runs of a store (``planexec mcp serve`` on the command line).

```python
server = mcp_server(AgentSpec(planner="openai:gpt-4.1", tools=("tools:search",)), open_store("runs.db"))
await serve_http(server, token=server_token().value)      # or: await serve_stdio(server)
```

Needs the ``mcp`` extra (``pip install 'planexec[mcp]'``).
"""

from planexec.hosting._connections import ConnectionLimits
from planexec.hosting._host import AgentSource
from planexec.hosting._server import mcp_server, require_mcp
from planexec.hosting._serving import (
    DEFAULT_PORT,
    LOOPBACK_HOSTS,
    MAX_BODY_BYTES,
    App,
    BearerGuard,
    http_app,
    is_loopback,
    serve_asgi,
    serve_http,
    serve_stdio,
)
from planexec.hosting._sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_EXPIRY, SessionLimits
from planexec.hosting._token import TOKEN_ENV, Token, default_token_path, server_token
from planexec.hosting._views import (
    AnswerView,
    OutcomeView,
    QuestionView,
    RunDetailView,
    RunListView,
    StepView,
    StopView,
)

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_PORT",
    "DEFAULT_SESSION_EXPIRY",
    "LOOPBACK_HOSTS",
    "MAX_BODY_BYTES",
    "TOKEN_ENV",
    "AgentSource",
    "AnswerView",
    "App",
    "BearerGuard",
    "ConnectionLimits",
    "OutcomeView",
    "QuestionView",
    "RunDetailView",
    "RunListView",
    "SessionLimits",
    "StepView",
    "StopView",
    "Token",
    "default_token_path",
    "http_app",
    "is_loopback",
    "mcp_server",
    "require_mcp",
    "serve_asgi",
    "serve_http",
    "serve_stdio",
    "server_token",
]
