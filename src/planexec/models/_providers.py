"""Providers: which ``provider:name`` strings make which models, what models cost, and how many
calls each provider takes — one immutable value, passed explicitly.

    providers = (
        Providers.default()
        .with_provider("acme", lambda name: AcmeModel(name))
        .with_price("acme-large", Price(input=1.0, output=3.0))
        .with_limits("openai", ProviderLimits(max_concurrency=4, requests_per_minute=500))
    )
    agent = Agent("acme:acme-large", providers=providers)
    model = resolve_model("acme:acme-large", providers=providers)

``Providers.default()`` holds the built-in providers (:mod:`planexec.models._registry`), the price
table of :mod:`planexec.models._prices` and no limits. Each ``with_*`` returns a new value and
leaves the one it was called on as it was: nothing is registered process-wide, so two agents with
different values in one process never see each other's providers, prices or limits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from planexec._util.clip import clip
from planexec.errors import ModelNotFound, Problem, UsageError
from planexec.models._base import Model
from planexec.models._limits import DEFAULT_LIMITS, ProviderLimits, limits_from
from planexec.models._prices import BUILT_IN_PRICES, Price, look_up_price
from planexec.models._registry import BUILT_IN_PROVIDERS, ProviderFactory
from planexec.models._resilience import FallbackModel

__all__ = ["ProviderFactory", "Providers", "known_providers", "resolve_model", "use_providers"]


@dataclass(frozen=True, slots=True, init=False, repr=False)
class Providers:
    """The providers model strings resolve through, the prices calls are charged at, and the limits
    calls to each provider keep to. Immutable: build one with :meth:`default` and the ``with_*``
    methods, each of which returns a new value.

    Limits are keyed by what a model's calls count against: the provider's name (``openai``,
    ``anthropic``), the base URL of a model that has one (``ollama:…`` models count against
    ``http://localhost:11434/v1``), or a test double's name.
    """

    _factories: Mapping[str, ProviderFactory]
    _prices: Mapping[str, Price]
    _limits: Mapping[str, ProviderLimits]

    def __init__(self) -> None:
        """The built-in providers and prices, and no limits: the same as :meth:`default`."""
        object.__setattr__(self, "_factories", BUILT_IN_PROVIDERS)
        object.__setattr__(self, "_prices", BUILT_IN_PRICES)
        object.__setattr__(self, "_limits", MappingProxyType({}))

    @classmethod
    def default(cls) -> Providers:
        """The built-in providers (``scripted``, ``object``, ``openai``, ``openai-responses``,
        ``ollama``, ``vllm``, ``lmstudio``, ``llamacpp``, ``openai-compatible``, ``anthropic``), the
        built-in price table, and no limits."""
        return _DEFAULT

    def _with(self, **changed: Mapping[str, Any]) -> Providers:
        made = object.__new__(type(self))
        for name in ("_factories", "_prices", "_limits"):
            object.__setattr__(made, name, MappingProxyType(dict(changed.get(name, getattr(self, name)))))
        return made

    # -- building -------------------------------------------------------------------------

    def with_provider(self, name: str, factory: ProviderFactory) -> Providers:
        """These providers, and ``name:model`` strings resolved through ``factory(model)`` (in place
        of any provider of that name)."""
        problems = _name_problems("provider", "name", name, provider=True)
        if not callable(factory):
            problems.append(
                Problem(
                    code="provider",
                    where="factory",
                    message=f"must be a function from a model name to a model, not {clip(repr(factory), 60)}",
                )
            )
        if problems:
            raise UsageError("invalid provider", problems)
        return self._with(_factories={**self._factories, name: factory})

    def with_price(self, model: str, price: Price) -> Providers:
        """These providers, with ``model`` (and the model names that start with it) priced at
        ``price``: in place of any price of that name, before and after every call."""
        problems = _name_problems("price", "model", model)
        if not isinstance(price, Price):
            problems.append(
                Problem(
                    code="price",
                    where="price",
                    message=f"must be a Price(input=..., output=...), not {clip(repr(price), 60)}",
                )
            )
        if problems:
            raise UsageError("invalid price", problems)
        return self._with(_prices={**self._prices, model: price})

    def with_limits(self, provider: str, limits: ProviderLimits) -> Providers:
        """These providers, with calls to ``provider`` (a provider's name, or a base URL: see the
        class) kept within ``limits``."""
        problems = _name_problems("limits", "provider", provider)
        if not isinstance(limits, ProviderLimits):
            problems.append(
                Problem(
                    code="limits",
                    where="limits",
                    message=f"must be a ProviderLimits(...), not {clip(repr(limits), 60)}",
                )
            )
        if problems:
            raise UsageError("invalid provider limits", problems)
        return self._with(_limits={**self._limits, provider: limits})

    # -- looking up -----------------------------------------------------------------------

    def known(self) -> tuple[str, ...]:
        """The provider names model strings may use, sorted."""
        return tuple(sorted(self._factories))

    def factory(self, name: str) -> ProviderFactory | None:
        """The factory of provider ``name``, or None."""
        return self._factories.get(name)

    def price_for(self, model: str) -> Price | None:
        """The price of ``model`` (a name, or a ``provider:name`` string): a key with a provider of
        its own that the string starts with, else its name's own entry, else the longest entry the
        name starts with; None when none does."""
        table = self._prices
        known = _PRICES_SEEN.get((id(table), model))
        if known is not None and known[0] is table:
            return known[1]
        price = look_up_price(table, model)
        if len(_PRICES_SEEN) >= _PRICES_SEEN_MAX:
            _PRICES_SEEN.clear()
        _PRICES_SEEN[(id(table), model)] = (table, price)  # the table is kept: its id stays its own
        return price

    def price_of(self, model: object) -> Price | None:
        """The price a call to ``model`` is charged at: the model's own (a ``price`` attribute that
        is a :class:`Price`), else :meth:`price_for` its name. None for a fallback list, which has
        no price of its own: a call to one is charged at the price of the model of the list that
        answered it (its ``answered_by``), never at a price the list's joined name may match."""
        if isinstance(model, FallbackModel):
            return None
        own = getattr(model, "price", None)
        if isinstance(own, Price):
            return own
        name = getattr(model, "name", None)
        return self.price_for(name) if isinstance(name, str) else None

    def limits_for(self, provider: str) -> ProviderLimits:
        """The limits calls to ``provider`` keep to (no limits unless set with :meth:`with_limits`)."""
        return self._limits.get(provider, DEFAULT_LIMITS)

    # -- values ---------------------------------------------------------------------------

    def __hash__(self) -> int:
        return hash((tuple(sorted(self._factories)), frozenset(self._prices.items()), frozenset(self._limits.items())))

    def __repr__(self) -> str:
        limits = dict(sorted(self._limits.items()))
        return f"Providers(providers={list(self.known())!r}, prices={len(self._prices)} models, limits={limits!r})"


_PRICES_SEEN: dict[tuple[int, str], tuple[Mapping[str, Price], Price | None]] = {}
"""Prices looked up (every model call looks its price up), by price table and model: a table is
never changed (``with_price`` makes a new one)."""
_PRICES_SEEN_MAX = 1024

_DEFAULT = Providers()


def _name_problems(code: str, where: str, name: object, *, provider: bool = False) -> list[Problem]:
    if not isinstance(name, str) or not name.strip():
        return [Problem(code=code, where=where, message=f"must be a non-empty name, not {clip(repr(name), 60)}")]
    if name != name.strip():
        return [Problem(code=code, where=where, message=f"{name!r} has spaces around it")]
    if provider and (":" in name or "|" in name):
        return [
            Problem(
                code=code,
                where=where,
                message=f"{name!r} holds ':' or '|', which model strings use to separate their parts",
            )
        ]
    return []


def known_providers() -> tuple[str, ...]:
    """The built-in provider names (``Providers.default().known()``)."""
    return _DEFAULT.known()


def resolve_model(spec: str | Model, *, providers: Providers | None = None) -> Model:
    """A model from a ``provider:name`` string, or the model itself.

    ``A | B | C`` (model strings joined by ``|``) is an ordered fallback list: when a model fails
    after its own retries, the next one is asked. Strings resolve through ``providers``
    (``Providers.default()`` when None).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Model):
            return spec
        raise ModelNotFound(f"{spec!r} is not a model: it needs a name and an async request() method")
    providers = _DEFAULT if providers is None else providers
    if "|" in spec:
        parts = [p.strip() for p in spec.split("|")]
        problems: list[Problem] = []
        models: list[Model] = []
        for part in parts:
            try:
                models.append(resolve_model(part, providers=providers))
            except ModelNotFound as e:
                problems += e.problems or [Problem(code="model_string", where=part, message=e.summary)]
        if problems:
            raise ModelNotFound(f"cannot resolve the fallback list {spec!r}", problems)
        return FallbackModel(models)
    provider, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ModelNotFound(
            f"model string {spec!r} is not of the form provider:name",
            [Problem(code="model_string", where=spec, message=f"known providers: {', '.join(providers.known())}")],
        )
    factory = providers.factory(provider)
    if factory is None:
        raise ModelNotFound(
            f"unknown model provider {provider!r}",
            [Problem(code="unknown_provider", where=spec, message=f"known providers: {', '.join(providers.known())}")],
        )
    return factory(rest)


@contextmanager
def use_providers(providers: Providers) -> Iterator[None]:
    """Model calls made in this block (in this task, and in the tasks it starts) keep to the limits
    of ``providers``; outside any such block, to those of ``Providers.default()`` (none). An agent
    puts its own providers in effect around every model call it makes."""
    if not isinstance(providers, Providers):
        raise UsageError(f"use_providers needs a Providers value, not {clip(repr(providers), 60)}")
    with limits_from(providers):
        yield
