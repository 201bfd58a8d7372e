"""Running a BFCL task as a planexec session: each user turn a turn of the session, each turn
checked with BFCL's checks before the next."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planexec.bfcl._check import GroundTruth, check_turn
from planexec.bfcl._data import BfclTask
from planexec.bfcl._oracle import Oracle
from planexec.bfcl._world import BfclWorld
from planexec.log import RunResult
from planexec.models import Model
from planexec.runtime import Agent, AnswerReview, Budget
from planexec.store import RunStore

__all__ = ["TaskOutcome", "run_task"]


def _says_something(answer: str) -> bool | str:
    return bool(answer.strip()) or "the answer is empty"


@dataclass(frozen=True, kw_only=True)
class TaskOutcome:
    """How a task went: BFCL's verdict, where it failed, and the session's turns."""

    task_id: str
    valid: bool
    failed_turn: int | None = None
    error: dict[str, Any] = field(default_factory=dict)
    turns: tuple[RunResult, ...] = ()
    planner_calls: int = 0

    @property
    def tool_calls(self) -> int:
        return sum(t.tool_calls for t in self.turns)


async def run_task(
    task: BfclTask,
    *,
    planner: Model | str | None = None,
    store: RunStore | None = None,
    budget: Budget | None = None,
) -> TaskOutcome:
    """Run ``task``'s turns as one session of an agent over its tools; ``planner``: a model to
    plan with (a model string or object), else the oracle planner that plans the ground truth."""
    world = BfclWorld(task)
    truth = GroundTruth(task, world)
    oracle = Oracle(task, world) if planner is None else None
    agent = Agent(
        oracle.model if oracle is not None else planner,  # type: ignore[arg-type]
        tools=world.tools(widened=world.widened_for_ground_truth()),
        store=store,
        budget=budget or Budget(),
        name="bfcl",
        # A turn may need no call (BFCL's ground truth for it is empty): its planner then answers
        # with no step, which a run accepts only when its final answer is reviewed.
        review=AnswerReview(checks=[_says_something]),
    )
    session = agent.session(f"bfcl-{task.id}")
    for turn, goal in enumerate(task.turns):
        if turn:
            world.next_turn()
        if oracle is not None:
            oracle.turn = turn
        result = await session.run(goal or "(the user said nothing this turn)")
        expected = truth.run_turn(turn)
        verdict = check_turn(world, truth, turn, expected)
        if not verdict.get("valid"):
            return TaskOutcome(
                task_id=task.id,
                valid=False,
                failed_turn=turn,
                error={k: v for k, v in verdict.items() if k in ("error_type", "error_message")}
                | {"stop": result.stop.kind},
                turns=session.turns,
                planner_calls=oracle.planner_calls if oracle is not None else 0,
            )
    return TaskOutcome(
        task_id=task.id,
        valid=True,
        turns=session.turns,
        planner_calls=oracle.planner_calls if oracle is not None else 0,
    )
