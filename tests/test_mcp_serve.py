"""``planexec mcp serve``: the real command, started as a process, spoken to with the official
``mcp`` client over stdio and over streamable HTTP with its bearer token."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

pytest.importorskip("mcp")

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from planexec.errors import UsageError
from planexec.hosting import TOKEN_ENV, is_loopback, require_mcp, server_token
from tests.cli_support import invoke

TOOLS = '''
from planexec import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    print("printed by a tool: it must not reach the protocol")
    return a + b


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x
'''

PLAN = {
    "steps": [
        {"id": "sum", "description": "add 2 and 3", "tool": "add", "args": {"a": 2, "b": 3}},
        {
            "id": "twice",
            "description": "double the sum",
            "tool": "double",
            "args": {"x": "${sum}"},
            "depends_on": ["sum"],
        },
    ]
}
REPLIES = [PLAN, {"answer": "(2 + 3) * 2 = 10"}]
TOKEN = "test-token-0123456789abcdef"


@dataclass(frozen=True)
class Setup:
    """A folder holding the tools module, the planner's script and a token file, and the serve
    flags that use them."""

    folder: Path
    token_file: Path

    def store(self, name: str) -> str:
        return f"sqlite:///{self.folder / name}"

    def flags(self, store: str, *more: str) -> list[str]:
        planner = f"scripted:{self.folder / 'planner.json'}"
        tools = ["--tools", "serve_tools:add", "--tools", "serve_tools:double"]
        return ["--store", store, "--planner", planner, *tools, *more]

    def env(self, **more: str) -> dict[str, str]:
        return {**os.environ, "XDG_DATA_HOME": str(self.folder / "data"), **more}


def make_setup(folder: Path) -> Setup:
    """The tools module, the planner's script and the token file, written into ``folder``."""
    (folder / "serve_tools.py").write_text(TOOLS)
    (folder / "planner.json").write_text(json.dumps(REPLIES))
    token_file = folder / "token"
    token_file.write_text(TOKEN + "\n")
    return Setup(folder=folder, token_file=token_file)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return make_setup(tmp_path_factory.mktemp("serve"))


# -- serving over HTTP, as a process -----------------------------------------------------------------


@dataclass
class Served:
    """A ``planexec mcp serve --transport http`` process, its URL and what it wrote on stderr."""

    process: subprocess.Popen[str]
    url: str
    reader: threading.Thread
    lines: list[str] = field(default_factory=list)

    def stop(self) -> None:
        """Stop the server by its pid, and wait for it to end."""
        self.process.terminate()
        self.process.wait(15)
        self.reader.join(15)
        assert self.process.stderr is not None
        self.process.stderr.close()


def serve_http(setup: Setup, flags: list[str], env: dict[str, str] | None = None) -> Served:
    """Start the server on a free loopback port; return once it says where it listens."""
    process = subprocess.Popen(
        [sys.executable, "-m", "planexec", "mcp", "serve", "--transport", "http", "--port", "0", *flags],
        cwd=setup.folder,
        env=env or setup.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    said: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            said.put(line)
        said.put("")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while True:
        try:
            line = said.get(timeout=60)
        except queue.Empty:
            process.kill()
            process.wait(10)
            raise RuntimeError("planexec mcp serve did not start: " + "".join(lines)) from None
        if not line:
            process.wait(10)
            raise RuntimeError(f"planexec mcp serve ended ({process.returncode}): " + "".join(lines))
        if "serving MCP over streamable HTTP at " in line:
            return Served(process=process, url=line.rsplit(" ", 1)[1].strip(), reader=reader, lines=lines)


@pytest.fixture(scope="module")
def http_server(setup: Setup) -> Iterator[Served]:
    """One server for the module's HTTP tests, with the token in a file; stopped by its pid."""
    served = serve_http(setup, setup.flags(setup.store("http.db"), "--token-file", str(setup.token_file)))
    try:
        yield served
    finally:
        served.stop()


@asynccontextmanager
async def connected(url: str, token: str) -> AsyncIterator[Client]:
    """The official client, over streamable HTTP, sending ``token`` with every request."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """The status of a plain POST to ``url``."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code


Progress = list[tuple[float, float | None, str | None]]


def recorder() -> tuple[Progress, Any]:
    seen: Progress = []

    async def record(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    return seen, record


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    found = result.structured_content
    assert isinstance(found, dict)
    return found


async def cli(*args: str) -> Result:
    """``planexec ARGS``, in this process (on a thread of its own: the command runs its own event loop)."""
    return await asyncio.to_thread(invoke, list(args))


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


# -- the tests ---------------------------------------------------------------------------------------


async def test_a_goal_over_stdio_reports_each_finished_step_and_lands_in_the_store(setup: Setup) -> None:
    store = setup.store("stdio.db")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "planexec", "mcp", "serve", *setup.flags(store)],
        cwd=str(setup.folder),
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "XDG_DATA_HOME": str(setup.folder / "data")},
    )
    seen, record = recorder()
    async with Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"run_goal", "list_runs", "show_run", "answer_question", "resume_run"}
        assert tools["list_runs"].annotations is not None
        assert tools["list_runs"].annotations.read_only_hint
        assert tools["run_goal"].input_schema["required"] == ["goal"]
        assert tools["run_goal"].output_schema is not None
        result = await client.call_tool("run_goal", {"goal": "double 2 + 3"}, progress_callback=record)
        outcome = data(result)
        listed = data(await client.call_tool("list_runs", {"status": "finished"}))
    assert outcome["status"] == "finished"
    assert outcome["stop"] == {"kind": "goal_met", "detail": outcome["stop"]["detail"]}
    assert outcome["answer"] == "(2 + 3) * 2 = 10"
    assert (outcome["steps_finished"], outcome["steps_planned"], outcome["pending_questions"]) == (2, 2, [])
    assert "(2 + 3) * 2 = 10" in result.content[0].text  # type: ignore[union-attr]
    assert seen == [(1, 2, "step sum finished"), (2, 2, "step twice finished")]
    assert [r["run_id"] for r in listed["runs"]] == [outcome["run_id"]]
    shown = await cli("show", outcome["run_id"], "--store", store, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["stop"]["kind"] == "goal_met"


def test_http_refuses_a_request_without_the_token_or_with_a_wrong_one(http_server: Served) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    kinds = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    assert post(http_server.url, body, kinds) == 401
    assert post(http_server.url, body, {**kinds, "Authorization": "Bearer wrong-token-0123456789"}) == 401
    assert post(http_server.url, body, {**kinds, "Authorization": f"Basic {TOKEN}"}) == 401
    assert post(http_server.url.replace("/mcp", "/other"), body, kinds) == 401
    # With the token, a body over the limit is refused before it is read.
    where = urllib.parse.urlsplit(http_server.url)
    connection = http.client.HTTPConnection(where.netloc, timeout=30)
    try:
        connection.putrequest("POST", where.path)
        for name, value in {**kinds, "Authorization": f"Bearer {TOKEN}", "Content-Length": "2000000"}.items():
            connection.putheader(name, value)
        connection.endheaders()
        assert connection.getresponse().status == 413
    finally:
        connection.close()


async def test_a_goal_over_http_with_the_token(http_server: Served, setup: Setup) -> None:
    seen, record = recorder()
    async with connected(http_server.url, TOKEN) as client:
        outcome = data(await client.call_tool("run_goal", {"goal": "double 2 + 3"}, progress_callback=record))
        shown = data(await client.call_tool("show_run", {"run_id": outcome["run_id"]}))
        quiet = data(await client.call_tool("run_goal", {"goal": "again, unwatched", "constraints": ["be brief"]}))
    assert outcome["stop"]["kind"] == "goal_met"
    assert [m for _, _, m in seen] == ["step sum finished", "step twice finished"]
    assert shown["status"] == "finished"
    assert [(s["id"], s["status"], s["output"]) for s in shown["steps"]] == [
        ("sum", "succeeded", 5),
        ("twice", "succeeded", 10),
    ]
    assert shown["usage"]["model_calls"] == 2
    assert quiet["stop"]["kind"] == "goal_met"
    runs = await cli("runs", "--store", setup.store("http.db"), "--json")
    assert {r["run_id"] for r in json.loads(runs.stdout)} >= {outcome["run_id"], quiet["run_id"]}


async def test_bad_input_is_a_tool_error_and_the_server_goes_on(http_server: Served) -> None:
    async with connected(http_server.url, TOKEN) as client:
        unknown = await client.call_tool("show_run", {"run_id": "no-such-run"})
        assert "no run 'no-such-run'" in error_text(unknown)
        control = await client.call_tool("show_run", {"run_id": "bad\x1bid"})
        assert "control characters" in error_text(control)
        too_long = await client.call_tool("show_run", {"run_id": "r" * 10_000})
        assert "at most 256 characters" in error_text(too_long)
        empty = await client.call_tool("run_goal", {"goal": "   "})
        assert "the goal is empty" in error_text(empty)
        huge = await client.call_tool("run_goal", {"goal": "g" * 50_000})
        assert "at most 20000 characters" in error_text(huge)
        status = await client.call_tool("list_runs", {"status": "lost", "limit": 0})
        assert "status" in error_text(status)
        assert "limit" in error_text(status)
        wrong_type = await client.call_tool("run_goal", {"goal": "x", "constraints": "not a list"})
        assert "constraints" in error_text(wrong_type)
        answer = await client.call_tool("answer_question", {"run_id": "no-such-run", "decision": "approve"})
        assert "no run 'no-such-run'" in error_text(answer)
        resume = await client.call_tool("resume_run", {"run_id": "no-such-run"})
        assert "no run 'no-such-run'" in error_text(resume)
        finished = data(await client.call_tool("run_goal", {"goal": "double 2 + 3"}))
        late = await client.call_tool("answer_question", {"run_id": finished["run_id"], "decision": "reject"})
        text = error_text(late)
        assert "it has finished" in text  # every problem at once
        assert "say why" in text
        assert data(await client.call_tool("list_runs", {"limit": 1}))["runs"][0]["run_id"] == finished["run_id"]
        again = data(await client.call_tool("resume_run", {"run_id": finished["run_id"]}))
        assert again["stop"]["kind"] == "goal_met"  # a finished run is returned as it is
    assert http_server.process.poll() is None


async def test_a_plan_approval_is_answered_and_resumed_after_the_server_restarts(setup: Setup) -> None:
    store = setup.store("approvals.db")
    flags = setup.flags(store, "--approve-plan")
    first = serve_http(setup, flags)  # no token given: one is generated beside the default store
    token_file = setup.folder / "data" / "planexec" / "mcp-token"
    try:
        token = token_file.read_text().strip()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert any(token in line for line in first.lines)  # shown once, when it is made
        async with connected(first.url, token) as client:
            waiting = data(await client.call_tool("run_goal", {"goal": "double 2 + 3"}))
    finally:
        first.stop()
    assert waiting["status"] == "waiting"
    assert waiting["stop"]["kind"] == "waiting"
    [question] = waiting["pending_questions"]
    decisions = sorted({a["decision"] for a in question["answers"]})
    assert (question["kind"], decisions) == ("plan", ["approve", "reject"])
    assert [s["id"] for s in question["plan"]["steps"]] == ["sum", "twice"]
    # what the human decides on: every step's tool, arguments (the binding ${sum} until it has run) and effect
    assert [
        (s["tool"], [(a["name"], a["value"], a["binding"]) for a in s["arguments"]]) for s in question["plan"]["steps"]
    ] == [
        ("add", [("a", 2, None), ("b", 3, None)]),
        ("double", [("x", "${sum}", "${sum}")]),
    ]
    run_id = waiting["run_id"]

    second = serve_http(setup, flags)
    try:
        assert not any(token in line for line in second.lines)
        seen, record = recorder()
        async with connected(second.url, token) as client:
            wrong = await client.call_tool("answer_question", {"run_id": run_id, "decision": "answer"})
            assert "answer it with approve or reject" in error_text(wrong)
            assert "the answer is empty" in error_text(wrong)
            answered = data(
                await client.call_tool(
                    "answer_question", {"run_id": run_id, "question_id": question["question_id"], "decision": "approve"}
                )
            )
            resumed = data(await client.call_tool("resume_run", {"run_id": run_id}, progress_callback=record))
    finally:
        second.stop()
    assert (answered["ready_to_resume"], answered["pending_questions"]) == (True, [])
    assert resumed["stop"]["kind"] == "goal_met"
    assert resumed["answer"] == "(2 + 3) * 2 = 10"
    assert [m for _, _, m in seen] == ["step sum finished", "step twice finished"]
    shown = await cli("show", run_id, "--store", store, "--json")
    assert shown.exit_code == 0, shown.output
    run = json.loads(shown.stdout)
    assert (run["status"], run["stop"]["kind"]) == ("finished", "goal_met")
    [approval] = run["approvals"]
    assert (approval["kind"], approval["answered"]["approved"], approval["answered"]["by"]) == ("plan", True, "mcp")


# -- the command line and the token, in this process ------------------------------------------------------


def test_a_host_other_than_loopback_is_served_only_with_a_warning(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "[::1]", "localhost")] == [True] * 4
    assert [is_loopback(h) for h in ("0.0.0.0", "192.0.2.7", "example.org")] == [False] * 3
    served: list[dict[str, Any]] = []

    async def listen(server: Any, **settings: Any) -> None:  # instead of binding an outside address in a test
        served.append(settings)

    monkeypatch.setattr("planexec.cli._mcp.serve_http", listen)
    monkeypatch.chdir(setup.folder)
    flags = setup.flags("memory://", "--token-file", str(setup.token_file))
    outside = invoke(["mcp", "serve", "--transport", "http", "--host", "0.0.0.0", *flags])
    assert outside.exit_code == 0, outside.output
    assert "warning: listening on 0.0.0.0, which other machines may reach" in outside.stderr
    assert TOKEN not in outside.stderr
    inside = invoke(["mcp", "serve", "--transport", "http", *flags])
    assert "warning: listening" not in inside.stderr
    assert [s["host"] for s in served] == ["0.0.0.0", "127.0.0.1"]


def test_http_flags_with_stdio_and_a_bad_path_are_refused_together(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(setup.folder)  # where the tools module is
    flags = setup.flags("memory://")
    result = invoke(["mcp", "serve", "--port", "9", "--path", "mcp", "--token-file", "t", *flags])
    assert result.exit_code == 2
    assert "4 problems" in result.stderr
    assert "--port: applies to --transport http only" in result.stderr
    assert "--token-file: applies to --transport http only" in result.stderr
    assert "--path: 'mcp' is not a URL path" in result.stderr


def test_the_token_is_generated_once_readable_by_its_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    made = server_token()
    path = tmp_path / "planexec" / "mcp-token"
    assert made.created
    assert path.read_text().strip() == made.value
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert made.value not in repr(made)
    again = server_token()
    assert (again.value, again.created) == (made.value, False)
    monkeypatch.setenv(TOKEN_ENV, "from-the-environment-1234")
    assert server_token().value == "from-the-environment-1234"
    given = tmp_path / "given"
    given.write_text("short")
    with pytest.raises(UsageError, match="at least 16"):
        server_token(given)


def test_without_the_mcp_sdk_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(UsageError, match=r"pip install .*planexec\[mcp\]|\.\[mcp\]"):
        require_mcp()


async def test_an_agent_built_by_a_function_must_log_to_the_servers_store() -> None:
    from planexec import Agent
    from planexec.hosting import mcp_server
    from planexec.store import MemoryStore
    from planexec.testing import ScriptedModel

    store, elsewhere = MemoryStore(), MemoryStore()
    server = mcp_server(lambda _: Agent(ScriptedModel([{"answer": "done"}]), store=elsewhere), store)
    async with Client(server) as client:
        refused = await client.call_tool("run_goal", {"goal": "anything"})
    assert "return an Agent(..., store=store)" in error_text(refused)
    assert await elsewhere.list_runs() == []
