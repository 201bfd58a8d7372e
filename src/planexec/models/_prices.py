"""Prices of common models, in US dollars per million tokens, and the cost of a call.

The table holds the providers' list prices as published when this version was written; they
change, so every entry can be overridden (``set_price``) and models not in the table cost
nothing unless priced. A model name matches the longest table key it starts with, so dated
snapshots (``claude-sonnet-4-20250514``) take their family's price.
"""

from __future__ import annotations

from dataclasses import dataclass

from planexec.errors import Problem, UsageError
from planexec.models._base import Usage

__all__ = ["Price", "cost_of", "price_for", "set_price"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Price:
    """Dollars per million tokens: input, output, and input served from the provider's cache."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        values = {"input": self.input, "output": self.output, "cached_input": self.cached_input}
        problems = [
            Problem(code="price", where=name, message="must not be negative")
            for name, value in values.items()
            if value is not None and value < 0
        ]
        if problems:
            raise UsageError("invalid price", problems)


_PRICES: dict[str, Price] = {
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
    # Anthropic (cached input: cache reads)
    "claude-opus-4": Price(input=15.0, output=75.0, cached_input=1.50),
    "claude-sonnet-4": Price(input=3.0, output=15.0, cached_input=0.30),
    "claude-haiku-4": Price(input=1.0, output=5.0, cached_input=0.10),
    "claude-3-7-sonnet": Price(input=3.0, output=15.0, cached_input=0.30),
    "claude-3-5-sonnet": Price(input=3.0, output=15.0, cached_input=0.30),
    "claude-3-5-haiku": Price(input=0.80, output=4.0, cached_input=0.08),
}


def set_price(model: str, price: Price | None) -> None:
    """Price ``model`` (and the names that start with it), or remove its price with ``None``."""
    if price is None:
        _PRICES.pop(model, None)
    else:
        _PRICES[model] = price


def price_for(model: str) -> Price | None:
    """The price of ``model``: its own entry, else the longest entry its name starts with."""
    name = model.split(":", 1)[-1]
    if name in _PRICES:
        return _PRICES[name]
    best = max((key for key in _PRICES if name.startswith(key)), key=len, default=None)
    return _PRICES[best] if best is not None else None


def cost_of(usage: Usage, price: Price | None) -> float | None:
    """What ``usage`` cost at ``price`` (None when the price is unknown)."""
    if price is None:
        return None
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    cached_rate = price.cached_input if price.cached_input is not None else price.input
    dollars = (usage.input_tokens - cached) * price.input + cached * cached_rate + usage.output_tokens * price.output
    return dollars / 1_000_000
