"""The ReAct baseline: one model in a tool-calling loop, no plan.

Each turn the model either asks for tool calls (run at once, their results sent back) or answers.
It runs under the same :class:`~planexec.Budget` as a planner–executor run, with the same tool
checks (schema, timeout, retries, output schema), the same stall rule (the same call failing
again) and the same stop reasons, and it logs the same kinds of events — so that the two can be
compared fairly on one suite. A model's reply is held to the same rules as a planner's
(:func:`~planexec.runtime.accepted_reply`: tool calls whose arguments are JSON objects, nothing
nested too deep or longer than ``Limits().max_reply_chars``, usage and cost that are numbers): one
that breaks them stops the run as a failed model call. It has no plan to approve and no approval
gate: a ``sensitive`` tool is called like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from planexec._util.sync import run_sync
from planexec.errors import Problem, UsageError
from planexec.log import (
    BudgetExhaustedEvent,
    Event,
    ModelCalled,
    RunFinished,
    RunStarted,
    RunState,
    StallDetected,
    StopReason,
    ToolCalled,
    canonical_call,
)
from planexec.models import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ToolCall,
    ToolSpec,
    Usage,
    estimate_tokens,
    missing_keys,
    resolve_model,
)
from planexec.react._calls import CallSite, call_tool, observation
from planexec.runtime import Budget, BudgetHit, Limits, RunContext, accepted_reply
from planexec.tools import Tool, ToolCrashed, Toolset

__all__ = ["DEFAULT_REACT_INSTRUCTIONS", "ReactAgent", "ReactResult"]

DEFAULT_REACT_INSTRUCTIONS = (
    "You reach the user's goal by calling tools. Each turn, decide what to do next and call the tools "
    "you need (several at once when they are independent); you will read their results. When the goal "
    "is met, reply with the final answer only."
)


_MAX_REPLY_CHARS = Limits().max_reply_chars
"""The longest reply kept, as a planner–executor run keeps it by default."""


@dataclass(frozen=True, kw_only=True)
class ReactResult:
    """Everything a ReAct run did: the answer (if any), why it stopped, every tool call with its
    outcome, usage and cost, and the event log (``run_started``, ``model_called``, ``tool_called``,
    ``stall_detected``, ``budget_exhausted``, ``run_finished``; a ``tool_called`` event's
    ``step_id`` names the turn, as ``turn-N``)."""

    run_id: str
    goal: str
    answer: str | None
    stop: StopReason
    calls: tuple[ToolCalled, ...]
    """Every tool call the model asked for, in the order they ended; ``attempts == 0``: refused
    before any attempt (an unknown tool, arguments that do not fit)."""
    turns: int
    usage: Usage
    cost: float
    model_calls: int
    tool_calls: int
    """Tool-call attempts made, retries included (as ``RunResult.tool_calls`` counts them)."""
    started_at: float
    finished_at: float
    events: tuple[Event, ...]
    messages: tuple[Message, ...] = ()
    """The conversation after the instructions — the earlier turns given as ``history``, the
    goal, each tool call and its result, the answer: the ``history`` of the next turn."""

    @property
    def ok(self) -> bool:
        return self.stop.ok

    @property
    def duration(self) -> float:
        return self.finished_at - self.started_at


class _Stop(Exception):
    def __init__(self, reason: StopReason) -> None:
        self.reason = reason
        super().__init__(str(reason))


class ReactAgent:
    """One model and some tools, in a loop of at most ``max_turns`` model calls.

    ``model``: a model object or a model string (``scripted:replies.json``, ``openai:gpt-4o-mini``…).
    ``budget``: the same caps a planner–executor run has (``replans`` and ``steps`` do not apply).
    ``settings``: how the model is asked, on every turn.
    """

    def __init__(
        self,
        model: Model | str,
        *,
        tools: Sequence[Tool | Toolset] | Toolset = (),
        max_turns: int = 10,
        budget: Budget | None = None,
        instructions: str = DEFAULT_REACT_INSTRUCTIONS,
        context: RunContext | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        problems = []
        if max_turns < 1:
            problems.append(Problem(code="react", where="max_turns", message="must be >= 1"))
        if settings is not None and not isinstance(settings, ModelSettings):
            problems.append(Problem(code="react", where="settings", message="must be a ModelSettings(...)"))
        if problems:
            raise UsageError("invalid ReAct agent", problems)
        self.settings = settings or ModelSettings()
        self.model = resolve_model(model)
        self.tools = tools if isinstance(tools, Toolset) else Toolset(*tools)
        self.max_turns = max_turns
        self.budget = budget or Budget()
        self.instructions = instructions
        self.context = context or RunContext()

    async def run(
        self,
        goal: str,
        *,
        constraints: Sequence[str] = (),
        run_id: str | None = None,
        history: Sequence[Message] = (),
    ) -> ReactResult:
        """Run ``goal`` to its stop and return the result (also when the goal was not met). A model
        with no API key is refused before anything starts.

        ``history``: the conversation so far (an earlier result's ``messages``), for a goal that
        goes on from earlier ones; the model reads it before the goal, as one conversation."""
        missing = missing_keys([self.model])
        problems = []
        if not isinstance(goal, str) or not goal.strip():
            problems.append(Problem(code="goal", where="goal", message="the goal is empty"))
        problems += _history_problems(history)
        if missing or problems:
            raise UsageError("the run cannot start", [*missing, *problems])
        return await _Loop(self, goal, tuple(constraints), run_id or self.context.new_id(), tuple(history)).run()

    def run_sync(self, goal: str, *, constraints: Sequence[str] = (), run_id: str | None = None) -> ReactResult:
        """``run`` for code without an event loop. Inside a running one (Jupyter, async code) it raises
        :class:`UsageError`: ``await agent.run(...)`` there instead."""
        return run_sync(
            lambda: self.run(goal, constraints=constraints, run_id=run_id),
            call="ReactAgent.run_sync()",
            instead="agent.run(...)",
        )


def _history_problems(history: Sequence[Message]) -> list[Problem]:
    """What makes ``history`` unfit to go before a goal: each message that is not one a user, an
    assistant or a tool could have sent (text content, tool calls that are ToolCalls)."""
    if not isinstance(history, list | tuple):
        return [Problem(code="react", where="history", message="must be a sequence of Message(...)")]
    problems = []
    for i, m in enumerate(history):
        if not isinstance(m, Message) or m.role not in ("user", "assistant", "tool"):
            message = "must be a Message(...) of a user, assistant or tool"
        elif not isinstance(m.content, str):
            message = f"its content must be text, not {type(m.content).__name__}"
        elif not isinstance(m.tool_calls, tuple | list) or not all(isinstance(c, ToolCall) for c in m.tool_calls):
            message = "its tool calls must be ToolCall(...) values"
        elif m.tool_call_id is not None and not isinstance(m.tool_call_id, str):
            message = "its tool_call_id must be text"
        else:
            continue
        problems.append(Problem(code="react", where=f"history[{i}]", message=message))
    return problems


class _Loop:
    """One run of a :class:`ReactAgent`: the conversation, the ledger and the log."""

    def __init__(
        self, agent: ReactAgent, goal: str, constraints: tuple[str, ...], run_id: str, history: tuple[Message, ...]
    ) -> None:
        self.agent = agent
        self.goal = goal
        self.run_id = run_id
        self.clock = agent.context.clock
        self.state = RunState()
        self.events: list[Event] = []
        self.calls: list[ToolCalled] = []
        self.turns = 0
        self.site = CallSite(
            run_id=run_id,
            tools=agent.tools,
            budget=agent.budget,
            state=self.state,
            clock=self.clock,
            rng=agent.context.rng(),
        )
        self.specs = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in agent.tools
        )
        task = goal if not constraints else goal + "\nConstraints:\n" + "\n".join(f"- {c}" for c in constraints)
        self.messages: list[Message] = [
            Message(role="system", content=agent.instructions),
            *history,
            Message(role="user", content=task),
        ]
        self.emit(
            RunStarted(
                at=self.clock(),
                run_id=run_id,
                goal=goal,
                constraints=constraints,
                policy="react",
                replan="never",
                budget=agent.budget.as_dict(),
                tools=agent.tools.names,
                config={"agent": "react", "model": agent.model.name, "max_turns": agent.max_turns}
                | ({"history": len(history)} if history else {}),
            )
        )

    def emit(self, event: Event) -> None:
        self.events.append(event)
        if not isinstance(event, ToolCalled):  # a tool call belongs to no step; its attempts are counted as made
            self.state.apply(event)

    async def run(self) -> ReactResult:
        answer: str | None = None
        wall = self.agent.budget.wall_time
        try:
            async with asyncio.timeout(None if wall is None else max(0.0, wall - self.state.active_time)):
                answer = await self._turns()
            stop = StopReason(kind="goal_met")
        except _Stop as stopped:
            stop = stopped.reason
        except BudgetHit as hit:
            stop = self._budget_stop(hit)
        except TimeoutError:
            stop = self._budget_stop(BudgetHit("wall_time", wall or 0.0, wall or 0.0))
        except ToolCrashed as crash:
            stop = StopReason(kind="error", code="tool_crashed", detail=str(crash))
        self.emit(RunFinished(at=self.clock(), stop=stop, answer=answer))
        state = self.state
        return ReactResult(
            run_id=self.run_id,
            goal=self.goal,
            answer=answer,
            stop=stop,
            calls=tuple(self.calls),
            turns=self.turns,
            usage=state.usage,
            cost=state.cost,
            model_calls=state.model_calls,
            tool_calls=state.tool_calls,
            started_at=state.started_at,
            finished_at=state.finished_at if state.finished_at is not None else state.started_at,
            events=tuple(self.events),
            messages=tuple(self.messages[1:]),
        )

    def _budget_stop(self, hit: BudgetHit) -> StopReason:
        self.emit(BudgetExhaustedEvent(at=self.clock(), budget=hit.budget, limit=hit.limit, used=hit.used))
        return StopReason(kind="budget_exhausted", detail=str(hit), budget=hit.budget)

    async def _turns(self) -> str:
        max_turns = self.agent.max_turns
        while self.turns < max_turns:
            self.turns += 1
            response = await self._ask()
            if response.refusal is not None or response.finish_reason == "refusal":
                refusal = response.refusal or ""
                raise _Stop(StopReason(kind="error", code="planner_failed", detail=f"the model refused: {refusal}"))
            if response.tool_calls:
                await self._act(response)
                continue
            answer = response.text.strip()
            if answer:
                self.messages.append(Message(role="assistant", content=response.text))
                return answer
            self.messages.append(Message(role="assistant", content=response.text))
            self.messages.append(Message(role="user", content="Reply with the final answer, or call a tool."))
        raise _Stop(
            StopReason(
                kind="budget_exhausted", detail=f"no answer within max_turns={max_turns} turns", budget="model_calls"
            )
        )

    async def _ask(self) -> ModelResponse:
        model = self.agent.model
        request = ModelRequest(
            messages=tuple(self.messages), tools=self.specs, settings=self.agent.settings, purpose="react"
        )
        estimate = estimate_tokens("".join(m.content for m in request.messages))
        self.agent.budget.check_model_call(self.state, self.clock(), estimate)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            response = accepted_reply(await model.request(request), _MAX_REPLY_CHARS, model)
        except Exception as e:
            detail = f"{type(e).__name__}: {e}"
            self.emit(self._model_called(model, request, loop.time() - t0, error=detail))
            raise _Stop(StopReason(kind="error", code="planner_failed", detail=f"the model failed: {detail}")) from None
        self.emit(self._model_called(model, request, loop.time() - t0, response=response))
        return response

    def _model_called(
        self,
        model: Model,
        request: ModelRequest,
        duration: float,
        *,
        response: ModelResponse | None = None,
        error: str | None = None,
    ) -> ModelCalled:
        return ModelCalled(
            at=self.clock(),
            role="executor",
            purpose=request.purpose,
            model=model.name,
            request_chars=request.chars,
            response=response,
            error=error,
            usage=response.usage if response is not None else Usage(),
            cost=(response.cost or 0.0) if response is not None else 0.0,
            duration=duration,
        )

    async def _act(self, response: ModelResponse) -> None:
        turn_id = f"turn-{self.turns}"
        self.messages.append(Message(role="assistant", content=response.text, tool_calls=response.tool_calls))

        async def act(call: ToolCall) -> ToolCalled:
            record = await call_tool(self.site, call, turn_id=turn_id)
            self.emit(record)  # logged as each call ends
            self.calls.append(record)
            return record

        outcomes = await asyncio.gather(*(act(c) for c in response.tool_calls), return_exceptions=True)
        hit: BudgetHit | None = None
        for call, outcome in zip(response.tool_calls, outcomes, strict=True):
            if isinstance(outcome, BudgetHit):
                hit = hit or outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                self.messages.append(Message(role="tool", content=observation(outcome), tool_call_id=call.id))
        if hit is not None:
            raise hit
        self._check_stall(turn_id)

    def _check_stall(self, turn_id: str) -> None:
        """The same call (tool and canonical arguments) failing a second time stops the run, as it
        stops a planner–executor run."""
        failed = [c for c in self.calls if c.step_id == turn_id and c.error is not None]
        for c in failed:
            key = canonical_call(c.tool, c.args)
            seen = self.state.failed_calls.get(key, 0)
            self.state.failed_calls[key] = seen + 1
            if seen:
                detail = f"{c.tool} failed again with the same arguments: {c.error}"
                self.emit(StallDetected(at=self.clock(), rule="repeated_failure", detail=detail))
                raise _Stop(StopReason(kind="stalled", detail=detail))
