"""A switch that every adapter for a real provider checks before it sends anything.

Test suites turn real requests off (``allow_model_requests(False)`` or the environment variable
``PLANEXEC_ALLOW_MODEL_REQUESTS=0``); the shipped test doubles are never affected.
"""

from __future__ import annotations

import os

from planexec.errors import UsageError

__all__ = ["allow_model_requests", "check_model_requests_allowed"]

_allowed: bool | None = None


def allow_model_requests(allowed: bool) -> None:
    """Allow or block requests to real model providers in this process."""
    global _allowed
    _allowed = allowed


def check_model_requests_allowed(model_name: str) -> None:
    """Raise when real model requests are blocked; adapters call this before every request."""
    allowed = _allowed
    if allowed is None:
        allowed = os.environ.get("PLANEXEC_ALLOW_MODEL_REQUESTS", "1").lower() not in ("0", "false", "no")
    if not allowed:
        raise UsageError(
            f"a real request to {model_name!r} was blocked: model requests are disabled "
            "(use a ScriptedModel or FunctionModel in tests)"
        )
