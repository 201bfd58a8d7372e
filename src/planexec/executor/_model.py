"""The model executor: a cheaper model runs a bounded tool-using loop for one step."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec._util.strict_json import JSONRefused
from planexec._util.strict_json import loads as strict_loads
from planexec._util.tasks import cancel_within
from planexec.errors import Problem, UnknownToolError, UsageError
from planexec.executor._base import StepContext, StepFailure
from planexec.executor._outcome import StepError
from planexec.executor._profile import check_profile
from planexec.executor._tool_calls import checked_call
from planexec.models import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OutputSpec,
    Providers,
    ToolCall,
    ToolSpec,
    resolve_model,
)
from planexec.plan import Step, judge

__all__ = ["ModelExecutor"]

DEFAULT_INSTRUCTIONS = (
    "You carry out one step of a larger plan. Use the tools offered when they help; call several "
    "at once when they are independent. When the step is done, reply with its result only, or with "
    'JSON {"result": ..., "confidence": 0 to 1} to say how sure you are of it.'
)


@dataclass(kw_only=True)
class ModelExecutor:
    """Runs steps that name no tool: ``model`` reasons and calls tools for at most ``max_turns``.

    A step's model may call only the tools the step grants (``Step.allowed_tools``; none when it
    grants none), so that text a tool returns cannot talk it into using any other. ``tools`` limits
    further which tools this executor's steps may be granted (None: any tool of the agent).
    ``settings``: how this executor's model is asked, on every request. ``step_timeout``: seconds
    a whole step may take — every model turn and tool call in it; past it the step fails with an
    error of kind ``timeout``, and the run goes on as its failure policy says (None: no limit but
    the turns, the tools' own timeouts and the run's budget).

    ``description`` and ``capabilities`` (short tags such as ``"legal-review"``) tell the planner
    what this executor is for; it sees them in every planning request, with the executor's model,
    the tools it may be granted and its ``max_concurrency`` (at most that many of its steps run at
    once; the rest wait, while other executors' steps go on).
    """

    model: Model | str
    name: str = "model"
    tools: Sequence[str] | None = None
    max_turns: int = 6
    max_concurrency: int | None = None
    instructions: str = DEFAULT_INSTRUCTIONS
    settings: ModelSettings = field(default_factory=ModelSettings)
    step_timeout: float | None = None
    description: str = ""
    capabilities: Sequence[str] = ()
    _resolved: Model | None = field(default=None, init=False, repr=False)
    _resolved_by: Providers | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int) or self.max_turns < 1:
            problems.append(Problem(code="executor", where="max_turns", message="must be a whole number >= 1"))
        timeout = self.step_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
        ):
            problems.append(
                Problem(code="executor", where="step_timeout", message="must be a positive number of seconds, or None")
            )
        if not isinstance(self.settings, ModelSettings):
            problems.append(Problem(code="executor", where="settings", message="must be a ModelSettings(...)"))
        most = self.max_concurrency
        if most is not None and (type(most) is not int or most < 1):
            problems.append(Problem(code="executor", where="max_concurrency", message="must be a whole number >= 1"))
        self.description, self.capabilities, bad = check_profile(self.description, self.capabilities)
        problems += bad
        if problems:
            raise UsageError(f"invalid model executor {self.name!r}", problems)

    @property
    def kind(self) -> Literal["model"]:
        return "model"

    def resolved_model(self, providers: Providers | None = None) -> Model:
        """The model, a model string resolved through ``providers`` (``Providers.default()`` when
        None); made once for each providers value, and kept until another is asked for."""
        chosen = Providers.default() if providers is None else providers
        if self._resolved is None or self._resolved_by != chosen:
            self._resolved = resolve_model(self.model, providers=chosen)
            self._resolved_by = chosen
        return self._resolved

    async def run(self, step: Step, args: dict[str, Any], ctx: StepContext) -> Any:
        if self.step_timeout is None:
            return await self._steps_work(step, args, ctx, set())
        spawned: set[asyncio.Task[str]] = set()
        work = asyncio.ensure_future(self._steps_work(step, args, ctx, spawned))
        try:
            done, _ = await asyncio.wait((work,), timeout=self.step_timeout)
        except BaseException:  # the step itself was cancelled: its work goes with it
            cancel_within(work, ctx.cancel_grace, spawned=spawned)
            raise
        if done:
            return work.result()
        # Cancelled, and abandoned (with the tool calls it started) if it has not ended within the
        # grace: whatever it still logs comes before the step's failure.
        cancel_within(work, ctx.cancel_grace, spawned=spawned)
        await asyncio.wait((work,), timeout=ctx.cancel_grace)
        message = f"executor {self.name!r} did not finish step {step.id!r} within {self.step_timeout:g}s"
        raise StepFailure(StepError(kind="timeout", message=message))

    async def _steps_work(
        self, step: Step, args: dict[str, Any], ctx: StepContext, spawned: set[asyncio.Task[str]]
    ) -> Any:
        model = self.resolved_model()
        allowed = ctx.tools.subset(t for t in step.allowed_tools if t in ctx.tools and self._may_use(t))
        specs = tuple(ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in allowed)
        output = OutputSpec(name="step_result", json_schema=step.output_schema) if step.output_schema else None
        messages: list[Message] = [
            Message(role="system", content=self.instructions),
            Message(role="user", content=_describe(step, args)),
        ]
        for _turn in range(self.max_turns):
            request = ModelRequest(
                messages=tuple(messages), tools=specs, output=output, settings=self.settings, purpose="executor"
            )
            response = await ctx.call_model(model, request)
            if response.refusal is not None or response.finish_reason == "refusal":
                raise StepFailure(StepError(kind="executor", message=f"the model refused: {response.refusal or ''}"))
            if response.tool_calls:
                messages.append(Message(role="assistant", content=response.text, tool_calls=response.tool_calls))
                results = await _all((self._call(c, ctx, allowed.names) for c in response.tool_calls), spawned)
                messages += [
                    Message(role="tool", content=text, tool_call_id=c.id)
                    for c, text in zip(response.tool_calls, results, strict=True)
                ]
                continue
            if output is None:
                return _with_confidence(response.text, ctx)
            value, problem = await _structured(response, output.json_schema)
            if problem is None:
                return value
            messages.append(Message(role="assistant", content=response.text))
            messages.append(
                Message(role="user", content=f"That result does not fit the schema: {problem}. Reply again.")
            )
        raise StepFailure(
            StepError(kind="executor", message=f"executor {self.name!r} gave no result within {self.max_turns} turns")
        )

    def _may_use(self, tool_name: str) -> bool:
        return self.tools is None or tool_name in self.tools

    async def _call(self, call: ToolCall, ctx: StepContext, allowed: tuple[str, ...]) -> str:
        if call.name not in allowed:
            error = StepError(kind="unknown_tool", message=str(UnknownToolError(call.name, allowed)))
            ctx.refuse_tool_call(call, error)
            return f"error: {error.message}"
        checked = checked_call(ctx.tools, call.name, call.arguments)
        if isinstance(checked, StepError):
            ctx.refuse_tool_call(call, checked)
            prefix = "invalid arguments: " if checked.kind == "invalid_arguments" else ""
            return f"error: {prefix}{checked.message}"
        tool, validated = checked
        try:
            result = await ctx.call_tool(tool, validated, call_id=call.id)
        except StepFailure as f:
            return f"error: {f.error}"
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


async def _all(calls: Iterable[Coroutine[Any, Any, str]], spawned: set[asyncio.Task[str]]) -> list[str]:
    """Run the calls together; when one raises (a budget ran out, a tool crashed) or the step is
    cancelled, the others are cancelled and waited for: no call outlives its step. The tasks are in
    ``spawned`` while they run, for a step timeout to abandon those that ignore their cancellation."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(call) for call in calls]
            spawned.update(tasks)
            for task in tasks:
                task.add_done_callback(spawned.discard)
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    return [task.result() for task in tasks]


def _with_confidence(text: str, ctx: StepContext) -> Any:
    """The result of a reply that may be ``{"result": ..., "confidence": x}``: the confidence is
    reported and the result returned; any other reply is the result itself."""
    stripped = text.strip()
    if not (stripped.startswith("{") and '"confidence"' in stripped):
        return text
    try:
        data = strict_loads(stripped)
    except JSONRefused:
        data = _lenient(stripped)  # ``NaN`` and ``Infinity`` are not JSON, but are still no confidence
        if data is None:
            return text
    if not isinstance(data, dict) or set(data) != {"result", "confidence"}:
        return text
    confidence = data["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        # a result whose confidence cannot be read must not pass as one that reported none
        shown = (
            json.dumps(confidence)[:40]
            if isinstance(confidence, int | float | str | None)
            else "a " + type(confidence).__name__
        )
        raise StepFailure(
            StepError(kind="executor", message=f"the executor's confidence must be a number from 0 to 1, not {shown}")
        )
    ctx.report_confidence(float(confidence))
    return data["result"]


def _lenient(text: str) -> Any:
    """``text`` read as Python's ``json`` module reads it (NaN and Infinity included), bounded in
    size, or None when it is not even that."""
    if len(text) > 100_000:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _describe(step: Step, args: dict[str, Any]) -> str:
    lines = [f"Step {step.id}: {step.description}"]
    if args:
        lines.append("Inputs: " + json.dumps(args, ensure_ascii=False, default=str))
    if step.expected:
        lines.append(f"Expected: {step.expected}")
    if step.output_schema:
        lines.append("Reply with JSON that fits: " + json.dumps(step.output_schema, separators=(",", ":")))
    return "\n".join(lines)


async def _structured(response: ModelResponse, schema: Any) -> tuple[Any, str | None]:
    """The step's result as ``schema`` asks for it (a planner's schema: judged in bounded time),
    or why it does not fit."""
    value = response.parsed
    if value is None:
        try:
            value = strict_loads(response.text)
        except JSONRefused as e:
            return None, f"not valid JSON ({e.problem.message})"
    errors = await judge(schema, value)
    return (value, None) if not errors else (None, "; ".join(errors))
