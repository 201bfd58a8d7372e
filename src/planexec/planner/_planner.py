"""The planner: turns the goal and the execution record into plans, patches, turns and answers.

It never calls tools. Its output is structured, parsed, validated and statically checked; on any
problem the whole list goes back to the model, for at most ``max_repairs`` repairs.

A *sealed* planner (``Planner(sealed=True)``) never reads text a tool or a model wrote: every
request it is sent is made from the goal, its constraints, what people told the run, the tools'
signatures and output schemas, the budget and the plan's structure (see :mod:`._prompt`). It
plans upfront, writes the final answer as a template with the plan, and pulls values out of
outputs only through quarantined extractor steps (:class:`~planexec.executor.Extractor`).

How a planner plans is its policy (see :mod:`._policies`): the planner asks it whether it is
asked for turns or for plans, and whether a sealed planner can follow it. Replies are read in
:mod:`._reply`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from planexec.errors import PlannerEscalated, PlannerGaveUp, Problem, UsageError
from planexec.executor import Extractor
from planexec.models import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OutputSpec,
    Providers,
    StreamingModel,
    resolve_model,
)
from planexec.plan import FinalAnswer, PlanDraft, Step, Turn
from planexec.planner._answer_checks import draft_problems, turn_problems
from planexec.planner._context import PlanningContext
from planexec.planner._ensemble import Ensemble
from planexec.planner._policies import PLANNER_POLICIES, PlannerPolicy, PolicyName, Upfront
from planexec.planner._prompt import (
    FINISH,
    FINISH_TURN,
    PATCH,
    PATCH_SEALED,
    STEP_BY_STEP,
    STEP_BY_STEP_FLAT,
    UPFRONT,
    describe_budget,
    describe_goal,
    describe_record,
    describe_sealed_record,
    describe_tools,
    sealed_instructions,
    sealed_why,
)
from planexec.planner._reply import FLAT_SPEC, PLAN_SPEC, TURN_SPEC, cache_key, confidence_of, parse_reply
from planexec.planner._stream import StreamedSteps
from planexec.planner._wire import unwire_step

if TYPE_CHECKING:
    from planexec.log import RunState

__all__ = ["Planner", "ReplanPolicy", "TurnFormat"]

ReplanPolicy = Literal["on_failure", "after_each_step", "never"]
TurnFormat = Literal["nested", "flat"]
"""The JSON Schema a step-by-step planner is sent: ``nested`` (a ``step`` object inside the turn)
or ``flat`` (``thought, next_step, tool, arguments, stop, confidence``). Either answer is accepted."""

T = TypeVar("T", bound=BaseModel)

ESCALATING = frozenset({"unknown_tool", "unknown_allowed_tool"})
"""Problems that escalate to a human, when one can be asked, instead of using up repairs."""


@dataclass(kw_only=True)
class Planner:
    """A planning model and how it plans.

    ``policy``: the name of a registered policy (see :data:`PLANNER_POLICIES`): ``upfront`` (the
    whole DAG at once) or ``step`` (one next step per turn), or one of your own.
    ``replan``: when the plan is patched — ``on_failure`` (default), ``after_each_step``, ``never``.
    ``record_chars``: how much of each step's output the planner sees in the record.
    ``record_window``: under the step-by-step policy, how many finished steps the record shows in
    full (older ones are folded into one line of ids, so a turn's input stays bounded); None: all.
    ``settings``: how the planning model is asked (temperature, output cap, reasoning effort …),
    on every planning request.
    ``ensemble``: the stronger models to hand planning to, and when (see :class:`Ensemble`); None:
    ``model`` plans alone.
    ``sealed``: plan without ever reading untrusted text — no output, no error message, no check's
    detail reaches the planner; results flow by bindings and the answer template the plan carries
    (upfront policy only). ``extractor``: for a sealed planner, the model (or
    :class:`~planexec.executor.Extractor`) of the quarantined steps that pull values out of outputs;
    the agent routes steps with ``executor`` set to its name (``extractor``) to it. None: no extractor.
    """

    model: Model | str
    policy: PolicyName = Upfront.name
    replan: ReplanPolicy = "on_failure"
    max_repairs: int = 2
    stream: bool = True
    """With a model that streams, hand each step on as soon as it is complete (streaming dispatch)."""
    instructions: str = ""
    record_chars: int = 600
    record_window: int | None = 8
    turn_format: TurnFormat = "nested"
    """The turn schema sent to the model (step-by-step policy); answers in either form are accepted."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    ensemble: Ensemble | None = None
    sealed: bool = False
    extractor: Model | str | Extractor | None = None
    _resolved: Model | None = field(default=None, init=False, repr=False)
    _resolved_ensemble: tuple[Model, ...] | None = field(default=None, init=False, repr=False)
    _resolved_by: Providers | None = field(default=None, init=False, repr=False)
    _streams_known: bool | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        problems = []

        def add(where: str, message: str) -> None:
            problems.append(Problem(code="planner", where=where, message=message))

        for name, choices in (
            ("policy", PLANNER_POLICIES.names()),
            ("replan", ("on_failure", "after_each_step", "never")),
            ("turn_format", ("nested", "flat")),
        ):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in choices:
                add(name, f"{value!r} is not one of {', '.join(choices)}")
        for name, least in (("max_repairs", 0), ("record_chars", 1), ("record_window", 1)):
            value = getattr(self, name)
            if name == "record_window" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                add(
                    name,
                    f"must be a whole number of at least {least}" + (", or None" if name == "record_window" else ""),
                )
        if not isinstance(self.settings, ModelSettings):
            add("settings", "must be a ModelSettings(...)")
        if self.ensemble is not None and not isinstance(self.ensemble, Ensemble):
            add("ensemble", "must be an Ensemble(...) or None")
        if not isinstance(self.sealed, bool):
            add("sealed", "must be True or False")
        elif self.sealed and (conflict := PLANNER_POLICIES.unsealable(self.policy)) is not None:
            give = " or ".join(f"policy={p.name!r}" for p in PLANNER_POLICIES.sealable())
            add("sealed", f"a sealed planner plans {PLANNER_POLICIES.how_sealed()}: {conflict} (give {give})")
        extractor = self.extractor
        if extractor is not None:
            if not self.sealed:
                add("extractor", "an extractor serves a sealed planner: give sealed=True too")
            if isinstance(extractor, str):
                if not extractor.strip():
                    add("extractor", "an empty model string")
            elif not isinstance(extractor, Extractor) and not callable(getattr(extractor, "request", None)):
                add("extractor", f"{type(extractor).__name__} is neither a model nor an Extractor(...)")
        if problems:
            raise UsageError("invalid planner", problems)
        if extractor is not None and not isinstance(extractor, Extractor):
            self.extractor = Extractor(model=extractor)

    @property
    def policy_kind(self) -> type[PlannerPolicy]:
        """The registered policy the planner follows (its class)."""
        return PLANNER_POLICIES.get(self.policy)

    @property
    def extractor_name(self) -> str | None:
        """The name of the executor extractor steps are routed to (None: no extractor)."""
        return self.extractor.name if isinstance(self.extractor, Extractor) else None

    def resolved_model(self, providers: Providers | None = None) -> Model:
        """The model, a model string resolved through ``providers`` (``Providers.default()`` when
        None); made once for each providers value, and kept until another is asked for."""
        chosen = Providers.default() if providers is None else providers
        if self._resolved is None or self._resolved_by != chosen:
            self._resolved = resolve_model(self.model, providers=chosen)
            self._resolved_ensemble = None
            self._resolved_by = chosen
        return self._resolved

    def resolved_models(self, providers: Providers | None = None) -> tuple[Model, ...]:
        """Every model of the planner in the order it escalates: its own, then its ensemble's."""
        first = self.resolved_model(providers)
        if self.ensemble is None:
            return (first,)
        if self._resolved_ensemble is None:
            chosen = self._resolved_by
            self._resolved_ensemble = tuple(resolve_model(m, providers=chosen) for m in self.ensemble.escalate_to)
        return (first, *self._resolved_ensemble)

    def describe(self, state: RunState) -> str:
        """The execution record as this planner shows it (taken by the run at the start of a round)."""
        if self.sealed:
            return describe_sealed_record(state)
        window = self.record_window if self.policy_kind.turns else None
        return describe_record(state, self.record_chars, window)

    def _record(self, ctx: PlanningContext) -> str:
        if self.sealed:
            return ctx.record if ctx.record is not None else describe_sealed_record(ctx.state)
        return ctx.record_text(self.record_chars)

    @property
    def _upfront_system(self) -> str:
        return sealed_instructions(self.extractor_name) if self.sealed else UPFRONT

    # -- the four planning requests --------------------------------------------------------

    async def propose(self, ctx: PlanningContext) -> PlanDraft:
        """The first plan (upfront policy)."""
        return await self._ask(ctx, self._upfront_system, [], PlanDraft, self._check_draft, "planner.propose")

    async def patch(self, ctx: PlanningContext, why: str) -> PlanDraft:
        """A new list of unfinished steps, after ``why`` (a failure, or a finished step). A sealed
        planner is told why in planexec's own words, never ``why`` (it may quote an error)."""
        if self.sealed:
            extra = [self._record(ctx), f"Why a new plan: {sealed_why(ctx.state)}\n{PATCH_SEALED}"]
        else:
            extra = [self._record(ctx), f"Why a new plan: {why}\n{PATCH}"]
        return await self._ask(ctx, self._upfront_system, extra, PlanDraft, self._check_draft, "planner.patch")

    async def turn(self, ctx: PlanningContext) -> Turn:
        """The next step, or stop (step-by-step policy). A turn that stops without the answer (none,
        or empty) has ``answer`` None: the run then asks for it with :meth:`finish`."""
        extra = [ctx.record_text(self.record_chars, self.record_window)] if ctx.state.steps else []
        return await self._ask(ctx, self._turn_system, extra, Turn, turn_problems, "planner.turn")

    async def finish(self, ctx: PlanningContext) -> str:
        """The final answer from the finished record. Under the step-by-step policy it is asked for
        as the turns are (the same instructions and schema, so a provider's prompt cache serves the
        request), after a turn that stopped without it; the answer may come in a turn's shape.
        A sealed planner is never asked: its plan's answer template gives the answer."""
        if self.sealed:
            raise UsageError(
                "a sealed planner is never asked for the final answer",
                [Problem(code="planner", where="finish", message="the plan's answer template gives it")],
            )
        if self.policy_kind.turns:
            system, instruction = self._turn_system, FINISH_TURN
        else:
            system, instruction = UPFRONT, FINISH
        extra = [ctx.record_text(self.record_chars), instruction]
        answer = await self._ask(ctx, system, extra, FinalAnswer, lambda _a, _c: [], "planner.finish")
        return answer.answer

    def _check_draft(self, draft: PlanDraft, ctx: PlanningContext) -> list[Problem]:
        return draft_problems(draft, ctx, sealed=self.sealed)

    @property
    def _turn_system(self) -> str:
        return STEP_BY_STEP_FLAT if self.turn_format == "flat" else STEP_BY_STEP

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
        models = self.resolved_models()
        system_text = system + (f"\n{self.instructions}" if self.instructions else "")
        asked, tools = self._messages(ctx, system_text, extra, purpose)
        spec = self._spec(output)
        key = cache_key(spec, system_text, tools)
        at = _Asking(models=models, level=self._start_level(ctx, purpose, len(models) - 1), asked=asked)
        while True:
            request = ModelRequest(
                messages=tuple(at.messages), output=spec, settings=self.settings, purpose=purpose, cache_key=key
            )
            response = await self._send(at.model, request, ctx, output)
            value, problems = parse_reply(response, output, ctx, sealed=self.sealed)
            if value is not None:
                problems = check(value, ctx)
                if not problems:
                    if at.can_escalate and self._unsure(value):
                        at.escalate()
                        continue
                    feedback = await self._act_on(value, ctx, at.unaided)
                    if feedback is None:
                        return value
                    if feedback.unaided:
                        at.unaided += 1
                    at.reply(response.text, feedback.text)
                    continue
            listing = await self._repair(ctx, problems, at)
            if listing is not None:
                at.reply(response.text, listing + "\nReply again with the whole corrected JSON.")

    def _messages(
        self, ctx: PlanningContext, system_text: str, extra: list[str], purpose: str
    ) -> tuple[list[Message], str]:
        """A request's messages, and the tools' description among them.

        What changes least comes first, each part ending at a cache point: the instructions and
        the tools (the same in every run of the agent), the goal (the same within a run); then
        what changes (the record, the budget, what people said, the instruction of this request)."""
        tools = describe_tools(ctx.tools, ctx.executors, ctx.checks.workflows, outputs=self.sealed)
        budget = [describe_budget(ctx.budget_left)] if purpose != "planner.finish" else []
        changing = [*extra[:1], *budget, *([ctx.heard] if ctx.heard else []), *extra[1:]]
        # A sealed planner is shown no remembered plan: its values may have been read from untrusted text.
        example = None if self.sealed else ctx.example
        messages = [
            Message(role="system", content=system_text, cache_point=True),
            Message(role="user", content=tools, cache_point=True),
            *([Message(role="user", content=ctx.conversation, cache_point=True)] if ctx.conversation else []),
            Message(role="user", content=describe_goal(ctx.goal, ctx.constraints), cache_point=True),
            *([Message(role="user", content=example)] if example else []),
            Message(role="user", content="\n\n".join(changing)),
        ]
        return messages, tools

    async def _send(
        self, model: Model, request: ModelRequest, ctx: PlanningContext, output: type[BaseModel]
    ) -> ModelResponse:
        """Send ``request`` to ``model``, streamed (its steps handed on as they come) when it can be."""
        if self._streams(model, ctx, output):
            assert ctx.call_stream is not None
            reader = StreamedSteps("step" if output is Turn else "steps")
            on_text = functools.partial(self._early_steps, reader, ctx=ctx)
            return await ctx.call_stream(model, request, on_text)
        return await ctx.call(model, request)

    async def _repair(self, ctx: PlanningContext, problems: list[Problem], at: _Asking) -> str | None:
        """The message that sends a rejected answer's problems back (with a human's guidance on
        those that escalate); None: the ensemble's next model takes the request over. Raises
        :class:`PlannerGaveUp` when the repairs are used up."""
        at.attempt += 1
        ctx.rejected(at.attempt, problems)
        escalating = [p for p in problems if p.code in ESCALATING]
        listing = "Your reply has these problems:\n" + "\n".join(f"- {p}" for p in problems)
        if escalating:
            detail = "; ".join(map(str, escalating))
            guidance = await self._escalate(ctx, "unknown_tool", detail, at.unaided)
            if ctx.escalate is None:
                at.unaided += 1
            return listing + _guided(guidance)
        at.repairs += 1
        if at.repairs > self.max_repairs:
            ensemble = self.ensemble
            if ensemble is not None and ensemble.on("repair_failed") and at.can_escalate:
                at.escalate()
                return None
            raise PlannerGaveUp(problems)
        return listing

    def _start_level(self, ctx: PlanningContext, purpose: str, last: int) -> int:
        """Which model of the ensemble a request starts with: a pure function of the run's record,
        so that a replay asks the same models."""
        ensemble = self.ensemble
        planning = ctx.state.planning
        if ensemble is None or purpose == "planner.finish" or planning is None or planning.trigger != "failure":
            return 0
        level = 0
        if ensemble.on("replan"):
            level = ctx.state.replans + 1
        if ensemble.on("acceptance_failed"):
            records = [*ctx.state.steps.values(), *ctx.state.superseded]
            failed = sum(1 for r in records if r.error is not None and r.error.kind == "acceptance")
            level = max(level, failed)
        return min(level, last)

    def _unsure(self, value: BaseModel) -> bool:
        """Whether the ensemble hands a valid answer on to its next model for its low confidence."""
        ensemble = self.ensemble
        if ensemble is None or not ensemble.on("low_confidence"):
            return False
        if getattr(value, "question", None) is not None or getattr(value, "give_up", None) is not None:
            return False
        confidence = confidence_of(value)
        return confidence is not None and confidence < ensemble.confidence_below

    async def _escalate(self, ctx: PlanningContext, code: str, detail: str, unaided: int) -> str | None:
        """A human's guidance (or None: try again); with nobody to ask, one repair, then stop."""
        if ctx.escalate is not None:
            return await ctx.escalate(code, detail)
        if unaided >= 1:
            raise PlannerEscalated(code, f"{detail} (nobody can be asked, and the repair allowed did not help)")
        return None

    async def _act_on(self, value: BaseModel, ctx: PlanningContext, unaided: int) -> _Feedback | None:
        """What stops a valid answer from being acted on as it is: a question for the user, giving
        up, a confidence under the floor. None: act on it."""
        question = getattr(value, "question", None)
        give_up = getattr(value, "give_up", None)
        if give_up is not None:
            if ctx.escalate is None:
                raise PlannerEscalated("planner_gave_up", f"the planner gave up: {give_up}")
            guidance = await ctx.escalate("planner_gave_up", f"the planner gave up: {give_up}")
            return _Feedback("You gave up; a human asks you to go on." + _guided(guidance))
        if question is not None:
            if ctx.ask_user is not None:
                answer = await ctx.ask_user(question)
                return _Feedback(f"The user answered your question: {answer}\nReply again with the whole JSON.")
            if unaided >= 1:
                raise PlannerEscalated(
                    "clarification_needed", f"the planner needs an answer nobody can give here: {question}"
                )
            return _Feedback(
                "Nobody can answer questions in this run: go on without asking, with reasonable assumptions "
                "you state in your thought, or give up. Reply again with the whole JSON.",
                unaided=True,
            )
        floor = ctx.confidence_floor
        confidence = confidence_of(value)
        if floor is not None and confidence is not None and confidence < floor:
            detail = f"the planner's confidence {confidence:.2f} is under the run's floor of {floor:.2f}"
            if ctx.escalate is None or ctx.low_confidence_stops:
                raise PlannerEscalated("low_confidence", detail)
            guidance = await ctx.escalate("low_confidence", detail)
            return _Feedback(f"Your confidence was too low to act on ({detail})." + _guided(guidance))
        return None

    def _streams(self, model: Model, ctx: PlanningContext, output: type[BaseModel]) -> bool:
        """Whether to stream this answer and hand on its steps while it streams."""
        return (
            self.stream
            and ctx.call_stream is not None
            and ctx.on_step is not None
            and output in (PlanDraft, Turn)
            and (self.model_streams if model is self._resolved else isinstance(model, StreamingModel))
        )

    @property
    def model_streams(self) -> bool:
        """Whether the planning model can stream (found out once: the protocol check is not free)."""
        if self._streams_known is None:
            self._streams_known = isinstance(self.resolved_model(), StreamingModel)
        return self._streams_known

    def _spec(self, output: type[BaseModel]) -> OutputSpec:
        """One output schema for every request of the policy, so that it is part of the stable prefix."""
        if self.policy_kind.turns or output is Turn:
            return FLAT_SPEC if self.turn_format == "flat" else TURN_SPEC
        return PLAN_SPEC

    def _early_steps(self, reader: StreamedSteps, text: str, *, ctx: PlanningContext) -> None:
        assert ctx.on_step is not None
        for raw in reader.feed(text):
            problems: list[Problem] = []
            raw = unwire_step(raw, "step", problems)
            if problems:
                continue
            try:
                step = Step.model_validate(raw)
            except ValidationError:
                continue  # the whole answer is validated, and repaired, when it is complete
            if reader.scalars.get("stop") is True:
                continue
            if reader.key == "step" and reader.scalars.get("stop") is not False:
                continue  # stop wins over a turn's step: it starts early only once the turn said it goes on
            if step.confidence is None and "confidence" in reader.scalars:
                confidence = reader.scalars["confidence"]
                if not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
                    continue
                step = step.model_copy(update={"confidence": float(confidence)})
            if reader.key == "step" and step.confidence is None:
                continue  # a turn's step is gated on its confidence: wait for the whole turn
            ctx.on_step(step)


@dataclass(kw_only=True)
class _Asking:
    """Where one request stands: the model asked (its place in the ensemble), the messages so far,
    and the attempts, repairs and unaided escalations used."""

    models: tuple[Model, ...]
    level: int
    asked: list[Message]
    """The request's first messages: a model the request is handed on to starts from them."""
    messages: list[Message] = field(init=False)
    attempt: int = 0
    repairs: int = 0
    unaided: int = 0
    """Escalations answered by one repair because nobody could be asked."""

    def __post_init__(self) -> None:
        self.messages = list(self.asked)

    @property
    def model(self) -> Model:
        return self.models[self.level]

    @property
    def can_escalate(self) -> bool:
        return self.level < len(self.models) - 1

    def escalate(self) -> None:
        """Hand the request on to the ensemble's next model, from its first messages."""
        self.level, self.repairs, self.messages = self.level + 1, 0, list(self.asked)

    def reply(self, answer: str, text: str) -> None:
        self.messages.append(Message(role="assistant", content=answer))
        self.messages.append(Message(role="user", content=text))


@dataclass(frozen=True, slots=True)
class _Feedback:
    text: str
    unaided: bool = False


def _guided(guidance: str | None) -> str:
    return f"\nGuidance from a human: {guidance}" if guidance else "\nA human lets you try again."
