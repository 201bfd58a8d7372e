"""A suite of golden tasks, as typed values: what each task asks, with which models, tools, budget
and faults, and what counts as passing it. Counts are bounded when a value is made (see
:mod:`planexec.eval._limits`), so a suite built in Python cannot ask for endless runs either."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from planexec.errors import Problem, UsageError
from planexec.eval._limits import (
    MAX_CONCURRENCY,
    MAX_REPEAT,
    MAX_RUNS,
    MAX_SEED,
    MAX_TASKS,
    MAX_TURNS,
    number_problem,
    shown,
)
from planexec.models import Model, ModelSettings
from planexec.planner import ENSEMBLE_TRIGGERS, EnsembleTrigger, PolicyName, Upfront
from planexec.runtime import AnswerCheck, Budget, Escalation, Limits
from planexec.tools import Toolset

if TYPE_CHECKING:
    from planexec.eval._world import TaskWorld

__all__ = [
    "AGENT_KINDS",
    "MATCH_MODES",
    "AgentKind",
    "AnswerExpectation",
    "AnswerReviewSpec",
    "EnsembleSpec",
    "FaultSpec",
    "JudgeCheck",
    "MatchMode",
    "ModelSpec",
    "Suite",
    "SuiteInvalid",
    "Task",
    "Tolerances",
    "ToolExpectation",
]

MatchMode = Literal["strict", "unordered", "subset", "superset"]
MATCH_MODES: tuple[MatchMode, ...] = ("strict", "unordered", "subset", "superset")

AgentKind = Literal["planexec", "react"]
AGENT_KINDS: tuple[AgentKind, ...] = ("planexec", "react")

ModelSpec: TypeAlias = "str | Callable[[], Model]"
"""A model string (``scripted:PATH``, ``object:pkg.module:attr``, ``provider:name``), or, in a suite
built in Python, a function that returns a fresh model for each run."""

FaultSpec: TypeAlias = "str | Mapping[str, Any]"
"""A fault profile's name, or its fields as a mapping (see :mod:`planexec.faults`)."""


@dataclass(frozen=True, kw_only=True)
class EnsembleSpec:
    """A task's planner ensemble (see :class:`~planexec.planner.Ensemble`): the models planning is
    handed to, in order, each made fresh for each run; when; and under which confidence."""

    escalate_to: tuple[ModelSpec, ...]
    escalate_on: tuple[EnsembleTrigger, ...] = ENSEMBLE_TRIGGERS
    confidence_below: float = 0.5


class SuiteInvalid(UsageError):
    """A suite has problems; every one found is in ``problems``."""


@dataclass(frozen=True, kw_only=True)
class ToolExpectation:
    """Which tools a run must call.

    ``strict``: exactly this sequence. ``unordered``: the same calls in any order (the same
    multiset). ``subset``: every listed tool was called (at least as often as it is listed).
    ``superset``: no tool outside the list was called.
    """

    match: MatchMode
    tools: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class JudgeCheck:
    """A model judges the answer against ``rubric``; ``model`` overrides the task's judge model."""

    rubric: str
    model: ModelSpec | None = None


@dataclass(frozen=True, kw_only=True)
class AnswerReviewSpec:
    """The final answer's review during a task's runs (see :class:`planexec.AnswerReview`):
    ``checks`` (their ``module:attr`` references in ``check_refs``), a ``rubric`` graded by the
    task's judge model, and how often a refused answer goes back. There is no checklist: nobody is
    at hand to tick it during an evaluation."""

    checks: tuple[AnswerCheck, ...] = field(default=(), compare=False, repr=False)
    check_refs: tuple[str, ...] = ()
    rubric: str | None = None
    max_rounds: int = 2


@dataclass(frozen=True, kw_only=True)
class AnswerExpectation:
    """What the final answer must be: at most one deterministic check (``exact``, ``contains`` —
    every text listed — or ``regex``, searched), and optionally a model ``judge``. The answer passes
    when every check given passes."""

    exact: str | None = None
    contains: tuple[str, ...] = ()
    regex: str | None = None
    judge: JudgeCheck | None = None
    ignore_case: bool = False

    @property
    def deterministic(self) -> Literal["exact", "contains", "regex"] | None:
        if self.exact is not None:
            return "exact"
        if self.contains:
            return "contains"
        if self.regex is not None:
            return "regex"
        return None


@dataclass(frozen=True, kw_only=True)
class Task:
    """One golden task. Model strings are already resolved against the suite's folder.

    With ``turns``, a run of the task is a session: ``goal``, then each of ``turns``, each a turn
    that goes on from the ones before (a planner–executor session, or a ReAct conversation); its
    tool expectation is matched against the calls of every turn, its answer expectation against
    the last turn's answer. A turn that stops short ends the run."""

    id: str
    goal: str
    turns: tuple[str, ...] = ()
    """The user's further requests, one per turn, after ``goal``."""
    world: Callable[[], TaskWorld] | None = field(default=None, compare=False, repr=False)
    """A task that brings its own world (see :class:`planexec.eval.TaskWorld`): made fresh for each
    run, it gives each turn's tools and request, checks each turn, and stands in for a model the
    task names none for."""
    constraints: tuple[str, ...] = ()
    tool_refs: tuple[str, ...] = ()
    tools: Toolset = field(default_factory=Toolset, compare=False, repr=False)
    """The tools ``tool_refs`` name (and any given as values), loaded when the suite was read."""
    planner: ModelSpec | None = None
    executor: ModelSpec | None = None
    judge: ModelSpec | None = None
    react_model: ModelSpec | None = None
    policy: PolicyName = Upfront.name
    replan: Literal["on_failure", "after_each_step", "never"] = "on_failure"
    budget: Budget = field(default_factory=Budget)
    limits: Limits = field(default_factory=Limits)
    max_turns: int = 10
    """For the ReAct baseline: its most model turns."""
    planner_settings: ModelSettings = field(default_factory=ModelSettings)
    executor_settings: ModelSettings = field(default_factory=ModelSettings)
    """For the executor, and for the ReAct baseline's model."""
    judge_settings: ModelSettings = field(default_factory=ModelSettings)
    step_timeout: float | None = None
    """Seconds a whole model-driven step may take (see ``ModelExecutor.step_timeout``)."""
    turn_format: Literal["nested", "flat"] = "nested"
    sealed: bool = False
    """Sealed planning: the planner never reads an output (see ``Planner(sealed=True)``)."""
    extractor: ModelSpec | None = None
    """The model of a sealed planner's quarantined extractor (None: none)."""
    ensemble: EnsembleSpec | None = None
    """The planner's ensemble: ``planner`` plans first, these models after it."""
    escalation: Escalation = field(default_factory=Escalation)
    review: AnswerReviewSpec | None = None
    expect_tools: ToolExpectation | None = None
    expect_answer: AnswerExpectation | None = None
    repeat: int = 1
    faults: FaultSpec | None = None

    def __post_init__(self) -> None:
        problems = _count_problems(self, (("repeat", 1, MAX_REPEAT), ("max_turns", 1, MAX_TURNS)))
        if len(self.turns) >= MAX_TURNS:
            message = f"holds {len(self.turns):,} turns; a task may hold at most {MAX_TURNS - 1:,} after its goal"
            problems.append(Problem(code="suite", where="turns", message=message))
        if problems:
            raise UsageError(f"invalid task {shown(self.id)}", problems)

    def model_for_react(self) -> ModelSpec | None:
        """The ReAct baseline's model: ``react_model``, else the task's ``executor``."""
        return self.react_model if self.react_model is not None else self.executor


@dataclass(frozen=True, kw_only=True)
class Tolerances:
    """How much worse than a baseline a report may be before it counts as a regression.

    ``pass_rate``: an absolute drop (0.0: any drop). ``cost`` and ``latency``: relative rises of
    the mean per run (0.1: ten per cent). ``latency_floor``: latency differences under this many
    seconds never count (scheduling noise on fast runs).
    """

    pass_rate: float = 0.0
    cost: float = 0.1
    latency: float = 0.25
    latency_floor: float = 0.05


@dataclass(frozen=True, kw_only=True)
class Suite:
    """A suite of tasks, read from a YAML file (``load_suite``) or built in Python (``suite_from_mapping``)."""

    name: str
    tasks: tuple[Task, ...]
    root: Path
    """The folder model and tool references are resolved from (the suite file's folder)."""
    path: Path | None = None
    seed: int = 0
    concurrency: int = 4
    tolerances: Tolerances = field(default_factory=Tolerances)
    mcp: tuple[str, ...] = ()
    """MCP servers whose tools every task may use: command lines (spawned from ``root``), or
    ``http://`` or ``https://`` URLs. A run of the suite starts them once, lists their tools, and
    stops them at the end."""

    def __post_init__(self) -> None:
        problems = _count_problems(self, (("seed", 0, MAX_SEED), ("concurrency", 1, MAX_CONCURRENCY)))
        if len(self.tasks) > MAX_TASKS:
            message = f"holds {len(self.tasks):,} tasks; a suite may hold at most {MAX_TASKS:,} tasks"
            problems.append(Problem(code="suite", where="tasks", message=message))
        elif (runs := sum(t.repeat for t in self.tasks)) > MAX_RUNS:
            message = f"asks for {runs:,} runs (every task's repeat added up); at most {MAX_RUNS:,}"
            problems.append(Problem(code="suite", where="tasks", message=message))
        if problems:
            raise UsageError(f"invalid suite {shown(self.name)}", problems)

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(task_id)


def _count_problems(value: object, counts: tuple[tuple[str, int, int], ...]) -> list[Problem]:
    """What is wrong with each whole number ``(name, minimum, maximum)`` of ``value``."""
    problems = []
    for name, low, high in counts:
        message = number_problem(getattr(value, name), whole=True, minimum=low, maximum=high)
        if message is not None:
            problems.append(Problem(code="suite", where=name, message=message))
    return problems
