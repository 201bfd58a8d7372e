"""Mock LLM servers from PyPI, run as subprocesses on 127.0.0.1 for the whole test session.

* ``fakellm`` answers from the rules in ``tests/fixtures/fakellm.yaml`` (OpenAI chat completions
  at ``/v1/chat/completions``, Anthropic messages at ``/v1/messages``).
* ``llmock`` answers with schema-shaped replies unless a scenario (``POST /_llmock/scenario``)
  scripts the next ones; it injects faults on demand (OpenAI under ``/v1``, Anthropic under
  ``/anthropic/v1/messages``). A second ``llmock`` runs in its random chaos mode, started only when
  a test asks for it.

Each server gets a free port, is waited for (at most ``READY_TIMEOUT`` seconds) and is stopped by
its process id when the session ends: only the processes started here. A server that cannot start
makes the tests that need it skip, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["FAKELLM_RULES", "MockServer", "ServerUnavailable", "start_server"]

HOST = "127.0.0.1"
READY_TIMEOUT = 15.0
"""Seconds a server may take to answer its readiness probe (fakellm needs about 0.6, llmock 1.4)."""
STOP_TIMEOUT = 5.0
FAKELLM_RULES = Path(__file__).parent / "fixtures" / "fakellm.yaml"

CHAOS_FLAGS = (
    "--error-rate",
    "429=0.2",
    "--error-rate",
    "503=0.15",
    "--stream-fault",
    "truncate=0.15",
    "--stream-fault",
    "malformed=0.15",
    "--stream-fault",
    "disconnect=0.15",
)
"""llmock's random chaos: HTTP errors on any request, and broken streams."""


class ServerUnavailable(RuntimeError):
    """A mock server did not start."""


@dataclass
class MockServer:
    """A mock server process and where it listens."""

    name: str
    url: str
    """The root, e.g. ``http://127.0.0.1:40123``."""
    process: subprocess.Popen[bytes]
    log: Path
    workdir: Path
    _stopped: bool = field(default=False, repr=False)

    def post(self, path: str, body: Any = None) -> Any:
        return _request("POST", self.url + path, body)

    def get(self, path: str) -> Any:
        return _request("GET", self.url + path)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop this server's process, by its id (one uvicorn worker: it starts no others)."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _request(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:  # always http://127.0.0.1
        return json.loads(response.read() or b"null")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _server_env() -> dict[str, str]:
    """The environment of a server process: none of the suite's settings for the servers, and no
    way off this machine (any client library in it would go through a proxy that is not there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMOCK_", "FAKELLM_"))}
    dead_end = f"http://{HOST}:9"
    env.update(
        HTTP_PROXY=dead_end,
        HTTPS_PROXY=dead_end,
        ALL_PROXY=dead_end,
        NO_PROXY=f"{HOST},localhost",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
        TERM="dumb",
    )
    return env


def start_server(name: str, args: Sequence[str], ready_path: str, *, attempts: int = 3) -> MockServer:
    """Start ``<venv>/bin/name args... --host 127.0.0.1 --port PORT`` and wait until ``GET
    ready_path`` answers. A port taken in between is retried on another (``attempts``)."""
    executable = Path(sys.executable).with_name(name)
    if not executable.exists():
        raise ServerUnavailable(f"{name} is not installed in {executable.parent} (it is in the dev extra)")
    problem = ""
    for _ in range(attempts):
        port = _free_port()
        workdir = Path(tempfile.mkdtemp(prefix=f"planexec-{name}-"))
        log = workdir / "server.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(executable), *args, "--host", HOST, "--port", str(port)],
                cwd=workdir,
                env=_server_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = MockServer(name=name, url=f"http://{HOST}:{port}", process=process, log=log, workdir=workdir)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            try:
                server.get(ready_path)
                return server
            except (OSError, urllib.error.URLError, ValueError):
                time.sleep(0.05)
        if process.poll() is None:
            problem = f"{name} did not answer GET {ready_path} within {READY_TIMEOUT:g}s"
        else:
            problem = f"{name} exited with status {process.returncode}"
        problem += f"; its output ends with:\n{server.log_tail(800)}"
        server.stop()
    raise ServerUnavailable(problem)


@contextlib.contextmanager
def _running(name: str, args: Sequence[str], ready_path: str) -> Iterator[MockServer | str]:
    """The running server, or why it could not start; stopped at the end."""
    try:
        server = start_server(name, args, ready_path)
    except ServerUnavailable as e:
        yield str(e)
        return
    try:
        yield server
    finally:
        server.stop()


def _needed(started: MockServer | str) -> MockServer:
    if isinstance(started, str):
        pytest.skip(f"mock server unavailable: {started}")
    if started.process.poll() is not None:
        pytest.skip(f"{started.name} stopped during the session:\n{started.log_tail(800)}")
    return started


# -- session-wide servers, and a clean handle on them for each test --------------------------------


@pytest.fixture(scope="session")
def _fakellm_process() -> Iterator[MockServer | str]:
    with _running("fakellm", ["serve", "--config", str(FAKELLM_RULES)], "/_fakellm/stats") as server:
        yield server


@pytest.fixture(scope="session")
def _llmock_process() -> Iterator[MockServer | str]:
    with _running("llmock", ["serve", "--log-level", "warning"], "/health") as server:
        yield server


@pytest.fixture(scope="session")
def _llmock_chaos_process() -> Iterator[MockServer | str]:
    with _running("llmock", ["serve", "--log-level", "warning", *CHAOS_FLAGS], "/health") as server:
        yield server


@pytest.fixture
def fakellm(_fakellm_process: MockServer | str) -> MockServer:
    """The session's fakellm, its conversations forgotten (it counts turns per first user message)."""
    server = _needed(_fakellm_process)
    server.post("/_fakellm/reset")
    return server


@pytest.fixture
def llmock(_llmock_process: MockServer | str) -> MockServer:
    """The session's llmock, with no scenario queued and an empty journal."""
    server = _needed(_llmock_process)
    server.post("/_llmock/reset")
    return server


@pytest.fixture
def llmock_chaos(_llmock_chaos_process: MockServer | str) -> MockServer:
    """An llmock that fails requests and breaks streams at random (``CHAOS_FLAGS``)."""
    server = _needed(_llmock_chaos_process)
    server.post("/_llmock/reset")
    return server
