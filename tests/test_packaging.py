"""The project as a package: its licence, and the wheel and sdist it builds, installed into fresh
virtual environments, each with one of the extras, as the README says to install it.

The install tests (marker ``install``) build once per session (``python -m build --no-isolation``:
the dev extra brings the build tools) and install with pip from the package index, so they need
it reachable; ``make test`` and CI run them, ``pytest -m "not install"`` leaves them out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_license_files_are_the_licences_pyproject_declares() -> None:
    assert PROJECT["license"] == "Apache-2.0 AND MIT"  # planexec's own, and the web page's vendored dagre
    assert PROJECT["license-files"] == ["LICENSE", "src/planexec/server/static/assets/vendor/dagre.LICENSE.txt"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    vendored = (ROOT / PROJECT["license-files"][1]).read_text(encoding="utf-8")
    assert "Permission is hereby granted, free of charge" in vendored  # the MIT licence


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


def source_copy(where: Path) -> Path:
    """The project's files — those git tracks and those it does not ignore — copied to ``where``:
    a build there is not disturbed by tests that write into the checkout while it runs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return where


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The wheel and the sdist, built once (the wheel from the sdist, so the sdist must be whole)."""
    out = tmp_path_factory.mktemp("dist")
    source = source_copy(tmp_path_factory.mktemp("source"))
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)])
    (wheel,) = out.glob("planexec-*.whl")
    (sdist,) = out.glob("planexec-*.tar.gz")
    return Dist(wheel=wheel, sdist=sdist)


def run(
    command: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


def fresh_venv(where: Path, requirement: str) -> Path:
    """A new virtual environment at ``where`` with ``requirement`` installed; its bin folder."""
    run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    python = where / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", requirement])
    return where / "bin"


EXTRA_CHECKS = {
    "without openai": "from planexec.models import resolve_model\n"
    "try:\n    resolve_model('openai:gpt-4o-mini')\nexcept planexec.errors.ModelNotFound as e:\n"
    "    assert '[openai]' in str(e), e\nelse:\n    raise AssertionError('the openai extra is not installed')",
    "openai": "from planexec.models import OpenAIModel\nassert OpenAIModel('gpt-4o-mini').missing_keys()",
    "anthropic": "from planexec.models import AnthropicModel\nassert AnthropicModel('claude-x').missing_keys()",
    "postgres": "from planexec.store import PostgresStore\nPostgresStore('postgresql://localhost/x')",
    "otel": "from planexec.telemetry import configure_otlp\n"
    "export = configure_otlp('http://127.0.0.1:9', set_global=False)\nexport.tracer_provider.shutdown()",
    "without otel": "from planexec.telemetry import configure_otlp\n"
    "try:\n    configure_otlp('http://127.0.0.1:9')\nexcept planexec.errors.UsageError as e:\n"
    "    assert '[otel]' in str(e.problems), e\nelse:\n    raise AssertionError('the otel extra is not installed')",
}

OFFLINE_RUN = """
import asyncio, planexec
from planexec import Agent, tool
from planexec.testing import ScriptedModel

@tool
def add(a: int, b: int) -> int:
    '''Add two numbers.'''
    return a + b

plan = {"steps": [{"id": "s", "description": "add", "tool": "add", "args": {"a": 1, "b": 2}}]}
result = asyncio.run(Agent(ScriptedModel([plan, {"answer": "3"}]), tools=[add], store=None).run("1 + 2"))
assert result.stop.kind == "goal_met" and result.outputs == {"s": 3}, result.stop
"""


@pytest.mark.install
@pytest.mark.parametrize(
    ("kind", "extras"),
    [
        ("wheel", "openai"),  # and without otel
        ("wheel", "anthropic,otel"),  # and without openai
        ("sdist", "postgres"),  # and without openai and otel
    ],
)
def test_the_package_installs_into_a_fresh_environment(dist: Dist, tmp_path: Path, kind: str, extras: str) -> None:
    archive = dist.wheel if kind == "wheel" else dist.sdist
    requirement = f"planexec[{extras}] @ {archive.as_uri()}"
    bin_dir = fresh_venv(tmp_path / "venv", requirement)
    env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "0", "PLANEXEC_STORE": "memory://"}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PYTHONPATH"):
        env.pop(name, None)
    helped = run([str(bin_dir / "planexec"), "--help"], env=env, cwd=tmp_path)
    assert "Commands:" in helped.stdout
    version = run([str(bin_dir / "planexec"), "--version"], env=env, cwd=tmp_path)
    assert version.stdout.strip() == f"planexec {PROJECT['version']}"
    where = run([str(bin_dir / "python"), "-c", "import planexec; print(planexec.__file__)"], env=env, cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv")  # the installed copy, not this clone
    run([str(bin_dir / "python"), "-c", OFFLINE_RUN], env=env, cwd=tmp_path)
    checks = extras.split(",") + ([] if "openai" in extras else ["without openai"])
    checks += [] if "otel" in extras else ["without otel"]
    for check in checks:
        run(
            [str(bin_dir / "python"), "-c", "import planexec, planexec.errors\n" + EXTRA_CHECKS[check]],
            env=env,
            cwd=tmp_path,
        )


WEB_PAGE = (
    "index.html",
    *(
        f"assets/{name}"
        for name in (
            "style.css",
            "app.js",
            "api.js",
            "ui.js",
            "dag.js",
            "fold.js",
            "runs.js",
            "run.js",
            "inbox.js",
            "vendor/dagre.esm.js",
            "vendor/dagre.esm.js.LEGAL.txt",
            "vendor/dagre.LICENSE.txt",
        )
    ),
)


@pytest.mark.install
def test_the_wheel_and_the_sdist_ship_the_web_page(dist: Dist) -> None:
    """``planexec serve``'s page works offline: its files are in the package, not on a CDN."""
    static = ROOT / "src" / "planexec" / "server" / "static"
    assert sorted(str(p.relative_to(static)) for p in static.rglob("*") if p.is_file()) == sorted(WEB_PAGE)
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
    with tarfile.open(dist.sdist) as sdist:
        sdist_names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for name in WEB_PAGE:
        assert f"planexec/server/static/{name}" in names, name
        assert f"src/planexec/server/static/{name}" in sdist_names, name
    # the vendored dagre's licence is among the wheel's licence files too
    assert any(
        n.endswith(".dist-info/licenses/src/planexec/server/static/assets/vendor/dagre.LICENSE.txt") for n in names
    )
