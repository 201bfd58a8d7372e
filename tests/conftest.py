"""Test-suite guards: no real model request and no connection off this machine."""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

import pytest

from planexec.models import allow_model_requests

# fakellm and llmock, started once per session when a test asks; headless Chromium for the browser tests;
# Arize Phoenix, an OpenTelemetry trace backend, and a local Ray cluster, each started once per
# session when a test asks
pytest_plugins = ("tests.mock_servers", "tests.browser_support", "tests.phoenix_support", "tests.ray_cluster")

allow_model_requests(False)
if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist sets COLUMNS=80 in its workers; a plain run has none
    os.environ.pop("COLUMNS", None)
os.environ["PLANEXEC_STORE"] = "memory://"  # agents that open their default store keep it in memory

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise ConnectionRefusedError(f"tests may only connect to this machine, not {host!r}")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)


# -- running in parallel (make test runs pytest with -n 2 --dist loadgroup) --------------------------

_SHARED_GROUPS = {
    "ray": ("test_ray_executors.py", "test_workers_ray.py", "test_ray_local.py"),
    "phoenix": ("test_phoenix_backend.py", "test_telemetry_phoenix.py"),
    "browser": ("test_web_a11y.py", "test_web_dag.py", "test_web_page.py", "test_web_run_view.py"),
}
"""Files whose tests share one session-wide service (a Ray cluster, Phoenix, Chromium and the npm
packages its tests install): each group runs in one worker, so the service starts once."""
_GROUP_OF = {name: group for group, names in _SHARED_GROUPS.items() for name in names}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep each file's tests in one worker (module fixtures start once, a file's own files and
    servers are never shared by two processes), and each shared service's files together."""
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group(_GROUP_OF.get(name, str(item.path))))
