"""The options every command shares — ``--store URL`` and ``--redact-pii`` — given before the
command (``planexec --store X runs``) or after it (``planexec runs --store X``).

The group keeps the choice in the click context; a command's own copy of an option, when typed,
replaces the group's. This module imports click alone, so that ``planexec --help`` stays quick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import click
from click.core import ParameterSource

__all__ = ["PII_HELP", "STORE_HELP", "StoreChoice", "global_options", "remember_store", "store_choice"]

STORE_HELP = (
    "Where run logs are kept: a file path (an SQLite file), sqlite:///abs/path.db, sqlite:rel/path.db, "
    "postgresql://…, or memory://. Default: $PLANEXEC_STORE, else the SQLite file "
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


def _typed(ctx: click.Context, param: click.Parameter) -> bool:
    return param.name is not None and ctx.get_parameter_source(param.name) == ParameterSource.COMMANDLINE


def _store_after(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None and _typed(ctx, param):
        ctx.obj = replace(store_choice(ctx), url=value or None, typed=True)


def _pii_after(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and _typed(ctx, param):
        ctx.obj = replace(store_choice(ctx), pii=True)


F = TypeVar("F", bound=Callable[..., Any])


def global_options(*, store: bool = True) -> Callable[[F], F]:
    """Accept the group's options after the command too. ``store=False`` leaves ``--store`` to a
    command that defines its own."""

    def add(f: F) -> F:
        f = click.option(
            "--redact-pii", "_global_pii", is_flag=True, expose_value=False, callback=_pii_after, help=PII_HELP
        )(f)
        if store:
            f = click.option(
                "--store", "_global_store", metavar="URL", expose_value=False, callback=_store_after, help=STORE_HELP
            )(f)
        return f

    return add
