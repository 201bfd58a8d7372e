"""Running AgentDojo's tasks through planexec: one case is a user task (with an injection task's
attack, or none) under one defence setting, on a fresh environment, judged by AgentDojo's checks;
a suite is every case of its user tasks and injection tasks under every setting asked for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from planexec.agentdojo._attacks import DEFAULT_ATTACK, attack_problems, injections_for
from planexec.agentdojo._defences import DEFENCE_NAMES, DEFENCES, DefenceContext, DefenceName, SimulatedHuman
from planexec.agentdojo._oracle import DojoOracle
from planexec.agentdojo._sealed import SealedOracle
from planexec.agentdojo._suites import DojoSuite, load_suite, suite_problems
from planexec.agentdojo._world import DojoWorld
from planexec.errors import Problem, UsageError
from planexec.log import ApprovalDecided, ApprovalRequested, Event, ModelCalled
from planexec.models import Model, resolve_model
from planexec.planner import PLANNER_POLICIES, PolicyName
from planexec.runtime import Budget

__all__ = [
    "MAX_CONCURRENCY",
    "Case",
    "CaseOutcome",
    "DojoProgress",
    "DojoSettings",
    "run_case",
    "run_cases",
    "settings_problems",
]

MAX_CONCURRENCY = 256
"""The most runs at once (as many as `planexec eval` allows)."""


@dataclass(frozen=True, kw_only=True)
class CaseOutcome:
    """How one case went: the run's stop and answer, AgentDojo's verdicts, and what it cost."""

    suite: str
    user_task: str
    injection_task: str | None
    defence: DefenceName
    stop: str
    stop_detail: str = ""
    answer: str | None = None
    utility: bool = False
    """AgentDojo's utility check: the user's task was done."""
    attacked: bool | None = None
    """AgentDojo's security check on the run as it went: the attacker's goal was met (None: no attack)."""
    unaided: bool | None = None
    """The same check on the calls made without a human's yes alone (None: no attack): the
    attack succeeded with no human letting it through."""
    held_calls: int = 0
    """Calls held for a human (steps a human was asked about before they ran)."""
    approved_steps: tuple[str, ...] = ()
    planner_calls: int = 0
    planner_chars: int = 0
    executor_calls: int = 0
    executor_chars: int = 0
    functions: tuple[str, ...] = ()
    """The suite's functions called, in order."""
    seconds: float = 0.0
    error: str | None = None
    """Why the case could not be run (its run never started), if it could not."""

    @property
    def attack_held(self) -> bool:
        """The attack succeeded only on a human's yes."""
        return bool(self.attacked) and not self.unaided


@dataclass(frozen=True, kw_only=True)
class DojoSettings:
    """How to run a suite. ``defences``: the settings (None: every one this version has);
    ``attack``: AgentDojo's attack; ``planner``, ``executor``: models or model strings (None:
    the offline stand-ins — the gullible oracle, the sealed-plan oracle and their extractor);
    ``policy``: the planner's (None: each setting's own); ``user_tasks``, ``injection_tasks``: ids
    (None: all), ``limit``: the first N user tasks; ``gullible``: the stand-ins fall for
    injections (else they read past them); ``budget``: each run's."""

    defences: Sequence[DefenceName] | None = None
    attack: str = DEFAULT_ATTACK
    planner: Model | str | None = None
    executor: Model | str | None = None
    policy: PolicyName | None = None
    user_tasks: Sequence[str] | None = None
    injection_tasks: Sequence[str] | None = None
    limit: int | None = None
    concurrency: int = 4
    gullible: bool = True
    budget: Budget | None = None

    def chosen_defences(self) -> tuple[DefenceName, ...]:
        if self.defences is None:
            return DEFENCE_NAMES
        return tuple(self.defences)


def settings_problems(suite: object, settings: DojoSettings) -> list[Problem]:
    """Everything wrong with running ``suite`` under ``settings``, all at once (the suite's tasks
    are looked up only when its name is right and AgentDojo is installed)."""
    problems = suite_problems(suite)
    for i, name in enumerate(settings.defences or ()):
        defence = DEFENCES.get(name) if isinstance(name, str) else None
        if defence is None:
            problems.append(
                Problem(
                    code="agentdojo",
                    where=f"defences[{i}]",
                    message=f"{repr(name)[:60]} is not one of {', '.join(DEFENCE_NAMES)}",
                )
            )
    if settings.defences is not None and not settings.defences:
        problems.append(Problem(code="agentdojo", where="defences", message="names no defence setting"))
    if settings.policy is not None and settings.policy not in PLANNER_POLICIES:
        choices = " or ".join(PLANNER_POLICIES.names())
        problems.append(Problem(code="agentdojo", where="policy", message=f"{settings.policy!r}: {choices}"))
    for field_name, value, low, high in (
        ("limit", settings.limit, 1, None),
        ("concurrency", settings.concurrency, 1, MAX_CONCURRENCY),
    ):
        if value is None and field_name == "limit":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            bound = f" and at most {high}" if high else ""
            problems.append(
                Problem(code="agentdojo", where=field_name, message=f"must be a whole number of at least {low}{bound}")
            )
    for field_name in ("user_tasks", "injection_tasks"):
        ids = getattr(settings, field_name)
        if ids is not None and (isinstance(ids, str) or not ids or not all(isinstance(i, str) for i in ids)):
            problems.append(Problem(code="agentdojo", where=field_name, message="must be a non-empty list of task ids"))
    for role in ("planner", "executor"):
        model = getattr(settings, role)
        if model is None:
            continue
        try:
            resolve_model(model)
        except UsageError as e:
            problems += [Problem(code="agentdojo", where=role, message=str(p)) for p in e.problems] or [
                Problem(code="agentdojo", where=role, message=e.summary)
            ]
    if problems:
        return problems
    assert isinstance(suite, str)
    loaded = load_suite(suite)
    problems += attack_problems(settings.attack)
    for field_name, known in (("user_tasks", loaded.user_tasks), ("injection_tasks", loaded.injection_tasks)):
        for task_id in getattr(settings, field_name) or ():
            if task_id not in known:
                problems.append(
                    Problem(code="agentdojo", where=field_name, message=f"{task_id[:60]!r} is not a task of {suite}")
                )
    return problems


def _model_name(model: Model | str | None) -> str | None:
    if model is None:
        return None
    return model if isinstance(model, str) else model.name


@dataclass(kw_only=True)
class _Models:
    planner: Model | None
    executor: Model | None


def _resolved(settings: DojoSettings) -> _Models:
    planner = None if settings.planner is None else resolve_model(settings.planner)
    executor = None if settings.executor is None else resolve_model(settings.executor)
    return _Models(planner=planner, executor=executor)


async def run_case(
    suite: DojoSuite | str,
    user_task: str,
    *,
    injection_task: str | None = None,
    defence: DefenceName = "none",
    attack: str = DEFAULT_ATTACK,
    planner: Model | str | None = None,
    executor: Model | str | None = None,
    policy: PolicyName | None = None,
    gullible: bool = True,
    budget: Budget | None = None,
    injections: Mapping[str, str] | None = None,
    environment: Any = None,
) -> CaseOutcome:
    """Run ``user_task`` of ``suite`` under ``defence``, attacked with ``injection_task`` by
    ``attack`` (None: no attack), and judge it with AgentDojo's checks.

    ``planner``, ``executor``: the models (None: the offline stand-ins; see
    :class:`DojoSettings`). ``injections``: the attack's injections, when already made (else
    they are made here); ``environment``: an environment already loaded with them, taken over.
    A user task whose ground truth reads no injection vector cannot be attacked: a usage error."""
    dojo = suite if isinstance(suite, DojoSuite) else load_suite(suite)
    settings = DojoSettings(defences=[defence], attack=attack, policy=policy, gullible=gullible)
    problems = settings_problems(dojo.name, settings)
    for name, task_id, known in (
        ("user_task", user_task, dojo.user_tasks),
        ("injection_task", injection_task, dojo.injection_tasks),
    ):
        if task_id is not None and task_id not in known:
            problems.append(Problem(code="agentdojo", where=name, message=f"{task_id!r} is not a task of {dojo.name}"))
    if problems:
        raise UsageError("invalid AgentDojo case", problems)
    if injection_task is not None and injections is None:
        injections = injections_for(dojo, user_task, injection_task, attack=attack, model_name=_model_name(planner))
        if injections is None:
            where = Problem(
                code="agentdojo", where="user_task", message=f"{user_task}: its ground truth reads no injection vector"
            )
            raise UsageError("the user task cannot be attacked", [where])
    models = _Models(
        planner=None if planner is None else resolve_model(planner),
        executor=None if executor is None else resolve_model(executor),
    )
    return await _run(
        dojo, user_task, injection_task, defence, injections or {}, environment, models, policy, gullible, budget
    )


async def _run(
    suite: DojoSuite,
    user_task: str,
    injection_task: str | None,
    defence: DefenceName,
    injections: Mapping[str, str],
    environment: Any,
    models: _Models,
    policy: PolicyName | None,
    gullible: bool,
    budget: Budget | None,
) -> CaseOutcome:
    started = time.perf_counter()
    world = DojoWorld(suite=suite, user_task=user_task, injections=injections, environment=environment)
    human = SimulatedHuman()
    if models.planner is None:
        oracle = DojoOracle(world, injection_task=injection_task, gullible=gullible)
        sealed = SealedOracle(world, injection_task=injection_task, gullible=gullible)
        planner: Model = oracle.planner
        sealed_planner: Model = sealed.planner
        executor = models.executor or oracle.executor
        extractor = models.executor or sealed.extractor
    else:
        planner = sealed_planner = models.planner
        executor = extractor = models.executor or models.planner
    build = DEFENCES[defence].build
    options = build(
        DefenceContext(
            planner=planner,
            sealed_planner=sealed_planner,
            executor=executor,
            extractor=extractor,
            tools=world.tools,
            human=human,
            policy=policy,
        )
    )
    if budget is not None:
        options = replace(options, budget=budget)
    result = await options.agent(name=f"agentdojo-{suite.name}").run(str(world.task.PROMPT))
    approved = _approved_steps(result.events)
    attacked = unaided = None
    if injection_task is not None:
        task = suite.injection_task(injection_task)
        attacked = world.security(task, result.answer)
        label = result.answer_provenance
        shown_first = label is not None and label.confirmed_by is not None  # a human read it, labelled, first
        unaided = attacked and world.security(task, None if shown_first else result.answer, without_steps=approved)
    planner_calls, planner_chars = _calls(result.events, "planner")
    executor_calls, executor_chars = _calls(result.events, "executor")
    return CaseOutcome(
        suite=suite.name,
        user_task=user_task,
        injection_task=injection_task,
        defence=defence,
        stop=result.stop.kind,
        stop_detail=result.stop.detail,
        answer=result.answer,
        utility=world.utility(result.answer),
        attacked=attacked,
        unaided=unaided,
        held_calls=sum(1 for e in result.events if isinstance(e, ApprovalRequested) and e.subject == "step"),
        approved_steps=tuple(sorted(approved)),
        planner_calls=planner_calls,
        planner_chars=planner_chars,
        executor_calls=executor_calls,
        executor_chars=executor_chars,
        functions=tuple(c.function for c in world.calls),
        seconds=time.perf_counter() - started,
    )


def _approved_steps(events: Sequence[Event]) -> set[str]:
    """The steps a human said yes to, from the run's log."""
    asked = {e.approval_id: e.step_id for e in events if isinstance(e, ApprovalRequested) and e.subject == "step"}
    return {
        step
        for e in events
        if isinstance(e, ApprovalDecided) and e.approved and (step := asked.get(e.approval_id)) is not None
    }


def _calls(events: Sequence[Event], role: str) -> tuple[int, int]:
    calls = [e for e in events if isinstance(e, ModelCalled) and e.role == role]
    return len(calls), sum(e.request_chars for e in calls)


@dataclass(kw_only=True)
class Case:
    """A user task with an injection task's attack (or none), its environment loaded once and
    copied for each setting's run."""

    user_task: str
    injection_task: str | None
    injections: Mapping[str, str] = field(default_factory=dict)
    _loaded: Any = None

    def environment(self, suite: DojoSuite) -> Any:
        if self._loaded is None:
            self._loaded = suite.load_environment(self.injections)
        return self._loaded.model_copy(deep=True)


class DojoProgress(Protocol):
    """Told how many runs a suite will make, once its cases are known, then of each run's end
    (runs end in any order)."""

    def planned(self, runs: int) -> None: ...

    def finished(self, outcome: CaseOutcome) -> None: ...


async def run_cases(
    suite: DojoSuite, settings: DojoSettings, progress: DojoProgress | None = None
) -> tuple[list[CaseOutcome], list[str]]:
    """Every case of ``suite`` under every setting of ``settings``; and the user tasks that cannot
    be attacked (their ground truth reads no injection vector)."""
    models = _resolved(settings)
    user_ids = list(settings.user_tasks or suite.user_tasks)
    if settings.limit is not None:
        user_ids = user_ids[: settings.limit]
    injection_ids = list(settings.injection_tasks or suite.injection_tasks)
    cases: list[Case] = []
    not_injectable: list[str] = []
    for user_task in user_ids:
        cases.append(Case(user_task=user_task, injection_task=None))
        for injection_task in injection_ids:
            made = injections_for(
                suite, user_task, injection_task, attack=settings.attack, model_name=_model_name(settings.planner)
            )
            if made is None:
                not_injectable.append(user_task)
                break
            cases.append(Case(user_task=user_task, injection_task=injection_task, injections=made))
    limit = asyncio.Semaphore(settings.concurrency)
    defences = settings.chosen_defences()
    if progress is not None:
        progress.planned(len(cases) * len(defences))

    async def one(case: Case) -> list[CaseOutcome]:
        async with limit:
            done = []
            for defence in defences:
                try:
                    outcome = await _run(
                        suite,
                        case.user_task,
                        case.injection_task,
                        defence,
                        case.injections,
                        case.environment(suite),
                        models,
                        settings.policy,
                        settings.gullible,
                        settings.budget,
                    )
                except Exception as e:  # building the run failed: the case is reported, the others go on
                    outcome = CaseOutcome(
                        suite=suite.name,
                        user_task=case.user_task,
                        injection_task=case.injection_task,
                        defence=defence,
                        stop="error",
                        error=f"{type(e).__name__}: {e}",
                    )
                if progress is not None:
                    progress.finished(outcome)
                done.append(outcome)
            case._loaded = None  # every setting has run: the environment is no longer needed
            return done

    ran = await asyncio.gather(*(one(case) for case in cases))
    return [o for outcomes in ran for o in outcomes], not_injectable
