"""Reading a suite's fields: the small values every part of a suite is made of (numbers in their
ranges, choices, lists of strings, settings objects, model strings, tool references), each problem
collected rather than raised, so that a suite's every problem is reported at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, cast

from planexec.errors import Problem, UsageError
from planexec.eval._limits import MAX_CONCURRENCY, MAX_NUMBER, MAX_STALL_ROUNDS, MAX_TOLERANCE, number_problem, shown
from planexec.eval._refs import anchor_model, load_tool_ref, model_problems
from planexec.eval._suite import AgentKind, Tolerances
from planexec.models import ModelSettings
from planexec.runtime import Limits
from planexec.tools import Tool, Toolset

__all__ = ["FieldReader", "Where"]

RANGES: dict[type[Any], dict[str, tuple[float, float]]] = {
    Limits: {
        "max_concurrency": (1, MAX_CONCURRENCY),
        "stall_rounds": (1, MAX_STALL_ROUNDS),
        "repeat_rounds": (1, MAX_STALL_ROUNDS),
        "confidence_threshold": (0, 1),
    },
    Tolerances: {
        "pass_rate": (0, 1),
        "cost": (0, MAX_TOLERANCE),
        "latency": (0, MAX_TOLERANCE),
        "latency_floor": (0, MAX_TOLERANCE),
    },
}
"""The range of each number of a settings object where it is not 0 to ``MAX_NUMBER``."""


class FieldReader:
    """Reads a suite's fields, collecting every problem instead of stopping at the first."""

    def __init__(self, root: Path, agent: AgentKind) -> None:
        self.root = root
        self.agent = agent
        self.problems: list[Problem] = []
        self._models: dict[str, list[Problem]] = {}
        self._tools: dict[str, list[Tool]] = {}
        self.mcp: tuple[str, ...] = ()
        """The suite's MCP servers: tool names only they can supply are checked once they list them."""

    def add(self, where: str, message: str, code: str = "suite") -> None:
        self.problems.append(Problem(code=code, where=where, message=message))

    def unknown_keys(self, data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
        for key in data:
            if key not in known:
                name = key if isinstance(key, str) and len(key) <= 60 else shown(key)
                self.add(f"{where}.{name}" if where else str(name), f"unknown key (known: {', '.join(known)})")

    def model(self, value: Any, where: str, *, load: bool = True) -> Any:
        """A model spec with its scripted paths anchored in the suite's folder; a model the agent will
        use (``load``) is resolved once per string to check it (nothing is sent to it)."""
        if value is None:
            return None
        if isinstance(value, str) and not load:
            if not value.strip():
                self.add(where, "must be a model string")
                return None
            return anchor_model(value, self.root)
        if isinstance(value, str):
            value = anchor_model(value, self.root)
            if value not in self._models:
                self._models[value] = model_problems(value, "")
            self.problems += [Problem(code=p.code, where=where, message=p.message) for p in self._models[value]]
            return value
        found = model_problems(value, where)
        self.problems += found
        return value

    def tools(self, value: Any, where: str) -> tuple[tuple[str, ...], Toolset]:
        if isinstance(value, str | Tool | Toolset):
            value = [value]
        if not isinstance(value, list | tuple):
            self.add(where, "must be a list of module:attribute references")
            return (), Toolset()
        refs: list[str] = []
        found: list[Tool | Toolset] = []
        for item in value:
            if isinstance(item, Tool | Toolset):
                found.append(item)
            elif isinstance(item, str):
                refs.append(item)
                if item not in self._tools:
                    problems: list[Problem] = []
                    self._tools[item] = load_tool_ref(item, self.root, where, problems)
                    self.problems += problems
                found += self._tools[item]
            else:
                self.add(where, f"{shown(item)} is not a module:attribute reference")
        try:
            return tuple(refs), Toolset(*found)
        except UsageError as e:
            self.problems += [Problem(code="tools", where=where, message=p.message) for p in e.problems]
            return tuple(refs), Toolset()

    # -- small values ---------------------------------------------------------------------------

    def typed(self, kind: type[Any], value: Any, where: str) -> Any:
        """An instance of the dataclass ``kind`` from a mapping of its fields, each number checked
        against its range (see ``RANGES``); ``None`` only where the field allows it."""
        if not isinstance(value, Mapping):
            self.add(where, f"must be a mapping of {', '.join(f.name for f in fields(kind))}")
            return None
        known = {f.name: f for f in fields(kind)}
        self.unknown_keys(value, tuple(known), where)
        before = len(self.problems)
        good: dict[str, Any] = {}
        for key, item in value.items():
            if key not in known:
                continue
            kind_of = str(known[key].type)
            low, high = RANGES.get(kind, {}).get(key, (0, MAX_NUMBER))
            whole = kind_of.startswith("int")
            message = number_problem(item, whole=whole, minimum=low, maximum=high, nullable="None" in kind_of)
            if message is not None:
                self.add(f"{where}.{key}", message)
            else:
                good[key] = item
        try:
            built = kind(**good)  # its own checks too, on the numbers that passed these
        except UsageError as e:
            self.problems += [Problem(code=p.code, where=f"{where}.{p.where}", message=p.message) for p in e.problems]
            return None
        return built if len(self.problems) == before else None

    def settings(self, value: Any, where: str) -> ModelSettings | None:
        """A role's model settings, from a mapping of their fields (in Python, also a ModelSettings)."""
        if isinstance(value, ModelSettings):
            return value
        try:
            return ModelSettings.from_dict(value, where=where)
        except UsageError as e:
            self.problems += e.problems
            return None

    def integer(self, value: Any, where: str, *, minimum: int, maximum: int) -> int | None:
        message = number_problem(value, whole=True, minimum=minimum, maximum=maximum)
        if message is not None:
            self.add(where, message)
            return None
        return cast(int, value)

    def choice(self, value: Any, choices: tuple[str, ...], where: str) -> str | None:
        if value in choices:
            return str(value)
        self.add(where, f"{shown(value)} is not one of {', '.join(choices)}")
        return None

    def strings(self, value: Any, where: str) -> list[str] | None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.add(where, "must be a list of strings")
            return None
        return list(value)


class Where:
    """Where a task's field is written: in the task, or in the suite's defaults when the task does
    not set it (so that a bad default is named once, where it is)."""

    def __init__(self, task: str, own: Mapping[str, Any]) -> None:
        self.task = task
        self.own = own

    def __call__(self, key: str) -> str:
        return f"{self.task}.{key}" if key in self.own else f"defaults.{key}"
