"""Running a suite: every task as many times as it asks, concurrently within a bound, each run
isolated (fresh models, its own fault profile and seed), then checked and measured. The suite's MCP
servers are the one thing the runs share: started once, before the first run, and stopped after the
last."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from planexec.errors import Problem, UsageError
from planexec.eval._faults import describe_faults, run_seed, seeded_profile
from planexec.eval._limits import MAX_CONCURRENCY, MAX_SEED, number_problem, shape_problems
from planexec.eval._matchers import CheckOutcome, check_answer, judge_answer, match_tools
from planexec.eval._mcp import served_tools
from planexec.eval._metrics import RunMetrics, Trace, joined_trace, trace_of
from planexec.eval._refs import fresh_model
from planexec.eval._report import EvalReport, RunReport, TaskReport, summarize
from planexec.eval._suite import AgentKind, FaultSpec, ModelSpec, Suite, Task
from planexec.eval._world import Role
from planexec.executor import ModelExecutor
from planexec.log import RunResult
from planexec.models import Message, Model
from planexec.planner import Ensemble, Planner
from planexec.react import ReactAgent, ReactResult
from planexec.runtime import Agent, AnswerReview, RunContext
from planexec.store import Redactor, RunStore
from planexec.tools import Tool

if TYPE_CHECKING:
    from planexec.faults import FaultProfile

__all__ = ["EvalSettings", "ProgressSink", "run_suite"]


@dataclass(frozen=True, kw_only=True)
class EvalSettings:
    """How to run a suite. None means: as the suite says."""

    agent: AgentKind = "planexec"
    concurrency: int | None = None
    seed: int | None = None
    faults: FaultSpec | None = None
    """A fault profile for every task, instead of the tasks' own."""
    store: RunStore | None = None
    """Where planner–executor runs are logged (None: not logged)."""
    redactor: Redactor | None = None
    """Applied to every text the report keeps (answers, stop details, check details), as the store
    applies it to what it writes; None: the store's redactor, else ``Redactor()``."""
    sealed: bool | None = None
    """Sealed planning for every task (True or False) instead of as each task says (None)."""

    def __post_init__(self) -> None:
        problems = []
        for name, low, high in (("concurrency", 1, MAX_CONCURRENCY), ("seed", 0, MAX_SEED)):
            message = number_problem(getattr(self, name), whole=True, minimum=low, maximum=high, nullable=True)
            if message is not None:
                problems.append(Problem(code="settings", where=name, message=message))
        if self.faults is not None and not isinstance(self.faults, str):
            problems += [
                Problem(code=p.code, where=f"faults.{p.where}" if p.where else "faults", message=p.message)
                for p in shape_problems(self.faults, code="settings")
            ]
        if problems:
            raise UsageError("invalid evaluation settings", problems)


class ProgressSink(Protocol):
    """Told when each run starts and ends (runs end in any order)."""

    def started(self, task: str, index: int) -> None: ...

    def finished(self, run: RunReport) -> None: ...


async def run_suite(
    suite: Suite, settings: EvalSettings | None = None, *, progress: ProgressSink | None = None
) -> EvalReport:
    """Run every task of ``suite`` and return the report (a failed run is a result, not an error).

    The suite's MCP servers are started first and stopped at the end; one that cannot start, or
    whose tools do not fit the tasks, is a :class:`SuiteInvalid` raised before any run."""
    settings = settings or EvalSettings()
    seed = settings.seed if settings.seed is not None else suite.seed
    limit = asyncio.Semaphore(settings.concurrency or suite.concurrency)

    async with served_tools(suite) as served:

        async def one(task: Task, index: int) -> RunReport:
            async with limit:
                if progress is not None:
                    progress.started(task.id, index)
                report = await _run_one(suite, task, index, settings, seed, served)
                if progress is not None:
                    progress.finished(report)
                return report

        jobs = [one(task, index) for task in suite.tasks for index in range(task.repeat)]
        runs = await asyncio.gather(*jobs)
    tasks = tuple(
        TaskReport(
            id=task.id,
            summary=summarize(mine),
            runs=tuple(mine),
            faults=describe_faults(settings.faults if settings.faults is not None else task.faults),
        )
        for task in suite.tasks
        if (mine := [r for r in runs if r.task == task.id])
    )
    return EvalReport(
        suite=suite.name,
        suite_path=str(suite.path) if suite.path is not None else None,
        agent=settings.agent,
        seed=seed,
        faults=describe_faults(settings.faults),
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        summary=summarize(runs),
        tasks=tasks,
    )


async def _run_one(
    suite: Suite, task: Task, index: int, settings: EvalSettings, seed: int, served: tuple[Tool, ...]
) -> RunReport:
    faults = settings.faults if settings.faults is not None else task.faults
    this_seed = run_seed(seed, task.id, index)
    try:
        profile = seeded_profile(faults, this_seed) if faults is not None else None
        ran = await _execute(suite, task, index, settings, profile, this_seed, served)
    except Exception as e:  # building the run failed (a model factory, a fault profile …): the run fails
        return _broken(task, index, _redactor(settings).redact_text(f"{type(e).__name__}: {e}"))
    trace = joined_trace([trace_of(result, profile) for result in ran.results])
    checks, disagreement, judge_cost = await _check(task, trace, profile)
    checks = [*checks, *ran.checks]
    clean = _redactor(settings).redact_text  # checked as given, reported as the store keeps it
    checks = [replace(c, detail=clean(c.detail)) for c in checks]
    return RunReport(
        task=task.id,
        index=index,
        passed=all(c.passed for c in checks),
        reasons=tuple(f"{c.name}: {c.detail}" for c in checks if not c.passed),
        stop=trace.stop.kind,
        stop_detail=clean(trace.stop.detail),
        answer=None if trace.answer is None else clean(trace.answer),
        tools_called=trace.tools_called,
        checks=tuple(checks),
        disagreement=disagreement,
        metrics=trace.metrics,
        judge_cost=judge_cost,
        fault_seed=this_seed if faults is not None else None,
        run_id=trace.run_id if settings.store is not None and settings.agent == "planexec" else None,
    )


def _redactor(settings: EvalSettings) -> Redactor:
    if settings.redactor is not None:
        return settings.redactor
    found = getattr(settings.store, "redactor", None)
    return found if isinstance(found, Redactor) else Redactor()


def _wrapper(profile: FaultProfile | None) -> Callable[[Model, str], Model]:
    if profile is None:
        return lambda model, _role: model
    return lambda model, role: profile.wrap_model(model, role=cast(Any, role))


def _model(spec: ModelSpec, role: str, wrap: Callable[[Model, str], Model]) -> Model:
    return wrap(fresh_model(spec), role)


@dataclass(frozen=True, kw_only=True)
class _Ran:
    """A task's run: each turn's result (one, for a task of one goal), and the world's checks."""

    results: tuple[RunResult | ReactResult, ...]
    checks: tuple[CheckOutcome, ...] = ()


class _Turns:
    """A task's turns as one run sees them: from its world when it has one, else its goals."""

    def __init__(self, task: Task, profile: FaultProfile | None, served: tuple[Tool, ...]) -> None:
        self.task = task
        self.world = task.world() if task.world is not None else None
        self.count = 1 + len(task.turns)
        self._profile = profile
        self._served = served
        self._names: tuple[str, ...] | None = None

    def tools(self, turn: int) -> list[Tool]:
        own = list(self.world.tools(turn)) if self.world is not None else list(self.task.tools)
        tools = [*own, *self._served]
        return tools if self._profile is None else list(self._profile.wrap_tools(tools))

    def changed(self, turn: int) -> bool:
        """Whether ``turn``'s tools are not the turn before's (by name)."""
        if self.world is None:
            return False
        names = tuple(t.name for t in self.world.tools(turn))
        before, self._names = self._names, names
        return before is not None and before != names

    def goal(self, turn: int) -> str:
        if self.world is not None:
            return self.world.goal(turn)
        return self.task.goal if turn == 0 else self.task.turns[turn - 1]

    def begin(self, turn: int) -> None:
        if self.world is not None:
            self.world.begin_turn(turn)

    def check(self, turn: int) -> CheckOutcome | None:
        if self.world is None:
            return None
        verdict = self.world.check_turn(turn)
        if verdict is not None and not isinstance(verdict, CheckOutcome):
            raise TypeError(f"the world's check of the turn is a {type(verdict).__name__}, not a CheckOutcome")
        return verdict

    def model(self, spec: ModelSpec | None, role: Role, wrap: Callable[[Model, str], Model]) -> Model | None:
        """The task's model for ``role``, else its world's stand-in."""
        if spec is not None:
            return _model(spec, "planner" if role == "planner" else "executor", wrap)
        found = self.world.stand_in(role) if self.world is not None else None
        return None if found is None else wrap(found, "planner" if role == "planner" else "executor")


async def _execute(
    suite: Suite,
    task: Task,
    index: int,
    settings: EvalSettings,
    profile: FaultProfile | None,
    seed: int,
    served: tuple[Tool, ...],
) -> _Ran:
    turns = _Turns(task, profile, served)
    wrap = _wrapper(profile)
    context = RunContext(seed=seed)
    if settings.agent == "react":
        model = turns.model(task.model_for_react(), "react", wrap)
        if model is None:
            raise ValueError(f"task {task.id!r} has no react_model (or executor) for the ReAct agent")
        return await _react_turns(task, turns, model, context)
    planner = turns.model(task.planner, "planner", wrap)
    if planner is None:
        raise ValueError(f"task {task.id!r} has no planner")
    executor = None
    if task.executor is not None:
        executor = ModelExecutor(
            model=_model(task.executor, "executor", wrap),
            settings=task.executor_settings,
            step_timeout=task.step_timeout,
        )
    ensemble = None
    if task.ensemble is not None:
        ensemble = Ensemble(
            escalate_to=[_model(spec, "planner", wrap) for spec in task.ensemble.escalate_to],
            escalate_on=task.ensemble.escalate_on,
            confidence_below=task.ensemble.confidence_below,
        )
    sealed = task.sealed if settings.sealed is None else settings.sealed
    extractor = _model(task.extractor, "executor", wrap) if sealed and task.extractor is not None else None
    agent = Agent(
        Planner(
            model=planner,
            policy=task.policy,
            replan=task.replan,
            settings=task.planner_settings,
            turn_format=task.turn_format,
            ensemble=ensemble,
            sealed=sealed,
            extractor=extractor,
        ),
        tools=turns.tools(0),
        executor=executor,
        budget=task.budget,
        limits=task.limits,
        context=context,
        store=settings.store,
        escalation=task.escalation,
        review=_review(task, wrap),
    )
    name = f"eval-{task.id}-{index}-{uuid.uuid4().hex[:8]}"
    metadata = {"eval": {"suite": suite.name, "task": task.id, "index": index}}
    if turns.count == 1 and turns.world is None:
        run_id = name if settings.store is not None else None
        run = agent.start(task.goal, constraints=task.constraints, run_id=run_id, metadata=metadata)
        return _Ran(results=(await run.result(),))
    session = agent.session(name)

    async def run_turn(turn: int) -> RunResult:
        if turns.changed(turn):
            agent.use_tools(turns.tools(turn))
        return await session.run(turns.goal(turn), constraints=task.constraints, metadata=metadata)

    return await _each_turn(turns, run_turn)


async def _react_turns(task: Task, turns: _Turns, model: Model, context: RunContext) -> _Ran:
    """The ReAct baseline over a task's turns: one conversation, a run per turn."""
    history: tuple[Message, ...] = ()

    async def run_turn(turn: int) -> ReactResult:
        nonlocal history
        react = ReactAgent(
            model,
            tools=turns.tools(turn),
            max_turns=task.max_turns,
            budget=task.budget,
            context=context,
            settings=task.executor_settings,
        )
        result = await react.run(turns.goal(turn), constraints=task.constraints, history=history)
        history = result.messages
        return result

    return await _each_turn(turns, run_turn)


async def _each_turn(turns: _Turns, run_turn: Callable[[int], Awaitable[RunResult | ReactResult]]) -> _Ran:
    """Run and check each turn until one stops short or fails its check. A turn whose world (or
    whose start) fails after earlier turns ran ends the run with a failed check of that turn, and
    the report keeps what the earlier turns did; before any turn ran, the failure is the run's."""
    results: list[RunResult | ReactResult] = []
    checks: list[CheckOutcome] = []
    for turn in range(turns.count):
        try:
            turns.begin(turn)
            result = await run_turn(turn)
        except Exception as e:
            if not results:
                raise
            checks.append(_turn_failed(turn, e))
            break
        results.append(result)
        try:
            went_on = _turn_went_on(turn, result, turns, checks)
        except Exception as e:
            checks.append(_turn_failed(turn, e))
            break
        if not went_on:
            break
    return _Ran(results=tuple(results), checks=tuple(checks))


def _turn_failed(turn: int, error: Exception) -> CheckOutcome:
    return CheckOutcome(name=f"turn {turn + 1}: error", passed=False, detail=f"{type(error).__name__}: {error}")


def _turn_went_on(turn: int, result: RunResult | ReactResult, turns: _Turns, checks: list[CheckOutcome]) -> bool:
    """Check ``turn`` (its world's check, kept in ``checks``); whether the next turn may run."""
    verdict = turns.check(turn)
    if verdict is not None:
        checks.append(replace(verdict, name=f"turn {turn + 1}: {verdict.name}"))
        if not verdict.passed:
            return False
    return result.stop.ok and turn + 1 < turns.count


def _review(task: Task, wrap: Callable[[Model, str], Model]) -> AnswerReview | None:
    """The task's review of its final answer, with a fresh judge model for this run."""
    spec = task.review
    if spec is None:
        return None
    judge = None
    if spec.rubric is not None:
        if task.judge is None:
            raise ValueError(f"task {task.id!r} reviews its answer with a rubric but names no judge")
        judge = _model(task.judge, "judge", wrap)
    return AnswerReview(
        checks=spec.checks,
        rubric=spec.rubric,
        judge=judge,
        max_rounds=spec.max_rounds,
        judge_settings=task.judge_settings,
    )


async def _check(
    task: Task, trace: Trace, profile: FaultProfile | None
) -> tuple[list[CheckOutcome], bool | None, float]:
    """The run's checks, whether the deterministic answer check and the judge disagreed, and the judge's cost."""
    checks = [CheckOutcome(name="stop", passed=trace.stop.ok, detail="" if trace.stop.ok else str(trace.stop))]
    if task.expect_tools is not None:
        checks.append(match_tools(task.expect_tools, trace.tools_chosen))  # a call a fault failed is not a choice
    expect = task.expect_answer
    if expect is None:
        return checks, None, 0.0
    deterministic = check_answer(expect, trace.answer)
    if deterministic is not None:
        checks.append(deterministic)
    if expect.judge is None:
        return checks, None, 0.0
    spec = expect.judge.model if expect.judge.model is not None else task.judge
    try:
        if spec is None:
            raise ValueError("the task names no judge model")
        judge = _model(spec, "judge", _wrapper(profile))
    except Exception as e:
        checks.append(CheckOutcome(name="answer.judge", passed=False, detail=f"the judge failed: {e}"))
        return checks, None, 0.0
    verdict = await judge_answer(
        judge, goal=task.goal, rubric=expect.judge.rubric, answer=trace.answer, settings=task.judge_settings
    )
    checks.append(verdict.check)
    disagreement = None
    if deterministic is not None and verdict.judged and trace.answer is not None:
        disagreement = deterministic.passed != verdict.check.passed
    return checks, disagreement, verdict.cost


def _broken(task: Task, index: int, why: str) -> RunReport:
    """The report of a run that could not be built or crashed outside the agent."""
    return RunReport(
        task=task.id,
        index=index,
        passed=False,
        reasons=(f"error: {why}",),
        stop="error",
        stop_detail=why,
        answer=None,
        tools_called=(),
        checks=(CheckOutcome(name="stop", passed=False, detail=why),),
        disagreement=None,
        metrics=RunMetrics(
            steps=0,
            tool_calls=0,
            tool_calls_ok=0,
            replans=0,
            stalls=0,
            escalations=0,
            model_calls=0,
            input_tokens=0,
            output_tokens=0,
            cost=0.0,
            latency=0.0,
            parallelism=None,
        ),
    )
