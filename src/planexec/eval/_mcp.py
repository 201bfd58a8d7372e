"""A suite's MCP servers (``mcp:``): each entry checked when the suite is read, the servers started
once for a run of the suite, their tools listed and checked against the tasks, and the servers
stopped when the run of the suite ends, however it ends.

An entry has the forms of ``AgentSpec.mcp`` (``planexec run --mcp``/``--mcp-url``): a command line
to spawn, over stdio, from the suite's folder, or an ``http://``/``https://`` URL (streamable HTTP).
Tool names only a server can supply (in ``expect_tools``) are checked once it has listed them.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.eval._limits import shown
from planexec.eval._suite import Suite, SuiteInvalid
from planexec.mcp import MCPStdio, MCPToolset
from planexec.runs import read_mcp_servers
from planexec.tools import Tool

__all__ = ["MAX_MCP_SERVERS", "mcp_entries", "served_tools"]

MAX_MCP_SERVERS = 16
"""The most MCP servers a suite may start."""


def mcp_entries(value: Any, root: Path, where: str = "mcp") -> tuple[tuple[str, ...], list[Problem]]:
    """The suite's ``mcp:`` list, and every problem with it: entries that are not text, command
    lines that cannot be read or name no program to be found, URLs of another scheme."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return (), [_problem(where, "must be a list of MCP servers: command lines, or http:// or https:// URLs")]
    problems = []
    if len(value) > MAX_MCP_SERVERS:
        problems.append(_problem(where, f"names {len(value)} servers; a suite may start at most {MAX_MCP_SERVERS}"))
    entries = []
    for index, entry in enumerate(value[:MAX_MCP_SERVERS]):
        here = f"{where}[{index}]"
        if not isinstance(entry, str) or not entry.strip():
            problems.append(
                _problem(here, f"{shown(entry)} is not an MCP server: a command line, or an http:// or https:// URL")
            )
            continue
        toolsets, found = read_mcp_servers([entry], str(root))
        problems += [_problem(here, p.message) for p in found]
        for toolset in toolsets:
            if isinstance(toolset.server, MCPStdio) and not _runnable(toolset.server.command, root):
                problems.append(_problem(here, f"no program {toolset.server.command!r} to start (not on PATH)"))
        entries.append(entry)
    return tuple(entries), problems


def _runnable(command: str, root: Path) -> bool:
    """Whether ``command`` names a program: a path (from the suite's folder) or a name on PATH."""
    if "/" in command:
        path = root / command
        return path.is_file()
    return shutil.which(command) is not None


def _problem(where: str, message: str) -> Problem:
    return Problem(code="mcp", where=where, message=message)


@contextlib.asynccontextmanager
async def served_tools(suite: Suite) -> AsyncIterator[tuple[Tool, ...]]:
    """The tools of the suite's MCP servers, started (all at once) for as long as the block runs
    and stopped after it, when it fails or is cancelled too. A server that cannot start, tools
    planexec cannot use, names that clash with a task's own tools or another server's, and
    expected tools that nothing offers are one :class:`SuiteInvalid` listing every problem."""
    if not suite.mcp:
        yield ()
        return
    toolsets, found = read_mcp_servers(suite.mcp, str(suite.root))
    if found:
        raise SuiteInvalid(f"the MCP servers of the suite {suite.name!r} are invalid", found)
    try:
        opened = await asyncio.gather(*(t.open() for t in toolsets), return_exceptions=True)
        problems: list[Problem] = []
        for index, (toolset, outcome) in enumerate(zip(toolsets, opened, strict=True)):
            here = f"mcp[{index}]"
            if isinstance(outcome, UsageError):
                problems += [_problem(here, f"{outcome.summary}: {p.where}: {p.message}") for p in outcome.problems]
            elif isinstance(outcome, Exception):
                problems.append(_problem(here, f"{toolset.label}: {type(outcome).__name__}: {outcome}"))
            elif isinstance(outcome, BaseException):
                raise outcome
        tools = _check_names(suite, toolsets, problems) if not problems else ()
        if problems:
            raise SuiteInvalid(f"the MCP servers of the suite {suite.name!r} cannot be used", problems)
        yield tools
    finally:
        await asyncio.gather(*(t.close() for t in toolsets), return_exceptions=True)


def _check_names(suite: Suite, toolsets: Sequence[MCPToolset], problems: list[Problem]) -> tuple[Tool, ...]:
    """The servers' tools; a problem for each name two servers share, each task tool a server's
    tool hides, and each expected tool nothing offers."""
    served: dict[str, int] = {}
    tools: list[Tool] = []
    for index, toolset in enumerate(toolsets):
        for tool in toolset:
            if tool.name in served:
                message = f"tool {tool.name!r} is offered by mcp[{served[tool.name]}] too"
                problems.append(_problem(f"mcp[{index}]", message))
                continue
            served[tool.name] = index
            tools.append(tool)
    for number, task in enumerate(suite.tasks):
        where = f"tasks[{number}] ({task.id})"
        for name in sorted(set(served) & {t.name for t in task.tools}):
            problems.append(_problem(f"{where}.tools", f"{name!r} is also a tool of mcp[{served[name]}]"))
        if task.expect_tools is not None:
            known = set(served) | {t.name for t in task.tools}
            unknown = [n for n in task.expect_tools.tools if n not in known]
            if unknown:
                message = f"not among the task's tools or its MCP servers': {', '.join(dict.fromkeys(unknown))}"
                problems.append(_problem(f"{where}.expect_tools.tools", message))
    return tuple(tools)
