"""Plans, the planner's output formats, and the versioned plan JSON Schema.

Plan schema changelog (bump ``PLAN_SCHEMA_VERSION`` and add a line on every change):
    1: first version — steps with tool/executor, bindings, checks, effect, approval, confidence.
    2: steps gain ``allowed_tools`` (the tools a model-driven step may call); ``approval: "never"`` means ``"auto"``.
    3: steps gain ``on_fail`` (patch, retry or review when the result fails its checks).
    4: plans gain ``answer``, the answer template a sealed planner writes with its plan
       (``{{step_id}}`` and ``{{step_id.field.0}}`` stand for outputs; left out when there is none).

Plans of every version listed here load (``schema_version`` says which one a plan was written as);
new plans are written as version 3 unless they carry an answer template, which only version 4
holds — so that a log written before version 4 replays to the same plans, and one with no
sealed plan stays readable by the planexec that wrote version 3.

A hand-off to a workflow (``PlanDraft.handoff``) changes no plan schema: it becomes an ordinary
step of the plan, one whose ``tool`` is the workflow (see :func:`handoff_step`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from planexec._util.strict_json import MAX_CHARS, MAX_DEPTH, json_problem
from planexec.plan._bindings import compile_args
from planexec.plan._step import Effect, Step

PLAN_SCHEMA_VERSION: Final = 4
"""The plan schema's version: the newest a plan can be written as (``planexec schema`` prints it)."""

PLAIN_PLAN_VERSION: Final = 3
"""The version a plan with no answer template is written as."""

Author = Literal["planner", "human", "memory"]


class Plan(BaseModel):
    """One version of a run's plan: a DAG of steps, with who made it and why.

    A replan makes a new version: finished steps are carried over unchanged, and only the
    unfinished work is replaced.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1, 2, 3, 4] = PLAIN_PLAN_VERSION
    version: int = Field(default=1, ge=1)
    steps: tuple[Step, ...]
    author: Author = "planner"
    reason: str = ""
    answer: str | None = Field(
        default=None,
        description="A sealed plan's answer template: the final answer, with {{step_id}} or "
        "{{step_id.field.0}} standing for outputs; filled in when every step has finished.",
    )

    @model_validator(mode="before")
    @classmethod
    def _version_of_template(cls, data: Any) -> Any:
        # A plan that carries an answer template is written as plan schema version 4.
        if isinstance(data, dict) and data.get("answer") is not None and "schema_version" not in data:
            return {**data, "schema_version": PLAN_SCHEMA_VERSION}
        return data

    @model_validator(mode="after")
    def _template_needs_version_4(self) -> Plan:
        if self.answer is not None and self.schema_version < 4:
            raise ValueError("an answer template is plan schema version 4")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A plan with no answer template dumps as plans written before plan schema version 4 did.
        data: dict[str, Any] = handler(self)
        if self.answer is None:
            data.pop("answer", None)
        return data

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.steps)


class Handoff(BaseModel):
    """The planner hands the rest of the work to a registered workflow: it runs after every step
    of the plan, and its output is the run's final answer. ``args`` may bind earlier outputs with
    ``${step_id}``, as a step's do."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workflow: str = Field(description="The workflow to hand the rest of the work to.")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments; may bind outputs.")


class PlanDraft(BaseModel):
    """What the upfront planner returns: the steps still to do, and why (for a patch) — or a
    question for the user, or that it gives up. ``handoff``: after those steps, a workflow does
    the rest and gives the answer."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", description="Why this plan, or what this patch changes.")
    steps: list[Step] = Field(
        default_factory=list, description="The steps still to run. Finished steps are not repeated."
    )
    confidence: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Confidence that this plan meets the goal, 0 to 1."
    )
    question: str | None = Field(
        default=None, description="A question for the user, when the goal is unclear (no steps then)."
    )
    give_up: str | None = Field(default=None, description="Why the goal cannot be met, when it cannot (no steps then).")
    handoff: Handoff | None = Field(
        default=None, description="A workflow that does the rest of the work after the steps, and gives the answer."
    )
    answer: str | None = Field(
        default=None,
        description="Sealed planning only: the final answer as a template over the steps' outputs "
        "({{step_id}}, {{step_id.field.0}}); a patch without one keeps the plan's.",
    )


HANDOFF_ID: Final = "handoff"
"""The id a hand-off's step is given (``handoff_2``, ``handoff_3`` … when it is taken)."""


def handoff_step(handoff: Handoff, after: Collection[str], taken: Collection[str], effect: Effect) -> Step:
    """The step that carries out ``handoff``: it calls the workflow with the hand-off's arguments,
    after every step in ``after`` (the plan's other steps) and every step its arguments bind. Its
    id is the first of ``handoff``, ``handoff_2`` … not in ``taken``."""
    step_id, n = HANDOFF_ID, 1
    while step_id in taken:
        n += 1
        step_id = f"{HANDOFF_ID}_{n}"
    bound: list[str] = []
    if json_problem(handoff.args, max_depth=MAX_DEPTH, max_chars=MAX_CHARS) is None:  # else the checks say why
        bound = [ref.step_id for _loc, ref in compile_args(handoff.args).refs]
    return Step(
        id=step_id,
        description=f"hand the rest of the work to workflow {handoff.workflow}",
        tool=handoff.workflow,
        args=handoff.args,
        depends_on=tuple(dict.fromkeys([*after, *bound])),
        effect=effect,
    )


class Turn(BaseModel):
    """What the step-by-step planner returns each turn: one next step, stop (with the answer, or
    without it: the planner is then asked for the final answer), ask the user a question, or give
    up. Stop wins over a step given with it: that step is not run."""

    model_config = ConfigDict(extra="forbid")

    thought: str = Field(default="", description="What is known so far and what to do next.")
    confidence: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Confidence in the next step, 0 to 1 (required with a step)."
    )
    stop: bool = Field(default=False, description="True when the goal is met and `answer` is final.")
    step: Step | None = Field(default=None, description="The next step, when not stopping.")
    answer: str | None = Field(
        default=None, description="The final answer, when stopping (none: the planner is asked for it)."
    )
    question: str | None = Field(default=None, description="A question for the user, when the goal is unclear.")
    give_up: str | None = Field(default=None, description="Why the goal cannot be met, when it cannot.")


class FlatTurn(BaseModel):
    """The flat turn format: one object with the next step's tool and arguments side by side.

    ``next_step`` says what to do next (a model-driven step's task when ``tool`` is null), or is the
    final answer when ``stop`` is true and ``answer`` is not given — unless the turn names a
    ``tool``: then it says what that step would do, stop wins, the step is not run, and the planner
    is asked for the final answer. The step's id is given by planexec (``s1``, ``s2``, ...), and it
    depends on every step its arguments bind (``${s1}``)."""

    model_config = ConfigDict(extra="forbid")

    thought: str = Field(default="", description="What is known so far and what to do next.")
    next_step: str | None = Field(
        default=None, description="The next step in a sentence; the final answer when stop is true."
    )
    tool: str | None = Field(default=None, description="The tool the next step calls (null: a model-driven step).")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments; may bind outputs.")
    stop: bool = Field(default=False, description="True when the goal is met and next_step (or answer) is final.")
    confidence: float | None = Field(default=None, ge=0.0, le=1.0, description="Confidence in the next step, 0 to 1.")
    answer: str | None = Field(default=None, description="The final answer, when stopping (else next_step is).")
    question: str | None = Field(default=None, description="A question for the user, when the goal is unclear.")
    give_up: str | None = Field(default=None, description="Why the goal cannot be met, when it cannot.")

    def as_turn(self, step_id: str) -> Turn:
        """This turn in the nested form, its step named ``step_id``."""
        if self.stop or self.question is not None or self.give_up is not None:
            answer = self.answer
            if self.stop and not _given(answer) and self.tool is None and _given(self.next_step):
                answer = self.next_step
            return Turn(
                thought=self.thought,
                confidence=self.confidence,
                stop=self.stop,
                answer=answer,
                question=self.question,
                give_up=self.give_up,
            )
        if self.next_step is None and self.tool is None:
            return Turn(thought=self.thought, confidence=self.confidence, stop=False)
        refs = compile_args(self.arguments).refs
        depends = tuple(dict.fromkeys(ref.step_id for _loc, ref in refs))
        step = Step(
            id=step_id,
            description=self.next_step or f"call {self.tool}",
            tool=self.tool,
            args=self.arguments,
            depends_on=depends,
            thought=self.thought or None,
            confidence=self.confidence,
        )
        return Turn(thought=self.thought, confidence=self.confidence, stop=False, step=step)


def _given(text: str | None) -> bool:
    """Whether ``text`` says something (an empty or blank answer is no answer)."""
    return text is not None and bool(text.strip())


FLAT_KEYS = frozenset({"next_step", "tool", "arguments"})
"""Keys that mark a reply as a flat turn (the nested form has none of them)."""


class FinalAnswer(BaseModel):
    """What the planner returns when every step is done."""

    model_config = ConfigDict(extra="forbid")

    answer: str


def plan_json_schema() -> dict[str, Any]:
    """The versioned JSON Schema of a plan, as ``planexec schema`` prints it."""
    schema = Plan.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:planexec:plan:{PLAN_SCHEMA_VERSION}",
        "x-planexec-schema-version": PLAN_SCHEMA_VERSION,
        **schema,
    }
