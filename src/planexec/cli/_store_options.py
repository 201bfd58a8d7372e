"""The global ``--store URL`` option: where every command reads and writes run logs.

The group keeps the URL (and whether it was typed on the command line) in the click context;
commands open the store inside their event loop and close it before the loop ends.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import click
from click.core import ParameterSource

from planexec._errors import UsageError
from planexec.cli._options import Problems, Refused
from planexec.cli._text import plain
from planexec.store import MemoryStore, RunStore, open_store, safe_url

__all__ = ["STORE_HELP", "StoreChoice", "is_memory", "remember_store", "store_choice", "store_flag", "using_store"]

STORE_HELP = (
    "Where run logs are kept: sqlite:///abs/path.db, sqlite:rel/path.db, postgresql://…, or memory://. "
    "Default: $PLANEXEC_STORE, else the SQLite file $XDG_DATA_HOME/planexec/runs.db "
    "(~/.local/share/planexec/runs.db)."
)


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """The store URL an invocation names (None: the default) and whether it came from the command line."""

    url: str | None = None
    typed: bool = False
    pii: bool = False
    """Redact personal data too (``--redact-pii``)."""

    def describe(self) -> str:
        """The store, safe to print (credentials hidden)."""
        return plain(safe_url(self.url)) if self.url else "the default store"


def remember_store(ctx: click.Context, url: str | None, *, pii: bool = False) -> None:
    """Called by the group: keep the choice for the command that runs next."""
    typed = ctx.get_parameter_source("store") == ParameterSource.COMMANDLINE
    ctx.obj = StoreChoice(url=url or None, typed=typed, pii=pii)


def store_choice(ctx: click.Context) -> StoreChoice:
    found = ctx.find_object(StoreChoice)
    return found if found is not None else StoreChoice()


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
    return isinstance(store, MemoryStore)
