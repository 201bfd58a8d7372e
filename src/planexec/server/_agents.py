"""The agents a server runs goals with, each registered under a name: from an agent spec file (the
JSON of :meth:`~planexec.runs.AgentSpec.to_dict`), from a ``module:attr`` reference (an
``AgentSpec``, its JSON data, or a function building an :class:`~planexec.Agent` from a store), or
the offline demo agent."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.runs import AgentSpec, ModelRef, build_agent
from planexec.runtime import Agent, Approvals, Budget
from planexec.store import RunStore

__all__ = ["AGENT_NAME", "DEMO_AGENT", "AgentBuilder", "ServedAgent", "demo_agent", "parse_agent_option"]

AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""What an agent's name may be: 1 to 64 letters, digits, ``.``, ``_`` and ``-``."""
DEMO_AGENT = "demo"
"""The name the demo agent is registered under when no agent is named."""

AgentBuilder = Callable[[RunStore, str], Agent]
"""Builds an agent logging to the store, for the run with the given id."""

BUDGET_FIELDS = tuple(f.name for f in dataclasses.fields(Budget))


def _problem(where: str, message: str, code: str = "agent") -> Problem:
    return Problem(code=code, where=where, message=message)


@dataclass(frozen=True, kw_only=True)
class ServedAgent:
    """An agent the server runs goals with: built afresh for each run from ``spec`` (recorded with
    the run, as ``planexec run`` does) or by ``builder``."""

    name: str
    spec: AgentSpec | None = None
    builder: AgentBuilder | None = None
    source: str = ""
    """Where it was registered from, for messages."""
    example: str | None = None
    """A goal it can be given, for a page to offer."""
    constraints: tuple[str, ...] = ()
    """Constraints every goal given to a built agent has (a spec carries its own)."""
    _described: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def build(
        self, store: RunStore, run_id: str, *, constraints: Sequence[str] = (), budget: Mapping[str, float | None] = {}
    ) -> tuple[Agent, tuple[str, ...], dict[str, Any]]:
        """The agent for run ``run_id``, every constraint the run has, and what the run records so
        that any process can pick it up. Raises :class:`~planexec.UsageError` listing every problem."""
        if self.spec is not None:
            spec = self.spec.with_texts({"constraints": (*self.spec.constraints, *constraints), "budget": budget})
            agent = build_agent(spec, store=store, approvals=Approvals(deferred=True, plan=spec.approve_plan))
            return agent, spec.constraints, spec.recorded().metadata()
        assert self.builder is not None
        agent = self.builder(store, run_id)
        if not isinstance(agent, Agent) or agent.store is not store:
            what = "an Agent logging elsewhere" if isinstance(agent, Agent) else type(agent).__name__
            raise UsageError(
                f"cannot build agent {self.name!r}",
                [
                    _problem(
                        self.source or self.name, f"the function returned {what}: return an Agent(..., store=store)"
                    )
                ],
            )
        if budget:
            caps: dict[str, Any] = dict(budget)
            agent.budget = replace(agent.budget, **caps)
        return agent, (*self.constraints, *constraints), {}

    def describe(self, store: RunStore) -> dict[str, Any]:
        """Its name, models, tools, policy and whether plans wait for approval, as the agent
        describes itself to its runs (built once to see)."""
        if not self._described:
            agent, _, _ = self.build(store, "describe")
            self._described.update(agent.description())
        return _summary(self.name, self._described, example=self.example)


def _summary(name: str, description: Mapping[str, Any], *, example: str | None = None) -> dict[str, Any]:
    """What a list of agents shows of one, from :meth:`~planexec.Agent.description`."""
    workflows = set(description.get("workflows", ()))
    executors = description["model_executors"]
    return {
        "name": name,
        "planner": description["planner"]["model"],
        "executor": next((e["model"] for e in executors.values()), None),
        "tools": sorted(t["name"] for t in description["tools"] if t["name"] not in workflows),
        "policy": description["planner"]["policy"],
        "approve_plan": bool(description["approvals"]["plan"]),
        "example": example,
    }


def check_budget(budget: Mapping[str, Any]) -> list[Problem]:
    """What is wrong with budget overrides (``{field: number or None}``)."""
    problems = []
    for name, value in budget.items():
        where = f"budget.{name}"
        if name not in BUDGET_FIELDS:
            problems.append(_problem(where, f"is not a budget cap: {', '.join(BUDGET_FIELDS)}", "budget"))
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            problems.append(_problem(where, f"{value!r} must be a number, 0 or more, or null for no cap", "budget"))
    return problems


# -- registering ---------------------------------------------------------------------------------


def parse_agent_option(text: str) -> ServedAgent:
    """An agent from ``NAME=module:attr`` or ``NAME=spec.json``; raises :class:`~planexec.UsageError`."""
    name, sep, ref = text.partition("=")
    where = f"--agent {text}"
    if not sep or not ref.strip():
        raise UsageError("cannot register the agent", [_problem(where, "use NAME=module:attr or NAME=spec.json")])
    name, ref = name.strip(), ref.strip()
    if not AGENT_NAME.match(name):
        message = f"{name!r} is not an agent name: 1 to 64 letters, digits, '.', '_' or '-'"
        raise UsageError("cannot register the agent", [_problem(where, message)])
    if ref.endswith(".json"):
        return _from_file(name, Path(ref), where)
    return _from_reference(name, ref, where)


def _from_file(name: str, path: Path, where: str) -> ServedAgent:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError("cannot register the agent", [_problem(where, f"cannot read {path}: {e}")]) from None
    spec = AgentSpec.from_dict(data, where=where)
    folder = path.resolve().parent
    return ServedAgent(
        name=name,
        spec=replace(
            spec,
            cwd=str(folder / spec.cwd) if spec.cwd else str(folder),
            planner=_beside(spec.planner, folder),
            executor=_beside(spec.executor, folder),
        ),
        source=where,
    )


def _beside(model: ModelRef | None, folder: Path) -> ModelRef | None:
    """A ``scripted:FILE`` model with a relative FILE read beside the spec file."""
    file = model.script if model is not None else None
    if model is None or file is None:
        return model
    return model if os.path.isabs(file) else ModelRef(f"scripted:{folder / file}")


def _from_reference(name: str, ref: str, where: str) -> ServedAgent:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError("cannot register the agent", [_problem(where, "use the form package.module:attribute")])
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except Exception as e:
        raise UsageError(
            "cannot register the agent", [_problem(where, f"cannot import {ref}: {type(e).__name__}: {e}")]
        ) from None
    if isinstance(value, AgentSpec):
        return ServedAgent(name=name, spec=replace(value, cwd=value.cwd or cwd), source=where)
    if isinstance(value, Mapping):
        spec = AgentSpec.from_dict(value, where=where)
        return ServedAgent(name=name, spec=replace(spec, cwd=spec.cwd or cwd), source=where)
    if callable(value):
        function = value
        return ServedAgent(name=name, builder=lambda store, _run_id: function(store), source=where)
    message = f"is a {type(value).__name__}: name an AgentSpec, its JSON data, or a function building an Agent"
    raise UsageError("cannot register the agent", [_problem(where, message)])


def demo_agent(workdir: Path, *, pace: float = 1.0) -> ServedAgent:
    """The offline demo agent (the one ``planexec demo`` runs), each run's scenario files in a
    folder of its own under ``workdir``."""
    from planexec.demo import CONSTRAINTS, GOAL, build_demo

    def build(store: RunStore, run_id: str) -> Agent:
        folder = workdir / re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
        return build_demo(folder, pace=pace, store=store, approvals=Approvals(deferred=True)).agent

    return ServedAgent(name=DEMO_AGENT, builder=build, source="the demo", example=GOAL, constraints=CONSTRAINTS)
