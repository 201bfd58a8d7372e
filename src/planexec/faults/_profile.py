"""A fault profile: which failures to inject, how often, and the seed that decides where.

Every decision is a seeded draw (see ``_draw``) over what the call is about:

- a tool call: the tool's name, its step's idempotency key without the run id (``tool_fault_key``)
  and the attempt number, so that retries, replays and forks meet the same faults whatever the
  scheduling and whatever the run's id;
- a model call: the wrapper's role, the request's purpose and how many calls with that purpose
  the wrapper has passed on to its model (calls refused in a rate-limit storm do not count; the
  planner asks one thing at a time, so this count is stable).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.faults._decisions import ModelFault, ToolFault
from planexec.faults._draw import hits
from planexec.faults._models import wrap_model
from planexec.faults._tools import wrap_tools
from planexec.models import Model
from planexec.tools import Tool

__all__ = ["PROFILES", "FaultProfile", "ModelFault", "ToolFault"]


_RATES = (
    "tool_error_rate",
    "tool_timeout_rate",
    "malformed_output_rate",
    "invalid_planner_json_rate",
    "unknown_tool_rate",
)


@dataclass(frozen=True, kw_only=True)
class FaultProfile:
    """Failures to inject into tools and models, reproducibly.

    Rates are probabilities from 0 to 1, drawn independently per fault kind; when several tool
    faults hit one call, the first of error, timeout, malformed output wins.

    - ``tool_error_rate``: the call raises ``TransientToolError("injected fault: …")`` (retries apply).
    - ``tool_timeout_rate``: the call raises ``TimeoutError("injected timeout: …")`` at once, as the
      tool's timeout would, without waiting.
    - ``malformed_output_rate``: the tool runs, then returns a value that does not fit its output
      schema (or, without one, a value of another JSON type than the real output).
    - ``invalid_planner_json_rate``: a planner answer (purpose ``planner.*``) has its text cut in
      half and no parsed value.
    - ``unknown_tool_rate``: one step of a planner's plan (``steps``) or turn (``step``) names a
      tool that does not exist.
    - ``rate_limit_storm``: the first N requests to each wrapped model fail with a retryable
      ``ModelCallError`` (status 429, ``retry_after=0``) inside the model's retry layer
      (``planexec.models.call_with_retries``, which the providers and the shipped test doubles
      use), so its retries absorb them as they would a provider's; a storm longer than its
      attempts, or a model without that layer, passes the error on to the run.
    """

    seed: int = 0
    tool_error_rate: float = 0.0
    tool_timeout_rate: float = 0.0
    malformed_output_rate: float = 0.0
    invalid_planner_json_rate: float = 0.0
    unknown_tool_rate: float = 0.0
    rate_limit_storm: int = 0
    name: str = "custom"

    def __post_init__(self) -> None:
        problems = _value_problems({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if problems:
            raise UsageError("invalid fault profile", problems)

    # -- the decisions ---------------------------------------------------------------------

    def tool_fault(self, tool: str, key: str, attempt: int) -> ToolFault | None:
        """The fault injected into attempt ``attempt`` of ``tool`` at ``key``, if any.

        ``key`` is what ``tool_fault_key`` makes of the call's context: the step's idempotency key
        without the run id.
        """
        if hits(self.tool_error_rate, self.seed, "tool.error", tool, key, attempt):
            return "error"
        if hits(self.tool_timeout_rate, self.seed, "tool.timeout", tool, key, attempt):
            return "timeout"
        if hits(self.malformed_output_rate, self.seed, "tool.malformed", tool, key, attempt):
            return "malformed"
        return None

    def model_fault(self, role: str, purpose: str, call: int) -> ModelFault | None:
        """The fault injected into the ``call``-th answer (from 1) with ``purpose`` of a model
        wrapped for ``role``, if any. Only planner answers (purpose ``planner.*``) are changed."""
        if not purpose.startswith("planner."):
            return None
        if hits(self.invalid_planner_json_rate, self.seed, "model.invalid_json", role, purpose, call):
            return "invalid_json"
        if hits(self.unknown_tool_rate, self.seed, "model.unknown_tool", role, purpose, call):
            return "unknown_tool"
        return None

    @property
    def injects_tool_faults(self) -> bool:
        return any((self.tool_error_rate, self.tool_timeout_rate, self.malformed_output_rate))

    @property
    def injects_model_faults(self) -> bool:
        return bool(self.invalid_planner_json_rate or self.unknown_tool_rate or self.rate_limit_storm)

    # -- wrapping --------------------------------------------------------------------------

    def wrap_tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """New tool values whose calls meet this profile's tool faults; schemas and flags unchanged."""
        return wrap_tools(self, tools)

    def wrap_model(self, model: Model | str, *, role: str = "planner") -> Model:
        """A model that meets this profile's model faults; it streams when ``model`` streams.

        ``role`` is part of every model fault's key: wrap a planner's and a judge's model with
        different roles and they meet different faults for the same seed.
        """
        return wrap_model(self, model, role=role)

    # -- building --------------------------------------------------------------------------

    def to_mapping(self) -> dict[str, Any]:
        """The profile as JSON data; ``from_mapping`` reads it back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FaultProfile:
        """A profile from YAML or JSON data; every unknown key and bad value is reported at once."""
        if not isinstance(data, Mapping):
            raise UsageError(
                "invalid fault profile",
                [
                    Problem(
                        code="fault_profile", where="profile", message=f"expected a mapping, got {type(data).__name__}"
                    )
                ],
            )
        known = [f.name for f in dataclasses.fields(cls)]
        problems = [
            Problem(code="unknown_key", where=str(key), message=f"unknown key (known: {', '.join(known)})")
            for key in data
            if key not in known
        ]
        values = {k: v for k, v in data.items() if k in known}
        problems += _value_problems(values)
        if problems:
            raise UsageError("invalid fault profile", problems)
        return cls(**values)

    @classmethod
    def named(cls, name: str, *, seed: int = 0) -> FaultProfile:
        """A built-in profile (see ``PROFILES``) with ``seed``."""
        profile = PROFILES.get(name)
        if profile is None:
            raise UsageError(
                f"unknown fault profile {name!r}",
                [Problem(code="fault_profile", where=name, message=f"known profiles: {', '.join(PROFILES)}")],
            )
        return dataclasses.replace(profile, seed=seed)


def _value_problems(values: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []

    def bad(where: str, message: str) -> None:
        problems.append(Problem(code="fault_profile", where=where, message=message))

    for key, value in values.items():
        if key in _RATES:
            if not _is_number(value):
                bad(key, f"must be a number from 0 to 1, got {value!r}")
            elif not (math.isfinite(value) and 0 <= value <= 1):
                bad(key, f"must be from 0 to 1, got {value!r}")
        elif key == "rate_limit_storm":
            if not _is_int(value) or value < 0:
                bad(key, f"must be a whole number of calls, 0 or more, got {value!r}")
        elif key == "seed":
            if not _is_int(value):
                bad(key, f"must be a whole number, got {value!r}")
        elif key == "name" and (not isinstance(value, str) or not value):
            bad(key, f"must be a non-empty string, got {value!r}")
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


PROFILES: Mapping[str, FaultProfile] = MappingProxyType(
    {
        "none": FaultProfile(name="none"),
        "flaky-tools": FaultProfile(name="flaky-tools", tool_error_rate=0.3),
        "slow-tools": FaultProfile(name="slow-tools", tool_timeout_rate=0.2),
        "garbage-output": FaultProfile(name="garbage-output", malformed_output_rate=0.2),
        "bad-planner": FaultProfile(name="bad-planner", invalid_planner_json_rate=0.3),
        "unknown-tools": FaultProfile(name="unknown-tools", unknown_tool_rate=0.3),
        "rate-limit-storm": FaultProfile(name="rate-limit-storm", rate_limit_storm=3),
        "chaos": FaultProfile(
            name="chaos",
            tool_error_rate=0.15,
            tool_timeout_rate=0.05,
            malformed_output_rate=0.05,
            invalid_planner_json_rate=0.1,
            unknown_tool_rate=0.1,
            rate_limit_storm=2,
        ),
    }
)
"""The built-in profiles, by name (``FaultProfile.named(name, seed=...)`` sets the seed)."""
