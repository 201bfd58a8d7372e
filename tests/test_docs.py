"""The documentation site: every Python block in docs/ runs as written, and the pages that describe
the code (the public names, the layers) say what the code says."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

import planexec

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

RUN = "```python"
"""A block the tests run."""
NOT_RUN = "```{.python .no-run}"
"""A block shown but not run (it needs something no test machine has). Keep these rare."""


def python_blocks() -> list[tuple[str, int, str, bool]]:
    """Every Python block in the docs: (page, line, code, runs)."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            fence = lines[i].strip()
            if fence.startswith("```") and fence != "```":
                end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
                if fence in (RUN, NOT_RUN):
                    code = "\n".join(lines[i + 1 : end]) + "\n"
                    found.append((str(page.relative_to(DOCS)), i + 1, code, fence == RUN))
                i = end
            i += 1
    return found


BLOCKS = python_blocks()
RUNNABLE = [(page, line, code) for page, line, code, runs in BLOCKS if runs]


def test_python_blocks_are_marked_run_or_not_run() -> None:
    """A fence that looks like Python but is neither marker would slip past the tests."""
    for page in DOCS.rglob("*.md"):
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fence = line.strip()
            if fence.startswith("```") and "py" in fence:
                assert fence in (RUN, NOT_RUN), f"{page.relative_to(DOCS)}:{n}: {fence}"
    assert len(RUNNABLE) >= 25
    assert len(BLOCKS) - len(RUNNABLE) <= 3


@pytest.mark.parametrize(("page", "line", "code"), RUNNABLE, ids=[f"{p}:{n}" for p, n, _ in RUNNABLE])
def test_block_runs(
    page: str, line: int, code: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # whatever a block writes stays in a throwaway folder
    exec(compile(code, f"{DOCS / page}:{line}", "exec"), {"__name__": "docs_block"})
    assert capsys.readouterr().out.strip(), "a block shows what it did"


def nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    return []


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == on_disk
    assert "benchmarks.md" in listed


def test_the_reference_lists_every_top_level_name() -> None:
    page = (DOCS / "reference" / "planexec.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| \[`(\w+)`\]\[([\w.]+)\]", page, flags=re.MULTILINE))
    names = [n for n in planexec.__all__ if n != "__version__"]
    assert {name for name, _ in listed} == set(names)
    for name, target in listed:
        assert target == f"{planexec._WHERE[name]}.{name}"


def test_every_public_face_has_a_reference_page() -> None:
    pages = " ".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md"))
    packages = [p.name for p in (ROOT / "src" / "planexec").iterdir() if p.is_dir() and p.name[0] not in "_."]
    faces = {f"planexec.{name}" for name in packages if name not in ("cli", "demo")} | {"planexec.testing"}
    for face in faces | {"planexec.errors"}:
        assert f"::: {face}\n" in pages, face


def test_the_architecture_page_draws_the_layers_pyproject_checks() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    drawing = (DOCS / "architecture.md").read_text(encoding="utf-8").split("```text\n", 1)[1].split("```", 1)[0]
    # Each row: the layer's packages, then (after two spaces or more) what they are.
    rows = [re.split(r"\s{2,}", row.strip())[0] for row in drawing.splitlines() if row.startswith("planexec")]
    drawn = [" | ".join(sorted(row.split(" | "))) for row in rows]
    assert drawn == [" | ".join(sorted(layer.split(" | "))) for layer in layers]
