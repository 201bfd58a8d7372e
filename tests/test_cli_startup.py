"""What starting planexec imports: ``import planexec`` and the ``planexec`` command load only what
they use; a command's dependencies are imported when that command runs. (How long starting takes
is measured in benchmarks/startup.py, not here.)"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from planexec.cli import main
from planexec.cli._main import COMMANDS

HEAVY = ["pydantic", "jsonschema", "rich", "yaml", "openai", "anthropic", "psycopg", "planexec.runtime"]
"""Modules the command group must not import before a command needs them."""


def imported_after(code: str) -> set[str]:
    """The modules loaded in a fresh interpreter after running ``code``."""
    show = "import sys, json; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", f"{code}\n{show}"], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], names: list[str]) -> list[str]:
    return [name for name in names if any(m == name or m.startswith(f"{name}.") for m in modules)]


def test_importing_the_command_line_imports_no_command() -> None:
    assert loaded(imported_after("import planexec.cli"), HEAVY) == []


def test_help_and_version_import_no_command() -> None:
    for args in (["--help"], ["--version"]):
        code = f"from planexec.cli import main\nmain({args!r}, standalone_mode=False)"
        assert loaded(imported_after(code), HEAVY) == [], args


def test_importing_planexec_loads_its_parts_on_first_use() -> None:
    modules = imported_after("import planexec")
    assert {m for m in modules if m.startswith("planexec.")} == set()
    modules = imported_after("import planexec\nplanexec.Toolset")
    assert "planexec.tools" in modules
    assert loaded(modules, ["planexec.runtime", "planexec.store"]) == []


def test_a_command_runs_with_what_it_needs() -> None:
    modules = imported_after("from planexec.cli import main\nmain(['schema'], standalone_mode=False)")
    assert "planexec.plan" in modules


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_summary_is_the_commands_own(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    assert command.name == name
    assert COMMANDS[name].summary == command.get_short_help_str(limit=1_000)


def test_help_lists_every_command_and_unknown_ones_are_refused() -> None:
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    assert main.get_command(ctx, "nope") is None
    text = main.get_help(ctx)
    for name in COMMANDS:
        assert f"  {name} " in text
