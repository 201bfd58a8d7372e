"""Telemetry through the public API: the span tree of a run (OpenTelemetry's GenAI conventions),
its trace continued by a resume in another process, context propagation into tools, content
capture and redaction, metrics, and the ``planexec`` logger's records."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from opentelemetry import propagate, trace

from planexec import Agent, Approvals, ToolError, tool
from planexec.log import ApprovalDecided, ApprovalRequested
from planexec.mcp import MCPToolset
from planexec.models import FunctionModel, ModelRequest
from planexec.store import SQLiteStore
from planexec.telemetry import LOGGER_NAME, Telemetry, run_telemetry
from planexec.testing import ScriptedModel, tool_calls
from tests.support import tool_step
from tests.telemetry_support import (
    PATCH,
    PLAN,
    SECRET,
    Captured,
    SpanData,
    all_text,
    named,
    shop_agent,
    shop_tools,
    tree,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def captured() -> Iterator[Captured]:
    held = Captured()
    yield held
    held.shutdown()


# -- the tree of one run, resumed in another process ----------------------------------------------


async def test_the_trace_of_a_run_with_parallel_steps_a_patch_an_approval_and_a_resume_elsewhere(
    tmp_path: Path, captured: Captured
) -> None:
    db = tmp_path / "runs.db"
    recorded: list[int] = []
    store = SQLiteStore(db)
    try:
        first = await shop_agent([PLAN, PATCH], store, captured.telemetry(), recorded).run(
            f"price of the lamp (key {SECRET})", run_id="shop-1"
        )
        assert first.stop.kind == "waiting"
        [asked] = [e for e in first.events if isinstance(e, ApprovalRequested)]
        # a human answers from elsewhere (as `planexec approve` does): the answer goes to the store
        last = await store.last_seq("shop-1")
        decided = ApprovalDecided(at=1.0, approval_id=asked.approval_id, approved=True, by="ops", reason="fine")
        await store.append("shop-1", [decided], expected_seq=last)
    finally:
        await store.close()

    spans = captured.spans()
    assert tree(spans) == [
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
    [run] = named(spans, "invoke_agent shop")
    assert run.parent_id is None
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "shop"
    assert run.attributes["planexec.run.id"] == "shop-1"
    assert run.attributes["planexec.run.status"] == "suspended"
    assert [name for name, _ in run.events] == ["planexec.replan", "planexec.approval.requested", "planexec.suspended"]
    replan = dict(run.events)["planexec.replan"]
    assert replan["planexec.plan.version"] == 2
    assert replan["planexec.plan.trigger"] == "failure"
    requested = dict(run.events)["planexec.approval.requested"]
    assert requested["planexec.step.id"] == "record"
    assert requested["planexec.approval.subject"] == "step"

    # the two fetches ran at once
    page, catalogue = sorted(named(spans, "execute_tool fetch"), key=lambda s: s.attributes["planexec.step.id"])
    assert page.start < catalogue.end
    assert catalogue.start < page.end
    for step in (page, catalogue):
        assert step.attributes["gen_ai.operation.name"] == "execute_tool"
        assert step.attributes["gen_ai.tool.name"] == "fetch"
        assert step.attributes["planexec.plan.version"] == 1
        assert step.attributes["planexec.step.status"] == "succeeded"
        assert "planexec.step.verdict" not in step.attributes  # no checks ran
        assert "planexec.step.attempts" not in step.attributes  # one attempt
        assert step.status == "UNSET"

    # the failure, and the patch that links to it
    [parse] = named(spans, "execute_tool parse")
    assert parse.status == "ERROR"
    assert parse.attributes["error.type"] == "tool_error"
    assert "no price on the page" in parse.status_message
    initial, patch = sorted(named(spans, "plan shop"), key=lambda s: s.start)
    assert initial.attributes["gen_ai.operation.name"] == "plan"
    assert initial.attributes["planexec.planning.trigger"] == "initial"
    assert initial.attributes["planexec.plan.version"] == 1
    assert initial.links == []
    assert patch.attributes["planexec.planning.trigger"] == "failure"
    assert patch.attributes["planexec.plan.version"] == 2
    assert patch.links == [(parse.trace_id, parse.span_id, {"planexec.link": "failure"})]
    chat = next(s for s in spans if s.name == "chat scripted" and s.parent_id == initial.span_id)
    assert chat.kind == "CLIENT"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["planexec.role"] == "planner"
    assert chat.attributes["planexec.purpose"] == "planner.propose"
    assert chat.attributes["gen_ai.usage.input_tokens"] >= 0
    assert "gen_ai.input.messages" not in chat.attributes  # content is not captured by default

    # another process resumes the run: the same trace goes on under the first process's run span
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.telemetry_worker", f"sqlite:///{db}", "shop-1"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    resumed = json.loads(out.stdout)
    assert resumed["stop"] == "goal_met"
    assert resumed["recorded"] == [42]
    later = [SpanData.from_json(s) for s in resumed["spans"]]
    assert tree(later) == [
        (0, "invoke_agent shop"),
        (1, "execute_tool record"),
        (1, "plan shop"),
        (2, "chat scripted"),
    ]
    [segment] = named(later, "invoke_agent shop")
    assert segment.trace_id == run.trace_id
    assert segment.parent_id == run.span_id
    assert segment.attributes["planexec.run.resumed"] is True
    assert segment.attributes["planexec.run.segment"] == 2
    assert segment.attributes["planexec.stop_reason"] == "goal_met"
    assert segment.attributes["planexec.run.status"] == "finished"
    assert segment.attributes["planexec.steps"] == 5
    assert segment.attributes["planexec.replans"] == 1
    decided_there = dict(segment.events)["planexec.approval.decided"]
    assert decided_there["planexec.approval.approved"] is True
    assert decided_there["planexec.approval.by"] == "ops"
    assert {s.trace_id for s in later} == {run.trace_id}
    [record] = named(later, "execute_tool record")
    assert record.attributes["planexec.plan.version"] == 2
    [finish] = named(later, "plan shop")
    assert finish.attributes["planexec.planning.trigger"] == "finish"

    # nothing secret reached either exporter
    for text in all_text([*spans, *later]):
        assert SECRET not in text


async def test_a_model_driven_step_is_an_agent_span_with_its_chats_and_tool_calls(captured: Captured) -> None:
    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    def executor(request: ModelRequest) -> Any:
        if any(m.role == "tool" for m in request.messages):
            return "it is sunny"
        return tool_calls(("weather", {"city": "Oslo"}))

    planner = ScriptedModel(
        [
            {"steps": [{"id": "look", "description": "find the weather in Oslo", "allowed_tools": ["weather"]}]},
            {"answer": "sunny"},
        ]
    )
    agent = Agent(
        planner,
        tools=[weather],
        executor=FunctionModel(executor, name="openai:gpt-4o-mini"),
        store=None,
        telemetry=captured.telemetry(),
    )
    result = await agent.run("weather in Oslo")
    assert result.stop.kind == "goal_met", result.stop
    spans = captured.spans()
    assert tree(spans) == [
        (0, "invoke_agent planexec"),
        (1, "plan planexec"),
        (2, "chat scripted"),
        (1, "invoke_agent model"),
        (2, "chat gpt-4o-mini"),
        (2, "execute_tool weather"),
        (2, "chat gpt-4o-mini"),
        (1, "plan planexec"),
        (2, "chat scripted"),
    ]
    step = named(spans, "invoke_agent model")[0]
    assert step.attributes["gen_ai.agent.name"] == "model"
    assert step.attributes["planexec.step.id"] == "look"
    call = named(spans, "execute_tool weather")[0]
    assert call.attributes["gen_ai.tool.name"] == "weather"
    assert call.attributes["gen_ai.tool.call.id"]
    assert call.attributes["gen_ai.tool.description"] == "The weather in a city."
    chat = named(spans, "chat gpt-4o-mini")[0]
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert chat.attributes["planexec.role"] == "executor"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)


# -- context propagation into tools ----------------------------------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("traceparent"))
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_tools_own_instrumented_calls_nest_under_its_span_in_threads_and_tasks(
    captured: Captured, recorder: str
) -> None:
    import urllib.request

    tracer = captured.tracer_provider.get_tracer("a.http.client")

    def fetch(url: str) -> str:
        """What an instrumented HTTP client does: a client span, its context sent along."""
        with tracer.start_as_current_span("GET", kind=trace.SpanKind.CLIENT):
            headers: dict[str, str] = {}
            propagate.inject(headers)
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as reply:
                return str(reply.read().decode())

    @tool
    def sync_get(url: str) -> str:
        """Fetch a URL (a function run in a worker thread)."""
        return fetch(url)

    @tool
    async def async_get(url: str) -> str:
        """Fetch a URL (a coroutine)."""
        return await asyncio.to_thread(fetch, url)

    planner = ScriptedModel(
        [
            {
                "steps": [
                    tool_step("one", "sync_get", {"url": recorder}),
                    tool_step("two", "async_get", {"url": recorder}),
                ]
            },
            {"answer": "fetched"},
        ]
    )
    result = await Agent(planner, tools=[sync_get, async_get], store=None, telemetry=captured.telemetry()).run(
        "fetch twice"
    )
    assert result.stop.kind == "goal_met", result.stop
    spans = captured.spans()
    for tool_name in ("sync_get", "async_get"):
        [step] = named(spans, f"execute_tool {tool_name}")
        [client] = [s for s in spans if s.name == "GET" and s.parent_id == step.span_id]
        assert client.trace_id == step.trace_id
        assert any(seen and seen.startswith(f"00-{client.trace_id}-{client.span_id}-") for seen in _Recorder.seen)
    assert len(_Recorder.seen) == 2


# -- content: off by default, redacted when on --------------------------------------------------


@pytest.mark.parametrize("capture", [False, True])
async def test_secrets_in_prompts_outputs_and_errors_never_reach_the_exporter(
    captured: Captured, capture: bool, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    async def leak(n: int) -> dict[str, Any]:
        """Return data holding a key."""
        return {"config": f"OPENAI_API_KEY={SECRET}", "n": n}

    @tool
    async def broken(n: int) -> int:
        """Fail, saying a key."""
        raise ToolError(f"upstream refused key {SECRET}")

    def executor(request: ModelRequest) -> Any:
        return f"the key is {SECRET}"

    planner = ScriptedModel(
        [
            {
                "reason": f"use {SECRET}",
                "steps": [
                    tool_step("a", "leak", {"n": 1}),
                    tool_step("b", "broken", {"n": 2}),
                    {"id": "c", "description": f"say the key {SECRET}"},
                ],
            },
            {"steps": []},
            {"answer": f"done, key {SECRET}"},
        ]
    )
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    agent = Agent(
        planner,
        tools=[leak, broken],
        executor=FunctionModel(executor),
        store=None,
        telemetry=captured.telemetry(capture_content=capture),
    )
    result = await agent.run(f"find the key {SECRET}")
    assert result.stop.kind == "goal_met", result.stop
    spans = captured.spans()
    texts = list(all_text(spans))
    assert texts
    for text in texts:
        assert SECRET not in text
    step_a = named(spans, "execute_tool leak")[0]
    chats = [s for s in spans if s.name.startswith("chat ")]
    if capture:
        assert "[REDACTED:" in step_a.attributes["gen_ai.tool.call.result"]
        assert json.loads(step_a.attributes["gen_ai.tool.call.arguments"]) == {"n": 1}
        assert all("gen_ai.input.messages" in s.attributes for s in chats)
        assert any("[REDACTED:" in s.attributes.get("gen_ai.output.messages", "") for s in chats)
        [run] = named(spans, "invoke_agent planexec")
        assert "[REDACTED:" in run.attributes["gen_ai.output.messages"]
    else:
        for s in spans:
            assert not {"gen_ai.tool.call.result", "gen_ai.input.messages", "gen_ai.output.messages"} & set(
                s.attributes
            )
    # the log records are redacted too, and hold no content unless it is captured
    records = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert {getattr(r, "planexec_event", None) for r in records} >= {"run_started", "step_failed", "run_finished"}
    for r in records:
        assert SECRET not in r.getMessage()
        assert SECRET not in json.dumps(getattr(r, "planexec", {}), default=str)
        assert getattr(r, "planexec_run_id", None) == result.run_id
        assert getattr(r, "otel_trace_id", None) == spans[0].trace_id
    outputs = [r for r in records if getattr(r, "planexec_event", "") == "step_succeeded"]
    assert all(("output" in r.planexec) is capture for r in outputs)  # type: ignore[attr-defined]


# -- metrics ---------------------------------------------------------------------------------------


async def test_metrics_count_runs_steps_calls_tokens_and_cost_with_the_stop_reason(captured: Captured) -> None:
    @tool
    async def ok(n: int) -> int:
        """Return n."""
        return n

    @tool
    async def bad(n: int) -> int:
        """Fail."""
        raise ToolError("no")

    planner = ScriptedModel(
        [{"steps": [tool_step("a", "ok", {"n": 1}), tool_step("b", "bad", {"n": 2})]}, {"steps": []}, {"answer": "a"}]
    )
    agent = Agent(planner, tools=[ok, bad], store=None, name="counter", telemetry=captured.telemetry(traces=False))
    result = await agent.run("count")
    assert result.stop.kind == "goal_met"
    assert captured.spans() == []  # traces off, metrics on
    found = captured.metrics()
    assert found["planexec.runs"] == [
        ({"gen_ai.agent.name": "counter", "planexec.stop_reason": "goal_met"}, 1),
    ]
    steps = {(a["planexec.step.status"], a["planexec.executor"]): v for a, v in found["planexec.steps"]}
    assert steps == {("succeeded", "tools"): 1, ("failed", "tools"): 1}
    calls = {a.get("error.type"): v for a, v in found["planexec.tool.calls"]}
    assert calls == {None: 1, "tool_error": 1}
    [(model_attrs, model_calls)] = found["planexec.model.calls"]
    assert model_calls == result.model_calls == 3
    assert model_attrs["planexec.role"] == "planner"
    tokens = {a["gen_ai.token.type"]: v for a, v in found["gen_ai.client.token.usage"]}
    assert tokens["input"][0] == 3
    assert tokens["input"][1] == result.usage.input_tokens
    assert tokens["output"][1] == result.usage.output_tokens
    assert found["planexec.run.duration"][0][1][0] == 1


# -- switches ---------------------------------------------------------------------------------------


def test_with_no_sdk_and_no_log_handler_a_run_has_no_telemetry_to_do() -> None:
    code = (
        "from planexec.telemetry import Telemetry, run_telemetry\n"
        "from planexec.log import RunState\n"
        "assert run_telemetry(Telemetry(), run_id='r', agent='a', state=RunState(), store_redactor=None) is None\n"
        "import logging; logging.basicConfig()\n"
        "assert run_telemetry(Telemetry(), run_id='r', agent='a', state=RunState(), store_redactor=None) is not None\n"
        "assert run_telemetry(Telemetry.off(), run_id='r', agent='a', state=RunState(), store_redactor=None) is None\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr


def test_bad_telemetry_settings_are_listed_together() -> None:
    from planexec import UsageError

    with pytest.raises(UsageError) as caught:
        Telemetry(traces="yes", max_content_chars=0, redactor="x", tracer_provider=object())  # type: ignore[arg-type]
    wheres = {p.where for p in caught.value.problems}
    assert wheres == {"traces", "max_content_chars", "redactor", "tracer_provider"}
    with pytest.raises(UsageError) as caught:
        Agent(ScriptedModel([]), store=None, name=" ", telemetry="on")  # type: ignore[arg-type]
    assert {p.where for p in caught.value.problems} == {"name", "telemetry"}


def test_content_capture_follows_opentelemetrys_switch_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    assert Telemetry().captures_content
    assert not Telemetry(capture_content=False).captures_content
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    assert not Telemetry().captures_content
    assert run_telemetry is not None


# -- MCP tools ---------------------------------------------------------------------------------------


async def test_an_mcp_tool_call_is_an_execute_tool_span_whose_context_reaches_the_server(captured: Captured) -> None:
    server = MCPServer("clock")
    seen: list[Any] = []

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def now(zone: str, ctx: Context) -> str:
        """The time in a zone."""
        seen.append(ctx.request_context.meta)
        return f"12:00 {zone}"

    planner = ScriptedModel([{"steps": [tool_step("t", "now", {"zone": "UTC"})]}, {"answer": "noon"}])
    async with MCPToolset(server=server) as clock:
        agent = Agent(planner, tools=[clock], store=None, telemetry=captured.telemetry())
        result = await agent.run("what time is it")
    assert result.stop.kind == "goal_met", result.stop
    [span] = named(captured.spans(), "execute_tool now")
    assert span.attributes["gen_ai.tool.name"] == "now"
    [meta] = seen
    traceparent = meta["traceparent"] if isinstance(meta, dict) else getattr(meta, "traceparent", None)
    assert traceparent is not None
    assert traceparent.startswith(f"00-{span.trace_id}-{span.span_id}-")


# -- what a broken dependency or a hostile model sends ------------------------------------------------


class _BrokenTracerProvider:
    """An OpenTelemetry provider whose tracer fails after a while (a broken SDK or processor)."""

    def __init__(self, inner: Any, fail_after: int) -> None:
        self._inner = inner
        self.calls = 0
        self.fail_after = fail_after

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        provider = self

        class Tracer:
            def start_span(self, *a: Any, **k: Any) -> Any:
                provider.calls += 1
                if provider.calls > provider.fail_after:
                    raise RuntimeError("the tracer broke")
                return provider._inner.get_tracer("x").start_span(*a, **k)

        return Tracer()


@pytest.mark.parametrize("fail_after", [0, 1, 3, 6])
async def test_a_tracer_that_breaks_mid_run_turns_telemetry_off_and_the_run_goes_on(
    captured: Captured, fail_after: int, caplog: pytest.LogCaptureFixture
) -> None:
    recorded: list[int] = []
    broken = _BrokenTracerProvider(captured.tracer_provider, fail_after)
    planner = ScriptedModel([PLAN, PATCH, {"answer": "42"}])
    agent = Agent(
        planner,
        tools=shop_tools(recorded),
        store=None,
        approvals=Approvals(steps="none"),
        telemetry=Telemetry(tracer_provider=broken, meter_provider=captured.meter_provider),  # type: ignore[arg-type]
    )
    result = await agent.run("price of the lamp")
    assert result.stop.kind == "goal_met", result.stop
    assert recorded == [42]
    warnings = [r.getMessage() for r in caplog.records if "telemetry turned off" in r.getMessage()]
    assert len(warnings) == 1
    assert "the tracer broke" in warnings[0]


async def test_hostile_model_output_reaches_spans_redacted_and_cut_to_size(captured: Captured) -> None:
    huge = "x" * 50_000

    def executor(request: ModelRequest) -> Any:
        from planexec.models import ModelResponse, Usage

        return ModelResponse(
            text=f"{huge} {SECRET}",
            model=f"evil-model {SECRET}",
            usage=Usage(input_tokens=1, output_tokens=1),
        )

    planner = ScriptedModel(
        [{"steps": [{"id": "s", "description": f"say {SECRET}"}]}, {"answer": "ok"}],
    )
    agent = Agent(
        planner,
        executor=FunctionModel(executor, name=f"openai-compatible:m@http://u:{SECRET}@host"),
        store=None,
        telemetry=captured.telemetry(capture_content=True, max_content_chars=1_000),
    )
    result = await agent.run("go")
    assert result.stop.kind == "goal_met", result.stop
    spans = captured.spans()
    for text in all_text(spans):
        assert SECRET not in text
    [chat] = [s for s in spans if s.attributes.get("planexec.role") == "executor"]
    assert len(chat.attributes["gen_ai.output.messages"]) <= 1_000
    assert chat.attributes["gen_ai.request.model"] == "m"


async def test_an_unreachable_collector_never_slows_a_run_and_the_command_exits(tmp_path: Path) -> None:
    out = await asyncio.to_thread(
        subprocess.run,
        [
            *(sys.executable, "-m", "planexec", "demo", "--store", "memory://", "--no-live"),
            *("--workdir", str(tmp_path), "--otlp-endpoint", "http://127.0.0.1:9", "--otlp-metrics"),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "Failed to export" in out.stderr  # the exporter says so; the run was not held up


def test_bad_otlp_flags_are_refused_with_every_problem_and_no_credential_shown(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            *(sys.executable, "-m", "planexec", "run", "x", "--planner", "scripted:/nope.json"),
            *("--otlp-endpoint", "ftp://user:pw@host", "--store", "memory://"),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "--otlp-endpoint" in out.stderr
    assert "http or https URL" in out.stderr
    assert "must not hold credentials" in out.stderr
    assert "pw" not in out.stderr
    metrics_only = subprocess.run(
        [sys.executable, "-m", "planexec", "run", "x", "--otlp-metrics", "--store", "memory://"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert metrics_only.returncode == 2
    assert "--otlp-metrics: needs --otlp-endpoint" in metrics_only.stderr


async def test_budget_stops_and_stalls_are_events_on_the_runs_span(captured: Captured) -> None:
    from planexec import Budget, Limits

    @tool
    async def ok(n: int) -> int:
        """Return n."""
        return n

    @tool
    async def flaky(n: int) -> int:
        """Always fails."""
        raise ToolError("down")

    planner = ScriptedModel([{"steps": [tool_step("a", "ok", {"n": 1})]}, {"answer": "1"}])
    agent = Agent(planner, tools=[ok], store=None, budget=Budget(model_calls=1), telemetry=captured.telemetry())
    result = await agent.run("a plan and an answer on a budget of one call")
    assert result.stop.kind == "budget_exhausted", result.stop
    [run] = [s for s in captured.spans() if s.name == "invoke_agent planexec"]
    [(_, attrs)] = [e for e in run.events if e[0] == "planexec.budget_exhausted"]
    assert attrs["planexec.budget"] == "model_calls"
    assert attrs["planexec.budget.limit"] == 1.0
    assert run.attributes["planexec.stop_reason"] == "budget_exhausted"
    assert run.attributes["planexec.stop_budget"] == "model_calls"

    again = {"steps": [tool_step("c", "flaky", {"n": 3})]}
    planner = ScriptedModel([again, again, again, again, {"answer": "gave up"}])
    stalled = Captured()
    try:
        agent = Agent(planner, tools=[flaky], store=None, limits=Limits(stall_rounds=1), telemetry=stalled.telemetry())
        result = await agent.run("keep failing")
        [run] = [s for s in stalled.spans() if s.name == "invoke_agent planexec"]
        stalls = [attrs for name, attrs in run.events if name == "planexec.stall"]
        assert stalls, (result.stop, [name for name, _ in run.events])
        assert stalls[0]["planexec.stall.rule"] in ("no_progress", "repeated_failure")
        assert result.stop.kind == "stalled"
    finally:
        stalled.shutdown()


def test_log_level_prints_the_runs_records_on_stderr(tmp_path: Path) -> None:
    script = tmp_path / "planner.json"
    script.write_text(json.dumps([{"steps": [{"id": "s", "description": "think"}]}, {"answer": "done"}]))
    executor = tmp_path / "executor.json"
    executor.write_text(json.dumps(["thought about it"]))
    common = [sys.executable, "-m", "planexec", "run", "ponder", "--planner", f"scripted:{script}"]
    common += ["--executor", f"scripted:{executor}", "--store", "memory://", "--no-live"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    info = subprocess.run([*common, "--log-level", "info"], env=env, capture_output=True, text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    lines = [line for line in info.stderr.splitlines() if line.startswith(("info ", "debug ", "warning "))]
    assert lines[0].startswith("info run ")
    assert "run started" in lines[0]
    assert any("plan version 1 (1 steps, initial)" in line for line in lines)
    assert "run finished: goal_met" in lines[-1]
    assert not any(line.startswith("debug ") for line in lines)
    debug = subprocess.run([*common, "--log-level", "debug"], env=env, capture_output=True, text=True, timeout=60)
    assert debug.returncode == 0, debug.stderr
    assert "debug run " in debug.stderr
    assert "step s started" in debug.stderr
    assert "executor called" in debug.stderr


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: the requests' protobuf bodies, decoded, by path."""

    got: ClassVar[dict[str, list[Any]]] = {}

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        message: Any
        if self.path == "/v1/traces":
            message = ExportTraceServiceRequest()
        elif self.path == "/v1/metrics":
            message = ExportMetricsServiceRequest()
        else:
            self.send_response(404)
            self.end_headers()
            return
        message.ParseFromString(body)
        type(self).got.setdefault(self.path, []).append(message)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def test_otlp_metrics_and_traces_arrive_on_the_wire_from_the_command_line(tmp_path: Path) -> None:
    _Receiver.got = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        out = subprocess.run(
            [
                *(sys.executable, "-m", "planexec", "demo", "--store", "memory://", "--no-live", "--pace", "0"),
                *("--workdir", str(tmp_path), "--otlp-endpoint", url, "--otlp-metrics"),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "OTEL_SERVICE_NAME": "audit-bot"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 0, out.stderr
    spans = [
        span
        for request in _Receiver.got.get("/v1/traces", [])
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    assert any(span.name == "invoke_agent planexec" for span in spans)
    services = {
        attr.value.string_value
        for request in _Receiver.got["/v1/traces"]
        for rs in request.resource_spans
        for attr in rs.resource.attributes
        if attr.key == "service.name"
    }
    assert services == {"audit-bot"}
    metrics = {
        metric.name
        for request in _Receiver.got.get("/v1/metrics", [])
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    assert {
        "planexec.runs",
        "planexec.steps",
        "planexec.model.calls",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "planexec.tool.calls",
        "gen_ai.execute_tool.duration",
    } <= metrics
