"""planexec's traces in a real backend: Arize Phoenix on 127.0.0.1 (tests/phoenix_support.py).

An agent exports over OTLP/HTTP; the trace is read back through Phoenix's REST API and must have
arrived whole: every span, under the right parent, with its attributes, status and events. Then
the command line: `planexec run --otlp-endpoint` suspended on an approval and `planexec resume
--otlp-endpoint` in other processes make one trace, and `planexec demo` draws the tree the docs show.
Phoenix does not keep span links (see tests/phoenix_support.py): those are checked in
tests/test_telemetry.py with the SDK's in-memory exporter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from planexec.store import SQLiteStore
from planexec.telemetry import Telemetry, configure_otlp
from tests.phoenix_support import Phoenix, PhoenixSpan
from tests.telemetry_support import PATCH, PLAN, SECRET, shop_agent

ROOT = Path(__file__).resolve().parent.parent


def _project() -> str:
    return f"planexec-{uuid.uuid4().hex[:12]}"


def _ours(span: PhoenixSpan) -> bool:
    """A span planexec made (not one of another instrumentation's, such as a web framework's)."""
    return any(k.startswith(("planexec.", "gen_ai.")) for k in span.attributes)


def _tree(spans: list[PhoenixSpan]) -> list[tuple[int, str]]:
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[PhoenixSpan]] = {}
    for s in spans:
        children.setdefault(s.parent_id if s.parent_id in ids else None, []).append(s)
    out: list[tuple[int, str]] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: s.start_time):
            out.append((depth, s.name))
            walk(s.span_id, depth + 1)

    walk(None, 0)
    return out


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planexec", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def test_a_runs_trace_arrives_whole_in_phoenix(phoenix: Phoenix, tmp_path: Path) -> None:
    project = _project()
    export = configure_otlp(phoenix.url, resource={"openinference.project.name": project}, set_global=False)
    store = SQLiteStore(tmp_path / "runs.db")
    recorded: list[int] = []
    try:
        telemetry = Telemetry(tracer_provider=export.tracer_provider, capture_content=True)
        result = await shop_agent([PLAN, PATCH], store, telemetry, recorded).run(f"price of the lamp ({SECRET})")
    finally:
        export.shutdown()
        await store.close()
    assert result.stop.kind == "waiting"

    spans = phoenix.wait_for_spans(project, 9)
    assert len(spans) == 9
    assert _tree(spans) == [
        (0, "invoke_agent shop"),
        (1, "plan shop"),
        (2, "chat scripted"),
        (1, "execute_tool fetch"),
        (1, "execute_tool fetch"),
        (1, "execute_tool parse"),
        (1, "plan shop"),
        (2, "chat scripted"),
        (1, "execute_tool lookup"),
    ]
    [root] = [s for s in spans if s.parent_id is None]
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert root.span_kind == "AGENT"  # openinference.span.kind, which Phoenix draws by
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "shop"
    assert root.attributes["planexec.run.status"] == "suspended"
    assert [e.name for e in root.events] == [
        "planexec.replan",
        "planexec.approval.requested",
        "planexec.suspended",
    ]
    [parse] = [s for s in spans if s.name == "execute_tool parse"]
    assert parse.status_code == "ERROR"
    assert parse.span_kind == "TOOL"
    assert parse.attributes["error.type"] == "tool_error"
    chats = [s for s in spans if s.name == "chat scripted"]
    assert {s.span_kind for s in chats} == {"LLM"}
    assert all(s.attributes["gen_ai.operation.name"] == "chat" for s in chats)
    assert all("gen_ai.input.messages" in s.attributes for s in chats)  # captured, redacted
    rounds = [s for s in spans if s.name == "plan shop"]
    assert sorted(s.attributes["planexec.planning.trigger"] for s in rounds) == ["failure", "initial"]
    assert SECRET not in json.dumps([s.raw for s in spans])


def test_run_and_resume_from_the_command_line_make_one_trace_in_phoenix(phoenix: Phoenix, tmp_path: Path) -> None:
    project = _project()
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
        "PLANEXEC_STORE": store,
    }
    plan = {
        "steps": [
            {"id": "look", "description": "look", "tool": "look", "args": {"path": "notes.txt"}},
            {"id": "wipe", "description": "wipe", "tool": "wipe", "args": {"path": "n.txt"}, "depends_on": ["look"]},
        ]
    }
    script = tmp_path / "planner.json"
    script.write_text(json.dumps([plan, {"answer": "wiped"}]), encoding="utf-8")
    tools = tmp_path / "cleanup_tools.py"
    tools.write_text(
        "from planexec import tool\n"
        "@tool\n"
        "def look(path: str) -> str:\n"
        '    """Look at a file."""\n'
        "    return f'saw {path}'\n"
        "@tool(sensitive=True, side_effect=True)\n"
        "def wipe(path: str) -> str:\n"
        '    """Wipe a file."""\n'
        "    return f'wiped {path}'\n"
        "tools = [look, wipe]\n",
        encoding="utf-8",
    )
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    common = ["--otlp-endpoint", phoenix.url, "--no-live", "--json"]
    flags = ["--planner", f"scripted:{script}", "--tools", "cleanup_tools:tools", *common]
    started = _cli("run", "clean up", *flags, env=env, cwd=tmp_path)
    assert started.returncode == 3, started.stderr  # waits for a human
    run_id = json.loads(started.stdout)["run_id"]
    approved = _cli("approve", run_id, "--no-resume", env=env, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    resumed = _cli("resume", run_id, *common, "--log-level", "info", env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"info run {run_id}: run finished: goal_met" in resumed.stderr

    spans = phoenix.wait_for_spans(project, 7)
    assert _tree(spans) == [
        (0, "invoke_agent planexec"),
        (1, "plan planexec"),
        (2, "chat planner.json"),
        (1, "execute_tool look"),
        (1, "invoke_agent planexec"),
        (2, "execute_tool wipe"),
        (2, "plan planexec"),
        (3, "chat planner.json"),
    ]
    first, second = sorted((s for s in spans if s.name == "invoke_agent planexec"), key=lambda s: s.start_time)
    assert second.parent_id == first.span_id
    assert {s.trace_id for s in spans} == {first.trace_id}
    assert first.attributes["planexec.run.status"] == "suspended"
    assert second.attributes["planexec.stop_reason"] == "goal_met"
    assert second.attributes["planexec.run.resumed"] is True


def test_the_demo_is_traced_from_the_command_line(phoenix: Phoenix, tmp_path: Path) -> None:
    project = _project()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
    }
    out = _cli(
        "demo", "--store", "memory://", "--no-live", "--otlp-endpoint", phoenix.url,
        "--workdir", str(tmp_path), env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    spans = phoenix.wait_for_spans(project, 20)
    names: dict[str, int] = {}
    for s in spans:
        names[s.name] = names.get(s.name, 0) + 1
    expected: dict[str, Any] = {
        "invoke_agent planexec": 1,
        "invoke_agent analyst": 1,
        "execute_tool collect_logs": 1,
        "execute_tool fetch_archived_logs": 1,
        "execute_tool write_fix": 1,
    }
    for name, count in expected.items():
        assert names.get(name) == count, (name, names)
    assert names["plan planexec"] >= 4
    [root] = [s for s in spans if s.parent_id is None]
    assert root.attributes["planexec.stop_reason"] == "goal_met"


def test_a_run_the_server_goes_on_with_after_a_restart_stays_one_trace_in_phoenix(
    phoenix: Phoenix, tmp_path: Path, monkeypatch: Any
) -> None:
    import signal

    from tests.serve_support import CHARGE_PLAN, Server, run_status, wait_for, write_agent

    project = _project()
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={project}")
    agents = [write_agent(tmp_path, "payer", [CHARGE_PLAN, {"answer": "paid and refunded"}])]
    traced = ["--otlp-endpoint", phoenix.url]
    first = Server(tmp_path, agents, extra=traced).start()
    try:
        with first.client() as api:
            run_id = api.post("/v1/runs", json={"agent": "payer", "goal": "pay, wait, refund"}).json()["run_id"]
            wait_for(lambda: first.reached(run_id), what="the run to reach its gate")
    finally:
        first.kill(signal.SIGTERM)  # the server stops; the run is left unfinished, its spans sent
    (tmp_path / "gates" / f"{run_id}.reached").unlink()
    second = Server(tmp_path, agents, extra=traced).start()
    try:
        with second.client() as api:
            wait_for(lambda: second.reached(run_id), what="the restarted server to go on with the run")
            second.open_gate(run_id)
            done = wait_for(run_status(api, run_id, "finished"), what="the run to finish")
            assert done["stop"]["kind"] == "goal_met"
    finally:
        second.kill(signal.SIGTERM)

    ours = 10  # two runs' spans; each a planning round with its chat; pay, wait; wait again, refund
    spans = phoenix.wait_for_spans(project, ours, counting=_ours)
    runs = sorted((s for s in spans if s.name == "invoke_agent planexec"), key=lambda s: s.start_time)
    assert len(runs) == 2
    first_run, second_run = runs
    by_id = {s.span_id: s for s in spans}
    if first_run.parent_id is not None:  # FastAPI traces its requests: the run is part of the POST's trace
        assert by_id[first_run.parent_id].name.startswith("fastapi")
    assert first_run.attributes["planexec.run.status"] == "left"
    assert second_run.parent_id == first_run.span_id
    assert second_run.attributes["planexec.stop_reason"] == "goal_met"
    planexecs = [s for s in spans if _ours(s)]
    assert len(planexecs) == ours
    assert {s.trace_id for s in planexecs} == {first_run.trace_id}
    steps = {s.attributes.get("planexec.step.id"): s for s in spans if s.name.startswith("execute_tool ")}
    assert steps["pay"].parent_id == first_run.span_id
    assert steps["refund"].parent_id == second_run.span_id
