"""The options every command shares — ``--store URL`` and ``--redact-pii``.

The group keeps the choice in the click context. This module imports click alone, so that
``planexec --help`` stays quick.
"""

from __future__ import annotations

from dataclasses import dataclass

import click
from click.core import ParameterSource

__all__ = ["PII_HELP", "STORE_HELP", "StoreChoice", "remember_store", "store_choice"]

STORE_HELP = (
    "Where run logs are kept: sqlite:///abs/path.db, sqlite:rel/path.db, postgresql://…, or memory://. "
    "Default: $PLANEXEC_STORE, else the SQLite file "
    "$XDG_DATA_HOME/planexec/runs.db (~/.local/share/planexec/runs.db)."
)

PII_HELP = (
    "Redact personal data (e-mail, phone, card and id numbers) too, in the store and in what is printed. "
    "Secrets are always redacted."
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
        if not self.url:
            return "the default store"
        from planexec.cli._text import plain
        from planexec.store import safe_url

        return plain(safe_url(self.url))


def remember_store(ctx: click.Context, url: str | None, *, pii: bool = False) -> None:
    """Called by the group: keep the choice for the command that runs next."""
    typed = ctx.get_parameter_source("store") == ParameterSource.COMMANDLINE
    ctx.obj = StoreChoice(url=url or None, typed=typed, pii=pii)


def store_choice(ctx: click.Context) -> StoreChoice:
    found = ctx.find_object(StoreChoice)
    return found if found is not None else StoreChoice()
