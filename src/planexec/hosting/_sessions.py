"""How many MCP-over-HTTP sessions the server keeps, and for how long an idle one is kept.

Each ``initialize`` over streamable HTTP opens a session that the server holds in memory (its
streams, its state: some tens of kilobytes) until the client ends it. Without bounds of its own
the SDK keeps up to 10,000 of them, each for 30 minutes after its last request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planexec.errors import Problem, UsageError

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_EXPIRY", "SessionLimits"]

DEFAULT_MAX_SESSIONS = 100
"""Sessions open at once, unless told otherwise."""
DEFAULT_SESSION_EXPIRY = 600.0
"""Seconds an idle session is kept, unless told otherwise (10 minutes)."""


@dataclass(frozen=True, kw_only=True)
class SessionLimits:
    """Bounds on the sessions of an MCP server over streamable HTTP.

    ``max_sessions``: sessions open at once. While that many are open, an ``initialize`` that
    would open another is refused with HTTP 503 and a JSON-RPC error (``Too many open sessions``);
    the open ones are served as before, and room comes back as clients end theirs (``DELETE``) or
    they expire.

    ``idle_expiry``: seconds a session is kept with nothing under way — no request being served,
    no stream open. Then it is closed, and a request naming it is answered 404 (the client opens a
    new one with ``initialize``). A long tool call is under way: it never expires its session.
    """

    max_sessions: int = DEFAULT_MAX_SESSIONS
    idle_expiry: float = DEFAULT_SESSION_EXPIRY

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.max_sessions, bool) or not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            problems.append(Problem(code="input", where="max_sessions", message="must be a whole number, 1 or more"))
        expiry = self.idle_expiry
        if isinstance(expiry, bool) or not isinstance(expiry, int | float) or not math.isfinite(expiry) or expiry <= 0:
            problems.append(Problem(code="input", where="idle_expiry", message="must be a number of seconds above 0"))
        if problems:
            raise UsageError("invalid session limits", problems)
