"""Plans, the planner's output formats, and the versioned plan JSON Schema.

Plan schema changelog (bump ``PLAN_SCHEMA_VERSION`` and add a line on every change):
    1: first version — steps with tool/executor, bindings, checks, effect, approval, confidence.
    2: steps gain ``allowed_tools`` (the tools a model-driven step may call); ``approval: "never"`` means ``"auto"``.

Plans of every version listed here load (``schema_version`` says which one a plan was written as);
new plans are the current version.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from planexec.plan._step import Step

PLAN_SCHEMA_VERSION: Final = 2

Author = Literal["planner", "human", "memory"]


class Plan(BaseModel):
    """One version of a run's plan: a DAG of steps, with who made it and why.

    A replan makes a new version: finished steps are carried over unchanged, and only the
    unfinished work is replaced.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1, 2] = PLAN_SCHEMA_VERSION
    version: int = Field(default=1, ge=1)
    steps: tuple[Step, ...]
    author: Author = "planner"
    reason: str = ""

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.steps)


class PlanDraft(BaseModel):
    """What the upfront planner returns: the steps still to do, and why (for a patch)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", description="Why this plan, or what this patch changes.")
    steps: list[Step] = Field(description="The steps still to run. Finished steps are not repeated.")


class Turn(BaseModel):
    """What the step-by-step planner returns each turn: one next step, or stop with the answer."""

    model_config = ConfigDict(extra="forbid")

    thought: str = Field(default="", description="What is known so far and what to do next.")
    confidence: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Confidence in the next step, 0 to 1 (required with a step)."
    )
    stop: bool = Field(description="True when the goal is met and `answer` is final.")
    step: Step | None = Field(default=None, description="The next step, when not stopping.")
    answer: str | None = Field(default=None, description="The final answer, when stopping.")


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
