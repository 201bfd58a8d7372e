"""What the HTTP API reads and answers besides runs and questions: request bodies, read strictly
(a boolean is not a number, a number is not text) so that the OpenAPI document says exactly what
is taken, and the listings' envelopes."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from planexec.server._contract import MAX_WHOLE, NOT_BLANK
from planexec.server._views import RunSummary
from planexec.views import QuestionView

__all__ = [
    "COUNTED_CAPS",
    "AgentList",
    "AgentView",
    "Answer",
    "AnswerResult",
    "BudgetCaps",
    "ChecklistItem",
    "EventItem",
    "EventPage",
    "Fork",
    "Health",
    "Inbox",
    "RunList",
    "StartRun",
    "Tell",
]

MAX_GOAL_CHARS = 20_000
MAX_CONSTRAINTS = 50
MAX_TEXT_CHARS = 20_000
MAX_KEY_CHARS = 200
MAX_COUNT = MAX_WHOLE


def _integral(value: Any) -> Any:
    """A float with no fraction as the whole number it is (JSON Schema's ``integer`` takes ``3.0``);
    anything else as it came, for the strict check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Count = Annotated[int, Field(strict=True, ge=0, le=MAX_COUNT), BeforeValidator(_integral)]
"""A whole number, 0 or more (``true`` and ``"3"`` are not)."""
Amount = Annotated[float, Field(strict=True, ge=0, le=sys.float_info.max, allow_inf_nan=False)]
"""A finite number, 0 or more."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class BudgetCaps(_Body):
    """Caps by name, each a number of 0 or more or null (no cap); a cap not named keeps its value."""

    model_calls: Count | None = None
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    cost: Amount | None = Field(default=None, description="US dollars.")
    wall_time: Amount | None = Field(default=None, description="Seconds (waiting for a human does not count).")
    tool_calls: Count | None = None
    steps: Count | None = None
    replans: Count | None = None

    def given(self) -> dict[str, float | int | None]:
        """The caps named, by name (null: lift the cap)."""
        return self.model_dump(exclude_unset=True)


COUNTED_CAPS = frozenset({"model_calls", "input_tokens", "output_tokens", "tool_calls", "steps", "replans"})
"""The caps that count (calls, tokens, steps): whole numbers; the others are amounts."""


class StartRun(_Body):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "agent": "demo",
                    "goal": "Audit the failing onboarding workflow: find the root cause and draft a fix.",
                    "budget": {"cost": 2.5, "steps": 40},
                    "idempotency_key": "audit-17",
                }
            ]
        }
    )

    agent: str = Field(min_length=1, max_length=64)
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS, pattern=NOT_BLANK)
    constraints: list[Annotated[str, Field(min_length=1, max_length=2_000)]] = Field(
        default_factory=list, max_length=MAX_CONSTRAINTS
    )
    budget: BudgetCaps = Field(
        default_factory=BudgetCaps, description="The agent's budget caps to change (null: no cap)."
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_CHARS)


class Tell(_Body):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"text": "The fix must not change the database schema.", "constraint": True}]}
    )

    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, pattern=NOT_BLANK)
    constraint: bool = False


class Fork(_Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"at": 12}, {"at": 12, "agent": "demo"}]})

    at: Annotated[int, Field(ge=1, le=MAX_COUNT), BeforeValidator(_integral)] = Field(
        description="How many events of the log to keep before going on live."
    )
    agent: str | None = Field(default=None, min_length=1, max_length=64)


class ChecklistItem(_Body):
    passed: bool
    note: str = Field(default="", max_length=MAX_TEXT_CHARS)


class Answer(_Body):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"decision": "approve"},
                {"decision": "reject", "text": "Do not email customers."},
                {"decision": "answer", "text": "Use the staging logs."},
            ]
        }
    )

    decision: Literal["approve", "reject", "answer"]
    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    plan: dict[str, Any] | None = None
    choice: Literal["retry", "skip", "done", "guidance", "replan"] | None = None
    output: Any = None
    checklist: list[ChecklistItem] | None = None
    budget: BudgetCaps | None = Field(
        default=None,
        description="For a budget question approved: the caps to raise, by name (null: no cap); the cap the run "
        "reached must be among them, above what it has used.",
    )


class RunList(BaseModel):
    runs: list[RunSummary]
    next_cursor: str | None


class EventItem(BaseModel):
    seq: int
    event: dict[str, Any]


class EventPage(BaseModel):
    events: list[EventItem]
    next: int


class Inbox(BaseModel):
    questions: list[QuestionView]


class AnswerResult(BaseModel):
    run: RunSummary
    resumed: bool


class AgentView(BaseModel):
    name: str
    example: str | None = None
    """A goal it can be given (the demo's), for a page to offer."""
    planner: str | None
    executor: str | None
    tools: list[str]
    policy: str
    approve_plan: bool


class AgentList(BaseModel):
    agents: list[AgentView]


class Health(BaseModel):
    ok: bool
    version: str
