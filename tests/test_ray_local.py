"""A Ray executor with no address and no ``RAY_ADDRESS`` starts a local Ray instance for
development (in a process of its own here, so that the session's cluster is not in the way), runs
its steps there, and leaves nothing running once the process shuts Ray down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import planexec
from tests.ray_cluster import require_ray

require_ray()

SCRIPT = """
import asyncio, json, os

import ray

from planexec import Agent, tool
from planexec.executor import RayExecutor
from planexec.testing import ScriptedModel


@tool
def where() -> dict:
    \"\"\"Say where the call ran.\"\"\"
    return {"pid": os.getpid(), "tmpdir": os.environ.get("RAY_TMPDIR")}


async def main():
    executor = RayExecutor(init_options={"num_cpus": 1, "_node_ip_address": "127.0.0.1"})
    step = {"id": "w", "description": "where", "tool": "where", "args": {}}
    planner = ScriptedModel([{"steps": [step]}, {"answer": "found"}])
    result = await Agent(planner, tools=[where], executors=[executor], store=None).run("where")
    errors = [str(s.error) for s in result.steps.values() if s.error is not None]
    why = f"{result.stop} {errors}"
    output = result.steps["w"].output
    print(json.dumps({"stop": result.stop.kind, "why": why, "output": output, "driver": os.getpid()}))
    ray.shutdown()


asyncio.run(main())
"""


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder with a short path: Ray's socket paths under it must stay within 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="pxl-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_without_an_address_a_local_ray_instance_is_started(short_tmp: Path) -> None:
    tmp_path = short_tmp
    home = tmp_path / "home"
    home.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    (tmp_path / "local_ray.py").write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "PLANEXEC_RAY_TEST_DIR")}
    env.update(
        {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_TMPDIR": str(tmp_path / "t"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
            "HOME": str(home),
            "PYTHONPATH": str(Path(planexec.__file__).resolve().parents[1]),
        }
    )
    done = subprocess.run(
        [sys.executable, "local_ray.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["stop"] == "goal_met", found["why"]
    assert found["output"]["tmpdir"] == str(tmp_path / "t")  # its own instance, not the session's cluster
    assert found["output"]["pid"] != found["driver"]  # the call ran in a Ray worker process
    deadline = time.monotonic() + 60
    while left := _processes_under(tmp_path / "t"):
        assert time.monotonic() < deadline, f"Ray processes left running: {left}"
        time.sleep(0.1)


def _processes_under(folder: Path) -> list[int]:
    """The processes whose command line names ``folder`` (a Ray instance's own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(") ", 1)[1][:1]
        except OSError:
            continue
        if str(folder) in command and state != "Z":
            found.append(int(entry.name))
    return found
