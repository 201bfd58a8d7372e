"""The demo's tools: real ``@tool`` functions over the scenario's files.

Every tool reads (or, for ``write_fix``, writes) files under the work directory and refuses paths
outside it. ``collect_logs`` fails on purpose: the current log was rotated in the middle of the run
it is asked about, and its error says where the rest went.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
from pathlib import Path
from typing import Any

from planexec._util.plural import counted
from planexec.demo._files import CHANGELOG, CURRENT_LOG, FIXES, INCIDENT_DAY, WORKFLOW, ScenarioFiles
from planexec.demo._pace import Pace
from planexec.errors import ToolError
from planexec.tools import Tool, ToolContext, Toolset, tool

__all__ = ["demo_tools"]

_ROTATED = re.compile(r"logrotate: segment closed .*; continued in (\S+)")
_ERROR = re.compile(
    r'ERROR (?P<run>\S+) (?P<step>\w+) failed branch=(?P<branch>\w+) exception="(?P<exc>[^"]+)" at=(?P<at>\S+)'
)
_FIX_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def _inside(root: Path, relative: str) -> Path:
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ToolError(f"{relative!r} is outside the work directory")
    return path


def _read(root: Path, relative: str) -> str:
    path = _inside(root, relative)
    if not path.is_file():
        raise ToolError(f"no file {relative!r} in the work directory")
    return path.read_text(encoding="utf-8")


def _run_lines(text: str, run_id: str) -> list[str]:
    return [line for line in text.splitlines() if f" {run_id} " in line]


def _parse_error(lines: list[str]) -> dict[str, str] | None:
    for line in lines:
        m = _ERROR.search(line)
        if m:
            return {
                "step": m["step"],
                "branch": m["branch"],
                "exception": m["exc"],
                "location": m["at"],
            }
    return None


def demo_tools(files: ScenarioFiles, pace: Pace) -> Toolset:
    """The scenario's tools, bound to the files in ``files.root``."""
    root = files.root
    tools: list[Tool] = [*_reading_tools(root, pace), *_inspecting_tools(root, pace), *_fixing_tools(root, pace)]
    return Toolset(*tools, name="support")


def _reading_tools(root: Path, pace: Pace) -> list[Tool]:
    """The workflow's definition and a run's log lines, current or archived."""

    @tool
    async def read_workflow() -> dict[str, Any]:
        """Read the customer-onboarding workflow definition: its intake form, steps and branches."""
        await pace.wait(0.15, 0.3)
        data: dict[str, Any] = json.loads(_read(root, WORKFLOW))
        return data

    @tool
    async def collect_logs(run_id: str) -> dict[str, Any]:
        """Collect the application log lines of one workflow run from the current log file.

        Args:
            run_id: The workflow run, e.g. r-1234.
        """
        await pace.wait(0.05, 0.1)
        text = _read(root, CURRENT_LOG)
        lines = _run_lines(text, run_id)
        if not lines:
            raise ToolError(f"no log lines for run {run_id!r} in {CURRENT_LOG}")
        finished = any("run finished" in line for line in lines)
        if not finished:
            rotated = [m[1] for m in map(_ROTATED.search, text.splitlines()) if m]
            if rotated:
                last = lines[-1].split(f" {run_id} ", 1)[1]
                raise ToolError(
                    f"the log of run {run_id} is incomplete: {CURRENT_LOG} ends mid-run after {last!r} "
                    f"({counted(len(lines), 'line')}) and the rest was rotated to the archived segment {rotated[-1]}"
                )
        return {"run_id": run_id, "source": CURRENT_LOG, "lines": lines, "error": _parse_error(lines)}

    @tool
    async def fetch_archived_logs(segment: str, run_id: str) -> dict[str, Any]:
        """Fetch a workflow run's log lines from an archived (rotated) log segment, with the error found in them.

        Args:
            segment: Path of the archived segment, as the current log names it.
            run_id: The workflow run, e.g. r-1234.
        """
        await pace.wait(0.15, 0.3)
        if not segment.startswith("logs/archive/"):
            raise ToolError(f"{segment!r} is not an archived segment (they are under logs/archive/)")
        lines = _run_lines(_read(root, segment), run_id)
        if not lines:
            raise ToolError(f"no log lines for run {run_id!r} in {segment}")
        return {"run_id": run_id, "source": segment, "lines": lines, "error": _parse_error(lines)}

    return [read_workflow, collect_logs, fetch_archived_logs]


def _inspecting_tools(root: Path, pace: Pace) -> list[Tool]:
    """The recent deploys, and a branch's steps and code."""

    @tool
    async def list_recent_changes(days: int = 7) -> list[dict[str, Any]]:
        """List the deploys of the last few days before the incident, newest first, with the files each changed.

        Args:
            days: How many days back to look.
        """
        await pace.wait(0.2, 0.4)
        since = dt.date.fromisoformat(INCIDENT_DAY) - dt.timedelta(days=days)
        deploys: list[dict[str, Any]] = json.loads(_read(root, CHANGELOG))
        recent = [d for d in deploys if dt.date.fromisoformat(d["at"][:10]) >= since]
        return sorted(recent, key=lambda d: str(d["at"]), reverse=True)

    @tool
    async def inspect_branch(branch: str) -> dict[str, Any]:
        """Inspect one branch of the workflow: its steps, its handler's source code (with line numbers) and error route.

        Args:
            branch: The branch name from the workflow definition.
        """
        await pace.wait(0.05, 0.2)
        workflow = json.loads(_read(root, WORKFLOW))
        branches: dict[str, Any] = workflow["branches"]
        if branch not in branches:
            raise ToolError(f"no branch {branch!r}; the workflow has: {', '.join(branches)}")
        spec = branches[branch]
        source = _read(root, spec["handler"])
        numbered = "\n".join(f"{n:>4} | {line}" for n, line in enumerate(source.splitlines(), 1))
        return {
            "branch": branch,
            "steps": spec["steps"],
            "handler": spec["handler"],
            "on_error": spec.get("on_error"),
            "source": numbered,
        }

    return [list_recent_changes, inspect_branch]


def _fixing_tools(root: Path, pace: Pace) -> list[Tool]:
    """A fix drafted as a diff, and written for review."""

    @tool
    async def draft_fix(path: str, find: str, replace: str) -> dict[str, Any]:
        """Draft a fix as a unified diff that replaces one exact piece of a file (the file is not changed).

        Args:
            path: The file to fix, relative to the work directory.
            find: The exact text to replace; it must occur once in the file.
            replace: The text to put in its place.
        """
        await pace.wait(0.05, 0.15)
        before = _read(root, path)
        count = before.count(find)
        if count != 1:
            raise ToolError(f"{find!r} occurs {count} times in {path}; it must occur exactly once")
        after = before.replace(find, replace)
        diff = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
        patch = "".join(diff)
        changed = sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
        return {"path": path, "patch": patch, "changed_lines": changed}

    @tool(side_effect=True, idempotent=True)
    async def write_fix(name: str, patch: str, ctx: ToolContext) -> dict[str, Any]:
        """Write a drafted patch into the fixes/ folder of the work directory for review.

        Args:
            name: The patch's file name without extension: lower-case letters, digits, _ and -.
            patch: The unified diff to write.
        """
        await pace.wait(0.05, 0.15)
        if not _FIX_NAME.match(name):
            raise ToolError(f"{name!r} is not a valid fix name: use lower-case letters, digits, _ and -")
        if not patch.startswith("--- "):
            raise ToolError("the patch is not a unified diff (it must start with '--- ')")
        relative = f"{FIXES}/{name}.patch"
        path = _inside(root, relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# drafted by planexec run {ctx.run_id}, step {ctx.step_id}\n"
        path.write_text(header + patch, encoding="utf-8")
        return {"path": relative, "bytes": path.stat().st_size}

    return [draft_fix, write_fix]
