"""Prompt caching across the planner calls of one run with a replan, against a stand-in server.

What is measured: of the input tokens the planner sends in one run (propose, patch after a failure,
final answer), how many a provider would serve from its prompt cache, and what that saves. The run
goes through ``OpenAIModel`` (Chat Completions, plans streamed as the planner streams them) to a
stand-in OpenAI server on 127.0.0.1 that answers with scripted planner replies (in the strict wire
form, every member given, as a provider enforcing the schema answers; a streamed reply's text comes
in one chunk) and reports usage as OpenAI does, in ``usage.prompt_tokens_details.cached_tokens``:

* the prompt is what the provider sees, serialised in order: the ``response_format`` schema, the
  tools, then each message's role and content;
* tokens are counted as ceil(characters ÷ 4) — an approximation, not a tokenizer;
* the cached tokens of a request are the longest prefix (in whole tokens) it shares with any earlier
  request carrying the same ``prompt_cache_key``, rounded down to a multiple of ``block``, and 0 when
  that is under ``minimum``. OpenAI's published rules are ``minimum`` = 1,024 and ``block`` = 128;
  the relaxed rules (0 / 1) measure the request layout itself, since the W5/W6 planner prompts with
  the ``lookup`` tool alone are 500–900 tokens, under OpenAI's minimum, and get no cache hit at all.

Workloads (from :mod:`benchmarks.side.economy`): W5 with one failure (10 steps, ``s5`` fails once)
and W6 (20 steps, ``s9`` fails once), upfront policy, three planner calls each. Tool sets: the
``lookup`` tool alone; twelve tools (``lookup`` and eleven others, each with a one-sentence
description and two or three typed parameters), as a real agent's tool list; and the same twelve
tools with about 1,000 characters of operator instructions. Only ``lookup`` is ever called.

Cost at OpenAI's published gpt-4.1 prices (https://openai.com/api/pricing, as published at the
model's launch, April 2025):
input $2.00, cached input $0.50, output $8.00 per million tokens — with caching (what the run's
``ModelCalled`` events are charged) against the same tokens all at the full input price.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.side.prompt_cache`` (a few seconds). It is not part
of ``benchmarks.compare``, whose workloads are measured side by side with peer frameworks.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from benchmarks.side.common import FailOnce, px_lookup
from benchmarks.side.economy import W6_FAIL, W6_STEPS, task_steps
from planexec import Agent, Planner, tool
from planexec.log import ModelCalled
from planexec.models import OpenAIModel, Price, Providers, allow_model_requests
from planexec.tools import Tool

__all__ = ["CacheRules", "PromptCacheServer", "main", "measure"]

MODEL = "gpt-4.1"
INPUT_PRICE, CACHED_INPUT_PRICE, OUTPUT_PRICE = 2.00, 0.50, 8.00
"""OpenAI's published gpt-4.1 prices, dollars per million tokens (April 2025)."""
GPT_4_1 = Price(input=INPUT_PRICE, output=OUTPUT_PRICE, cached_input=CACHED_INPUT_PRICE)
CHARS_PER_TOKEN = 4


# -- the stand-in server ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheRules:
    """When a provider serves a prefix from its cache: at least ``minimum`` tokens, in ``block`` steps."""

    name: str
    minimum: int
    block: int


OPENAI_RULES = CacheRules("openai 1024/128", minimum=1024, block=128)
RELAXED_RULES = CacheRules("relaxed 0/1", minimum=0, block=1)


def tokens(chars: int) -> int:
    """Tokens of ``chars`` characters: ceil(chars ÷ 4)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def prompt_text(body: dict[str, Any]) -> str:
    """A Chat Completions request as the provider reads it: the response format, tools, messages."""
    parts = [json.dumps(body.get("response_format"), separators=(",", ":"))]
    parts.append(json.dumps(body.get("tools"), separators=(",", ":")))
    for message in body.get("messages", []):
        calls = message.get("tool_calls")
        parts.append(f"<{message.get('role')}>{message.get('content') or ''}{json.dumps(calls) if calls else ''}")
    return "\n".join(parts)


def shared_chars(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@dataclass
class PromptCache:
    """Earlier prompts per cache key, and the cached tokens a new prompt is reported."""

    rules: CacheRules
    seen: dict[str, list[str]] = field(default_factory=dict)

    def cached_tokens(self, key: str, prompt: str) -> int:
        """Cached tokens of ``prompt`` (then remembered under ``key``), under :attr:`rules`."""
        earlier = self.seen.setdefault(key, [])
        prefix = max((shared_chars(prompt, e) for e in earlier), default=0)
        earlier.append(prompt)
        whole = prefix // CHARS_PER_TOKEN
        cached = whole - whole % self.rules.block
        return cached if cached >= self.rules.minimum else 0


@dataclass(frozen=True)
class Served:
    """One request as the stand-in answered it."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    streamed: bool


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PromptCacheServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.endswith("/chat/completions"):
            self._json({"error": {"message": f"no such path {self.path}", "type": "invalid_request"}}, 404)
            return
        reply = self.server.next_reply()
        if reply is None:
            self._json({"error": {"message": "no scripted reply left", "type": "invalid_request"}}, 400)
            return
        usage = self.server.usage_of(body, reply)
        if body.get("stream"):
            self._stream(body, reply, usage)
        else:
            self._json(_completion(body["model"], reply, usage), 200)

    def _json(self, payload: dict[str, Any], status: int) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, body: dict[str, Any], reply: str, usage: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for chunk in _chunks(body["model"], reply, usage if with_usage else None):
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _usage(prompt: int, cached: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _completion(model: str, text: str, usage: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    }


def _chunks(model: str, text: str, usage: dict[str, Any] | None, pieces: int = 1) -> Iterator[dict[str, Any]]:
    """The reply as streamed chunks: its text in ``pieces``, the finish, then usage when asked for.

    One piece by default: the planner starts steps as they stream in, so with several pieces a
    step can fail before the last steps have arrived, and the patch request's record (and its
    size) would depend on timing."""

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [choice],
        }

    size = max(1, -(-len(text) // pieces))
    yield chunk({"role": "assistant", "content": ""}, None)
    for start in range(0, len(text), size):
        yield chunk({"content": text[start : start + size]}, None)
    yield chunk({}, "stop")
    if usage is not None:
        yield {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": usage,
        }


class PromptCacheServer(ThreadingHTTPServer):
    """A stand-in OpenAI Chat Completions server on 127.0.0.1 (ephemeral port) that answers with
    ``replies`` in order and reports cached tokens under ``rules``; use it in a ``with`` block."""

    daemon_threads = True

    def __init__(self, replies: Sequence[str], rules: CacheRules) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cache = PromptCache(rules)
        self.served: list[Served] = []
        self._replies = list(replies)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = cast("tuple[str, int]", self.server_address)
        return f"http://{host}:{port}/v1"

    def next_reply(self) -> str | None:
        with self._lock:
            return self._replies.pop(0) if self._replies else None

    def usage_of(self, body: dict[str, Any], reply: str) -> dict[str, Any]:
        """Usage of one request, as OpenAI reports it; the request is remembered for later ones."""
        prompt = prompt_text(body)
        with self._lock:
            cached = self.cache.cached_tokens(str(body.get("prompt_cache_key") or ""), prompt)
            served = Served(tokens(len(prompt)), cached, tokens(len(reply)), bool(body.get("stream")))
            self.served.append(served)
        return _usage(served.prompt_tokens, served.cached_tokens, served.completion_tokens)

    def __enter__(self) -> PromptCacheServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join()


# -- planner replies in the strict wire form --------------------------------------------------------


def wire_step(step: dict[str, Any]) -> dict[str, Any]:
    """``step`` as a strict-schema answer gives it: every member, ``args`` as JSON text."""
    return {
        "id": step["id"],
        "description": step["description"],
        "tool": step["tool"],
        "args": json.dumps(step["args"]),
        "depends_on": step["depends_on"],
        "executor": None,
        "allowed_tools": [],
        "expected": None,
        "checks": [],
        "output_schema": None,
        "effect": "read",
        "approval": "auto",
        "on_fail": None,
        "confidence": None,
    }


def _answer(**given: Any) -> str:
    members: dict[str, Any] = {
        "reason": "",
        "steps": [],
        "confidence": None,
        "question": None,
        "give_up": None,
        "answer": None,
    }
    return json.dumps(members | given)


def replan_script(n: int, fail: str) -> list[str]:
    """The planner's three replies: the plan, the patch from the failed step on, the answer."""
    steps = [wire_step(s) for s in task_steps(n)]
    at = next(i for i, s in enumerate(steps) if s["id"] == fail)
    return [
        _answer(reason="one lookup per record", steps=steps),
        _answer(reason="the record was locked: try it again", steps=steps[at:]),
        _answer(answer="ok"),
    ]


# -- tool sets ------------------------------------------------------------------------------------


def _other_tools() -> list[Tool]:
    """Eleven tools a records assistant might carry beside ``lookup``; none is called here."""

    @tool
    async def search_records(query: str, limit: int = 20) -> list[str]:
        """Search the ledger for records whose text matches a query."""
        return []

    @tool
    async def get_customer(customer_id: str, include_history: bool = False) -> dict[str, str]:
        """Fetch a customer's profile by id, optionally with their order history."""
        return {}

    @tool
    async def list_invoices(customer_id: str, status: str = "open", since: str = "") -> list[str]:
        """List a customer's invoices with a given status, issued on or after a date."""
        return []

    @tool
    async def create_ticket(title: str, body: str, priority: int = 3) -> str:
        """Open a support ticket and return its id."""
        return ""

    @tool
    async def send_email(to: str, subject: str, body: str) -> bool:
        """Send a plain-text email from the team's shared address."""
        return True

    @tool
    async def convert_currency(amount: float, from_currency: str, to_currency: str) -> float:
        """Convert an amount between two ISO 4217 currencies at today's rate."""
        return amount

    @tool
    async def schedule_meeting(attendees: list[str], start: str, minutes: int = 30) -> str:
        """Book a meeting for the attendees at an ISO 8601 start time and return its link."""
        return ""

    @tool
    async def read_file(path: str, max_bytes: int = 65536) -> str:
        """Read a text file from the shared drive."""
        return ""

    @tool
    async def web_search(query: str, max_results: int = 5) -> list[str]:
        """Search the web and return the titles and addresses of the top results."""
        return []

    @tool
    async def summarize(text: str, max_words: int = 100) -> str:
        """Summarise a text in at most the given number of words."""
        return ""

    @tool
    async def calculate(expression: str, precision: int = 2) -> float:
        """Evaluate an arithmetic expression and round the result."""
        return 0.0

    return [
        search_records,
        get_customer,
        list_invoices,
        create_ticket,
        send_email,
        convert_currency,
        schedule_meeting,
        read_file,
        web_search,
        summarize,
        calculate,
    ]


OPERATOR_INSTRUCTIONS = " ".join(
    [
        "You plan work for the records team of a mid-sized retailer.",
        "Prefer reading before writing: look records up and check what you find before any step changes something.",
        "Never email a customer or open a ticket unless the goal asks for it in so many words.",
        "Amounts are in euros unless a record says otherwise; convert amounts in other currencies before comparing.",
        "Dates are ISO 8601 and in the Europe/Paris time zone.",
        "When a record is locked, try it again once; if it is still locked, say so in the answer rather than guessing.",
        "Keep plans short: one step per record or per action, and no step that only restates another's result.",
        "Do not look up a customer's full history unless the goal needs it; it is slow and holds personal data.",
        "Answers are for colleagues: plain sentences, figures with their units, no speculation.",
        "If the goal is ambiguous, ask one question rather than planning for every reading of it.",
        "Steps that send anything outside the company need a human's approval; mark them so.",
        "Summaries quote record ids so that a colleague can check them.",
    ]
)
"""About 1,000 characters of operator instructions, as an agent's system prompt adds to the planner's."""


@dataclass(frozen=True)
class ToolSet:
    """What the planner is given beside the task: the tools (``lookup`` first) and instructions."""

    name: str
    extra_tools: Callable[[], list[Tool]]
    instructions: str = ""


TOOL_SETS = (
    ToolSet("lookup only", list),
    ToolSet("12 tools", _other_tools),
    ToolSet("12 tools + instructions", _other_tools, OPERATOR_INSTRUCTIONS),
)


# -- one measured run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    steps: int
    fail: str


WORKLOADS = (Workload("W5 one failure", 10, "s5"), Workload("W6", W6_STEPS, W6_FAIL))


def _share(cached: Sequence[int], total: Sequence[int]) -> float:
    return round(sum(cached) / sum(total), 3) if sum(total) else 0.0


def _dollars(input_tokens: int, output_tokens: int, cached: int = 0) -> float:
    fresh = input_tokens - cached
    return (fresh * INPUT_PRICE + cached * CACHED_INPUT_PRICE + output_tokens * OUTPUT_PRICE) / 1e6


def _saving(paid: float, full: float) -> float:
    """The share of ``full`` not paid."""
    return round(1 - paid / full, 3) + 0.0 if full else 0.0  # + 0.0: no -0.0


def figures(calls: Sequence[ModelCalled]) -> dict[str, Any]:
    """Per planner call input and cached tokens, the shares served from cache, and the cost."""
    inputs = [c.usage.input_tokens for c in calls]
    cached = [c.usage.cached_input_tokens for c in calls]
    output = sum(c.usage.output_tokens for c in calls)
    charged = sum(c.cost for c in calls)
    uncached = _dollars(sum(inputs), output)
    assert math.isclose(charged, _dollars(sum(inputs), output, sum(cached))), "the run was charged another price"
    return {
        "purposes": [c.purpose for c in calls],
        "input_tokens": inputs,
        "cached_tokens": cached,
        "output_tokens": output,
        "cached_share_after_first": _share(cached[1:], inputs[1:]),
        "cached_share_all": _share(cached, inputs),
        "cost_usd": round(charged, 6),
        "cost_usd_without_cache": round(uncached, 6),
        "saving": _saving(charged, uncached),
        "input_saving": _saving(_dollars(sum(inputs), 0, sum(cached)), _dollars(sum(inputs), 0)),
    }


async def measure(workload: Workload, tools: ToolSet, rules: CacheRules) -> dict[str, Any]:
    """One run of ``workload`` with ``tools`` through ``OpenAIModel``, cached tokens under ``rules``."""
    fails = FailOnce(workload.fail)
    providers = Providers.default().with_price(MODEL, GPT_4_1)
    with PromptCacheServer(replan_script(workload.steps, workload.fail), rules) as server:
        async with OpenAIModel(MODEL, base_url=server.url, api_key="x") as model:
            planner = Planner(model=model, instructions=tools.instructions)
            agent = Agent(planner, tools=[px_lookup(fails), *tools.extra_tools()], store=None, providers=providers)
            result = await agent.run("look every record up")
        assert result.ok, result.stop
        assert len(server.served) == 3, "three planner calls: propose, patch, finish"
        assert fails.calls[workload.fail] == 2, "the failing step ran twice"
        streamed = sum(s.streamed for s in server.served)
    calls = [e for e in result.events if isinstance(e, ModelCalled) and e.role == "planner"]
    out = {"workload": workload.name, "tools": tools.name, "rules": rules.name, "streamed_calls": streamed}
    return out | figures(calls)


# -- report -----------------------------------------------------------------------------------------


def notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Why a run got no cache hit under OpenAI's rules: the prefix it shares is under the minimum."""
    relaxed = {(r["workload"], r["tools"]): r for r in rows if r["rules"] == RELAXED_RULES.name}
    out = []
    for r in rows:
        if r["rules"] != OPENAI_RULES.name or any(r["cached_tokens"]):
            continue
        prefix = max(relaxed[r["workload"], r["tools"]]["cached_tokens"])
        out.append(
            f"{r['workload']}, {r['tools']}: prompts of {min(r['input_tokens'])}–{max(r['input_tokens'])} tokens"
            f" share at most {prefix} with an earlier one, under OpenAI's {OPENAI_RULES.minimum}-token minimum:"
            " no cache hit."
        )
    return out


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        "| workload | tools | cache rules | input tokens per call | cached per call "
        "| cached share, calls 2+ | cached share, all | cost | cost without cache | saving: input, all |\n"
        "|---|---|---|---|---|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['tools']} | {r['rules']} | {' / '.join(map(str, r['input_tokens']))} "
            f"| {' / '.join(map(str, r['cached_tokens']))} | {r['cached_share_after_first']:.0%} "
            f"| {r['cached_share_all']:.0%} | ${r['cost_usd']:.5f} | ${r['cost_usd_without_cache']:.5f} "
            f"| {r['input_saving']:.0%}, {r['saving']:.0%} |"
        )
    return "\n".join(lines)


async def _all() -> list[dict[str, Any]]:
    return [await measure(w, t, r) for w in WORKLOADS for t in TOOL_SETS for r in (OPENAI_RULES, RELAXED_RULES)]


def main() -> None:
    allow_model_requests(True)
    rows = asyncio.run(_all())
    for row in rows:
        print(json.dumps(row))
    print()
    print(markdown(rows))
    print()
    print(
        f"Tokens are characters ÷ 4. Prices: gpt-4.1 ${INPUT_PRICE:.2f} input, ${CACHED_INPUT_PRICE:.2f}"
        f" cached input, ${OUTPUT_PRICE:.2f} output per million tokens (OpenAI, April 2025)."
    )
    for line in notes(rows):
        print(line)
    print("The relaxed rules (0/1) measure what the request layout lets a cache reuse, whatever the prompt's size.")


if __name__ == "__main__":
    main()
