"""The TypeScript client (clients/typescript): its OpenAPI document is the server's, and its own
tests (``node --test``) pass against a live ``planexec serve``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planexec.server import openapi_document

CLIENT = Path(__file__).resolve().parent.parent / "clients" / "typescript"
IN_CI = os.environ.get("CI") == "true"


def test_the_clients_openapi_document_is_the_servers() -> None:
    shipped = json.loads((CLIENT / "openapi.json").read_text(encoding="utf-8"))
    assert shipped == openapi_document(), (
        "clients/typescript/openapi.json is out of date: `planexec serve --openapi > clients/typescript/openapi.json`, "
        "then `npm run schema` in clients/typescript"
    )


def _npm() -> str | None:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        if IN_CI:
            pytest.fail("node and npm are needed for the TypeScript client's tests")
        pytest.skip("node and npm are not installed")
    return npm


def test_the_typescript_clients_own_tests_pass_against_a_live_server() -> None:
    npm = _npm()
    assert npm is not None
    env = {**os.environ, "PLANEXEC_PYTHON": sys.executable, "npm_config_audit": "false", "npm_config_fund": "false"}
    if not (CLIENT / "node_modules" / ".package-lock.json").exists():
        installed = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=300
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
    tested = subprocess.run([npm, "test"], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=600)
    assert tested.returncode == 0, tested.stdout[-6000:] + tested.stderr[-3000:]
    assert "# fail 0" in tested.stdout
