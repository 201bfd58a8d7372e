"""Schemathesis against a live ``planexec serve``: cases generated from the server's own OpenAPI
document (its examples, boundary and invalid values, random ones, and sequences that follow the
document's links from a new run to what can be done with it), every answer checked with all of
Schemathesis's checks. It finds nothing: the document is the API's contract.

Bounded and repeatable: 50 cases an operation and a phase, generated deterministically (no seed,
no example database), about a minute on two cores."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve_support import ADD_PLAN, ASK, TOKEN, Server, write_agent

IN_CI = os.environ.get("CI") == "true"
MAX_EXAMPLES = 50
ACCEPTED_OR_STATE_DEPENDENT = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]

CONFIG = f"""
# What the server is asked with: its token through the document's bearer scheme, and agent names it
# has registered most of the time (else a run is never started).
[auth.openapi.bearer]
bearer = "${{PLANEXEC_TEST_TOKEN}}"

[dictionaries.agents]
values = ["demo", "asker"]

[parameters]
"body.agent" = {{ dictionary = "agents", probability = 0.8 }}

# Whether a fork's `at` is within the run's log, or an answer fits its question (a question needs a
# text, a checklist one result per item, an edited plan the run's tools), depends on the run, which
# no schema can say: a body that fits the schema may be refused with the documented 422 there.
[[operations]]
include-operation-id = ["fork_run", "answer_question"]
checks.positive_data_acceptance.expected-statuses = {json.dumps(ACCEPTED_OR_STATE_DEPENDENT)}

# A run's stream stays open while the run waits for a human: one event shows what it sends.
[[operations]]
include-operation-id = "stream_events"
max-stream-events = 1
request-timeout = 5.0
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("schemathesis")
    agents = [
        write_agent(folder, "demo", [ADD_PLAN, {"answer": "5"}]),
        write_agent(folder, "asker", [ASK, ADD_PLAN, {"answer": "5"}]),
    ]
    served = Server(folder, agents).start()
    assert served.process is not None
    assert served.process.stderr is not None
    stderr = served.process.stderr
    logged: list[str] = []
    drain = threading.Thread(target=lambda: logged.extend(stderr), daemon=True)
    drain.start()
    served.logged = logged  # type: ignore[attr-defined]
    yield served
    served.kill()
    drain.join(timeout=10)


def _schemathesis() -> None:
    if importlib.util.find_spec("schemathesis") is None:
        if IN_CI:
            pytest.fail("schemathesis is needed (it is in the dev extra)")
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")


def test_schemathesis_with_all_its_checks_finds_nothing(server: Server, tmp_path: Path) -> None:
    _schemathesis()
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG, encoding="utf-8")
    document = tmp_path / "openapi.json"  # the server's own, as it serves it (to its token only)
    with server.client() as api:
        document.write_bytes(api.get("/v1/openapi.json").raise_for_status().content)
    reports = tmp_path / "reports"
    command = [
        *(sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run"),
        str(document),
        *("--url", server.url),
        *("--checks", "all"),
        *("--phases", "examples,coverage,fuzzing,stateful"),
        *("--max-examples", str(MAX_EXAMPLES)),
        "--generation-deterministic",
        *("--workers", "1"),
        *("--request-timeout", "10"),
        *("--report", "json", "--report-dir", str(reports)),
        "--no-color",
    ]
    env = {**os.environ, "PLANEXEC_TEST_TOKEN": TOKEN}
    ran = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    output = ran.stdout[-12_000:] + ran.stderr[-3_000:]
    (report_path,) = reports.glob("*.json")
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    assert (ran.returncode, report["exit_code"]) == (0, 0), output
    assert report["failures"] == [], output
    assert report["errors"] == [], output
    assert report["complete"] is True
    phases = {name: phase["status"] for name, phase in report["phases"].items()}
    assert phases == dict.fromkeys(("examples", "coverage", "fuzzing", "stateful"), "success"), output
    assert report["operations"]["tested"] == report["operations"]["total"] == 13, output
    assert report["test_cases"]["generated"] > 13 * MAX_EXAMPLES, output
    assert report["test_cases"]["with_failures"] == 0, output
    assert "API Links:" in ran.stdout, output
    server.kill(signal.SIGTERM)
    logged = "".join(server.logged)  # type: ignore[attr-defined]
    assert "Traceback" not in logged, logged[-4000:]
    assert TOKEN not in logged
