"""One real local Ray cluster for the whole test session: a head node and two worker nodes with
different custom resources (``ray.cluster_utils.Cluster`` runs each node's processes on this
machine), and this process connected to it as a driver.

The environment Ray needs here is set before it starts (loopback only, no usage reports, a short
temporary directory, a home of its own for its auth token); :meth:`RayNodes.env` gives it to
processes that join the cluster by address. Every node gets a ready worker before any test, so
that tests do not pay for starting them (slow on a busy machine). Shut down after the session.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

LOOPBACK = "127.0.0.1"
DIR_VAR = "PLANEXEC_RAY_TEST_DIR"
"""The cluster's scratch directory, as every task on every node sees it."""
WARM_UP_SECONDS = 120.0

NODE_RESOURCES: dict[str, dict[str, float]] = {
    "sql": {"sql": 2, "payments": 1},
    "draft": {"draft": 2, "payments": 1},
}
"""The worker nodes' custom resources by label (the head has ``{"head": 1}``)."""


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


class RayNodes:
    """The session's cluster: its nodes by label, its scratch directory, its address."""

    def __init__(self, cluster: Any, root: Path, env: dict[str, str]) -> None:
        self.cluster = cluster
        self.root = root
        self._env = env
        self.by_label: dict[str, Any] = {"head": cluster.head_node}

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def env(self) -> dict[str, str]:
        """What a process joining this cluster by address needs in its environment."""
        return {**self._env, "RAY_ADDRESS": self.address}

    def add(self, label: str, resources: dict[str, float]) -> None:
        self.by_label[label] = self.cluster.add_node(num_cpus=1, resources=resources, node_ip_address=LOOPBACK)
        self.cluster.wait_for_nodes()

    def node_id(self, label: str) -> str:
        return str(self.by_label[label].node_id)

    def label_of(self, node_id: str) -> str:
        return next(label for label, node in self.by_label.items() if node.node_id == node_id)

    def kill(self, label: str) -> None:
        self.cluster.remove_node(self.by_label.pop(label))

    def restore(self, label: str) -> None:
        """Start a node killed by :meth:`kill` again, with the resources it had."""
        self.add(label, dict(NODE_RESOURCES[label]))


@contextmanager
def ray_cluster() -> Iterator[RayNodes]:
    root = Path(tempfile.mkdtemp(prefix="pxr-", dir="/tmp"))
    home = root / "home"
    home.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    env = {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_TMPDIR": str(root / "t"),
        "RAY_USAGE_STATS_ENABLED": "0",
        # the workers run tasks on the standard asyncio loop, where ray.cancel reaches a running call
        # only through the signal handler planexec sets (uvloop, when Ray can load it, hides its absence)
        "RAY_USE_UVLOOP": "0",
        "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
        "HOME": str(home),
        DIR_VAR: str(root),
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # Ray reads some of it on import, and its nodes inherit it
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"head": 1},
            "include_dashboard": False,
            "node_ip_address": LOOPBACK,
        },
    )
    nodes = RayNodes(cluster, root, env)
    try:
        for label, resources in NODE_RESOURCES.items():
            nodes.add(label, dict(resources))
        ray.init(address=cluster.address, _node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False)
        warm = ray.remote(_node_id)
        ready = [warm.options(num_cpus=0, resources={r: 1}).remote() for r in ("head", "sql", "draft")]
        ray.get(ready, timeout=WARM_UP_SECONDS)
        os.environ["HOME"] = saved["HOME"] or str(home)  # the driver has read its token
        yield nodes
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]
        shutil.rmtree(root, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def require_ray() -> None:
    """Skip the calling test module when Ray is not installed (fail with ``PLANEXEC_REQUIRE_RAY=1``)."""
    if importlib.util.find_spec("ray") is not None:
        return
    if os.environ.get("PLANEXEC_REQUIRE_RAY") == "1":  # pragma: no cover - depends on the environment
        pytest.fail("ray is not installed, but PLANEXEC_REQUIRE_RAY=1 (pip install 'planexec[ray]')")
    pytest.skip("ray is not installed (pip install 'planexec[ray]')", allow_module_level=True)


@pytest.fixture(scope="session")
def ray_nodes() -> Iterator[RayNodes]:
    """The session's Ray cluster, started by the first test that asks."""
    require_ray()
    with ray_cluster() as nodes:
        yield nodes
