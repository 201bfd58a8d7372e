"""MCP servers' tools in plans: an in-process server of the SDK for every mapping, and a real
server from PyPI over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from planexec import Agent, Approvals, Limits, Planner
from planexec.errors import ToolDefinitionError, ToolError, TransientToolError, UsageError
from planexec.log import PlannerOutputRejected, RunState, StepStarted, StepSucceeded, ToolProgress, ToolsChanged
from planexec.mcp import IDEMPOTENCY_META_KEY, MCPHttp, MCPStdio, MCPTool, MCPToolset
from planexec.runtime import ApprovalDecision, ApprovalRequest
from planexec.store import MemoryStore
from planexec.testing import ScriptedModel
from planexec.tools import ToolContext
from tests.support import events_of, tool_step

CONTEXT = ToolContext(run_id="r1", step_id="s1", attempt=1, idempotency_key="r1:s1:v1")


def demo_server() -> tuple[MCPServer, list[Any]]:
    server = MCPServer("demo")
    seen: list[Any] = []

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True))
    def save(note: str, ctx: Context) -> str:
        """Save a note."""
        seen.append(ctx.request_context.meta)
        return f"saved {note}"

    @server.tool()
    def wipe() -> str:
        """Wipe everything (no annotations: MCP's defaults)."""
        return "wiped"

    @server.tool()
    def refuse() -> str:
        """Always fails."""
        raise ValueError("no such record")

    @server.tool(name="odd name!")
    def odd() -> str:
        """A name planexec cannot use as it is."""
        return "odd"

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(3600)
        return "never"

    return server, seen


async def test_tools_are_listed_with_their_schemas_and_annotations() -> None:
    server, _ = demo_server()
    async with MCPToolset(server=server, prefix="demo.", tools={"wipe": MCPTool(requires_approval=True)}) as tools:
        by_name = {t.name: t for t in tools}
    assert set(by_name) == {"demo.add", "demo.save", "demo.wipe", "demo.refuse", "demo.odd_name_", "demo.hang"}
    add, save, wipe = by_name["demo.add"], by_name["demo.save"], by_name["demo.wipe"]
    assert add.description == "Add two numbers."
    assert add.parameters["required"] == ["a", "b"]
    assert add.output_schema is not None
    assert (add.side_effect, add.sensitive, add.idempotent) == (False, False, True)
    assert (save.side_effect, save.sensitive, save.idempotent) == (True, False, True)
    assert (wipe.side_effect, wipe.sensitive, wipe.idempotent, wipe.requires_approval) == (True, True, False, True)


async def test_calls_map_results_errors_and_pass_the_idempotency_key_to_write_tools() -> None:
    server, seen = demo_server()
    async with MCPToolset(server=server) as tools:
        by_name = {t.name: t for t in tools}
        assert await by_name["add"].invoke({"a": 2, "b": 3}, CONTEXT) == {"result": 5}
        assert await by_name["save"].invoke({"note": "hi"}, CONTEXT) == {"result": "saved hi"}
        with pytest.raises(ToolError) as refused:
            await by_name["refuse"].invoke({}, CONTEXT)
        assert not isinstance(refused.value, TransientToolError)
        # Arguments are checked against the server's schema before anything is sent.
        assert by_name["add"].check_args({"a": "two"})[0] is None
    [meta] = seen  # the write tool got the key; the read tool's request carried none
    assert meta[IDEMPOTENCY_META_KEY] == "r1:s1:v1"


async def test_a_hung_call_ends_at_the_tools_timeout() -> None:
    server, _ = demo_server()
    async with MCPToolset(server=server, tools={"hang": MCPTool(timeout=0.3)}) as tools:
        hang = next(t for t in tools if t.name == "hang")
        assert hang.timeout == 0.3
        model = ScriptedModel([{"steps": [tool_step("h", "hang", {})]}, {"reason": "give up", "steps": []}])
        result = await Agent(model, tools=list(tools), budget=None).run("hang")
    assert result.stop.kind != "goal_met"
    error = result.steps["h"].error
    assert error is not None
    assert "timed out" in error.message or "timeout" in error.message.lower()


async def test_a_plan_uses_mcp_tools_like_any_other() -> None:
    server, _ = demo_server()
    async with MCPToolset(server=server) as tools:
        model = ScriptedModel(
            [
                {
                    "steps": [
                        tool_step("x", "add", {"a": 1, "b": 2}),
                        tool_step("y", "add", {"a": "${x.result}", "b": 4}, "x"),
                    ]
                },
                {"answer": "7"},
            ]
        )
        result = await Agent(model, tools=list(tools)).run("1+2+4")
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs == {"x": {"result": 3}, "y": {"result": 7}}
    # The planner saw the tool as a compact signature.
    assert "- add(a: integer, b: integer, ...): Add two numbers." in model.calls[0].messages[1].content


def test_bad_settings_are_listed_at_once() -> None:
    with pytest.raises(UsageError) as caught:
        MCPToolset(server=object(), prefix="no spaces", timeout=0, tools={"x": "read"})  # type: ignore[dict-item]
    assert {p.where for p in caught.value.problems} == {"prefix", "timeout", "tools.x"}
    with pytest.raises(UsageError) as bad:
        MCPStdio(command="", args=["not", "a", "tuple"])  # type: ignore[arg-type]
    assert {p.where for p in bad.value.problems} == {"command", "args"}


async def test_a_server_that_cannot_start_is_a_typed_retryable_error() -> None:
    toolset = MCPToolset(server=MCPStdio(command=sys.executable, args=("-c", "import sys; sys.exit(3)")))
    with pytest.raises(TransientToolError, match="cannot connect to the MCP server"):
        await toolset.open()
    await toolset.close()


TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"


@pytest.mark.skipif(not TIME_SERVER.exists(), reason="mcp-server-time is not installed")
async def test_a_real_server_over_stdio() -> None:
    server = MCPStdio(command=str(TIME_SERVER), args=("--local-timezone", "UTC"))
    async with MCPToolset(server=server, prefix="time.") as tools:
        names = sorted(t.name for t in tools)
        assert names == ["time.convert_time", "time.get_current_time"]
        model = ScriptedModel(
            [{"steps": [tool_step("now", "time.get_current_time", {"timezone": "Europe/Paris"})]}, {"answer": "now"}]
        )
        result = await Agent(model, tools=list(tools)).run("what time is it in Paris?")
    assert result.stop.kind == "goal_met", result.stop
    output = result.outputs["now"]
    assert isinstance(output, dict)
    assert output["timezone"] == "Europe/Paris"


DYING = Path(__file__).parent / "fixtures" / "mcp_dying_server.py"


async def test_a_server_that_dies_mid_call_fails_the_call_retryably_and_is_started_again(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    async with MCPToolset(server=MCPStdio(command=sys.executable, args=(str(DYING), str(starts)))) as tools:
        by_name = {t.name: t for t in tools}
        assert await by_name["starts"].invoke({}, CONTEXT) == {"result": 1}
        with pytest.raises(TransientToolError, match="went away"):
            await asyncio.wait_for(by_name["die"].invoke({}, CONTEXT), 20)
        assert await by_name["starts"].invoke({}, CONTEXT) == {"result": 2}


async def test_in_a_run_a_dying_server_is_a_failed_step_and_the_retry_reconnects(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    async with MCPToolset(server=MCPStdio(command=sys.executable, args=(str(DYING), str(starts)))) as tools:
        model = ScriptedModel(
            [
                {"steps": [tool_step("d", "die", {})]},
                {"reason": "the server died: ask it how often it started", "steps": [tool_step("n", "starts", {})]},
                {"answer": "started again"},
            ]
        )
        result = await Agent(model, tools=list(tools)).run("die, then count")
    assert result.stop.kind == "goal_met", result.stop
    assert result.steps["d"].status == "failed"
    # The die step was retried (a connection that dies is transient), each try starting the server.
    assert result.outputs["n"] == {"result": 1 + result.steps["d"].attempts}


async def test_cancelling_a_call_cancels_the_mcp_request() -> None:
    server = MCPServer("slow")
    started, cancelled = asyncio.Event(), asyncio.Event()

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def wait() -> str:
        """Wait until cancelled."""
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async with MCPToolset(server=server) as tools:
        [wait_tool] = list(tools)
        call: asyncio.Future[Any] = asyncio.ensure_future(wait_tool.invoke({}, CONTEXT))
        await asyncio.wait_for(started.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(cancelled.wait(), 5)  # the server stopped working on it
        assert [t.name for t in tools] == ["wait"]  # and the connection still serves


HTTP_SERVER = Path(__file__).parent / "fixtures" / "mcp_http_server.py"


@pytest.fixture(scope="module")
def http_server_url() -> Iterator[str]:
    """The fixture server over streamable HTTP, started once for this module and stopped by its pid."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(HTTP_SERVER), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("the MCP HTTP fixture server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


async def test_a_server_over_streamable_http_with_headers(http_server_url: str) -> None:
    server = MCPHttp(url=http_server_url, headers={"Authorization": "Bearer secret-token"})
    async with MCPToolset(server=server, prefix="web.") as tools:
        by_name = {t.name: t for t in tools}
        assert await by_name["web.add"].invoke({"a": 20, "b": 22}, CONTEXT) == {"result": 42}
        assert await by_name["web.authorization"].invoke({}, CONTEXT) == {"result": "Bearer secret-token"}
    assert "secret-token" not in repr(server)


async def test_a_url_where_no_server_listens_is_a_typed_retryable_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    toolset = MCPToolset(server=MCPHttp(url=f"http://127.0.0.1:{port}/mcp"), connect_timeout=5)
    with pytest.raises(TransientToolError, match="MCP server"):
        await toolset.open()
    await toolset.close()


GIT_SERVER = Path(sys.executable).parent / "mcp-server-git"


def git(repo: Path, *args: str) -> str:
    where = ["-C", str(repo)] if args[0] != "init" else []
    identity = ["-c", "user.name=T", "-c", "user.email=t@example.com"]
    return subprocess.run(["git", *where, *identity, *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(not GIT_SERVER.exists() or shutil.which("git") is None, reason="mcp-server-git or git missing")
async def test_a_git_agent_reads_in_parallel_and_commits_only_with_approval(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(repo, "init", "-q", str(repo))
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "a.txt").write_text("one\ntwo\n")

    asked: list[str | None] = []

    async def approve(request: ApprovalRequest) -> bool:
        asked.append(request.step.id if request.step is not None else None)
        return True

    gated = {"git_add": MCPTool(requires_approval=True), "git_commit": MCPTool(requires_approval=True)}
    server = MCPStdio(command=str(GIT_SERVER), args=("--repository", str(repo)))
    async with MCPToolset(server=server, tools=gated) as tools:
        by_name = {t.name: t for t in tools}
        assert len(by_name) == 12
        assert not by_name["git_status"].side_effect
        assert by_name["git_commit"].side_effect
        where = {"repo_path": str(repo)}
        plan = [
            tool_step("status", "git_status", where),
            tool_step("log", "git_log", where),
            tool_step("diff", "git_diff_unstaged", where),
            tool_step("add", "git_add", {**where, "files": ["a.txt"]}, "status", "diff"),
            tool_step("commit", "git_commit", {**where, "message": "second line"}, "add", "log"),
        ]
        model = ScriptedModel([{"steps": plan}, {"answer": "committed"}])
        agent = Agent(model, tools=list(tools), approvals=Approvals(approver=approve))
        result = await agent.run("commit the change to a.txt")

    assert result.stop.kind == "goal_met", result.stop
    assert sorted(a for a in asked if a) == ["add", "commit"]  # the writes, and only they
    reads = [e for e in events_of(result, StepStarted) if e.step_id in ("status", "log", "diff")]
    first_read_done = min(e.at for e in events_of(result, StepSucceeded) if e.step_id in ("status", "log", "diff"))
    assert all(e.at <= first_read_done for e in reads)  # the reads were all under way at once
    assert "+two" in str(result.outputs["diff"])
    assert git(repo, "log", "--format=%s").splitlines() == ["second line", "first"]


async def test_progress_notifications_become_events_few_and_in_order() -> None:
    server = MCPServer("progress")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def crunch(ctx: Context) -> str:
        """Crunch, saying how far it got."""
        await ctx.report_progress(0, 2, "starting")
        await asyncio.sleep(0.3)
        await ctx.report_progress(1, 2, "half way")
        for i in range(500):  # a flood: logged at most once a quarter second
            await ctx.report_progress(1 + i / 1000, 2, "more")
        return "crunched"

    async with MCPToolset(server=server) as tools:
        model = ScriptedModel([{"steps": [tool_step("c", "crunch", {})]}, {"answer": "done"}])
        store = MemoryStore()
        agent = Agent(model, tools=list(tools), store=store)
        result = await agent.run("crunch", run_id="progress")
        assert result.stop.kind == "goal_met", result.stop
        progress = events_of(result, ToolProgress)
        assert [(p.progress, p.total, p.message) for p in progress[:2]] == [(0, 2, "starting"), (1, 2, "half way")]
        assert len(progress) <= 3
        assert result.steps["c"].progress == progress[-1]
        # The progress is part of the run's record: a replay reproduces it.
        report = await agent.replay("progress")
    assert report.matched, report.divergence


def growing_server() -> MCPServer:
    """A server whose tool ``grow`` adds the tool ``extra`` and ``shrink`` takes it away, each
    telling the client (``tools/list_changed``)."""
    server = MCPServer("growing")

    async def grow(ctx: Context) -> str:
        """Add the tool 'extra' and tell the client."""
        server.add_tool(extra)
        await ctx.notify_tools_changed()
        return "grown"

    async def shrink(ctx: Context) -> str:
        """Remove the tool 'extra' and tell the client."""
        server.remove_tool("extra")
        await ctx.notify_tools_changed()
        return "shrunk"

    def extra() -> str:
        """A tool added while the server runs."""
        return "extra"

    server.add_tool(grow, annotations=ToolAnnotations(readOnlyHint=True))
    server.add_tool(shrink, annotations=ToolAnnotations(readOnlyHint=True))
    return server


async def test_a_run_takes_up_tools_a_server_adds_before_its_next_plan_and_a_replay_does_too(tmp_path: Path) -> None:
    from planexec.store import SQLiteStore
    from tests.cli_support import invoke

    toolset = MCPToolset(server=growing_server())
    model = ScriptedModel(
        [
            {"steps": [tool_step("g", "grow", {})]},
            {"steps": [tool_step("e", "extra", {})]},  # a tool that did not exist when the run began
            {"steps": []},
            {"answer": "used the new tool"},
        ]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    agent = Agent(Planner(model=model, replan="after_each_step"), tools=[toolset], store=store)
    with pytest.raises(UsageError, match="is not open"):
        agent.start("grow")  # a run cannot wait for a server to start: run() or open() first
    result = await agent.run("grow, then use what is new", run_id="grows")  # opens the server
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs["e"] == {"result": "extra"}
    [change] = events_of(result, ToolsChanged)
    assert [spec["name"] for spec in change.tools] == ["extra"]
    assert change.removed == ()
    assert RunState.fold(result.events).tools == ("grow", "shrink", "extra")
    assert not toolset.changed
    # The change is in the run's record: a replay checks the second plan against the same tools.
    report = await agent.replay("grows")
    assert report.matched, report.divergence
    await agent.aclose()
    assert not toolset.is_open
    await store.close()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    shown = await asyncio.to_thread(invoke, ["show", "grows", "--json", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert [(c["tools"], c["removed"]) for c in json.loads(shown.stdout)["tool_changes"]] == [(["extra"], [])]
    table = await asyncio.to_thread(invoke, ["show", "grows", "--store", url])
    assert "tools changed" in table.stdout
    assert "+extra" in table.stdout


async def test_a_plan_for_a_tool_the_server_took_away_is_refused_and_the_planner_told() -> None:
    toolset = MCPToolset(server=growing_server())
    model = ScriptedModel(
        [
            {"steps": [tool_step("g", "grow", {})]},
            {"steps": [tool_step("s", "shrink", {})]},
            {"steps": [tool_step("e", "extra", {})]},  # gone by now: refused, the planner told why
            {"steps": []},
            {"answer": "extra is gone"},
        ]
    )
    async with Agent(Planner(model=model, replan="after_each_step"), tools=[toolset]) as agent:
        result = await agent.run("grow, shrink, try the tool that went")
    assert result.stop.kind == "goal_met", result.stop
    assert "e" not in result.steps
    changes = events_of(result, ToolsChanged)
    assert [([s["name"] for s in c.tools], c.removed) for c in changes] == [(["extra"], ()), ([], ("extra",))]
    [rejected] = events_of(result, PlannerOutputRejected)
    assert "extra" in str(rejected.problems)
    assert "extra" not in [t.name for t in agent.tools]


async def test_a_server_that_keeps_saying_its_tools_changed_cannot_hold_a_run_up() -> None:
    server = MCPServer("churning")

    async def churn(ctx: Context) -> str:
        """Add 100 tools, saying so after each."""
        for i in range(100):
            server.add_tool(lambda: "made", name=f"made_{i}", description="A tool made by churn.")
            await ctx.notify_tools_changed()
        return "churned"

    server.add_tool(churn, annotations=ToolAnnotations(readOnlyHint=True))
    model = ScriptedModel(
        [
            {"steps": [tool_step("c", "churn", {})]},
            {"steps": [tool_step("m", "made_99", {})]},
            {"steps": []},
            {"answer": "done"},
        ]
    )
    async with Agent(Planner(model=model, replan="after_each_step"), tools=[MCPToolset(server=server)]) as agent:
        result = await asyncio.wait_for(agent.run("churn"), 60)
    assert result.stop.kind == "goal_met", result.stop
    assert result.outputs["m"] == "made"
    changes = events_of(result, ToolsChanged)
    assert len(changes) == 1  # one change a planning round at most, however often the server spoke
    assert len(changes[0].tools) == 100


async def test_an_agent_lists_tools_again_between_runs_when_a_server_said_they_changed() -> None:
    server = growing_server()
    toolset = MCPToolset(server=server)
    model = ScriptedModel([{"steps": [tool_step("e", "extra", {})]}, {"answer": "used the new tool"}])
    async with toolset:
        toolset.changed = True  # as if the server had said so while no run was going on
        server.add_tool(lambda: "extra", name="extra", description="A tool added while no run went on.")
        agent = Agent(model, tools=[toolset])
        assert [t.name for t in agent.tools] == ["grow", "shrink"]
        result = await agent.run("use what is new")  # lists the tools again first
        assert result.stop.kind == "goal_met", result.stop
        assert sorted(t.name for t in agent.tools) == ["extra", "grow", "shrink"]
        assert events_of(result, ToolsChanged) == []  # the run began with them


async def test_a_toolset_the_caller_opened_stays_open_after_the_agent_closes() -> None:
    server, _ = demo_server()
    async with MCPToolset(server=server) as toolset, Agent(ScriptedModel([]), tools=[toolset]) as agent:
        assert "add" in [t.name for t in agent.tools]
    assert not toolset.is_open  # closed by its own `async with`, after the agent's


# -- the command line and recorded specs -----------------------------------------------------------


@pytest.mark.skipif(not TIME_SERVER.exists(), reason="mcp-server-time is not installed")
def test_planexec_run_with_an_mcp_server_and_a_resume_that_starts_it_again(tmp_path: Path) -> None:
    from tests.cli_support import invoke, write_script

    plan = {"steps": [tool_step("now", "get_current_time", {"timezone": "Asia/Tokyo"})]}
    planner = write_script(tmp_path, [plan, {"answer": "it is morning in Tokyo"}])
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    server = f'"{TIME_SERVER}" --local-timezone UTC'
    args = ["run", "what time is it in Tokyo?", "--planner", planner, "--mcp", server]
    result = invoke([*args, "--store", store, "--json", "--no-live"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == "it is morning in Tokyo"
    [now] = data["steps"]
    assert now["output"]["timezone"] == "Asia/Tokyo"
    # The spec recorded with the run names the server: the run can be shown and resumed anywhere.
    shown = invoke(["show", data["run_id"], "--store", store, "--json"])
    assert shown.exit_code == 0, shown.output


def _children_running(name: str) -> list[int]:
    """This process's children whose command line mentions ``name`` (and that have not exited)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and name in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not TIME_SERVER.exists() or not Path("/proc").is_dir(), reason="needs mcp-server-time and /proc")
async def test_a_run_picked_up_from_the_store_stops_its_mcp_servers_when_it_ends(tmp_path: Path) -> None:
    from planexec import runs
    from planexec.store import SQLiteStore
    from tests.cli_support import invoke, write_script

    plan = {"steps": [tool_step("now", "get_current_time", {"timezone": "UTC"})]}
    planner = write_script(tmp_path, [plan, {"answer": "it is some time"}])
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["run", "what time is it?", "--planner", planner, "--mcp", f'"{TIME_SERVER}" --local-timezone UTC']
    started = await asyncio.to_thread(invoke, [*args, "--approve-plan", "--no-input", "--store", url, "--json"])
    assert started.exit_code == 3, started.output  # waits for the plan's approval
    run_id = json.loads(started.stdout)["run_id"]
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        await runs.answer(store, run_id, ApprovalDecision(approved=True))
        run = await runs.resume(store, run_id)
        assert _children_running("mcp-server-time")  # started again for the run
        result = await run.result()
        assert result.stop.kind == "goal_met", result.stop
        for _ in range(200):  # the server is stopped as the run ends: give it up to 10 s to exit
            if not _children_running("mcp-server-time"):
                break
            await asyncio.sleep(0.05)
        assert _children_running("mcp-server-time") == []
    finally:
        await store.close()


def test_a_bad_mcp_command_is_a_problem_under_its_flag(tmp_path: Path) -> None:
    from tests.cli_support import invoke, write_script

    planner = write_script(tmp_path, [{"answer": "x"}])
    result = invoke(["run", "go", "--planner", planner, "--mcp", '"unclosed', "--mcp-url", "ftp://x", "--no-live"])
    assert result.exit_code != 0
    assert "--mcp or --mcp-url '\"unclosed'" in result.output
    assert "--mcp or --mcp-url 'ftp://x'" in result.output


def test_planexec_run_sends_headers_from_the_environment_and_records_only_the_reference(
    tmp_path: Path, http_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.cli_support import invoke, write_script

    monkeypatch.setenv("TEAM_MCP_TOKEN", "s3cret-value")
    plan = {"steps": [tool_step("who", "authorization", {})]}
    planner = write_script(tmp_path, [plan, {"answer": "sent"}])
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["run", "which header?", "--planner", planner, "--mcp-url", http_server_url]
    header = ["--mcp-header", "Authorization: Custom ${TEAM_MCP_TOKEN}", "--mcp-header", "X-Team: ops"]
    result = invoke([*args, *header, "--store", store, "--json", "--no-live"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["steps"][0]["output"] == {"result": "Custom s3cret-value"}
    exported = invoke(["export", data["run_id"], "--store", store])
    assert exported.exit_code == 0, exported.output
    started = exported.stdout.splitlines()[0]  # run_started: the agent's spec is recorded there
    assert "s3cret-value" not in started  # the spec keeps ${TEAM_MCP_TOKEN}, not its value
    assert "Custom ${TEAM_MCP_TOKEN}" in started


def test_bad_mcp_headers_are_problems_listed_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.cli_support import invoke, write_script

    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    planner = write_script(tmp_path, [{"answer": "x"}])
    headers = ["Authorization: Bearer literal-secret", "no colon here", "X-Key: ${NOT_SET_ANYWHERE}", "X-Ok: a\x07"]
    args = ["run", "go", "--planner", planner, "--mcp-url", "http://127.0.0.1:9/mcp", "--no-live"]
    result = invoke([*args, *(f for h in headers for f in ("--mcp-header", h.replace("\\x07", "\x07")))])
    assert result.exit_code == 2, result.output
    assert "--mcp-header 'Authorization': Authorization carries a credential" in result.output
    assert "--mcp-header 'no colon here': a header is NAME: VALUE" in result.output
    assert "the environment has no NOT_SET_ANYWHERE" in result.output
    assert "no control characters" in result.output
    assert "literal-secret" not in result.output
    alone = invoke(["run", "go", "--planner", planner, "--mcp-header", "X-Team: ops", "--no-live"])
    assert alone.exit_code == 2, alone.output
    assert "--mcp-header: headers are sent to MCP servers given by URL" in alone.output


async def test_tool_names_that_collide_once_made_usable_are_refused_together() -> None:
    server = MCPServer("clash")

    @server.tool(name="look up")
    def one() -> str:
        """One."""
        return "1"

    @server.tool(name="look_up")
    def two() -> str:
        """Two."""
        return "2"

    toolset = MCPToolset(server=server)
    with pytest.raises(ToolDefinitionError) as refused:
        await toolset.open()
    await toolset.close()
    assert [p.where for p in refused.value.problems] == ["look_up"]
    # Keeping one of them is the way out.
    async with MCPToolset(server=server, only=("look_up",)) as kept:
        assert [t.name for t in kept] == ["look_up"]


async def test_an_output_too_large_to_keep_fails_its_step() -> None:
    server = MCPServer("big")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def flood() -> str:
        """Answer with a lot of text."""
        return "x" * 200_000

    async with MCPToolset(server=server) as tools:
        model = ScriptedModel([{"steps": [tool_step("f", "flood", {})]}, {"reason": "too big", "steps": []}])
        agent = Agent(model, tools=list(tools), limits=Limits(max_output_chars=10_000))
        result = await agent.run("flood")
    error = result.steps["f"].error
    assert error is not None
    assert error.kind == "invalid_output"
