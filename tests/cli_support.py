"""Helpers for the command-line tests: invoking the CLI, and tools modules, planner scripts and
run logs written where a test's CLI calls find them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from planexec.cli import main
from planexec.log import Event
from planexec.store import open_store

ARITHMETIC_TOOLS = '''
from planexec import ToolError, tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


@tool
def broken(x: int) -> int:
    """Always fails."""
    raise ToolError("broken on purpose")
'''
"""The start of a tools module's source: the tools ``add``, ``double`` and ``broken`` (which always fails)."""


def invoke(args: Sequence[str], *, input: str | None = None) -> Result:
    """Run the ``planexec`` command in this process, letting any exception through."""
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def write_tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, prefix: str) -> str:
    """Write ``source`` as a module with a fresh name (``prefix`` and a random suffix) into ``tmp_path``,
    importable by that name until the test ends; returns the name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def write_script(tmp_path: Path, replies: list[Any], name: str = "planner.json") -> str:
    """Write ``replies`` as a scripted model's file in ``tmp_path``; returns the ``--planner`` value for it."""
    path = tmp_path / name
    path.write_text(json.dumps(replies))
    return f"scripted:{path}"


def write_runs(store: str, logs: Mapping[str, Sequence[Event]]) -> None:
    """Append each run's events, as a new run, to the store at URL ``store``."""

    async def write() -> None:
        s = open_store(store)
        try:
            for run_id, events in logs.items():
                await s.append(run_id, events, expected_seq=0)
        finally:
            await s.close()

    asyncio.run(write())
