"""Every Python snippet in the README runs, as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("code", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, str(README), "exec"), {"__name__": "readme_snippet"})
    assert capsys.readouterr().out.strip()


MAKEFILE = README.parent / "Makefile"


def test_the_make_targets_the_readme_names_run_what_it_says() -> None:
    """ "`make X` (`python -m M`, ...)": each module named is one target X runs."""
    recipes: dict[str, str] = {}
    target = ""
    for line in MAKEFILE.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^([\w-]+):", line):
            target = m.group(1)
            recipes[target] = ""
        elif line.startswith("\t") and target:
            recipes[target] += line + "\n"
    claims = re.findall(r"`make ([\w-]+)` \(([^)]*)\)", README.read_text(encoding="utf-8"))
    assert claims
    for name, said in claims:
        assert name in recipes, name
        for module in re.findall(r"python -m ([\w.]+)", said):
            assert f"-m {module}" in recipes[name], (name, module)
