"""Driving a replay: rebuild the run's set-up from its log, run the engine over the log segment by
segment (a segment ends where the recorded process stopped), and report whether it matched."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from planexec._util.plural import counted
from planexec.errors import UsageError
from planexec.executor import Acceptance, Executor, ExecutorProfile, Extractor, ModelExecutor, ToolExecutor
from planexec.log import ApprovalDecided, Event, RunStarted
from planexec.models import ModelRequest, ModelResponse, ModelSettings, Providers, StreamDelta
from planexec.planner import Ensemble, Planner
from planexec.runtime._budget import Budget
from planexec.runtime._core import EngineConfig
from planexec.runtime._engine import Engine
from planexec.runtime._recorded_world import Fault, RecordedWorld
from planexec.runtime._tool_specs import served, stand_in_tool

if TYPE_CHECKING:
    from planexec.faults import FaultProfile, FaultyModel
from planexec.log import RunResult
from planexec.runtime._settings import AnswerReview, Approvals, Escalation, Limits, RunContext
from planexec.store import RunStore
from planexec.tools import Toolset
from planexec.trust import TrustPolicy

__all__ = ["ReplayReport", "recorded_config", "replay_log"]


@dataclass(frozen=True, kw_only=True)
class ReplayReport:
    """What a replay found. ``matched``: every recorded event was reproduced, in order (a fork
    matches when the part before the fork point did). ``events``: the events the replay produced."""

    run_id: str
    matched: bool
    divergence: str | None
    compared: int
    events: tuple[Event, ...]
    result: RunResult | None
    """The run the replay produced (for a fork or a fault: the new run, live after the fork point)."""


class _StandIn:
    """A model a replay names but never calls."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        raise UsageError(f"a replay does not call models (asked {self._name} for {request.purpose})")


class _StreamingStandIn(_StandIn):
    """The stand-in for a planner that streamed: the replay takes the streaming path too."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        raise UsageError(f"a replay does not call models (asked {self.name} for {request.purpose})")
        yield  # pragma: no cover - makes this an async generator


def recorded_config(first: RunStarted) -> EngineConfig:
    """The set-up a log records, with stand-ins for tools and models (they are never called)."""
    cfg = first.config
    if "tools" not in cfg:
        raise UsageError("this log does not record its set-up (an older planexec wrote it): replay it with an agent")
    tools = Toolset(*(stand_in_tool(spec) for spec in cfg["tools"]))
    planner_cfg = cfg.get("planner", {})
    model_executors = cfg.get("model_executors", {})
    recorded_profiles = cfg.get("executor_profiles")
    profiles: dict[str, ExecutorProfile] | None = None if not isinstance(recorded_profiles, Mapping) else {}
    executors: dict[str, Executor] = {}
    for name, kind in cfg.get("executors", {"tools": "tools"}).items():
        profile = ExecutorProfile.from_record(
            name,
            "tools" if kind == "tools" else "model",
            recorded_profiles.get(name) if isinstance(recorded_profiles, Mapping) else None,
        )
        if profiles is not None:
            profiles[name] = profile
        if kind == "tools":
            executors[name] = ToolExecutor(name=name, max_concurrency=profile.max_concurrency)
        else:
            executors[name] = _recorded_executor(name, model_executors.get(name), profile.max_concurrency)
    approvals_cfg = cfg.get("approvals", {})
    judge_cfg = cfg.get("judge")
    trust_cfg = cfg.get("trust")
    return EngineConfig(
        planner=Planner(
            model=(_StreamingStandIn if planner_cfg.get("streams") else _StandIn)(planner_cfg.get("model", "planner")),
            policy=planner_cfg.get("policy", first.policy),
            replan=planner_cfg.get("replan", first.replan),
            max_repairs=planner_cfg.get("max_repairs", 2),
            turn_format=planner_cfg.get("turn_format", "nested"),
            settings=_recorded_settings(planner_cfg),
            ensemble=_recorded_ensemble(planner_cfg.get("ensemble")),
            sealed=planner_cfg.get("sealed") is True,
            extractor=_recorded_extractor(planner_cfg, model_executors),
        ),
        tools=tools,
        executors=executors,
        default_executor=cfg.get("default_executor"),
        budget=Budget(**first.budget),  # type: ignore[arg-type]
        limits=Limits(**cfg.get("limits", {})),
        acceptance=Acceptance(
            predicates=dict.fromkeys(cfg.get("predicates", []), lambda _s, _o: True),
            judge=_StandIn(str(judge_cfg.get("model", "judge"))) if isinstance(judge_cfg, Mapping) else None,
            judge_settings=_recorded_settings(judge_cfg),
        ),
        approvals=Approvals(plan=approvals_cfg.get("plan", False), steps=approvals_cfg.get("steps", "sensitive")),
        context=RunContext(),
        metadata=cfg,
        escalation=Escalation(**cfg.get("escalation") or {}),
        review=_recorded_review(cfg.get("review")),
        executor_profiles=profiles,
        workflows=frozenset(str(name) for name in cfg.get("workflows", ())),
        # a log from before trust labels records none: its replay labels nothing, as the run did
        trust=TrustPolicy.from_record(trust_cfg, served) if isinstance(trust_cfg, Mapping) else None,
    )


def _recorded_extractor(planner_cfg: Mapping[str, Any], model_executors: Any) -> Extractor | None:
    """A sealed planner's extractor as recorded (its model a stand-in), or None."""
    name = planner_cfg.get("extractor")
    if planner_cfg.get("sealed") is not True or not isinstance(name, str) or not name:
        return None
    record = model_executors.get(name) if isinstance(model_executors, Mapping) else None
    model = record.get("model") if isinstance(record, Mapping) else None
    return Extractor(model=_StandIn(str(model or f"{name}-model")), name=name)


def _recorded_ensemble(cfg: Any) -> Ensemble | None:
    """A planner ensemble as recorded, its models stand-ins (the log holds their answers)."""
    if not isinstance(cfg, Mapping) or not cfg.get("models"):
        return None
    streams = list(cfg.get("streams") or [])
    models = [
        (_StreamingStandIn if i < len(streams) and streams[i] else _StandIn)(str(name))
        for i, name in enumerate(cfg["models"])
    ]
    return Ensemble(
        escalate_to=models,
        escalate_on=tuple(cfg.get("escalate_on", ())),
        confidence_below=cfg.get("confidence_below", 0.5),
    )


def _recorded_review(cfg: Mapping[str, Any] | None) -> AnswerReview | None:
    """The answer review a log records; its checks are code, so their verdicts are served from the log."""
    if not cfg:
        return None

    def stand_in(_answer: str) -> bool:
        raise UsageError("a replay does not run answer checks")

    judge = cfg.get("judge")
    return AnswerReview(
        checks=[stand_in for _ in cfg.get("checks", [])],
        rubric=cfg.get("rubric"),
        judge=None if judge is None else _StandIn(str(judge)),
        checklist=tuple(cfg.get("checklist", [])),
        max_rounds=int(cfg.get("max_rounds", 2)),
        judge_settings=_recorded_settings({"settings": cfg.get("judge_settings") or {}}),
    )


def _recorded_settings(role: Any) -> ModelSettings:
    """The settings a role's record holds. A replay calls no model, so settings it cannot read
    (a damaged record) change nothing it decides: they are left unset."""
    try:
        return ModelSettings.from_dict(role.get("settings", {}) if isinstance(role, Mapping) else {})
    except UsageError:
        return ModelSettings()


def _recorded_executor(name: str, record: Any, max_concurrency: int | None) -> ModelExecutor:
    """A model executor as recorded: its model a stand-in, its settings and limits as they were."""
    record = record if isinstance(record, Mapping) else {}
    model = _StandIn(str(record.get("model", f"{name}-model")))
    try:
        return ModelExecutor(
            model=model,
            name=name,
            max_turns=record.get("max_turns", 6),
            step_timeout=record.get("step_timeout"),
            settings=_recorded_settings(record),
            max_concurrency=max_concurrency,
        )
    except UsageError:
        return ModelExecutor(model=model, name=name, max_concurrency=max_concurrency)


def with_faults(config: EngineConfig, faults: FaultProfile) -> tuple[EngineConfig, dict[str, FaultyModel]]:
    """``config`` with its tools and models wrapped by a fault profile (and the model wrappers)."""
    from planexec.faults import FaultyModel

    wrappers: dict[str, FaultyModel] = {}
    planner_model = faults.wrap_model(config.planner.resolved_model(), role="planner")
    if isinstance(planner_model, FaultyModel):
        wrappers["planner"] = planner_model
    ensemble = config.planner.ensemble
    if ensemble is not None:
        rest = [faults.wrap_model(m, role="planner") for m in config.planner.resolved_models()[1:]]
        ensemble = replace(ensemble, escalate_to=rest)
    executors: dict[str, Executor] = {}
    for name, executor in config.executors.items():
        if isinstance(executor, ModelExecutor):
            model = faults.wrap_model(executor.resolved_model(), role="executor")
            if isinstance(model, FaultyModel):
                wrappers.setdefault("executor", model)
            executor = replace(executor, model=model)
        executors[name] = executor
    config = replace(
        config,
        tools=Toolset(*faults.wrap_tools(list(config.tools))),
        current_tools=None,  # the tools it started with, spoiled as the profile says
        planner=replace(config.planner, model=planner_model, ensemble=ensemble),
        executors=executors,
    )
    return config, wrappers


def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


async def replay_log(
    log: Sequence[Event],
    *,
    config: EngineConfig | None = None,
    fork_at: int | None = None,
    fault: Fault | None = None,
    faults: FaultProfile | None = None,
    store: RunStore | None = None,
    run_id: str | None = None,
    providers: Providers | None = None,
) -> ReplayReport:
    """Replay ``log``. With ``fork_at`` or ``fault``, ``config`` (an agent's live set-up) takes
    over from the fork point and the new run ``run_id`` is written to ``store``. ``providers``:
    the prices a replay checks the cost budget with, as the recorded run did (a fork uses its
    ``config``'s; None: ``Providers.default()``)."""
    events = list(log)
    if not events or not isinstance(events[0], RunStarted):
        raise UsageError("a log to replay must begin with run_started")
    first = events[0]
    forking = fork_at is not None or fault is not None or faults is not None
    if fork_at is not None and not 0 < fork_at <= len(events):
        raise UsageError(f"fork_at must be from 1 to {len(events)} (the number of events to keep)")
    if not forking:
        config = recorded_config(first)
        if providers is not None:
            config = replace(config, providers=providers)
    elif config is None:
        raise UsageError("a fork goes on live: it needs an agent's models and tools")
    replayer = RecordedWorld(log=events, context=config.context, fork_at=fork_at, fault=fault)
    if faults is not None:
        config, wrappers = with_faults(config, faults)
        replayer.faults, replayer.wrappers = faults, wrappers
    new_id = run_id or (first.run_id if not forking else config.context.new_id())
    engine: Engine | None = None
    history: list[Event] | None = None
    while True:
        engine = Engine(
            config,
            goal=first.goal,
            constraints=first.constraints,
            run_id=new_id,
            store=store if forking else None,
            history=history,
            world=replayer,
        )
        task = asyncio.create_task(engine.run(), name=f"replay:{new_id}")
        replayer.abort = functools.partial(_cancel, task)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if replayer.divergence is not None or replayer.live or engine.state.finished:
            break
        if replayer.cursor >= len(events):
            break
        # The recorded process stopped here. Answers written meanwhile by others come before the
        # next process resumes the run.
        history = list(engine.events)
        while replayer.cursor < len(events) and isinstance(events[replayer.cursor], ApprovalDecided):
            answer = events[replayer.cursor]
            history.append(replace(answer, at=config.context.clock()) if forking else answer)
            replayer.cursor += 1
    divergence = replayer.divergence
    compared = replayer.cursor if divergence is None else divergence.index
    matched = divergence is None and (forking or replayer.cursor == len(events))
    detail = str(divergence) if divergence is not None else None
    if divergence is None and not matched:
        detail = f"the replay ended after {replayer.cursor} of {counted(len(events), 'event')}"
    result = None
    if engine.state.finished or engine.state.suspended is not None:
        result = RunResult.from_state(engine.state, engine.events)
    return ReplayReport(
        run_id=new_id,
        matched=matched,
        divergence=detail,
        compared=compared,
        events=tuple(engine.events),
        result=result,
    )
