"""Failed attempts of model calls are in the log: each one an event with its status, its error and
the wait before the next attempt (the provider's ``retry-after`` honoured), counted as requests in
the run's usage, and replayed exactly."""

from __future__ import annotations

from planexec import Agent
from planexec.log import ModelAttemptFailed, ModelCalled, RunState
from planexec.models import ModelCallError, ModelRetryPolicy
from planexec.runtime import replay_log
from planexec.testing import ScriptedModel
from tests.support import SAFETY, add, events_of

PLAN = {"steps": [{"id": "s1", "description": "add", "tool": "add", "args": {"a": 2, "b": 3}}]}
SLOW_DOWN = ModelCallError("answered 429: slow down", provider="scripted", retryable=True, status=429, retry_after=0.02)
BROKEN = ModelCallError("answered 503: overloaded", provider="scripted", retryable=True, status=503)
RETRY = ModelRetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.05, jitter=0)


async def test_each_failed_attempt_is_an_event_and_a_request() -> None:
    planner = ScriptedModel([SLOW_DOWN, BROKEN, PLAN, {"answer": "5"}], retry=RETRY)
    result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "goal_met"
    failed = events_of(result, ModelAttemptFailed)
    assert [(f.attempt, f.status, f.purpose) for f in failed] == [
        (1, 429, "planner.propose"),
        (2, 503, "planner.propose"),
    ]
    assert failed[0].retry_after == 0.02
    assert failed[0].retry_in is not None
    assert failed[0].retry_in >= 0.02
    assert failed[1].retry_in is not None
    assert failed[1].retry_after is None
    assert "slow down" in failed[0].error
    calls = events_of(result, ModelCalled)
    assert len(calls) == 2  # the attempts are one call
    assert result.usage.failed_requests == 2
    assert result.usage.requests == sum(c.usage.requests for c in calls) + 2
    folded = RunState.fold(result.events)
    assert folded.usage == result.usage

    report = await replay_log(list(result.events))
    assert report.matched, report.divergence


async def test_the_last_failed_attempt_is_logged_with_no_retry_before_the_call_fails() -> None:
    gone = ModelCallError("answered 500: gone", provider="scripted", retryable=True, status=500)
    planner = ScriptedModel([gone, gone, gone], retry=RETRY)
    result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "error"
    failed = events_of(result, ModelAttemptFailed)
    assert [f.attempt for f in failed] == [1, 2, 3]
    assert [f.retry_in is None for f in failed] == [False, False, True]
    (call,) = events_of(result, ModelCalled)
    assert call.error is not None
    assert "gone" in call.error
    assert result.usage.failed_requests == 3
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_fallback_list_skips_a_failed_model_while_it_cools_down() -> None:
    from planexec.models import FallbackModel, Message, ModelRequest

    down = ModelCallError("answered 503: down", provider="a", retryable=True, status=503)
    first = ScriptedModel([down] * 3 + ["a is back"], name="a", retry=RETRY)
    second = ScriptedModel(["b one", "b two", "b three"], name="b", retry=RETRY)
    clock = _Clock()
    both = FallbackModel([first, second], cooldown=30, clock=clock)
    ask = ModelRequest(messages=(Message(role="user", content="hi"),))

    one = await both.request(ask)
    assert (one.text, one.answered_by) == ("b one", "b")
    assert len(first.calls) == 3  # a's whole retry cycle, once

    clock.now += 10  # a is cooling down: it is not asked at all
    two = await both.request(ask)
    assert (two.text, two.answered_by) == ("b two", "b")
    assert len(first.calls) == 3

    clock.now += 25  # the cool-down is over: a is asked first again
    three = await both.request(ask)
    assert (three.text, three.answered_by) == ("a is back", "a")
    assert len(second.calls) == 2


async def test_the_model_of_a_fallback_list_that_answered_is_logged_per_call() -> None:
    from planexec.models import FallbackModel

    down = ModelCallError("answered 503: down", provider="a", retryable=False, status=503)
    first = ScriptedModel([down], name="primary", retry=RETRY)
    second = ScriptedModel([PLAN, {"answer": "5"}], name="backup", retry=RETRY)
    planner = FallbackModel([first, second], cooldown=60)
    result = await Agent(planner, tools=[add], budget=SAFETY).run("What is 2 + 3?")

    assert result.stop.kind == "goal_met"
    calls = events_of(result, ModelCalled)
    assert [(c.model, c.answered_by) for c in calls] == [("primary > backup", "backup")] * 2
    assert len(first.calls) == 1  # the second call did not ask the model that was down
    report = await replay_log(list(result.events))
    assert report.matched, report.divergence
