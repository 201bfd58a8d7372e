"""API keys, the same way for every provider.

A provider's model reads its key (``api_key=``, else an environment variable) when it first makes a
request, so that a model can be built, and a run replayed, without one. It reports a missing key
through an optional method, ``missing_keys() -> tuple[Problem, ...]``, and refuses a request
without one with :func:`missing_keys_error`. Before a run starts, the agent asks every model it
holds (planner, executors, judge; fallback lists and fault wrappers pass the question on) and
refuses the run with every missing key listed at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from planexec.errors import Problem, UsageError

__all__ = ["missing_key", "missing_keys", "missing_keys_error"]


def missing_key(model: str, env: str | None) -> Problem:
    """The problem of ``model`` having no key, where ``env`` is the variable it reads one from."""
    if env:
        return Problem(code="api_key", where=model, message=f"{env} is not set: set it, or pass api_key=")
    return Problem(code="api_key", where=model, message="no API key: pass api_key=")


def missing_keys_error(problems: Sequence[Problem]) -> UsageError:
    """The error that refuses a request, or a run, for want of keys."""
    summary = "a model has no API key" if len(problems) == 1 else f"{len(problems)} models have no API key"
    return UsageError(summary, problems)


def missing_keys(models: Iterable[object]) -> list[Problem]:
    """Every missing key of ``models`` (those with a ``missing_keys`` method), each problem once."""
    found: list[Problem] = []
    for model in models:
        check = getattr(model, "missing_keys", None)
        if callable(check):
            found += [p for p in check() if p not in found]
    return found
