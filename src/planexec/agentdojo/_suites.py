"""AgentDojo's task suites as the installed ``agentdojo`` package ships them, at one benchmark version.

AgentDojo's modules are imported only when a suite is first loaded: importing them brings in the
provider SDKs its ``agent_pipeline`` package imports eagerly (a few seconds), which nothing else in
planexec needs.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planexec.agentdojo._effects import WRITES
from planexec.errors import Problem, UsageError

__all__ = ["BENCHMARK_VERSION", "INSTALL", "SUITES", "DojoSuite", "load_suite", "suite_problems"]

BENCHMARK_VERSION = "v1.2.2"
"""The AgentDojo benchmark version the suites are loaded at (the newest that agentdojo 0.1.35 has)."""

SUITES = ("banking", "slack", "travel", "workspace")
"""The suites AgentDojo ships."""

INSTALL = "pip install 'planexec[agentdojo]' && pip install --no-deps agentdojo==0.1.35"
"""How to install AgentDojo without the dependencies none of its modules planexec uses imports."""


def _require_agentdojo() -> None:
    if importlib.util.find_spec("agentdojo") is None:
        raise UsageError(
            "AgentDojo's suites need the agentdojo package",
            [Problem(code="agentdojo", where="agentdojo", message=f"install it: {INSTALL}")],
        )


@dataclass(frozen=True, kw_only=True)
class DojoSuite:
    """One of AgentDojo's suites: its ``TaskSuite`` (environment, functions, user and injection
    tasks, checks), and which of its functions change the environment (``writes``)."""

    name: str
    task_suite: Any
    """AgentDojo's ``TaskSuite`` object, at :data:`BENCHMARK_VERSION`."""
    writes: frozenset[str]
    _schemas: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def user_tasks(self) -> Mapping[str, Any]:
        """The user tasks by id (``user_task_0``, …), in AgentDojo's order."""
        return dict(self.task_suite.user_tasks)

    @property
    def injection_tasks(self) -> Mapping[str, Any]:
        """The injection tasks by id (``injection_task_0``, …)."""
        return dict(self.task_suite.injection_tasks)

    @property
    def functions(self) -> list[Any]:
        """AgentDojo's ``Function`` objects: the suite's tools."""
        return list(self.task_suite.tools)

    def user_task(self, task_id: str) -> Any:
        return self.task_suite.get_user_task_by_id(task_id)

    def injection_task(self, task_id: str) -> Any:
        return self.task_suite.get_injection_task_by_id(task_id)

    def schema(self, function: str) -> dict[str, Any]:
        """The JSON Schema of a function's arguments (from its pydantic model), made once."""
        if function not in self._schemas:
            found = next(f for f in self.task_suite.tools if f.name == function)
            self._schemas[function] = found.parameters.model_json_schema()
        return self._schemas[function]

    def load_environment(self, injections: Mapping[str, str]) -> Any:
        """A fresh environment with ``injections`` in their vectors (the others at their defaults),
        as AgentDojo loads it."""
        return self.task_suite.load_and_inject_default_environment(dict(injections))


def suite_problems(name: object, where: str = "suite") -> list[Problem]:
    """What is wrong with a suite's name (nothing: an empty list)."""
    if not isinstance(name, str) or name not in SUITES:
        shown = repr(name)[:60]
        return [Problem(code="agentdojo", where=where, message=f"{shown} is not one of {', '.join(SUITES)}")]
    return []


@functools.cache
def load_suite(name: str) -> DojoSuite:
    """The suite ``name`` (banking, slack, travel or workspace); a usage error for another name,
    or when AgentDojo is not installed."""
    problems = suite_problems(name)
    if problems:
        raise UsageError("unknown AgentDojo suite", problems)
    _require_agentdojo()
    from agentdojo.task_suite.load_suites import get_suite

    return DojoSuite(name=name, task_suite=get_suite(BENCHMARK_VERSION, name), writes=WRITES[name])
