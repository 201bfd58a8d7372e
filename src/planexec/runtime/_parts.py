"""What an agent is made of — its planner, tools and executors by name — put together and checked
once, when the agent is made or its tools change."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec._util.clip import clip
from planexec.errors import Problem, UsageError
from planexec.executor import Executor, Extractor, ModelExecutor, RayExecutor, ToolExecutor, executor_profile
from planexec.mcp import MCPToolset
from planexec.models import Model
from planexec.planner import Planner
from planexec.tools import Tool, Toolset

__all__ = ["Parts", "assemble", "split_servers"]


@dataclass(frozen=True, kw_only=True)
class Parts:
    """An agent's planner, tools and executors (the built-in ``tools`` executor included)."""

    planner: Planner
    tools: Toolset
    executors: dict[str, Executor] = field(default_factory=dict)
    default_executor: str | None = None


def split_servers(items: Iterable[Any]) -> tuple[list[Any], list[MCPToolset]]:
    """``items`` without the MCP servers' toolsets (at any depth of nested lists), and those."""
    own: list[Any] = []
    servers: list[MCPToolset] = []
    for item in items:
        if isinstance(item, MCPToolset):
            servers.append(item)
        elif isinstance(item, list | tuple):
            inner, found = split_servers(item)
            own.append(inner)
            servers += found
        else:
            own.append(item)
    return own, servers


def assemble(
    planner: Planner | Model | str,
    tools: Sequence[Tool | Toolset] | Toolset,
    executor: Model | str | ModelExecutor | None,
    executors: Sequence[Executor],
) -> Parts:
    problems: list[Problem] = []
    the_planner = planner if isinstance(planner, Planner) else Planner(model=planner)
    toolset = tools if isinstance(tools, Toolset) else Toolset(*tools)
    by_name: dict[str, Executor] = {"tools": ToolExecutor()}
    default: str | None = None
    extra: list[Executor] = list(executors)
    if isinstance(the_planner.extractor, Extractor):  # a sealed planner's quarantined extractor
        extra.append(the_planner.extractor)
    if executor is not None:
        default_exec = executor if isinstance(executor, ModelExecutor) else ModelExecutor(model=executor)
        extra.insert(0, default_exec)
        default = default_exec.name
    for e in extra:
        if not isinstance(e, Executor):
            problems.append(Problem(code="executor", where=clip(repr(e), 60), message="is not an executor"))
            continue
        if not isinstance(e.name, str) or not e.name.strip():
            message = f"has the name {clip(repr(e.name), 60)}: an executor's name must be non-empty text"
            problems.append(Problem(code="executor", where=clip(repr(e), 60), message=message))
            continue
        if e.name == "tools" and not (isinstance(e, ToolExecutor | RayExecutor) and e.kind == "tools"):
            message = "the name 'tools' is the built-in tool executor's (or a RayExecutor that runs tool steps)"
            problems.append(Problem(code="executor", where="tools", message=message))
            continue
        if e.name in by_name and e.name != "tools":
            problems.append(Problem(code="executor", where=e.name, message="two executors have this name"))
        try:
            executor_profile(e)  # a custom executor's description and capabilities, checked now
        except UsageError as error:
            problems += [dataclasses.replace(p, where=f"{e.name}.{p.where}") for p in error.problems]
        by_name[e.name] = e
    if problems:
        raise UsageError("invalid agent", problems)
    return Parts(planner=the_planner, tools=toolset, executors=by_name, default_executor=default)
