"""Workers and Ray together: ``planexec worker`` processes (real subprocesses) run the runs' loops
from a real PostgreSQL store, and every tool step runs on the session's real local Ray cluster,
on the node that has the resource the step asks for. The workers join the cluster by address
(``RAY_ADDRESS``); the agent's executors come from the submitted spec (``--executors``).

One worker is killed with SIGKILL while its steps run on the cluster: its runs are taken over by
the other worker and finished, each step's effect applied once (the re-sent call carries the same
idempotency key), every step on the right node. Every wait is for a state the database or the
effects folder shows, with a deadline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

import planexec
from planexec.log import RunFinished, RunResumed, StepSucceeded
from planexec.runs import AgentSpec, submit
from planexec.store import PostgresStore, RunQueue
from tests.ray_cluster import RayNodes, require_ray

from .test_store_support import postgres_schema
from .test_workers import logs, wait_for

require_ray()

RUNS = 12
LEASE = 1.5

TOOLS = '''
import asyncio
import hashlib
import os

from planexec import ToolContext, tool
from planexec.executor import RayExecutor, RayOptions
from planexec.testing import FunctionModel

EFFECTS = {effects!r}


@tool(side_effect=True, idempotent=True, trusted=True)  # its own words, not outside text
async def crunch(item: str, seconds: float, ctx: ToolContext) -> dict:
    """Heavy work, on a node with the "sql" resource; its effect applied once per idempotency key."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    with open(os.path.join(EFFECTS, "attempts.log"), "a") as log:
        log.write(f"{{ctx.run_id}} {{ctx.step_id}} {{ctx.idempotency_key}} {{node}}\\n")
    await asyncio.sleep(seconds)
    name = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()
    try:
        fd = os.open(os.path.join(EFFECTS, "applied", name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return {{"item": item, "node": node, "applied": "before"}}
    os.write(fd, f"{{ctx.run_id}} {{ctx.step_id}}\\n".encode())
    os.close(fd)
    return {{"item": item, "node": node, "applied": "now"}}


TOOLS = [crunch]

# every tool step of the agent runs on the cluster RAY_ADDRESS names, on a node with "sql"
EXECUTORS = [
    RayExecutor(
        name="tools",
        options=RayOptions(num_cpus=0, resources={{"sql": 1}}),
        init_options={{"_node_ip_address": "127.0.0.1"}},
    )
]


def reply(request):
    if request.purpose != "planner.propose":
        return {{"answer": "crunched"}}
    first = {{"id": "a", "description": "first", "tool": "crunch", "args": {{"item": "first", "seconds": 0.4}}}}
    second = {{"id": "b", "description": "second", "tool": "crunch", "args": {{"item": "second", "seconds": 0.4}},
              "depends_on": ["a"]}}
    return {{"steps": [first, second]}}


PLANNER = FunctionModel(reply, name="crunch-planner")
'''


class Setup:
    def __init__(self, url: str, home: Path, nodes: RayNodes) -> None:
        self.url = url
        self.home = home
        self.nodes = nodes
        self.effects = home / "effects"
        (self.effects / "applied").mkdir(parents=True)
        (home / "workers_ray_tools.py").write_text(TOOLS.format(effects=str(self.effects)))
        self.workers: list[subprocess.Popen[str]] = []

    def flags(self) -> list[str]:
        return [
            "--planner",
            "object:workers_ray_tools:PLANNER",
            "--tools",
            "workers_ray_tools:TOOLS",
            "--executors",
            "workers_ray_tools:EXECUTORS",
        ]

    def spec(self) -> AgentSpec:
        return AgentSpec(
            planner="object:workers_ray_tools:PLANNER",
            tools=("workers_ray_tools:TOOLS",),
            executors=("workers_ray_tools:EXECUTORS",),
            cwd=str(self.home),
        )

    def env(self) -> dict[str, str]:
        src = str(Path(planexec.__file__).resolve().parents[1])
        return {**os.environ, **self.nodes.env(), "PYTHONPATH": os.pathsep.join([src, str(self.home)])}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "planexec", "--store", self.url, *args]
        return subprocess.run(command, cwd=self.home, env=self.env(), capture_output=True, text=True, timeout=120)

    def start_worker(self, name: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "planexec", "--store", self.url, "worker", "--name", name]
        command += ["--lease-seconds", str(LEASE), "--poll-seconds", "0.05", "--concurrency", "4"]
        process = subprocess.Popen(
            command, cwd=self.home, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.workers.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)

    def applied(self) -> list[tuple[str, str]]:
        return [tuple(f.read_text().split()) for f in (self.effects / "applied").iterdir()]  # type: ignore[misc]

    def attempts(self) -> list[list[str]]:
        log = self.effects / "attempts.log"
        return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def setup(tmp_path: Path, ray_nodes: RayNodes) -> Iterator[Setup]:
    with postgres_schema() as url:
        made = Setup(url, tmp_path, ray_nodes)
        try:
            yield made
        finally:
            made.stop_all()


async def test_workers_run_the_loops_and_ray_the_steps_through_a_worker_killed_mid_step(setup: Setup) -> None:
    store = PostgresStore(setup.url, pool_size=4)
    queue = RunQueue(store)
    try:
        by_cli = await asyncio.to_thread(setup.cli, "submit", "crunch item 0", *setup.flags(), "--run-id", "r0")
        assert by_cli.returncode == 0, by_cli.stderr
        run_ids = ["r0"] + [await submit(store, setup.spec(), f"crunch item {i}", check=False) for i in range(1, RUNS)]
        doomed, survivor = setup.start_worker("w0"), setup.start_worker("w1")

        async def doomed_mid_step() -> bool:
            held = {e.run_id for e in await queue.entries(state="leased") if e.owner == "w0"}
            done = {run_id for run_id, _step in setup.applied()}
            called = {a[0] for a in setup.attempts()}
            return bool(held & called - done)

        await wait_for(doomed_mid_step, "worker w0 to have a step running on the cluster")
        taken = {e.run_id for e in await queue.entries(state="leased") if e.owner == "w0"}
        doomed.send_signal(signal.SIGKILL)

        async def all_done() -> bool:
            return len(await queue.entries(state="done", limit=RUNS + 5)) == RUNS

        await wait_for(all_done, "every run to finish")
        survivor.send_signal(signal.SIGTERM)
        _out, err = survivor.communicate(timeout=60)
        assert survivor.returncode == 0, err

        run_logs = await logs(store, run_ids)
        resumed = set()
        for run_id, log in run_logs.items():
            assert isinstance(log[-1], RunFinished), run_id
            assert log[-1].stop.kind == "goal_met", (run_id, log[-1].stop)
            succeeded = [e for e in log if isinstance(e, StepSucceeded)]
            assert Counter(e.step_id for e in succeeded) == {"a": 1, "b": 1}, run_id
            assert {setup.nodes.label_of(e.output["node"]) for e in succeeded} == {"sql"}
            if any(isinstance(e, RunResumed) for e in log):
                resumed.add(run_id)
        assert resumed & taken, "no run of the killed worker was taken over"
        applied = Counter(setup.applied())
        assert set(applied) == {(run_id, step) for run_id in run_ids for step in ("a", "b")}, "lost effects"
        assert max(applied.values()) == 1, "duplicated effects"
        keys: dict[tuple[str, str], set[str]] = defaultdict(set)
        for run_id, step_id, key, node in setup.attempts():
            keys[(run_id, step_id)].add(key)
            assert setup.nodes.label_of(node) == "sql"
        assert all(len(k) == 1 for k in keys.values()), "a step was sent again with another idempotency key"
    finally:
        await store.close()


def test_a_bad_executors_reference_is_refused_with_the_others(tmp_path: Path) -> None:
    (tmp_path / "not_executors.py").write_text("NUMBERS = [1, 2]\n")
    command = [sys.executable, "-m", "planexec", "--store", str(tmp_path / "r.db"), "run", "goal"]
    command += ["--planner", "nope:x", "--executors", "not_executors:NUMBERS", "--executors", "gone_module:X"]
    src = str(Path(planexec.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(tmp_path)])}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "--planner" in done.stderr
    assert "item 0 is a int, not an executor" in done.stderr
    assert "cannot import module 'gone_module'" in done.stderr
    assert "Traceback" not in done.stderr
