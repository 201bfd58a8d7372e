"""Real MCP servers from PyPI in plans: mcp-server-fetch reading pages served on 127.0.0.1 by this
test (a page, a page that fails, a page robots.txt forbids, and the server's own refusal of
loopback addresses)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from planexec import Agent
from planexec.log import RunState, StepFailed, StepSucceeded
from planexec.mcp import MCPStdio, MCPToolset
from planexec.store import SQLiteStore
from planexec.testing import ScriptedModel
from tests.support import events_of, tool_step

FETCH_SERVER = Path(sys.executable).parent / "mcp-server-fetch"
needs_fetch = pytest.mark.skipif(not FETCH_SERVER.exists(), reason="mcp-server-fetch is not installed")

PAGE = """<!doctype html>
<html><head><title>Harbour notes</title></head>
<body>
<nav><a href="/">home</a> | <a href="/tides">tides</a></nav>
<article>
<h1>Tide tables for Brest</h1>
<p>High water at Brest comes at <strong>06:12</strong> on the first of May, with a range of 6.9 metres.</p>
<p>Low water follows at 12:31; the harbour master advises small boats to keep to the channel.</p>
<ul><li>Spring tides: large range</li><li>Neap tides: small range</li></ul>
</article>
</body></html>
"""


class _Site(BaseHTTPRequestHandler):
    """``/tides``: an HTML page; ``/broken``: a 500 with a reason; ``/private/…``: forbidden to
    robots by ``/robots.txt``; anything else: 404."""

    def do_GET(self) -> None:
        if self.path == "/tides":
            self._answer(200, PAGE, "text/html; charset=utf-8")
        elif self.path == "/broken":
            self._answer(500, "the tide database is being rebuilt", "text/plain")
        elif self.path == "/robots.txt":
            self._answer(200, "User-agent: *\nDisallow: /private/\n", "text/plain")
        else:
            self._answer(404, "no such page", "text/plain")

    def _answer(self, status: int, text: str, content_type: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep the test's output quiet
        return


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The pages above on 127.0.0.1, served from a thread and stopped when the module's tests end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    thread = threading.Thread(target=server.serve_forever, name="test-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def fetch_tools(*flags: str) -> MCPToolset:
    return MCPToolset(server=MCPStdio(command=str(FETCH_SERVER), args=flags), prefix="web.")


@needs_fetch
async def test_fetch_reads_a_local_page_as_markdown(site: str, tmp_path: Path) -> None:
    async with fetch_tools("--allow-private-ips") as tools:
        [fetch] = list(tools)
        # readOnlyHint (and idempotentHint): a read step, parallel-safe, never asked about.
        assert fetch.name == "web.fetch"
        assert (fetch.side_effect, fetch.sensitive, fetch.idempotent, fetch.requires_approval) == (
            False,
            False,
            True,
            False,
        )
        assert fetch.output_schema is None  # page text, not structured content
        url = f"{site}/tides"
        model = ScriptedModel([{"steps": [tool_step("page", "web.fetch", {"url": url})]}, {"answer": "06:12"}])
        store = SQLiteStore(tmp_path / "runs.db")
        try:
            result = await Agent(model, tools=[tools], store=store).run("when is high water at Brest?")
            stored = [s.event for s in await store.read(result.run_id)]
        finally:
            await store.close()
    assert result.stop.kind == "goal_met", result.stop
    page = result.outputs["page"]
    assert isinstance(page, str)
    assert page.startswith(f"Contents of {url}:")
    # The article's words, as markdown: its text and its list, none of its tags.
    assert "High water at Brest comes at **06:12** on the first of May" in page
    assert "the harbour master advises small boats to keep to the channel" in page
    assert "Spring tides: large range" in page
    assert "<p>" not in page
    assert "<strong>" not in page
    # What the planner was told in the end holds the page's text too.
    assert "06:12" in model.calls[-1].messages[-1].content
    assert [e.step_id for e in events_of(result, StepSucceeded)] == ["page"]
    assert [e.kind for e in stored] == [e.kind for e in result.events]
    assert RunState.fold(stored).outputs == result.outputs


@needs_fetch
async def test_a_page_that_fails_fails_its_step_with_the_servers_words(site: str, tmp_path: Path) -> None:
    url = f"{site}/broken"
    model = ScriptedModel(
        [
            {"steps": [tool_step("page", "web.fetch", {"url": url})]},
            {"give_up": "the page cannot be read, and nothing else would answer the question"},
        ]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        async with fetch_tools("--allow-private-ips") as tools:
            result = await Agent(model, tools=[tools], store=store).run("read the tide table")
        stored = [s.event for s in await store.read(result.run_id)]
    finally:
        await store.close()
    step = result.steps["page"]
    assert step.status == "failed"
    assert step.error is not None
    assert step.error.kind == "tool_error"
    assert f"Failed to fetch {url} - status code 500" in step.error.message
    assert step.attempts == 1  # the server's refusal is not a passing fault: not tried again
    # The planner was told why, in the server's words, and gave up: a typed stop.
    assert "status code 500" in model.calls[1].messages[-1].content
    assert result.stop.kind == "escalated", result.stop
    assert result.stop.code == "planner_gave_up"
    # The log is whole: everything the run did was written, and it folds to the run's state.
    assert [e.kind for e in stored] == [e.kind for e in result.events]
    [failed] = [e for e in stored if isinstance(e, StepFailed)]
    assert failed.step_id == "page"
    folded = RunState.fold(stored)
    assert folded.stop == result.stop
    assert folded.steps["page"].status == "failed"


@needs_fetch
async def test_a_page_robots_txt_forbids_is_refused(site: str) -> None:
    url = f"{site}/private/log"
    model = ScriptedModel([{"steps": [tool_step("page", "web.fetch", {"url": url})]}, {"give_up": "not allowed"}])
    async with fetch_tools("--allow-private-ips") as tools:
        result = await Agent(model, tools=[tools], store=None).run("read the private log")
    error = result.steps["page"].error
    assert error is not None
    assert error.kind == "tool_error"
    assert "robots.txt" in error.message
    assert "autonomous fetching of this page is not allowed" in error.message
    # With --ignore-robots-txt the server asks nobody and gets the site's own 404.
    model = ScriptedModel([{"steps": [tool_step("page", "web.fetch", {"url": url})]}, {"give_up": "not there"}])
    async with fetch_tools("--allow-private-ips", "--ignore-robots-txt") as tools:
        result = await Agent(model, tools=[tools], store=None).run("read the private log")
    error = result.steps["page"].error
    assert error is not None
    assert "status code 404" in error.message


@needs_fetch
async def test_without_allow_private_ips_the_server_refuses_loopback(site: str) -> None:
    url = f"{site}/tides"
    model = ScriptedModel([{"steps": [tool_step("page", "web.fetch", {"url": url})]}, {"give_up": "refused"}])
    async with fetch_tools() as tools:
        result = await Agent(model, tools=[tools], store=None).run("read the tide table")
    error = result.steps["page"].error
    assert error is not None
    assert error.kind == "tool_error"
    # Refused before the page is asked for: its robots.txt is on a loopback address too.
    assert "which is not a public address" in error.message
    assert "--allow-private-ips" in error.message
