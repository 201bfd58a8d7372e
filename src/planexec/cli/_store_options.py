"""The store a command reads and writes run logs in (``--store URL``, see :mod:`._globals`).

Commands open the store inside their event loop and close it before the loop ends.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from planexec.cli._globals import STORE_HELP, StoreChoice, remember_store, store_choice
from planexec.cli._options import Problems, Refused
from planexec.cli._text import plain
from planexec.errors import UsageError
from planexec.store import RunStore, open_store, safe_url

__all__ = ["STORE_HELP", "StoreChoice", "is_memory", "remember_store", "store_choice", "store_flag", "using_store"]


def store_flag(choice: StoreChoice) -> str:
    """What goes between ``planexec`` and the command in a command line printed for the user:
    ``--store URL `` when the URL was typed on this command line (credentials hidden), else nothing
    (the environment that chose the store chooses it again)."""
    if not choice.typed or not choice.url:
        return ""
    return f"--store {shlex.quote(plain(safe_url(choice.url)))} "


@asynccontextmanager
async def using_store(choice: StoreChoice, problems: Problems | None = None) -> AsyncIterator[RunStore]:
    """The store, open for the block and closed after it. A wrong URL or a store that cannot be
    opened raises :class:`Refused`, listing it after the ``problems`` found before."""
    problems = problems if problems is not None else Problems()
    try:
        store = open_store(choice.url, pii=choice.pii)
    except UsageError as e:
        problems.add_usage_error("--store", e)
        raise Refused(problems) from None
    try:
        try:
            await store.last_seq("-")  # open it now: a bad location is a usage problem, not a traceback
        except Exception as e:
            problems.add("--store", f"cannot open {choice.describe()}: {type(e).__name__}: {e}")
            raise Refused(problems) from e
        yield store
    finally:
        await store.close()


def is_memory(store: RunStore) -> bool:
    """Whether runs in ``store`` end with the process (they cannot be resumed from another one)."""
    return not store.durable
