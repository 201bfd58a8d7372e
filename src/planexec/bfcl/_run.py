"""Running a BFCL task as a session: each user turn a turn of the session (a planner–executor run,
or a ReAct run that goes on from the conversation so far), each turn checked with BFCL's checks
before the next.

:class:`TaskRun` is one run of a task — its world, its ground truth, its oracles, the tools of each
turn (``miss_func``: the functions held back until a turn appear at that turn) and the check of each
turn; :func:`run_task` drives it to the end.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.bfcl._calls import parse_call
from planexec.bfcl._check import GroundTruth, check_turn
from planexec.bfcl._data import BfclTask
from planexec.bfcl._oracle import Oracle, ReactOracle
from planexec.bfcl._world import BfclWorld
from planexec.errors import Problem, UsageError
from planexec.faults import FaultProfile
from planexec.log import Event, ModelCalled, RunResult
from planexec.models import Message, Model
from planexec.planner import PLANNER_POLICIES, Planner, PolicyName, Upfront
from planexec.react import ReactAgent, ReactResult
from planexec.runtime import Agent, AnswerReview, Budget, Session
from planexec.store import RunStore
from planexec.tools import RetryPolicy, Tool

__all__ = ["REACT_TURNS", "AgentKind", "Policy", "TaskOutcome", "TaskRun", "run_task"]

AgentKind = Literal["planexec", "react"]
Policy = PolicyName
"""The planner's policy: the name of a registered one (see ``planexec.planner.PLANNER_POLICIES``)."""

REACT_TURNS = 50
"""The ReAct baseline's most model calls per BFCL turn: a turn of BFCL's makes up to 34 calls, and
a ReAct model may need one model call for each that depends on the one before."""

MORE_TOOLS = "You have more tools now: {names}. Please go on with what I asked."
"""A turn's request when BFCL gives none (the turn that adds functions held back until then)."""


def _chosen_call(task: BfclTask, world: BfclWorld, seed: int) -> tuple[int, str, dict[str, Any]] | None:
    calls = [(turn, text) for turn, texts in enumerate(task.ground_truth) for text in texts]
    if not calls:
        return None
    turn, text = random.Random(f"{seed}:{task.id}").choice(calls)
    name, kwargs = parse_call(text, world.signature_of)
    return turn, name, kwargs


def _calls_function(text: str, name: str) -> bool:
    return text.strip().startswith(f"{name}(")


def says_something(answer: str) -> bool | str:
    """The review of a BFCL turn's answer: a turn may need no call (its ground truth is empty), and
    then its planner answers with no step, which a run accepts only when its answer is reviewed."""
    return bool(answer.strip()) or "the answer is empty"


class TaskRun:
    """One run of ``task``: fresh instances, the ground truth beside them, and what each turn gets.

    ``fail_one=SEED``: one of the ground truth's calls (chosen by the seed and the task) fails
    once, as a tool that errs (not transiently), before it changes anything. ``retry``: how the
    tools try transient failures again (``RetryPolicy()`` by default)."""

    def __init__(self, task: BfclTask, *, fail_one: int | None = None, retry: RetryPolicy | None = None) -> None:
        self.task = task
        self.world = BfclWorld(task)
        if fail_one is not None:
            self.world.fail_once = _chosen_call(task, self.world, fail_one)
        self.truth = GroundTruth(task, self.world)
        self.retry = retry
        self._widened = self.world.widened_for_ground_truth()
        self._turn = 0

    @property
    def turns(self) -> int:
        return len(self.task.turns)

    def held_back(self, turn: int) -> frozenset[str]:
        """The functions not available yet at ``turn`` (``miss_func``) — but one the ground truth
        itself calls before then, which BFCL's data does in a few tasks: those calls could never
        be made, whoever plans them."""
        return frozenset(
            name
            for at, names in self.task.missed.items()
            if at > turn
            for name in names
            if not any(_calls_function(text, name) for calls in self.task.ground_truth[:at] for text in calls)
        )

    def tools(self, turn: int) -> list[Tool]:
        """The tools of ``turn``: every documented function but those held back until later."""
        return self.world.tools(hidden=self.held_back(turn), widened=self._widened, retry=self.retry)

    def goal(self, turn: int) -> str:
        """What the user asks at ``turn``."""
        text = self.task.turns[turn]
        if text.strip():
            return text
        added = self.task.missed.get(turn)
        if added:
            return MORE_TOOLS.format(names=", ".join(added))
        return "(the user said nothing this turn)"

    def begin_turn(self, turn: int) -> None:
        if turn:
            self.world.next_turn()
        self._turn = turn

    def check(self, turn: int) -> dict[str, Any]:
        """BFCL's verdict on ``turn`` once the agent is done with it: ``{"valid": True}`` or why not."""
        expected = self.truth.run_turn(turn)
        return check_turn(self.world, self.truth, turn, expected)


@dataclass(frozen=True, kw_only=True)
class TaskOutcome:
    """How a task went: BFCL's verdict, where it failed, and the session's turns."""

    task_id: str
    valid: bool
    failed_turn: int | None = None
    error: dict[str, Any] = field(default_factory=dict)
    turns: tuple[RunResult | ReactResult, ...] = ()
    planner_calls: int = 0
    """Model calls made to plan (the ReAct baseline: all its model calls)."""
    request_chars: int = 0
    """Characters of those calls' requests."""
    injected: int = 0
    """Faults injected with ``fail_one``."""
    calls: tuple[tuple[tuple[str, Any], ...], ...] = ()
    """Each turn's calls that succeeded (function, arguments), in order."""

    @property
    def tool_calls(self) -> int:
        return sum(t.tool_calls for t in self.turns)


def planning_calls(events: Sequence[Event]) -> tuple[int, int]:
    """The model calls a run made to plan — a planner's, or a ReAct model's — and their requests' characters."""
    calls = [e for e in events if isinstance(e, ModelCalled) and e.role in ("planner", "executor")]
    calls = [e for e in calls if e.role == "planner" or e.purpose == "react"]
    return len(calls), sum(e.request_chars for e in calls)


async def run_task(
    task: BfclTask,
    *,
    planner: Model | str | None = None,
    agent: AgentKind = "planexec",
    policy: Policy = Upfront.name,
    store: RunStore | None = None,
    budget: Budget | None = None,
    fail_one: int | None = None,
    faults: FaultProfile | None = None,
    retry: RetryPolicy | None = None,
) -> TaskOutcome:
    """Run ``task``'s turns as one session and check each turn with BFCL's checks.

    ``planner``: the model that plans (a model string or object; for ``agent="react"`` the ReAct
    model), else the oracle that plans the ground truth. ``policy``: the planner's, upfront or step
    by step. ``fail_one``, ``retry``: see :class:`TaskRun`. ``faults``: a fault profile wrapping the
    tools (transient errors and timeouts, which the tools' retries absorb)."""
    problems = []
    if agent not in ("planexec", "react"):
        problems.append(Problem(code="bfcl", where="agent", message=f"{agent!r}: planexec or react"))
    if policy not in PLANNER_POLICIES:
        choices = " or ".join(PLANNER_POLICIES.names())
        problems.append(Problem(code="bfcl", where="policy", message=f"{policy!r}: {choices}"))
    if problems:
        raise UsageError("invalid BFCL run", problems)
    run = TaskRun(task, fail_one=fail_one, retry=retry)
    if agent == "react":
        return await _run_react(run, planner, budget, faults)
    return await _run_planexec(run, planner, policy, store, budget, faults)


def _wrapped(tools: list[Tool], faults: FaultProfile | None) -> list[Tool]:
    return tools if faults is None else list(faults.wrap_tools(tools))


async def _run_planexec(
    run: TaskRun,
    planner: Model | str | None,
    policy: Policy,
    store: RunStore | None,
    budget: Budget | None,
    faults: FaultProfile | None,
) -> TaskOutcome:
    oracle = Oracle(run.task, run.world) if planner is None else None
    model = oracle.model if oracle is not None else planner
    assert model is not None
    agent = Agent(
        Planner(model=model, policy=policy),
        tools=_wrapped(run.tools(0), faults),
        store=store,
        budget=budget or Budget(),
        name="bfcl",
        review=AnswerReview(checks=[says_something]),
    )
    session = agent.session(f"bfcl-{run.task.id}")
    return await _turns(run, session, agent, oracle, faults)


async def _turns(
    run: TaskRun, session: Session, agent: Agent, oracle: Oracle | None, faults: FaultProfile | None
) -> TaskOutcome:
    for turn in range(run.turns):
        run.begin_turn(turn)
        if oracle is not None:
            oracle.next_turn(turn)
        if turn and run.held_back(turn) != run.held_back(turn - 1):
            agent.use_tools(_wrapped(run.tools(turn), faults))
        result = await session.run(run.goal(turn))
        verdict = run.check(turn)
        if not verdict.get("valid"):
            return _outcome(run, session.turns, verdict, turn, result.stop.kind)
    return _outcome(run, session.turns, None, None, None)


async def _run_react(
    run: TaskRun, model: Model | str | None, budget: Budget | None, faults: FaultProfile | None
) -> TaskOutcome:
    oracle = ReactOracle(run.task, run.world) if model is None else None
    chosen = oracle.model if oracle is not None else model
    assert chosen is not None
    history: tuple[Message, ...] = ()
    results: list[ReactResult] = []
    for turn in range(run.turns):
        run.begin_turn(turn)
        if oracle is not None:
            oracle.next_turn(turn)
        react = ReactAgent(
            chosen, tools=_wrapped(run.tools(turn), faults), budget=budget or Budget(), max_turns=REACT_TURNS
        )
        result = await react.run(run.goal(turn), history=history, run_id=f"bfcl-{run.task.id}-{turn}")
        results.append(result)
        history = result.messages
        verdict = run.check(turn)
        if not verdict.get("valid"):
            return _outcome(run, results, verdict, turn, result.stop.kind)
    return _outcome(run, results, None, None, None)


def _outcome(
    run: TaskRun,
    turns: Sequence[RunResult | ReactResult],
    verdict: dict[str, Any] | None,
    failed_turn: int | None,
    stop: str | None,
) -> TaskOutcome:
    counted = [planning_calls(t.events) for t in turns]
    error = {}
    if verdict is not None:
        error = {k: v for k, v in verdict.items() if k in ("error_type", "error_message")} | {"stop": stop}
    return TaskOutcome(
        task_id=run.task.id,
        valid=verdict is None,
        failed_turn=failed_turn,
        error=error,
        turns=tuple(turns),
        planner_calls=sum(c for c, _ in counted),
        request_chars=sum(n for _, n in counted),
        injected=run.world.injected,
        calls=tuple(tuple((name, tuple(sorted(kwargs.items()))) for name, kwargs in done) for done in run.world.done),
    )
