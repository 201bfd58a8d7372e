"""An agent described as typed values — models named by their model strings, ``module:attr``
references to tools and executors, MCP servers, policies, budget caps, model settings and the
pattern's rules — recorded with each run it starts, so that any process can build the agent
again from the run's log (to resume it, fork it or answer it).

A run records its :class:`AgentSpec` in its first event (``RunStarted.config["agent_spec"]``; a
run recorded before spec version 10 has it under ``"cli"``); a server registering agents from spec
files reads the same form with :meth:`AgentSpec.from_dict`. The agent is built from a spec by
:func:`~planexec.runs.build_agent`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec.errors import Problem
from planexec.log import RunStarted
from planexec.models import ModelSettings
from planexec.planner import PolicyName, ReplanPolicy, Upfront
from planexec.runs._problems import Problems
from planexec.runs._spec_texts import RULE_FLAGS, RULE_LISTS, RULE_TEXTS, read_fields
from planexec.runs._spec_values import (
    ImportRef,
    MCPHeader,
    MCPServerRef,
    ModelRef,
    Rules,
    read_mcp_server,
    read_recorded_rules,
)
from planexec.store import RunStore

__all__ = ["METADATA_KEYS", "SPEC_VERSION", "AgentSpec", "Recorded", "recorded_spec"]

SPEC_VERSION = 10
"""Version of the recorded spec (1: first version; 2: planner_settings, executor_settings and
step_timeout; 3: the rules, under ``rules``; 4: mcp and mcp_headers; 5: the planner's ensemble,
as the rules escalate_to, escalate_on and confidence_below; 6: executors and memory; 7: sealed
planning, as the rules sealed (true or false) and extractor (a model string); 8: trust, as the
rules trusted_tools (tool names) and untrusted_effects (true or false); 9: what an untrusted
answer does, as the rule untrusted_answer (label, ask or withhold); 10: typed values instead of
the command line's texts — numbers, settings as objects, references as objects, MCP servers as a
command's words or a URL, rules in groups — recorded under ``agent_spec``. What an earlier version
lacks reads as unset)."""

METADATA_KEYS = ("agent_spec", "cli")
"""Where in a run's first event (``RunStarted.config``) its spec is recorded: the first key since
spec version 10, the second before."""

_FIELDS = (
    "planner",
    "executor",
    "tools",
    "mcp",
    "mcp_headers",
    "executors",
    "memory",
    "policy",
    "replan",
    "budget",
    "approve_plan",
    "constraints",
    "cwd",
    "planner_settings",
    "executor_settings",
    "step_timeout",
    "rules",
)

_DEFAULTS: Mapping[str, Any] = {
    "planner": None,
    "executor": None,
    "tools": (),
    "mcp": (),
    "mcp_headers": (),
    "executors": (),
    "memory": False,
    "policy": Upfront.name,
    "replan": "on_failure",
    "budget": {},
    "approve_plan": False,
    "constraints": (),
    "cwd": None,
    "planner_settings": ModelSettings(),
    "executor_settings": ModelSettings(),
    "step_timeout": None,
    "rules": Rules(),
}


@dataclass(frozen=True, kw_only=True, init=False)
class AgentSpec:
    """How to build an agent, as typed values; recorded with each run it starts.

    ``planner``/``executor`` are :class:`ModelRef` values (``scripted:FILE`` is made absolute
    when recorded); ``tools`` and ``executors`` are :class:`ImportRef` values imported from
    ``cwd`` (``executors``: executors, or lists of them, steps may be routed to, such as a
    :class:`~planexec.executor.RayExecutor` named ``tools``); ``budget`` maps
    :class:`~planexec.Budget` fields to caps (None lifts one); ``mcp``: MCP servers whose tools the
    agent uses (:class:`MCPCommand`, spawned and spoken to over stdio, or :class:`MCPUrl`, over
    streamable HTTP); ``mcp_headers``: headers sent to every URL server, ``${VAR}`` in a value read
    from the environment when the agent is built (the spec keeps the reference, never the value);
    ``memory``: the agent remembers plans that met their goals in its run store and reuses them
    (whoever runs the agent gives it the memory); ``rules``: the pattern's :class:`Rules`.

    Each value may also be given as the text the command line takes (``planner="openai:gpt-4.1"``,
    ``tools=("pkg.mod:TOOLS",)``, ``budget={"steps": "10"}``, ``planner_settings=("temperature=0.2",)``,
    ``rules={"on_fail": "retry"}``): it is read into its typed value, and what cannot be read is
    kept in ``problems``, which :func:`~planexec.runs.build_agent` lists with its own.
    """

    planner: ModelRef | None
    executor: ModelRef | None
    tools: tuple[ImportRef, ...]
    mcp: tuple[MCPServerRef, ...]
    mcp_headers: tuple[MCPHeader, ...]
    executors: tuple[ImportRef, ...]
    memory: bool
    policy: PolicyName
    replan: ReplanPolicy
    budget: Mapping[str, int | float | None]
    """Caps by :class:`~planexec.Budget` field: a number, or None for no cap; a cap not given keeps
    its default."""
    approve_plan: bool
    constraints: tuple[str, ...]
    cwd: str | None
    """The directory ``module:attr`` references are imported from."""
    planner_settings: ModelSettings
    executor_settings: ModelSettings
    step_timeout: float | None
    """Seconds a whole model-driven step may take (None: no limit)."""
    rules: Rules
    problems: tuple[Problem, ...] = field(default=(), compare=False, repr=False)
    """What the values given could not be read as (they read as unset); never recorded."""

    def __init__(
        self,
        *,
        planner: ModelRef | str | None = None,
        executor: ModelRef | str | None = None,
        tools: Sequence[ImportRef | str] = (),
        mcp: Sequence[MCPServerRef | str] = (),
        mcp_headers: Sequence[MCPHeader | str] = (),
        executors: Sequence[ImportRef | str] = (),
        memory: bool = False,
        policy: str = Upfront.name,
        replan: str = "on_failure",
        budget: Mapping[str, int | float | str | None] | None = None,
        approve_plan: bool = False,
        constraints: Sequence[str] = (),
        cwd: str | None = None,
        planner_settings: ModelSettings | Sequence[str] = (),
        executor_settings: ModelSettings | Sequence[str] = (),
        step_timeout: float | str | None = None,
        rules: Rules | Mapping[str, Any] | None = None,
        problems: Sequence[Problem] = (),
    ) -> None:
        given = {
            "planner": planner,
            "executor": executor,
            "tools": tools,
            "mcp": mcp,
            "mcp_headers": mcp_headers,
            "executors": executors,
            "memory": memory,
            "policy": policy,
            "replan": replan,
            "budget": {} if budget is None else budget,
            "approve_plan": approve_plan,
            "constraints": constraints,
            "cwd": cwd,
            "planner_settings": planner_settings,
            "executor_settings": executor_settings,
            "step_timeout": step_timeout,
            "rules": Rules() if rules is None else rules,
        }
        found = Problems(problems)
        for name, value in read_fields(given, _DEFAULTS, found).items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "problems", tuple(dict.fromkeys(found)))  # a value read again says nothing new

    def with_texts(self, texts: Mapping[str, Any]) -> AgentSpec:
        """This spec with ``texts`` (values by field, typed or as text) over it, as a command
        line's flags change a recorded spec: budget caps one by one, model settings after this
        spec's, rules key by key (``rules`` maps the keys of ``RULE_TEXTS``, ``RULE_LISTS`` and
        ``RULE_FLAGS`` to values); any other field given replaces this spec's."""
        found = Problems(self.problems)
        fields = read_fields(texts, {name: getattr(self, name) for name in _FIELDS}, found)
        return AgentSpec(**fields, problems=tuple(found))

    def recorded(self) -> AgentSpec:
        """This spec as it is recorded: scripted model files made absolute, ``cwd`` filled in."""
        return self.with_typed(
            planner=self.planner.absolute() if self.planner is not None else None,
            executor=self.executor.absolute() if self.executor is not None else None,
            rules=self.rules.absolute(),
            cwd=self.cwd if self.cwd is not None else os.getcwd(),
        )

    def with_typed(self, **changes: Any) -> AgentSpec:
        """This spec with typed values replacing some of its fields."""
        return AgentSpec(**{**{name: getattr(self, name) for name in _FIELDS}, **changes}, problems=self.problems)

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON data (with its version), as recorded and as a spec file holds it."""
        return {
            "version": SPEC_VERSION,
            "planner": None if self.planner is None else self.planner.text,
            "executor": None if self.executor is None else self.executor.text,
            "tools": [ref.record() for ref in self.tools],
            "mcp": [server.record() for server in self.mcp],
            "mcp_headers": [header.record() for header in self.mcp_headers],
            "executors": [ref.record() for ref in self.executors],
            "memory": self.memory,
            "policy": self.policy,
            "replan": self.replan,
            "budget": dict(self.budget),
            "approve_plan": self.approve_plan,
            "constraints": list(self.constraints),
            "cwd": self.cwd,
            "planner_settings": self.planner_settings.as_dict(),
            "executor_settings": self.executor_settings.as_dict(),
            "step_timeout": self.step_timeout,
            "rules": self.rules.record(),
        }

    def metadata(self) -> dict[str, Any]:
        """What ``Agent.start(metadata=...)`` records so that the run can be picked up anywhere."""
        return {METADATA_KEYS[0]: self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "spec") -> AgentSpec:
        """A spec from JSON data (:meth:`to_dict`'s, of any version); raises
        :class:`~planexec.UsageError` listing every key that cannot be read. A value that is read
        but is wrong (a policy no planner has, a negative cap) is kept in ``problems``."""
        spec = read_spec(data, where)
        Problems(p for p in spec.problems if p.code == "spec").raise_if_any("the agent spec cannot be read")
        return spec


def read_spec(data: Any, where: str) -> AgentSpec:
    """A spec from recorded data of any version; each key that cannot be read is a problem (and
    reads as unset), kept in the spec's ``problems``."""
    problems = Problems()
    if not isinstance(data, Mapping):
        problems.add(where, f"is a {type(data).__name__}, not an object of spec fields", code="spec")
        return AgentSpec(problems=problems)
    version = data.get("version", 1)
    bad: list[str] = []
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SPEC_VERSION:
        bad.append("version")
    bad += [str(key) for key in data if key not in ("version", *_FIELDS)]
    reader = _typed if version == SPEC_VERSION else _texts
    given = reader({key: data[key] for key in _FIELDS if key in data}, where, problems, bad)
    for key in bad:
        problems.add(where, f"the spec has an unreadable {key!r}; give it again", code="spec")
    return AgentSpec(**given, problems=problems)


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _texts(data: Mapping[str, Any], where: str, problems: Problems, bad: list[str]) -> dict[str, Any]:
    """The fields of a spec recorded before version 10 (texts, as the command line gave them)."""
    given: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("policy", "replan") and value is None:
            continue  # reads as unset
        if key in ("planner", "executor", "cwd", "step_timeout", "policy", "replan"):
            ok = isinstance(value, str) or value is None
        elif key in ("memory", "approve_plan"):
            ok = isinstance(value, bool)
        elif key == "budget":
            ok = isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())
        elif key == "rules":
            ok = isinstance(value, Mapping)
            value = _rule_texts(value, bad) if ok else value
        else:
            ok = _strings(value) is not None
        if ok:
            given[key] = value
        else:
            bad.append(key)
    return given


def _rule_texts(rules: Mapping[str, Any], bad: list[str]) -> dict[str, Any]:
    given: dict[str, Any] = {}
    for key, value in rules.items():
        if key in RULE_TEXTS and isinstance(value, str):
            given[key] = value
        elif key in RULE_LISTS and _strings(value) is not None:
            given[key] = _strings(value)
        elif key in RULE_FLAGS and isinstance(value, bool):
            given[key] = value
        else:
            bad.append(f"rules.{key}")
    return given


def _typed(data: Mapping[str, Any], where: str, problems: Problems, bad: list[str]) -> dict[str, Any]:
    """The fields of a spec of version 10 (typed values)."""
    given: dict[str, Any] = {}
    for key, value in data.items():
        read = _read_typed(key, value, where, problems)
        if read is _UNREADABLE:
            bad.append(key)
        else:
            given[key] = read
    return given


_UNREADABLE = object()


def _read_typed(key: str, value: Any, where: str, problems: Problems) -> Any:
    """One recorded field of version 10, or ``_UNREADABLE``."""
    if key in ("planner", "executor"):
        return None if value is None else ModelRef(value) if isinstance(value, str) else _UNREADABLE
    if key in ("tools", "executors"):
        return _each(value, ImportRef.read)
    if key == "mcp":
        return _each(value, read_mcp_server)
    if key == "mcp_headers":
        return _each(value, MCPHeader.read)
    if key in ("memory", "approve_plan"):
        return value if isinstance(value, bool) else _UNREADABLE
    if key in ("policy", "replan"):
        return value if isinstance(value, str) else _UNREADABLE
    if key in ("cwd",):
        return value if value is None or isinstance(value, str) else _UNREADABLE
    if key == "constraints":
        return _strings(value) if _strings(value) is not None else _UNREADABLE
    if key == "budget":
        numbers = isinstance(value, Mapping) and all(_number(v) or v is None for v in value.values())
        return dict(value) if numbers else _UNREADABLE
    if key == "step_timeout":
        return value if value is None or _number(value) else _UNREADABLE
    if key in ("planner_settings", "executor_settings"):
        try:
            return ModelSettings.from_dict(value, where=key)
        except Exception:
            return _UNREADABLE
    return read_recorded_rules(value, where, problems)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _each(value: Any, read: Any) -> Any:
    """Each item of a recorded list read, or ``_UNREADABLE`` when one cannot be."""
    if not isinstance(value, list):
        return _UNREADABLE
    items = [read(item) for item in value]
    return tuple(items) if None not in items else _UNREADABLE


def _from_log(first: RunStarted) -> AgentSpec:
    """What a run that recorded no spec says about itself."""
    budget = {name: value for name, value in first.budget.items() if value is not None}
    return AgentSpec(policy=first.policy, replan=first.replan, budget=budget, constraints=first.constraints)


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """The spec a run recorded: ``own`` is False when the run recorded none (then ``spec`` is what
    its first event says); ``problems`` lists the recorded fields that could not be read."""

    spec: AgentSpec
    own: bool
    problems: tuple[Problem, ...] = ()


def recorded_data(first: RunStarted) -> Any:
    """The spec data a run's first event records (None when it records none)."""
    for key in METADATA_KEYS:
        if key in first.config:
            return first.config[key]
    return None


async def recorded_spec(store: RunStore, first: RunStarted) -> Recorded:
    """The spec a run recorded (a fork records none: its origin's is used)."""
    seen: set[str] = set()
    current = first
    while True:
        recorded = recorded_data(current)
        if isinstance(recorded, dict):
            spec = read_spec(recorded, f"run {current.run_id}")
            return Recorded(spec=spec, own=True, problems=spec.problems)
        origin = current.config.get("forked_from")
        if not isinstance(origin, str) or origin in seen:
            return Recorded(spec=_from_log(first), own=False)
        seen.add(origin)
        log = await store.read(origin)
        if not log or not isinstance(log[0].event, RunStarted):
            return Recorded(spec=_from_log(first), own=False)
        current = log[0].event
