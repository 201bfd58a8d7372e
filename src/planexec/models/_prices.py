"""Prices of common models, in US dollars per million tokens, and the cost of a call.

The table holds the providers' list prices as published when this version was written; they
change, so every entry can be overridden (``Providers.default().with_price(...)``, passed to an
agent as ``providers=``) and models not in the table cost nothing unless priced. A model name
matches the longest table key it starts with, so dated snapshots (``claude-sonnet-4-20250514``)
take their family's price. A ``provider:name`` string is looked up by its name, unless the table
has a key with a provider of its own (``ollama:qwen2.5``) that the whole string starts with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from planexec.errors import Problem, UsageError
from planexec.models._base import Usage

__all__ = ["BUILT_IN_PRICES", "Price", "cost_of", "look_up_price", "price_for"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Price:
    """Dollars per million tokens: input, output, input served from the provider's prompt cache
    (``cached_input``) and input written to it (``cache_write``); a cache rate that is not given
    is the input rate."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        values = {
            "input": self.input,
            "output": self.output,
            "cached_input": self.cached_input,
            "cache_write": self.cache_write,
        }
        problems = []
        for name, value in values.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                problems.append(Problem(code="price", where=name, message=f"must be a finite number, not {value!r}"))
            elif value < 0:
                problems.append(Problem(code="price", where=name, message="must not be negative"))
        if problems:
            raise UsageError("invalid price", problems)


BUILT_IN_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        # OpenAI
        "gpt-5": Price(input=1.25, output=10.0, cached_input=0.125),
        "gpt-5-mini": Price(input=0.25, output=2.0, cached_input=0.025),
        "gpt-5-nano": Price(input=0.05, output=0.40, cached_input=0.005),
        "gpt-4.1": Price(input=2.0, output=8.0, cached_input=0.50),
        "gpt-4.1-mini": Price(input=0.40, output=1.60, cached_input=0.10),
        "gpt-4.1-nano": Price(input=0.10, output=0.40, cached_input=0.025),
        "gpt-4o": Price(input=2.50, output=10.0, cached_input=1.25),
        "gpt-4o-mini": Price(input=0.15, output=0.60, cached_input=0.075),
        "o3": Price(input=2.0, output=8.0, cached_input=0.50),
        "o4-mini": Price(input=1.10, output=4.40, cached_input=0.275),
        # Anthropic (cached input: cache reads, 0.1x; cache writes of the 5-minute cache, 1.25x)
        "claude-opus-4": Price(input=15.0, output=75.0, cached_input=1.50, cache_write=18.75),
        "claude-sonnet-4": Price(input=3.0, output=15.0, cached_input=0.30, cache_write=3.75),
        "claude-haiku-4": Price(input=1.0, output=5.0, cached_input=0.10, cache_write=1.25),
        "claude-3-7-sonnet": Price(input=3.0, output=15.0, cached_input=0.30, cache_write=3.75),
        "claude-3-5-sonnet": Price(input=3.0, output=15.0, cached_input=0.30, cache_write=3.75),
        "claude-3-5-haiku": Price(input=0.80, output=4.0, cached_input=0.08, cache_write=1),
    }
)


def look_up_price(table: Mapping[str, Price], model: str) -> Price | None:
    """The price ``table`` gives ``model``: a key with a provider that the whole string starts with
    (the longest), else the name's own entry, else the longest entry the name starts with."""
    qualified = [key for key in table if ":" in key and model.startswith(key)]
    if qualified:
        return table[max(qualified, key=len)]
    name = model.split(":", 1)[-1]
    if name in table:
        return table[name]
    best = max((key for key in table if name.startswith(key)), key=len, default=None)
    return table[best] if best is not None else None


def price_for(model: str) -> Price | None:
    """The built-in price of ``model`` (``Providers.default().price_for``): its own entry, else the
    longest entry its name starts with."""
    return look_up_price(BUILT_IN_PRICES, model)


def cost_of(usage: Usage, price: Price | None) -> float | None:
    """What ``usage`` cost at ``price`` (None when the price is unknown)."""
    if price is None:
        return None
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    written = min(usage.cache_write_tokens, usage.input_tokens - cached)
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    write_rate = price.cache_write if price.cache_write is not None else price.input
    fresh = usage.input_tokens - cached - written
    dollars = fresh * price.input + cached * cached_rate + written * write_rate + usage.output_tokens * price.output
    return dollars / 1_000_000
