"""The planner: turns the goal and the execution record into plans, patches, turns and answers.

It never calls tools. Its output is structured, parsed, validated and statically checked; on any
problem the whole list goes back to the model, for at most ``max_repairs`` repairs.

A *sealed* planner (``Planner(sealed=True)``) never reads text a tool or a model wrote: every
request it is sent is made from the goal, its constraints, what people told the run, the tools'
signatures and output schemas, the budget and the plan's structure (see :mod:`._prompt`). It
plans upfront, writes the final answer as a template with the plan, and pulls values out of
outputs only through quarantined extractor steps (:class:`~planexec.executor.Extractor`).

The answer is hostile input: it is parsed as strict JSON (``NaN`` and ``Infinity`` are
``invalid_json``), and an answer nested deeper than the plan allows (``REPLY_DEPTH``) is a
``too_deep`` problem, never a ``RecursionError``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from planexec._util.clip import clip
from planexec._util.strict_json import MAX_DEPTH, JSONRefused, loads
from planexec._util.values import replaced
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
from planexec.plan import (
    FLAT_KEYS,
    CheckContext,
    FinalAnswer,
    FlatTurn,
    PlanDraft,
    Step,
    Turn,
    capped,
    changes_world,
    check_steps,
    template_problems,
)
from planexec.planner import _prompt
from planexec.planner._handoff import take_handoff
from planexec.planner._stream import StreamedSteps
from planexec.planner._wire import FLAT_TURN_SCHEMA, PLAN_SCHEMA, TURN_SCHEMA, unwire_handoff, unwire_step, unwire_turn
from planexec.tools import Toolset

if TYPE_CHECKING:
    from planexec.log import RunState

__all__ = [
    "ENSEMBLE_TRIGGERS",
    "Ensemble",
    "EnsembleTrigger",
    "Planner",
    "PlannerEscalated",
    "PlannerGaveUp",
    "PlanningContext",
    "PolicyName",
    "ReplanPolicy",
    "TurnFormat",
]

PolicyName = Literal["upfront", "step"]
ReplanPolicy = Literal["on_failure", "after_each_step", "never"]
TurnFormat = Literal["nested", "flat"]
"""The JSON Schema a step-by-step planner is sent: ``nested`` (a ``step`` object inside the turn)
or ``flat`` (``thought, next_step, tool, arguments, stop, confidence``). Either answer is accepted."""

EnsembleTrigger = Literal["repair_failed", "low_confidence", "replan", "acceptance_failed"]
"""When an ensemble hands planning to its next model: ``repair_failed`` (an answer still fails its
checks after every repair), ``low_confidence`` (an answer's confidence is under the ensemble's
``confidence_below``), ``replan`` (a patch after a failure), ``acceptance_failed`` (a patch after a
step's result failed its acceptance checks)."""

ENSEMBLE_TRIGGERS: tuple[EnsembleTrigger, ...] = ("repair_failed", "low_confidence", "replan", "acceptance_failed")


@dataclass(frozen=True, kw_only=True)
class Ensemble:
    """The models a planner escalates to, in order, after its own ``model`` (the cheap, fast one).

    ``escalate_to``: the next models, strongest last. ``escalate_on``: the triggers that hand a
    request to the next model (see :data:`EnsembleTrigger`); all of them by default.
    ``confidence_below``: the confidence under which ``low_confidence`` escalates.

    A request starts with the planner's own model, or, for a patch after a failure, one model further
    for each replan (``replan``) or each step that failed acceptance (``acceptance_failed``) so far;
    within a request, ``repair_failed`` and ``low_confidence`` move on to the next model. The last
    model behaves as a single planner does: it gives up after its repairs, and its low confidence
    goes to the run's own confidence floor.
    """

    escalate_to: Sequence[Model | str]
    escalate_on: Sequence[EnsembleTrigger] = ENSEMBLE_TRIGGERS
    confidence_below: float = 0.5

    def __post_init__(self) -> None:
        problems: list[Problem] = []

        def add(where: str, message: str) -> None:
            problems.append(Problem(code="ensemble", where=where, message=message))

        models = self.escalate_to
        if isinstance(models, str) or not isinstance(models, Sequence):
            add("escalate_to", "must be a list of models or model strings")
        else:
            if not models:
                add("escalate_to", "names no model: give at least one model to escalate to")
            for i, m in enumerate(models):
                if not isinstance(m, str) and not callable(getattr(m, "request", None)):
                    add(f"escalate_to.{i}", f"{type(m).__name__} is not a model (nothing with a request method)")
                elif isinstance(m, str) and not m.strip():
                    add(f"escalate_to.{i}", "an empty model string")
        triggers = self.escalate_on
        if isinstance(triggers, str) or not isinstance(triggers, Sequence | frozenset | set):
            add("escalate_on", f"must be a list of triggers among {', '.join(ENSEMBLE_TRIGGERS)}")
        else:
            for t in triggers:
                if t not in ENSEMBLE_TRIGGERS:
                    add("escalate_on", f"{t!r} is not one of {', '.join(ENSEMBLE_TRIGGERS)}")
        c = self.confidence_below
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c <= 1:
            add("confidence_below", "must be a number from 0 to 1")
        if problems:
            raise UsageError("invalid planner ensemble", problems)
        object.__setattr__(self, "escalate_to", tuple(models))
        object.__setattr__(self, "escalate_on", tuple(dict.fromkeys(triggers)))

    def on(self, trigger: EnsembleTrigger) -> bool:
        return trigger in self.escalate_on


ESCALATING = frozenset({"unknown_tool", "unknown_allowed_tool"})
"""Problems that escalate to a human, when one can be asked, instead of using up repairs."""

T = TypeVar("T", bound=BaseModel)

REPLY_DEPTH = MAX_DEPTH + 5
"""How deep a planner's answer may nest: a step's arguments or schemas may be ``MAX_DEPTH`` levels
deep, inside the answer, its list of steps, a step, its checks and a check."""


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
    escalate: Callable[[str, str], Awaitable[str | None]] | None = None
    """Ask a human about an output that cannot be acted on (reason code, detail): returns guidance
    text, or None to let the planner try again; raises :class:`PlannerEscalated` to stop. None:
    nobody can be asked."""
    ask_user: Callable[[str], Awaitable[str]] | None = None
    """Ask the user a clarifying question and wait for the answer. None: nobody can be asked."""
    confidence_floor: float | None = None
    low_confidence_stops: bool = False
    """Under ``confidence_floor``: stop at once rather than ask a human."""
    empty_plan_ok: bool = False
    """Whether a plan with no steps (or a stop before any step) may end the run: only when some
    work has been done, or the final answer passes a review."""
    new_step_id: Callable[[], str] | None = None
    """The id of the next step of a flat turn."""
    heard: str | None = None
    """What people told the run (information, answers, guidance, refused answers), as text."""
    conversation: str | None = None
    """For a session's turn: the record of the turns before it (fixed for the run)."""
    example: str | None = None
    """A remembered plan for a similar goal, shown as a worked example (plan memory's guided reuse)."""
    plan_problems: Callable[[Sequence[Step]], list[Problem]] | None = None
    """The run's own checks of a plan that passed its static checks (its cost forecast against the
    budget): problems the planner repairs like any other."""

    def current_checks(self) -> CheckContext:
        """The check context as of now: the steps finished so far, and the steps the budget still allows."""
        left = None if self.step_budget is None else self.step_budget - self.state.steps_started
        return with_finished(self.checks, self.state, left)

    def record_text(self, limit: int, window: int | None = None) -> str:
        return self.record if self.record is not None else _prompt.describe_record(self.state, limit, window)


@dataclass(kw_only=True)
class Planner:
    """A planning model and how it plans.

    ``policy``: ``upfront`` (the whole DAG at once) or ``step`` (one next step per turn).
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
    policy: PolicyName = "upfront"
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
            ("policy", ("upfront", "step")),
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
        elif self.sealed and self.policy == "step":
            add(
                "sealed",
                "a sealed planner plans upfront: the step-by-step policy chooses each next step from the results "
                "it reads, and a sealed planner reads none (give policy='upfront')",
            )
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
            return _prompt.describe_sealed_record(state)
        window = self.record_window if self.policy == "step" else None
        return _prompt.describe_record(state, self.record_chars, window)

    def _record(self, ctx: PlanningContext) -> str:
        if self.sealed:
            return ctx.record if ctx.record is not None else _prompt.describe_sealed_record(ctx.state)
        return ctx.record_text(self.record_chars)

    @property
    def _upfront_system(self) -> str:
        return _prompt.sealed_instructions(self.extractor_name) if self.sealed else _prompt.UPFRONT

    # -- the four planning requests --------------------------------------------------------

    async def propose(self, ctx: PlanningContext) -> PlanDraft:
        """The first plan (upfront policy)."""
        return await self._ask(ctx, self._upfront_system, [], PlanDraft, self._check_draft, "planner.propose")

    async def patch(self, ctx: PlanningContext, why: str) -> PlanDraft:
        """A new list of unfinished steps, after ``why`` (a failure, or a finished step). A sealed
        planner is told why in planexec's own words, never ``why`` (it may quote an error)."""
        if self.sealed:
            extra = [self._record(ctx), f"Why a new plan: {_prompt.sealed_why(ctx.state)}\n{_prompt.PATCH_SEALED}"]
        else:
            extra = [self._record(ctx), f"Why a new plan: {why}\n{_prompt.PATCH}"]
        return await self._ask(ctx, self._upfront_system, extra, PlanDraft, self._check_draft, "planner.patch")

    async def turn(self, ctx: PlanningContext) -> Turn:
        """The next step, or stop (step-by-step policy). A turn that stops without the answer (none,
        or empty) has ``answer`` None: the run then asks for it with :meth:`finish`."""
        extra = [ctx.record_text(self.record_chars, self.record_window)] if ctx.state.steps else []
        return await self._ask(ctx, self._turn_system, extra, Turn, self._check_turn, "planner.turn")

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
        if self.policy == "step":
            system, instruction = self._turn_system, _prompt.FINISH_TURN
        else:
            system, instruction = _prompt.UPFRONT, _prompt.FINISH
        extra = [ctx.record_text(self.record_chars), instruction]
        answer = await self._ask(ctx, system, extra, FinalAnswer, lambda _a, _c: [], "planner.finish")
        return answer.answer

    @property
    def _turn_system(self) -> str:
        return _prompt.STEP_BY_STEP_FLAT if self.turn_format == "flat" else _prompt.STEP_BY_STEP

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
        level = self._start_level(ctx, purpose, len(models) - 1)
        model = models[level]
        system_text = system + (f"\n{self.instructions}" if self.instructions else "")
        # What changes least comes first, each part ending at a cache point: the instructions and
        # the tools (the same in every run of the agent), the goal (the same within a run); then
        # what changes (the record, the budget, what people said, the instruction of this request).
        tools = _prompt.describe_tools(ctx.tools, ctx.executors, ctx.checks.workflows, outputs=self.sealed)
        budget = [_prompt.describe_budget(ctx.budget_left)] if purpose != "planner.finish" else []
        changing = [*extra[:1], *budget, *([ctx.heard] if ctx.heard else []), *extra[1:]]
        # A sealed planner is shown no remembered plan: its values may have been read from untrusted text.
        example = None if self.sealed else ctx.example
        messages = [
            Message(role="system", content=system_text, cache_point=True),
            Message(role="user", content=tools, cache_point=True),
            *([Message(role="user", content=ctx.conversation, cache_point=True)] if ctx.conversation else []),
            Message(role="user", content=_prompt.describe_goal(ctx.goal, ctx.constraints), cache_point=True),
            *([Message(role="user", content=example)] if example else []),
            Message(role="user", content="\n\n".join(changing)),
        ]
        asked = list(messages)
        spec = self._spec(output)
        cache_key = _cache_key(spec, system_text, tools)
        attempt = 0
        repairs = 0
        unaided = 0
        """Escalations answered by one repair because nobody could be asked."""
        while True:
            request = ModelRequest(
                messages=tuple(messages), output=spec, settings=self.settings, purpose=purpose, cache_key=cache_key
            )
            if self._streams(model, ctx, output):
                assert ctx.call_stream is not None
                reader = StreamedSteps("step" if output is Turn else "steps")
                on_text = functools.partial(self._early_steps, reader, ctx=ctx)
                response = await ctx.call_stream(model, request, on_text)
            else:
                response = await ctx.call(model, request)
            value, problems = _parse(response, output, ctx, sealed=self.sealed)
            if value is not None:
                problems = check(value, ctx)
                if not problems:
                    if level < len(models) - 1 and self._unsure(value):
                        level, model, repairs, messages = level + 1, models[level + 1], 0, list(asked)
                        continue
                    feedback = await self._act_on(value, ctx, unaided)
                    if feedback is None:
                        return value
                    if feedback.unaided:
                        unaided += 1
                    messages.append(Message(role="assistant", content=response.text))
                    messages.append(Message(role="user", content=feedback.text))
                    continue
            attempt += 1
            ctx.rejected(attempt, problems)
            escalating = [p for p in problems if p.code in ESCALATING]
            listing = "Your reply has these problems:\n" + "\n".join(f"- {p}" for p in problems)
            if escalating:
                detail = "; ".join(map(str, escalating))
                guidance = await self._escalate(ctx, "unknown_tool", detail, unaided)
                if ctx.escalate is None:
                    unaided += 1
                listing += _guided(guidance)
            else:
                repairs += 1
                if repairs > self.max_repairs:
                    ensemble = self.ensemble
                    if ensemble is not None and ensemble.on("repair_failed") and level < len(models) - 1:
                        level, model, repairs, messages = level + 1, models[level + 1], 0, list(asked)
                        continue
                    raise PlannerGaveUp(problems)
            messages.append(Message(role="assistant", content=response.text))
            messages.append(Message(role="user", content=listing + "\nReply again with the whole corrected JSON."))

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
        confidence = _confidence_of(value)
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
        confidence = _confidence_of(value)
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
        if self.policy == "step" or output is Turn:
            return _FLAT_SPEC if self.turn_format == "flat" else _TURN_SPEC
        return _PLAN_SPEC

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

    def _check_draft(self, draft: PlanDraft, ctx: PlanningContext) -> list[Problem]:
        answer = self._answer_problems(draft, ctx) if self.sealed else []
        handoff = take_handoff(draft, ctx.checks, ctx.state)
        if handoff:
            return capped([*handoff, *answer, *check_steps(draft.steps, ctx.current_checks())])
        if answer:
            return capped([*answer, *check_steps(draft.steps, ctx.current_checks())])
        if draft.question is not None or draft.give_up is not None:
            if draft.steps:
                return [Problem(code="plan", where="steps", message="a question or giving up comes with no steps")]
            return []
        if not draft.steps and not _work_done(ctx):
            return [_EMPTY]
        problems = check_steps(draft.steps, ctx.current_checks())
        if not problems and draft.steps and ctx.plan_problems is not None:
            problems = ctx.plan_problems(draft.steps)
        return problems

    def _answer_problems(self, draft: PlanDraft, ctx: PlanningContext) -> list[Problem]:
        """A sealed answer's problems: its answer template (or, for a patch that gives none, the
        plan's, which it keeps) must name only steps of the new plan version or finished ones; a
        hand-off gives the answer itself."""
        if draft.question is not None or draft.give_up is not None:
            return []
        if draft.handoff is not None:
            if draft.answer is None:
                return []
            message = "a hand-off's output is the final answer: give no answer template with it"
            return [Problem(code="answer_template", where="answer", message=message)]
        template, kept = draft.answer, False
        if template is None:
            plan = ctx.state.plan
            template, kept = (plan.answer if plan is not None else None), True
        if template is None:
            return []
        checks = ctx.current_checks()
        known = {*(s.id for s in draft.steps), *checks.finished, *checks.running}
        problems = template_problems(template, known)
        if kept:
            problems = [
                Problem(
                    code=p.code,
                    where=p.where,
                    message=f"{p.message}: the plan's answer template is kept when a patch gives none; "
                    "give answer again",
                )
                for p in problems
            ]
        return problems

    def _check_turn(self, turn: Turn, ctx: PlanningContext) -> list[Problem]:
        if turn.question is not None or turn.give_up is not None:
            if turn.stop or turn.step is not None:
                what = "a question" if turn.question is not None else "giving up"
                return [Problem(code="turn", where="turn", message=f"{what} comes with no step and no stop")]
            return []
        if turn.stop:
            # Stop wins over a step given with it (the step is not run); with no answer (none, or
            # empty), the run asks the planner for it (``finish``).
            if turn.answer is not None and not turn.answer.strip():
                turn.answer = None
            if not _work_done(ctx):
                return [_EMPTY]
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


def _cache_key(spec: OutputSpec, system: str, tools: str) -> str:
    """One key for every planner request that starts the same way (the agent's schema,
    instructions and tools), in any run: a provider that routes by key finds its cached prefix."""
    return _key_of(_SCHEMA_TEXT.get(id(spec)) or json.dumps(spec.json_schema, sort_keys=True), system, tools)


@functools.lru_cache(maxsize=64)
def _key_of(schema: str, system: str, tools: str) -> str:
    digest = hashlib.sha256("\0".join((schema, system, tools)).encode()).hexdigest()
    return f"planexec/planner/{digest[:24]}"


_PLAN_SPEC = OutputSpec(name="plan", json_schema=PLAN_SCHEMA)
_TURN_SPEC = OutputSpec(name="turn", json_schema=TURN_SCHEMA)
_FLAT_SPEC = OutputSpec(name="turn", json_schema=FLAT_TURN_SCHEMA)
_SCHEMA_TEXT = {id(spec): json.dumps(spec.json_schema, sort_keys=True) for spec in (_PLAN_SPEC, _TURN_SPEC, _FLAT_SPEC)}

_EMPTY = Problem(
    code="empty_plan",
    where="steps",
    message="no step has been tried: plan the work that meets the goal (an answer with no work done "
    "is accepted only when the run reviews its final answer)",
)


@dataclass(frozen=True, slots=True)
class _Feedback:
    text: str
    unaided: bool = False


def _guided(guidance: str | None) -> str:
    return f"\nGuidance from a human: {guidance}" if guidance else "\nA human lets you try again."


def _work_done(ctx: PlanningContext) -> bool:
    """Whether an answer may come with no more steps: some step was tried, or answers are reviewed."""
    return ctx.empty_plan_ok or bool(ctx.state.steps)


def _confidence_of(value: BaseModel) -> float | None:
    """A turn's confidence, or a plan's: its own, else the lowest its steps give."""
    if isinstance(value, Turn):
        if value.stop:
            return value.confidence
        step_confidence = value.step.confidence if value.step is not None else None
        return value.confidence if value.confidence is not None else step_confidence
    if isinstance(value, PlanDraft):
        if value.confidence is not None:
            return value.confidence
        given = [s.confidence for s in value.steps if s.confidence is not None]
        return min(given) if given else None
    return None


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


def _parse(
    response: ModelResponse, output: type[T], ctx: PlanningContext | None = None, *, sealed: bool = False
) -> tuple[T | None, list[Problem]]:
    if response.refusal is not None:
        return None, [Problem(code="refusal", where="reply", message=f"the model refused: {response.refusal}")]
    # Structured output reaches the planner only as strict JSON data: a run keeps a reply's parsed
    # output only when it is (see planexec.runtime), else the text is parsed here, strictly.
    data = response.parsed
    if data is None:
        text = _unfenced(response.text)
        try:
            data = loads(text, max_depth=REPLY_DEPTH)
        except JSONRefused as e:
            if not text.lstrip().startswith(("{", "[")):
                return None, [_prose_problem(text)]
            return None, [_reply_problem(e.problem)]
    data, problems = _unwired(data, output, sealed=sealed)
    try:
        if output is Turn and isinstance(data, dict) and "step" not in data and not FLAT_KEYS.isdisjoint(data):
            flat = FlatTurn.model_validate(data)
            if problems:
                return None, capped(problems)
            step_id = ctx.new_step_id() if ctx is not None and ctx.new_step_id is not None else "s1"
            return flat.as_turn(step_id), []  # type: ignore[return-value]
        value = output.model_validate(data)
        return (None, capped(problems)) if problems else (value, [])
    except ValidationError as e:
        return None, capped(
            [
                *problems,
                *(
                    Problem(
                        code="invalid_output",
                        where=".".join(str(p) for p in err["loc"]) or "reply",
                        message=err["msg"],
                    )
                    for err in e.errors(include_url=False)
                ),
            ]
        )


def _unwired(data: Any, output: type[BaseModel], *, sealed: bool = False) -> tuple[Any, list[Problem]]:
    """An answer in the wire form (see :mod:`planexec.planner._wire`) in the form of ``output``.
    ``sealed``: a plan's ``answer`` is its answer template."""
    problems: list[Problem] = []
    if not isinstance(data, dict):
        return data, problems
    if output is Turn:
        return unwire_turn(data, problems), problems
    data = dict(data)
    answer = data.pop("answer", None)
    if output is FinalAnswer:
        if answer is None and data.get("stop") is True and data.get("tool") is None:
            answer = data.get("next_step")  # a flat turn's answer, asked for under the step-by-step policy
        if not isinstance(answer, str):
            problems.append(Problem(code="invalid_output", where="answer", message="give the final answer as text"))
        elif not answer.strip():
            problems.append(Problem(code="invalid_output", where="answer", message="the final answer is empty"))
        return {"answer": answer if isinstance(answer, str) else ""}, problems
    if sealed:
        if answer is not None and not (isinstance(answer, str) and not answer.strip()):
            data["answer"] = answer  # a sealed plan's answer template (blank: none, as a strict reply gives it)
    elif answer is not None:
        problems.append(
            Problem(
                code="invalid_output",
                where="answer",
                message="an answer is given only when the final answer is asked for: plan the steps first",
            )
        )
    steps = data.get("steps")
    if isinstance(steps, list):
        data["steps"] = [unwire_step(s, f"steps.{i}", problems) for i, s in enumerate(steps)]
    if "handoff" in data:
        data["handoff"] = unwire_handoff(data["handoff"], problems)
    return data, problems


def _prose_problem(text: str) -> Problem:
    """A reply in words where structured output was asked for (a model that wrote text instead of
    calling the output tool it was told to call, or that ignored the response format)."""
    said = clip(" ".join(text.split()), 160) or "nothing"
    asked = "the structured output asked for"
    return Problem(
        code="invalid_json",
        where="reply",
        message=f"not valid JSON: the model answered in text rather than with {asked}: {said!r}",
    )


def _reply_problem(problem: Problem) -> Problem:
    where = f"reply{problem.where}" if problem.where else "reply"
    if problem.code in ("too_deep", "too_large"):
        return Problem(code=problem.code, where=where, message=f"the reply is {problem.message}")
    return Problem(code="invalid_json", where=where, message=f"not valid JSON: {problem.message}")


def with_finished(checks: CheckContext, state: RunState, max_steps: int | None) -> CheckContext:
    """The check context for a planning round: finished steps known, running steps that cannot be
    stopped kept, the step budget applied."""
    finished = {sid: rec.step for sid, rec in state.steps.items() if rec.status == "succeeded"}
    running = {
        sid: rec.step
        for sid, rec in state.steps.items()
        if rec.status == "running" and changes_world(rec.step, checks.tools)
    }
    return replaced(checks, finished=tuple(finished), finished_steps=finished, running=running, max_steps=max_steps)
