"""Steps and their acceptance checks: the unit of work a plan is made of."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

STEP_ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"

Effect = Literal["read", "write"]
"""``read``: no side effects, safe to repeat. ``write``: changes something outside the run."""

OnFail = Literal["patch", "retry", "review"]
"""What happens when a step's result fails its acceptance checks: ``patch`` (the planner patches the
plan), ``retry`` (run the step once more, when that is safe, then patch), ``review`` (a human looks
at the result and its verdict: accepted, it counts as a success; refused, the planner patches)."""

ApprovalPolicy = Literal["auto", "always", "never"]
"""``auto``: the gates the developer configured decide (sensitive tools, every step, the confidence
gate); ``always``: never run without a human's yes. A plan can make a gate stricter, never lift one:
``never`` is kept so that plans written before plan schema version 2 keep loading, and it means the
same as ``auto``."""


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NonEmpty(_Value):
    """The output is not None, an empty string, an empty list or an empty object."""

    kind: Literal["non_empty"] = "non_empty"


class Contains(_Value):
    """The output, rendered as text, contains ``text``."""

    kind: Literal["contains"] = "contains"
    text: str


class Matches(_Value):
    """The output, rendered as text, matches the regular expression ``pattern`` (search)."""

    kind: Literal["matches"] = "matches"
    pattern: str


class FitsSchema(_Value):
    """The output validates against the JSON Schema ``json_schema``."""

    kind: Literal["schema"] = "schema"
    json_schema: dict[str, Any]


class Predicate(_Value):
    """A named Python predicate from the run's acceptance settings accepts the output."""

    kind: Literal["predicate"] = "predicate"
    name: str


Check = Annotated[NonEmpty | Contains | Matches | FitsSchema | Predicate, Field(discriminator="kind")]


class Step(_Value):
    """One unit of work: a tool call, or a task for a model-driven executor.

    ``args`` may bind earlier outputs with ``${step_id}`` (the whole output, type kept) or
    ``${step_id.field.0}`` (a path into it); see :mod:`planexec.plan` for the syntax.

    ``allowed_tools`` lists the tools a model-driven step (one that names no tool) may call; when it
    is empty the step may call none. A step that names a tool has no ``allowed_tools``.

    ``approval`` can only make the developer's gates stricter: ``"always"`` asks a human before the
    step runs; ``"auto"`` leaves the configured gates to decide; ``"never"`` is kept for plans
    written before plan schema version 2 and means the same as ``"auto"`` — no plan can lift a gate.
    """

    id: str = Field(pattern=STEP_ID_PATTERN, description="Unique id; letters, digits, _ and -.")
    description: str = Field(description="What the step does, in a sentence.")
    tool: str | None = Field(default=None, description="The tool this step calls.")
    executor: str | None = Field(
        default=None,
        description="A named executor: a model-driven one for steps with no tool, or a tool "
        "executor with its own limits.",
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments; may bind outputs.")
    depends_on: tuple[str, ...] = Field(default=(), description="Ids of steps that must finish first.")
    expected: str | None = Field(default=None, description="The expected output or success criteria, in words.")
    checks: tuple[Check, ...] = Field(default=(), description="Deterministic acceptance checks.")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema the output must fit (model steps are asked for it)."
    )
    allowed_tools: tuple[str, ...] = Field(
        default=(),
        description="For a step with no tool: the tools the model doing it may call (none when empty).",
    )
    effect: Effect = "read"
    approval: ApprovalPolicy = Field(
        default="auto",
        description='"always" to ask a human before the step runs; "auto" to leave it to the configured gates.',
    )
    on_fail: OnFail | None = Field(
        default=None,
        description='When the result fails its checks: "patch" the plan, "retry" the step once, or have a human '
        '"review" it (default: the agent\'s rule).',
    )
    thought: str | None = Field(default=None, description="Why this step (step-by-step policy).")
    confidence: float | None = Field(
        default=None, ge=0.0, le=1.0, description="The planner's confidence in this step, 0 to 1."
    )

    @model_validator(mode="after")
    def _unique_dependencies(self) -> Step:
        if len(set(self.depends_on)) != len(self.depends_on):
            raise ValueError(f"depends_on of step {self.id!r} lists a step twice")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An empty allowed_tools and an unset on_fail are left out: a step of an older log dumps as written.
        data: dict[str, Any] = handler(self)
        if not self.allowed_tools:
            data.pop("allowed_tools", None)
        if self.on_fail is None:
            data.pop("on_fail", None)
        return data
