"""Failures and how they are routed: patches, retries, timeouts, invalid arguments, crashes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from planexec import Agent, Planner, RetryPolicy, ToolError, TransientToolError, tool
from planexec.errors import UnrecoverableError
from planexec.log import ModelCalled, PlanProposed, StepAttemptFailed, StepCancelled, StepFailed, StepStarted
from planexec.testing import ScriptedModel
from tests.support import SAFETY, Blocker, FailingTool, add, events_of, failing_tool, tool_step

NO_WAIT = RetryPolicy(initial_delay=0, jitter=0)


GIVE_UP = {"reason": "nothing more to try", "steps": []}


async def test_tool_failure_is_patched_with_a_data_gathering_step_and_finished_steps_stay() -> None:
    calls: dict[str, int] = {"fetch": 0, "parse": 0, "lookup_price": 0, "price_of": 0}

    @tool
    async def fetch(url: str) -> dict[str, str]:
        """Fetch a product page."""
        calls["fetch"] += 1
        return {"name": "lamp", "url": url}

    @tool
    async def parse(page: dict[str, str]) -> int:
        """Read the price from a product page."""
        calls["parse"] += 1
        raise ToolError("the page has no price field")

    @tool
    async def lookup_price(name: str) -> int:
        """Look a product's price up in the catalogue."""
        calls["lookup_price"] += 1
        return 40

    @tool
    async def price_of(page: dict[str, str], catalogue: int) -> int:
        """Combine a page with a catalogue price."""
        calls["price_of"] += 1
        return catalogue + 2

    planner = ScriptedModel(
        [
            {
                "reason": "fetch then parse",
                "steps": [
                    tool_step("fetch", "fetch", {"url": "https://shop.example/lamp"}),
                    tool_step("parse", "parse", {"page": "${fetch}"}, "fetch"),
                ],
            },
            {
                "reason": "the page lacks the price: look it up in the catalogue",
                "steps": [
                    tool_step("lookup", "lookup_price", {"name": "${fetch.name}"}, "fetch"),
                    tool_step("price", "price_of", {"page": "${fetch}", "catalogue": "${lookup}"}, "fetch", "lookup"),
                ],
            },
            {"answer": "42"},
        ]
    )
    result = await Agent(planner, tools=[fetch, parse, lookup_price, price_of]).run("price of the lamp")

    assert result.stop.kind == "goal_met"
    assert result.answer == "42"
    assert result.replans == 1
    assert calls == {"fetch": 1, "parse": 1, "lookup_price": 1, "price_of": 1}  # fetch was not run again
    assert result.outputs == {"fetch": {"name": "lamp", "url": "https://shop.example/lamp"}, "lookup": 40, "price": 42}

    parse_rec = result.steps["parse"]
    assert parse_rec.status == "failed"
    assert parse_rec.error is not None
    assert parse_rec.error.kind == "tool_error"
    assert "no price field" in parse_rec.error.message

    # The patch request names the failure and shows the finished step's output.
    assert [c.purpose for c in planner.calls] == ["planner.propose", "planner.patch", "planner.finish"]
    patch_prompt = planner.calls[1].last_user_text
    assert "parse" in patch_prompt
    assert "the page has no price field" in patch_prompt
    assert re.search(r"^- fetch .* → ", patch_prompt, re.MULTILINE)
    assert re.search(r"^- parse .* ✗ failed: ", patch_prompt, re.MULTILINE)

    # Version 2: made by the planner for the stated reason, keeping the finished step.
    assert [p.version for p in result.plans] == [1, 2]
    v2 = result.plans[1]
    assert v2.author == "planner"
    assert v2.reason == "the page lacks the price: look it up in the catalogue"
    assert v2.ids == ("fetch", "lookup", "price")
    assert v2.step("fetch") == result.plans[0].step("fetch")
    triggers = [e.trigger for e in events_of(result, PlanProposed)]
    assert triggers == ["initial", "failure"]
    assert [e.step_id for e in events_of(result, StepStarted)].count("fetch") == 1
    assert result.steps["lookup"].plan_version == 2


async def test_transient_errors_are_retried_and_every_attempt_is_recorded() -> None:
    attempts: list[int] = []

    @tool(retry=RetryPolicy(max_attempts=4, initial_delay=0))
    async def flaky(x: int) -> int:
        """Fails twice, then works."""
        attempts.append(x)
        if len(attempts) < 3:
            raise TransientToolError(f"busy #{len(attempts)}")
        return x * 10

    planner = ScriptedModel([{"steps": [tool_step("s1", "flaky", {"x": 4})]}, {"answer": "40"}])
    result = await Agent(planner, tools=[flaky]).run("retry")

    assert result.stop.kind == "goal_met"
    assert result.outputs == {"s1": 40}
    assert len(attempts) == 3
    rec = result.steps["s1"]
    assert rec.attempts == 3
    assert [e.kind for e in rec.attempt_errors] == ["transient", "transient"]
    assert "busy #1" in rec.attempt_errors[0].message
    failed = events_of(result, StepAttemptFailed)
    assert [(e.attempt, e.error.kind, e.retry_in) for e in failed] == [(1, "transient", 0.0), (2, "transient", 0.0)]
    assert result.tool_calls == 3
    assert result.replans == 0


async def test_retries_used_up_fail_the_step_with_the_transient_kind() -> None:
    down = FailingTool(
        "service unavailable", name="down", error=TransientToolError, retry=RetryPolicy(max_attempts=2, initial_delay=0)
    )
    planner = ScriptedModel([{"steps": [tool_step("s1", "down", {})]}, GIVE_UP, {"answer": "unavailable"}])
    result = await Agent(planner, tools=[down.tool]).run("retry")

    assert down.calls == 2
    rec = result.steps["s1"]
    assert rec.status == "failed"
    assert rec.error is not None
    assert rec.error.kind == "transient"
    assert rec.attempts == 2
    assert "transient: down: service unavailable" in planner.calls[1].last_user_text
    assert result.stop.kind == "goal_met"


async def test_a_plain_tool_error_is_not_retried() -> None:
    broken = FailingTool("bad input file", name="broken", retry=NO_WAIT)
    planner = ScriptedModel([{"steps": [tool_step("s1", "broken", {})]}, GIVE_UP, {"answer": "no"}])
    result = await Agent(planner, tools=[broken.tool]).run("once")
    assert broken.calls == 1
    assert events_of(result, StepAttemptFailed) == []
    rec = result.steps["s1"]
    assert rec.error is not None
    assert rec.error.kind == "tool_error"


async def test_timeout_is_retried_then_fails() -> None:
    hang = Blocker("hang", timeout=0.05, retry=RetryPolicy(max_attempts=2, initial_delay=0))
    planner = ScriptedModel([{"steps": [tool_step("s1", "hang", {})]}, GIVE_UP, {"answer": "timed out"}])
    result = await Agent(planner, tools=[hang.tool], budget=SAFETY).run("wait")

    assert result.stop.kind == "goal_met", result.stop
    assert hang.calls == 2
    assert hang.cancellations == 2
    retried = events_of(result, StepAttemptFailed)
    assert [(e.attempt, e.error.kind) for e in retried] == [(1, "timeout")]
    failed = events_of(result, StepFailed)
    assert len(failed) == 1
    assert failed[0].error.kind == "timeout"
    assert failed[0].attempts == 2
    assert "timed out after 0.05s" in failed[0].error.message
    assert "timeout" in planner.calls[1].last_user_text


async def test_invalid_arguments_found_at_call_time_are_repaired_by_the_planner() -> None:
    word_calls = 0

    @tool
    async def word() -> str:
        """Return a number written as a word."""
        nonlocal word_calls
        word_calls += 1
        return "three"

    planner = ScriptedModel(
        [
            {"steps": [tool_step("w", "word", {}), tool_step("sum", "add", {"a": "${w}", "b": 1}, "w")]},
            {"reason": "a must be a number: use 3", "steps": [tool_step("sum2", "add", {"a": 3, "b": 1})]},
            {"answer": "4"},
        ]
    )
    result = await Agent(planner, tools=[word, add]).run("three plus one")

    assert result.stop.kind == "goal_met"
    assert result.outputs == {"w": "three", "sum2": 4}
    assert word_calls == 1
    rec = result.steps["sum"]
    assert rec.status == "failed"
    assert rec.error is not None
    assert rec.error.kind == "invalid_arguments"
    assert [p.where for p in rec.error.problems] == ["a"]
    assert rec.args == {"a": "three", "b": 1}  # the resolved arguments are recorded
    patch_prompt = planner.calls[1].last_user_text
    assert "invalid_arguments" in patch_prompt
    assert "sum" in patch_prompt
    assert result.replans == 1


async def test_an_output_that_does_not_fit_the_return_type_fails_the_step() -> None:
    @tool
    async def count(text: str) -> int:
        """Count the words (but returns text by mistake)."""
        result: Any = f"{len(text.split())} words"
        return result  # type: ignore[no-any-return]

    planner = Planner(model=ScriptedModel([{"steps": [tool_step("c", "count", {"text": "a b"})]}]), replan="never")
    result = await Agent(planner, tools=[count]).run("count")
    assert result.stop.kind == "error"
    rec = result.steps["c"]
    assert rec.error is not None
    assert rec.error.kind == "invalid_output"


async def test_a_planner_model_that_raises_stops_the_run_with_an_error() -> None:
    planner = ScriptedModel([RuntimeError("the provider is down")])
    result = await Agent(planner, tools=[], budget=SAFETY).run("anything")
    assert result.stop.kind == "error"
    assert "RuntimeError" in result.stop.detail
    assert "the provider is down" in result.stop.detail
    calls = events_of(result, ModelCalled)
    assert len(calls) == 1
    assert calls[0].error is not None
    assert "the provider is down" in calls[0].error
    assert result.events[-1].kind == "run_finished"


async def test_an_exhausted_scripted_planner_stops_the_run_with_an_error() -> None:
    @tool
    async def ping() -> str:
        """Ping."""
        return "pong"

    planner = ScriptedModel([{"steps": [tool_step("p", "ping", {})]}])  # no final answer scripted
    result = await Agent(planner, tools=[ping], budget=SAFETY).run("ping")
    assert result.stop.kind == "error"
    assert "UnexpectedModelCall" in result.stop.detail
    assert result.outputs == {"p": "pong"}  # partial results are kept
    with pytest.raises(UnrecoverableError) as raised:
        result.raise_for_stop()
    assert raised.value.result is result


async def test_a_planner_crash_during_a_patch_cancels_running_steps_and_nothing_hangs() -> None:
    slow = Blocker("slow")
    failing = failing_tool("broken", name="failing", after=slow.started)

    planner = ScriptedModel(
        [{"steps": [tool_step("s", "slow", {}), tool_step("f", "failing", {})]}, RuntimeError("planner crashed")]
    )
    result = await Agent(planner, tools=[slow.tool, failing], budget=SAFETY).run("crash")

    assert result.stop.kind == "error", result.stop
    assert "planner crashed" in result.stop.detail
    assert slow.cancelled
    assert [e.step_id for e in events_of(result, StepCancelled)] == ["s"]
    assert result.steps["s"].status == "cancelled"
    assert result.events[-1].kind == "run_finished"


async def test_an_executor_step_on_an_unknown_executor_route_is_a_static_problem() -> None:
    @tool
    async def ping() -> str:
        """Ping."""
        return "pong"

    bad = {"steps": [tool_step("p", "ping", {}, executor="gpu")]}
    good = {"steps": [tool_step("p", "ping", {})]}
    planner = ScriptedModel([bad, good, {"answer": "pong"}])
    result = await Agent(planner, tools=[ping]).run("ping")
    assert result.stop.kind == "goal_met"
    assert "unknown executor 'gpu'" in planner.calls[1].last_user_text


async def test_a_timeout_raised_by_a_tool_without_a_timeout_of_its_own_is_logged_as_a_timeout() -> None:
    from planexec import Budget, RetryPolicy

    @tool(retry=RetryPolicy(max_attempts=1))
    async def slow() -> str:
        """Gives up waiting on something."""
        raise TimeoutError("the upstream did not answer")

    planner = ScriptedModel([{"steps": [tool_step("s", "slow", {})]}], name="p")
    result = await Agent(planner, tools=[slow], budget=Budget(replans=0)).run("go")
    error = result.steps["s"].error
    assert error is not None
    assert error.kind == "timeout"
    assert "the upstream did not answer" in error.message
