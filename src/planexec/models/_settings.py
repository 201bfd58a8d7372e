"""How a model is asked: :class:`ModelSettings`, one typed value per role (planner, executor, judge).

Every field is optional; a field left unset is not sent, and the provider's default applies. The
value is checked when it is made, and every problem is listed in one :class:`UsageError`. Each
provider adapter maps the fields to its own request parameters and says, through
``unsupported_settings``, which ones it cannot send to a given model: those are dropped, and a run
records what was dropped for which role (see :func:`unsupported_settings`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from planexec._util.strict_json import json_problem
from planexec.errors import Problem, UsageError

__all__ = ["REASONING_EFFORTS", "ModelSettings", "ReasoningEffort", "unsupported_settings"]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)

MAX_SEED = 2**63 - 1
"""Seeds are 64-bit signed integers on every provider that takes one."""
MAX_EXTRA_CHARS = 100_000
"""Provider extras are request parameters, not payloads: their JSON text is bounded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSettings:
    """Settings for the requests of one role's model. None (or empty): not sent.

    ``temperature`` (0 to 2) and ``top_p`` (0 to 1) shape sampling; ``max_tokens`` caps the
    output tokens of each reply (at least 1); ``stop`` lists stop sequences (a single string is
    one sequence); ``seed`` asks for reproducible sampling where the provider offers it;
    ``reasoning_effort`` is one of ``none``, ``minimal``, ``low``, ``medium``, ``high``,
    ``xhigh``, ``max``; ``extra`` holds provider-specific request parameters (JSON data), merged
    into the request body last, so they win over what planexec sets; ``timeout`` bounds each
    request, in seconds.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None

    def __post_init__(self) -> None:
        problems: list[Problem] = []

        def bad(where: str, message: str) -> None:
            problems.append(Problem(code="model_settings", where=where, message=message))

        for name, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and low <= value <= high):
                bad(name, f"must be a number from {low:g} to {high:g}, not {value!r}")
        if self.max_tokens is not None and not (_is_whole(self.max_tokens) and self.max_tokens >= 1):
            bad("max_tokens", f"must be a whole number of at least 1, not {self.max_tokens!r}")
        if self.seed is not None and not (_is_whole(self.seed) and -MAX_SEED - 1 <= self.seed <= MAX_SEED):
            bad("seed", f"must be a whole number that fits in 64 bits, not {self.seed!r}")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            bad("reasoning_effort", f"must be one of {', '.join(REASONING_EFFORTS)}, not {self.reasoning_effort!r}")
        if self.timeout is not None and not (_is_number(self.timeout) and 0 < self.timeout < math.inf):
            bad("timeout", f"must be a positive number of seconds, not {self.timeout!r}")
        stop = _stop(self.stop, bad)
        extra = _extra(self.extra, bad)
        if problems:
            raise UsageError("invalid model settings", problems)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "extra", extra)

    def as_dict(self) -> dict[str, Any]:
        """The fields that are set, as JSON data (what a run records); ``from_dict`` reads it back."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name in ("stop", "extra") and not value):
                continue
            data[f.name] = list(value) if f.name == "stop" else dict(value) if f.name == "extra" else value
        return data

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "") -> ModelSettings:
        """Settings from a mapping of field names (a suite file, recorded settings, parsed options).

        Raises :class:`UsageError` listing every problem: unknown keys and every invalid value.
        ``where`` is put before each problem's place (``planner_settings.temperature``).
        """
        prefix = f"{where}." if where else ""
        if not isinstance(data, Mapping):
            place = where or "settings"
            raise UsageError(
                "invalid model settings",
                [Problem(code="model_settings", where=place, message=f"must be a mapping of {_FIELDS}")],
            )
        problems = [
            Problem(code="model_settings", where=f"{prefix}{key}", message=f"unknown setting (known: {_FIELDS})")
            for key in data
            if key not in _FIELD_NAMES
        ]
        known = {key: value for key, value in data.items() if key in _FIELD_NAMES}
        try:
            settings = cls(**known)
        except UsageError as e:
            problems += [Problem(code=p.code, where=f"{prefix}{p.where}", message=p.message) for p in e.problems]
            settings = None
        if problems or settings is None:
            raise UsageError("invalid model settings", problems)
        return settings


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(ModelSettings))
_FIELDS = ", ".join(_FIELD_NAMES)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _is_whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def _stop(value: Any, bad: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, list | tuple) or not all(isinstance(s, str) and s for s in value):
        bad("stop", f"must be a list of non-empty strings, not {_short(value)}")
        return ()
    return tuple(value)


def _extra(value: Any, bad: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        bad("extra", f"must be a mapping of parameter names to JSON data, not {_short(value)}")
        return {}
    extra = dict(value)
    problem = json_problem(extra, max_chars=MAX_EXTRA_CHARS, where="extra")
    if problem is not None:
        bad(problem.where, problem.message)
    return extra


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def unsupported_settings(model: Any, settings: ModelSettings) -> dict[str, str]:
    """The settings ``model`` would not send, each with the reason: a model says so through an
    optional ``unsupported_settings(settings)`` method (provider adapters, fallback lists and
    wrappers have one); a model without it is taken to use every setting (test doubles record
    them all)."""
    ask = getattr(model, "unsupported_settings", None)
    if not callable(ask):
        return {}
    found = ask(settings)
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}
