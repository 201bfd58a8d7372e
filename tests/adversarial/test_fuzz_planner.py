"""Fuzzing the planner-output path: whatever a planner model sends — plans of any shape, broken
JSON, NaN, deep nesting, unknown tools, cycles, catastrophic regexes, hostile schemas, endless
turns, streamed or whole — the run ends, within its budget, with a typed stop reason (never an
internal error), and its log folds back to its result.

``PLANEXEC_FUZZ_EXAMPLES`` sets the number of examples (default 2,500, which CI runs with a fixed
seed; run 10,000 or more locally when the planner-output path changes). A failure prints the
smallest reply sequence that shows it.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planexec import Agent, Budget, Limits, Planner, RetryPolicy, ToolError, TransientToolError, tool
from planexec.log import ErrorCode, RunFinished, RunState, StopKind, dump_event
from planexec.models import ModelCallError, ModelResponse, StreamingScriptedModel
from planexec.store import MemoryStore, Redactor
from planexec.testing import ScriptedModel

EXAMPLES = int(os.environ.get("PLANEXEC_FUZZ_EXAMPLES", "2500"))
BUDGET = Budget(model_calls=8, tool_calls=30, steps=20, wall_time=20.0, replans=3)
LIMITS = Limits(max_output_chars=20_000, max_reply_chars=200_000, cancel_grace=0.2, max_concurrency=8)
GUARD_SECONDS = 40.0
"""Only turns a hang into a failure: the wall-time budget is 20 s, the runs take milliseconds."""


# -- tools the plans may name ----------------------------------------------------------------------


@tool
async def echo(value: Any = None) -> Any:
    """Give the value back."""
    return value


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
async def fail(reason: str = "no") -> str:
    """Always fail."""
    raise ToolError(reason)


@tool(retry=RetryPolicy(max_attempts=3, initial_delay=0, jitter=0))
async def flaky() -> str:
    """Fail in a way worth retrying."""
    raise TransientToolError("busy")


@tool(side_effect=True, requires_approval=True)
async def wipe(path: str = "/") -> str:
    """Never allowed without a human."""
    raise AssertionError("a tool that requires approval ran without one")


TOOLS = [echo, add, fail, flaky, wipe]
NAMES = ["echo", "add", "fail", "flaky", "wipe", "nope", "", "Echo", "x" * 80]
IDS = ["a", "b", "c", "d", "e", "a-1", "_x", "1bad", "", "a.b"]


# -- what a planner may send ------------------------------------------------------------------------
# Hostile values come from fixed pools drawn whole (one choice each), so that an example costs few
# draws and ten thousand of them fit in CI; small random JSON fills the gaps between them.


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


small_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4)),
    lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=3), inner, max_size=2)),
    max_leaves=4,
)
ARGS: list[Any] = [
    {},
    {"value": 1},
    {"value": "${a}"},
    {"value": "${b.x}"},
    {"value": "${c.0.y}"},
    {"value": "pre ${d} post"},
    {"value": "$${a}"},
    {"value": "${"},
    {"value": "${a.}"},
    {"value": "${nope}"},
    {"value": math.nan},
    {"value": -math.inf},
    {"value": 10**400},
    {"value": deep(150)},
    {"value": "\udcff\x00\x1b[2J"},
    {"value": "v" * 30_000},
    {"a": 1, "b": 2},
    {"a": "1", "b": None},
    {"a": "${a}", "b": "${b}"},
    {"reason": "${e}"},
    {"path": "/"},
    {"unknown": 1},
    [1, 2],
    "args",
    None,
]
CHECKS: list[Any] = [
    [],
    [{"kind": "non_empty"}],
    [{"kind": "contains", "text": "1"}],
    [{"kind": "matches", "pattern": "(a+)+$"}],
    [{"kind": "matches", "pattern": "(a|aa)*b"}],
    [{"kind": "matches", "pattern": "(?<=a)b"}],
    [{"kind": "matches", "pattern": r"(\w+)\1"}],
    [{"kind": "matches", "pattern": "["}],
    [{"kind": "schema", "json_schema": {"pattern": "(a+)+$"}}],
    [{"kind": "schema", "json_schema": {"$ref": "http://127.0.0.1:9/x.json"}}],
    [{"kind": "schema", "json_schema": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}],
    [{"kind": "schema", "json_schema": {"type": 17}}],
    [{"kind": "predicate", "name": "nope"}],
    [{"kind": "teleport"}],
    "checks",
]
SCHEMAS: list[Any] = [
    {"type": "string"},
    {"type": "object", "required": ["z"]},
    {"type": "array", "uniqueItems": True},
    {"multipleOf": 1e-308},
    {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "number"}]}, {"not": {}}]},
    {"type": "object", "patternProperties": {"(a+)+$": {}}},
    deep(200),
    "schema",
]
steps = st.fixed_dictionaries(
    {"id": st.sampled_from(IDS), "description": st.text(max_size=6)},
    optional={
        "tool": st.sampled_from([*NAMES, None]),
        "args": st.one_of(st.sampled_from(ARGS), st.dictionaries(st.sampled_from(["value", "a"]), small_json)),
        "depends_on": st.lists(st.sampled_from(IDS), max_size=3),
        "checks": st.sampled_from(CHECKS),
        "output_schema": st.sampled_from(SCHEMAS),
        "effect": st.sampled_from(["read", "write", "delete"]),
        "approval": st.sampled_from(["auto", "always", "never", "sometimes"]),
        "confidence": st.sampled_from([0.0, 0.5, 1.0, 1.5, -1.0, math.nan, None, "high"]),
        "allowed_tools": st.sampled_from([[], ["echo"], ["echo", "wipe"], ["nope"], ["echo", "echo"], "echo"]),
        "executor": st.sampled_from(["tools", "model", "nope"]),
    },
)
plans = st.fixed_dictionaries({"steps": st.lists(steps, max_size=6)}, optional={"reason": st.text(max_size=6)})
turns = st.fixed_dictionaries(
    {"stop": st.booleans()},
    optional={
        "thought": st.text(max_size=6),
        "confidence": st.sampled_from([0.9, 0.1, math.nan, 2.0, None]),
        "step": steps,
        "answer": st.sampled_from(["done", "", None, 7]),
    },
)
ODD: list[Any] = [
    "not json",
    "```json\n{}\n```",
    '{"steps": [',
    "NaN",
    '{"steps": NaN}',
    "",
    {"steps": [{"id": "a", "description": "d", "tool": "echo", "args": {"value": deep(3000)}}]},
    {"reason": "r" * 250_000, "steps": []},
    ModelResponse(refusal="no"),
    ModelCallError("the provider failed", provider="fuzz", retryable=False),
    ModelCallError("busy", provider="fuzz", retryable=True),
    ModelResponse(text="", finish_reason="tool_calls"),
    {"answer": "done"},
    {"answer": None},
    [],
    42,
]
replies = st.one_of(plans, plans, turns, st.sampled_from(ODD), small_json)
runs = st.fixed_dictionaries(
    {
        "replies": st.lists(replies, min_size=1, max_size=5),
        "policy": st.sampled_from(["upfront", "step"]),
        "replan": st.sampled_from(["on_failure", "after_each_step", "never"]),
        "stream": st.booleans(),
        "chunks": st.integers(min_value=1, max_value=40),
    }
)


# -- one run, and what must hold ---------------------------------------------------------------------

STOP_KINDS = set(get_args(StopKind))
ERROR_CODES = set(get_args(ErrorCode)) - {"internal"}


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


async def one_run(case: dict[str, Any]) -> None:
    script = list(case["replies"])
    model: ScriptedModel = (
        StreamingScriptedModel(script, chunks=case["chunks"]) if case["stream"] else ScriptedModel(script)
    )
    planner = Planner(model=model, policy=case["policy"], replan=case["replan"], max_repairs=1)
    executor = ScriptedModel(["done"] * 4, name="executor")
    store = MemoryStore(redactor=Redactor.off())  # the log is compared as written: redaction has tests of its own
    agent = Agent(planner, tools=TOOLS, executor=executor, budget=BUDGET, limits=LIMITS, store=store)
    async with asyncio.timeout(GUARD_SECONDS):
        result = await agent.run("fuzz the planner", run_id="fuzz")

    stop = result.stop
    assert stop.kind in STOP_KINDS - {"waiting"}, stop
    if stop.kind == "error":
        assert stop.code in ERROR_CODES, stop  # an internal error is a defect
    assert result.model_calls <= (BUDGET.model_calls or 0)
    state = RunState.fold(result.events)
    assert state.steps_started <= (BUDGET.steps or 0)
    assert state.tool_calls <= (BUDGET.tool_calls or 0) + 2  # a running step's retries stop at the cap
    assert isinstance(result.events[-1], RunFinished)
    assert state.stop == stop
    assert state.outputs == result.outputs
    logged = [s.event for s in await store.read("fuzz")]
    assert [dump_event(e) for e in logged] == [dump_event(e) for e in result.events]
    for event in logged:
        for value in _floats(dump_event(event)):
            assert math.isfinite(value)


def _floats(data: Any) -> Iterator[float]:
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("CI") == "true",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(case=runs)
def test_any_planner_output_ends_the_run_within_its_budget_with_its_log_intact(
    case: dict[str, Any], loop: asyncio.AbstractEventLoop
) -> None:
    loop.run_until_complete(one_run(case))
