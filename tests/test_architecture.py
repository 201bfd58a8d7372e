"""docs/architecture.md describes the house as it is: every extension point it lists names files
that exist, each kind of extension is one place (no store class, policy name or event kind spelled
outside its own place — the last two are kept by test_policy_registry.py and test_event_kinds.py),
and the units stay small (no module over 600 lines, no function over 80, no private name imported
from another module)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "planexec"
PAGE = ROOT / "docs" / "architecture.md"

EXTENSION_POINTS = (
    "a **tool type**",
    "a **provider**",
    "a **store backend**",
    "a **planner policy**",
    "an **executor backend**",
    "an **HTTP route**",
    "an **event kind**",
    "an **eval workload**",
    "a **run host**",
)
"""Every kind of extension the architecture page must say the place of."""

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
STORE_CLASSES = ("MemoryStore", "SQLiteStore", "PostgresStore")


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _table_rows() -> dict[str, str]:
    """The rows of the page's "Where new code goes" table, by what they add."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Where new code goes", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith(("a **", "an **")):
            rows[cells[0]] = " | ".join(cells[1:])
    return rows


def test_the_page_lists_every_extension_point() -> None:
    assert sorted(_table_rows()) == sorted(EXTENSION_POINTS)


@pytest.mark.parametrize("point", EXTENSION_POINTS)
def test_every_file_an_extension_point_names_exists(point: str) -> None:
    row = _table_rows()[point]
    named = re.findall(r"`((?:planexec|tests|docs|clients)/[\w/.\-<>]+)`", row)
    assert named, f"{point}: the row names no file"
    missing = []
    for name in named:
        if "<" in name:  # a pattern: its folder must exist
            name = name.split("<", 1)[0].rsplit("/", 1)[0]
        path = ROOT / "src" / name if name.startswith("planexec") else ROOT / name
        if not path.exists():
            missing.append(name)
    assert missing == [], f"{point}: the page names files that do not exist"


def test_no_module_is_over_its_size() -> None:
    long = {}
    for path in _modules():
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_MODULE_LINES:
            long[str(path.relative_to(SRC))] = lines
    assert long == {}, f"split modules over {MAX_MODULE_LINES} lines by role"


def test_no_function_is_over_its_size() -> None:
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(SRC)}:{node.lineno} {node.name}"] = lines
    assert long == {}, f"cut functions over {MAX_FUNCTION_LINES} lines into named parts"


def test_no_private_name_crosses_a_module() -> None:
    crossing = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        crossing.append(f"{path.relative_to(SRC)}: {alias.name} from {node.module}")
    assert crossing == [], "what modules share gets a public name in its module"


def test_no_store_class_is_asked_for_outside_the_store() -> None:
    """Callers ask a store what it offers (``durable``, ``queue()``, ``plan_memory()``), not which
    class it is; only the store package, and the faces that export the classes, name them."""
    found = []
    for path in _modules():
        relative = path.relative_to(SRC)
        if relative.parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                classes = node.args[1] if len(node.args) > 1 else ast.Constant(None)
                names = {n.id for n in ast.walk(classes) if isinstance(n, ast.Name)}
                if names & set(STORE_CLASSES):
                    found.append(f"{relative}:{node.lineno}")
    assert found == []
