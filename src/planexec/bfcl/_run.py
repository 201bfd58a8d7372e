"""Running a BFCL task as a planexec session: each user turn a turn of the session, each turn
checked with BFCL's checks before the next."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from planexec.bfcl._calls import parse_call
from planexec.bfcl._check import GroundTruth, check_turn
from planexec.bfcl._data import BfclTask
from planexec.bfcl._oracle import Oracle
from planexec.bfcl._world import BfclWorld
from planexec.faults import FaultProfile
from planexec.log import RunResult
from planexec.models import Model
from planexec.runtime import Agent, AnswerReview, Budget
from planexec.store import RunStore
from planexec.tools import RetryPolicy, Tool

__all__ = ["TaskOutcome", "run_task"]


def _wrapped(tools: list[Tool], faults: FaultProfile | None) -> list[Tool]:
    return tools if faults is None else list(faults.wrap_tools(tools))


def _chosen_call(task: BfclTask, world: BfclWorld, seed: int) -> tuple[int, str, dict[str, Any]] | None:
    calls = [(turn, text) for turn, texts in enumerate(task.ground_truth) for text in texts]
    if not calls:
        return None
    turn, text = random.Random(f"{seed}:{task.id}").choice(calls)
    name, kwargs = parse_call(text, world.signature_of)
    return turn, name, kwargs


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
    injected: int = 0
    """Faults injected with ``fail_one``."""
    calls: tuple[tuple[tuple[str, Any], ...], ...] = ()
    """Each turn's calls that succeeded (function, arguments), in order."""

    @property
    def tool_calls(self) -> int:
        return sum(t.tool_calls for t in self.turns)


async def run_task(
    task: BfclTask,
    *,
    planner: Model | str | None = None,
    store: RunStore | None = None,
    budget: Budget | None = None,
    fail_one: int | None = None,
    faults: FaultProfile | None = None,
    retry: RetryPolicy | None = None,
) -> TaskOutcome:
    """Run ``task``'s turns as one session of an agent over its tools; ``planner``: a model to
    plan with (a model string or object), else the oracle planner that plans the ground truth.

    ``fail_one=SEED``: one of the ground truth's calls (chosen by the seed and the task) fails
    once, as a tool that errs (not transiently), before it changes anything: the planner must
    patch the plan. ``faults``: a fault profile wrapping the tools (transient errors and
    timeouts, which the tools' retries absorb, as ``retry`` says: ``RetryPolicy()`` by default)."""
    world = BfclWorld(task)
    if fail_one is not None:
        world.fail_once = _chosen_call(task, world, fail_one)
    truth = GroundTruth(task, world)
    oracle = Oracle(task, world) if planner is None else None
    agent = Agent(
        oracle.model if oracle is not None else planner,  # type: ignore[arg-type]
        tools=_wrapped(world.tools(widened=world.widened_for_ground_truth(), retry=retry), faults),
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
            oracle.next_turn(turn)
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
                injected=world.injected,
                calls=_done(world),
            )
    return TaskOutcome(
        task_id=task.id,
        valid=True,
        turns=session.turns,
        planner_calls=oracle.planner_calls if oracle is not None else 0,
        injected=world.injected,
        calls=_done(world),
    )


def _done(world: BfclWorld) -> tuple[tuple[tuple[str, Any], ...], ...]:
    return tuple(tuple((name, tuple(sorted(kwargs.items()))) for name, kwargs in turn) for turn in world.done)
