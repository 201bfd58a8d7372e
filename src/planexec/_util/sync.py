"""The one synchronous wrapper's machinery: run a coroutine to its end where no event loop runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from planexec.errors import Problem, UsageError

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(make: Callable[[], Coroutine[Any, Any, T]], *, call: str, instead: str) -> T:
    """Run the coroutine ``make()`` returns in a fresh event loop and return its result.

    Inside a running loop (a Jupyter cell, an async function) this cannot work: that raises
    :class:`UsageError` naming ``call`` and saying to ``await`` ``instead``, before the coroutine
    is even made.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    raise UsageError(
        f"{call} cannot run inside a running event loop (a Jupyter notebook, an async function)",
        [Problem(code="running_loop", where=call, message=f"use `await {instead}` there instead")],
    )
