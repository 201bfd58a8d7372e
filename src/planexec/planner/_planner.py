"""The planner: turns the goal and the execution record into plans, patches, turns and answers.

It never calls tools. Its output is structured, parsed, validated and statically checked; on any
problem the whole list goes back to the model, for at most ``max_repairs`` repairs.

The answer is hostile input: it is parsed as strict JSON (``NaN`` and ``Infinity`` are
``invalid_json``), and an answer nested deeper than the plan allows (``REPLY_DEPTH``) is a
``too_deep`` problem, never a ``RecursionError``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from planexec._errors import Problem
from planexec._json import MAX_DEPTH, JSONRefused, loads
from planexec.models._base import Message, Model, ModelRequest, ModelResponse, OutputSpec, StreamingModel
from planexec.models._registry import resolve_model
from planexec.plan._checks import CheckContext, capped, check_steps
from planexec.plan._plan import FinalAnswer, PlanDraft, Turn
from planexec.plan._step import Step
from planexec.planner import _prompt
from planexec.planner._stream import StreamedSteps
from planexec.tools._toolset import Toolset

if TYPE_CHECKING:
    from planexec.runtime._state import RunState

__all__ = ["Planner", "PlannerGaveUp", "PlanningContext", "PolicyName", "ReplanPolicy"]

PolicyName = Literal["upfront", "step"]
ReplanPolicy = Literal["on_failure", "after_each_step", "never"]

T = TypeVar("T", bound=BaseModel)

REPLY_DEPTH = MAX_DEPTH + 5
"""How deep a planner's answer may nest: a step's arguments or schemas may be ``MAX_DEPTH`` levels
deep, inside the answer, its list of steps, a step, its checks and a check."""


class PlannerGaveUp(Exception):
    """The planner's output was still invalid after every repair allowed."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(map(str, problems)))


@dataclass(frozen=True, kw_only=True)
class PlanningContext:
    """What the run gives the planner for one planning round."""

    goal: str
    constraints: tuple[str, ...]
    state: RunState
    tools: Toolset
    executors: Mapping[str, str]
    checks: CheckContext
    """What plans are checked against; steps that have finished by the time an answer is checked
    are added to it then (``current_checks``)."""
    step_budget: int | None = None
    """The run's step cap, if any."""
    budget_left: Mapping[str, Any]
    call: Callable[[Model, ModelRequest], Awaitable[ModelResponse]]
    rejected: Callable[[int, list[Problem]], None]
    record: str | None = None
    """The execution record as text, when taken at the start of the round (else read from ``state``)."""
    call_stream: Callable[[Model, ModelRequest, Callable[[str], None]], Awaitable[ModelResponse]] | None = None
    """Call a streaming model, passing each piece of text on as it arrives."""
    on_step: Callable[[Step], None] | None = None
    """Receives each step of a streaming answer the moment it is complete (streaming dispatch)."""

    def current_checks(self) -> CheckContext:
        """The check context as of now: the steps finished so far, and the steps the budget still allows."""
        left = None if self.step_budget is None else self.step_budget - self.state.steps_started
        return with_finished(self.checks, self.state, left)

    def record_text(self, limit: int) -> str:
        return self.record if self.record is not None else _prompt.describe_record(self.state, limit)


@dataclass(kw_only=True)
class Planner:
    """A planning model and how it plans.

    ``policy``: ``upfront`` (the whole DAG at once) or ``step`` (one next step per turn).
    ``replan``: when the plan is patched — ``on_failure`` (default), ``after_each_step``, ``never``.
    ``record_chars``: how much of each step's output the planner sees in the record.
    """

    model: Model | str
    policy: PolicyName = "upfront"
    replan: ReplanPolicy = "on_failure"
    max_repairs: int = 2
    stream: bool = True
    """With a model that streams, hand each step on as soon as it is complete (streaming dispatch)."""
    instructions: str = ""
    record_chars: int = 600
    _resolved: Model | None = field(default=None, init=False, repr=False)
    _streams_known: bool | None = field(default=None, init=False, repr=False)

    def resolved_model(self) -> Model:
        if self._resolved is None:
            self._resolved = resolve_model(self.model)
        return self._resolved

    # -- the four planning requests --------------------------------------------------------

    async def propose(self, ctx: PlanningContext) -> PlanDraft:
        """The first plan (upfront policy)."""
        return await self._ask(ctx, _prompt.UPFRONT, [], PlanDraft, self._check_draft, "planner.propose")

    async def patch(self, ctx: PlanningContext, why: str) -> PlanDraft:
        """A new list of unfinished steps, after ``why`` (a failure, or a finished step)."""
        extra = [ctx.record_text(self.record_chars), f"Why a new plan: {why}", _prompt.PATCH]
        return await self._ask(ctx, _prompt.UPFRONT, extra, PlanDraft, self._check_draft, "planner.patch")

    async def turn(self, ctx: PlanningContext) -> Turn:
        """The next step, or stop with the answer (step-by-step policy)."""
        extra = [ctx.record_text(self.record_chars)] if ctx.state.steps else []
        return await self._ask(ctx, _prompt.STEP_BY_STEP, extra, Turn, self._check_turn, "planner.turn")

    async def finish(self, ctx: PlanningContext) -> str:
        """The final answer from the finished record."""
        extra = [ctx.record_text(self.record_chars), _prompt.FINISH]
        answer = await self._ask(ctx, _prompt.UPFRONT, extra, FinalAnswer, lambda _a, _c: [], "planner.finish")
        return answer.answer

    # -- the shared loop: ask, parse, validate, check, repair --------------------------------

    async def _ask(
        self,
        ctx: PlanningContext,
        system: str,
        extra: list[str],
        output: type[T],
        check: Callable[[T, PlanningContext], list[Problem]],
        purpose: str,
    ) -> T:
        model = self.resolved_model()
        system_text = system + (f"\n{self.instructions}" if self.instructions else "")
        user = "\n\n".join(
            [
                _prompt.describe_goal(ctx.goal, ctx.constraints),
                _prompt.describe_tools(ctx.tools, ctx.executors),
                _prompt.describe_budget(ctx.budget_left),
                *extra,
            ]
        )
        messages = [Message(role="system", content=system_text), Message(role="user", content=user)]
        spec = _output_spec(output)
        attempt = 0
        while True:
            request = ModelRequest(messages=tuple(messages), output=spec, purpose=purpose)
            if self._streams(model, ctx, output):
                assert ctx.call_stream is not None
                reader = StreamedSteps("step" if output is Turn else "steps")
                on_text = functools.partial(self._early_steps, reader, ctx=ctx)
                response = await ctx.call_stream(model, request, on_text)
            else:
                response = await ctx.call(model, request)
            value, problems = _parse(response, output)
            if value is not None:
                problems = check(value, ctx)
                if not problems:
                    return value
            attempt += 1
            ctx.rejected(attempt, problems)
            if attempt > self.max_repairs:
                raise PlannerGaveUp(problems)
            messages.append(Message(role="assistant", content=response.text))
            messages.append(
                Message(
                    role="user",
                    content="Your reply has these problems:\n"
                    + "\n".join(f"- {p}" for p in problems)
                    + "\nReply again with the whole corrected JSON.",
                )
            )

    def _streams(self, model: Model, ctx: PlanningContext, output: type[BaseModel]) -> bool:
        """Whether to stream this answer and hand on its steps while it streams."""
        return (
            self.stream
            and ctx.call_stream is not None
            and ctx.on_step is not None
            and output in (PlanDraft, Turn)
            and self.model_streams
        )

    @property
    def model_streams(self) -> bool:
        """Whether the planning model can stream (found out once: the protocol check is not free)."""
        if self._streams_known is None:
            self._streams_known = isinstance(self.resolved_model(), StreamingModel)
        return self._streams_known

    def _early_steps(self, reader: StreamedSteps, text: str, *, ctx: PlanningContext) -> None:
        assert ctx.on_step is not None
        for raw in reader.feed(text):
            try:
                step = Step.model_validate(raw)
            except ValidationError:
                continue  # the whole answer is validated, and repaired, when it is complete
            if reader.scalars.get("stop") is True:
                continue
            if step.confidence is None and "confidence" in reader.scalars:
                confidence = reader.scalars["confidence"]
                if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
                    continue
                step = step.model_copy(update={"confidence": float(confidence)})
            if reader.key == "step" and step.confidence is None:
                continue  # a turn's step is gated on its confidence: wait for the whole turn
            ctx.on_step(step)

    def _check_draft(self, draft: PlanDraft, ctx: PlanningContext) -> list[Problem]:
        return check_steps(draft.steps, ctx.current_checks())

    def _check_turn(self, turn: Turn, ctx: PlanningContext) -> list[Problem]:
        if turn.stop:
            if turn.answer is None:
                return [Problem(code="turn", where="answer", message="stop is true, so an answer is required")]
            return []
        if turn.step is None:
            return [Problem(code="turn", where="step", message="stop is false, so a step is required")]
        step = turn.step
        if turn.confidence is None and step.confidence is None:
            return [Problem(code="turn", where="confidence", message="a turn with a step needs a confidence (0 to 1)")]
        if step.confidence is None or step.thought is None:
            step = step.model_copy(
                update={
                    "confidence": turn.confidence if step.confidence is None else step.confidence,
                    "thought": turn.thought if step.thought is None else step.thought,
                }
            )
            turn.step = step
        return check_steps([step], ctx.current_checks())


@functools.cache
def _output_spec(output: type[BaseModel]) -> OutputSpec:
    return OutputSpec(name=output.__name__.lower(), json_schema=output.model_json_schema())


def _unfenced(text: str) -> str:
    """The text inside a Markdown code fence (```json ... ```), or the text itself when it is not
    fenced. Plain string operations: a regex for this backtracks for minutes on a reply that opens
    a fence over a long run of spaces and never closes it."""
    stripped = text.strip()
    if len(stripped) < 6 or not stripped.startswith("```") or not stripped.endswith("```"):
        return text
    inner = stripped[3:-3]
    if inner.startswith("json"):
        inner = inner[4:]
    return inner.strip()


def _parse(response: ModelResponse, output: type[T]) -> tuple[T | None, list[Problem]]:
    if response.refusal is not None:
        return None, [Problem(code="refusal", where="reply", message=f"the model refused: {response.refusal}")]
    # Structured output reaches the planner only as strict JSON data: a run keeps a reply's parsed
    # output only when it is (see planexec.runtime), else the text is parsed here, strictly.
    data = response.parsed
    if data is None:
        try:
            data = loads(_unfenced(response.text), max_depth=REPLY_DEPTH)
        except JSONRefused as e:
            return None, [_reply_problem(e.problem)]
    try:
        return output.model_validate(data), []
    except ValidationError as e:
        return None, capped(
            Problem(
                code="invalid_output",
                where=".".join(str(p) for p in err["loc"]) or "reply",
                message=err["msg"],
            )
            for err in e.errors(include_url=False)
        )


def _reply_problem(problem: Problem) -> Problem:
    where = f"reply{problem.where}" if problem.where else "reply"
    if problem.code in ("too_deep", "too_large"):
        return Problem(code=problem.code, where=where, message=f"the reply is {problem.message}")
    return Problem(code="invalid_json", where=where, message=f"not valid JSON: {problem.message}")


def with_finished(checks: CheckContext, state: RunState, max_steps: int | None) -> CheckContext:
    """The check context for a planning round: finished steps known, the step budget applied."""
    finished = {sid: rec.step for sid, rec in state.steps.items() if rec.status == "succeeded"}
    return replace(checks, finished=tuple(finished), finished_steps=finished, max_steps=max_steps)
