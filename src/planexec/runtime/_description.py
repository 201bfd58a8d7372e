"""What an agent's runs record about its set-up (data only; no code): its planner, executors,
review, judge and approvals as the log keeps them. :meth:`Agent.description` puts them together;
everything that shows an agent (a run's first event, a server's list of agents) reads that."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from planexec.executor import Acceptance, Executor, ModelExecutor, executor_profile
from planexec.models import Model, ModelSettings, Providers, StreamingModel, resolve_model, unsupported_settings
from planexec.planner import Planner
from planexec.runtime._settings import AnswerReview, Approvals

__all__ = [
    "approvals_record",
    "bound",
    "executors_record",
    "judge_record",
    "model_executors_record",
    "planner_record",
    "review_record",
    "settings_record",
]

_Bound = TypeVar("_Bound", Planner, Executor)


def bound(part: _Bound, providers: Providers) -> _Bound:
    """``part`` as a run uses it: a planner or model executor whose model is a string gets a copy
    holding the model that string resolves to through ``providers`` (the part's own resolution,
    so the part and the run share one model object)."""
    if isinstance(part, Planner) and part.ensemble is not None:
        first, *rest = part.resolved_models(providers)
        return dataclasses.replace(part, model=first, ensemble=dataclasses.replace(part.ensemble, escalate_to=rest))
    if isinstance(part, Planner | ModelExecutor) and isinstance(part.model, str):
        return dataclasses.replace(part, model=part.resolved_model(providers))
    return part


def settings_record(model: Model, settings: ModelSettings) -> dict[str, Any]:
    """A role's settings as the log keeps them, and the ones its model does not send (with why)."""
    record: dict[str, Any] = {"settings": settings.as_dict()}
    dropped = unsupported_settings(model, settings)
    if dropped:
        record["dropped_settings"] = dropped
    return record


def _ensemble_record(planner: Planner) -> dict[str, Any]:
    """A planner ensemble as the log keeps it: its models' names, whether each streams, its triggers."""
    ensemble = planner.ensemble
    if ensemble is None:
        return {}
    rest = planner.resolved_models()[1:]
    return {
        "ensemble": {
            "models": [m.name for m in rest],
            "streams": [isinstance(m, StreamingModel) for m in rest],
            "escalate_on": list(ensemble.escalate_on),
            "confidence_below": ensemble.confidence_below,
        }
    }


def planner_record(planner: Planner, providers: Providers) -> dict[str, Any]:
    """The planner as the log keeps it: its model, policies, settings and ensemble."""
    planner = bound(planner, providers)
    return {
        "model": planner.resolved_model().name,
        "policy": planner.policy,
        "replan": planner.replan,
        "max_repairs": planner.max_repairs,
        "streams": planner.stream and planner.model_streams,
        "turn_format": planner.turn_format,
        **({"sealed": True, "extractor": planner.extractor_name} if planner.sealed else {}),
        **settings_record(planner.resolved_model(), planner.settings),
        **_ensemble_record(planner),
    }


def executors_record(executors: Mapping[str, Executor], providers: Providers) -> dict[str, Any]:
    """The executors as the log keeps them: each one's kind and profile."""
    return {
        "executors": {name: e.kind for name, e in executors.items()},
        "executor_profiles": {name: executor_profile(bound(e, providers)).record() for name, e in executors.items()},
    }


def model_executors_record(executors: Mapping[str, Executor], providers: Providers) -> dict[str, Any]:
    """The model executors' models, turns, step timeouts and settings, by name."""
    return {
        name: {
            "model": e.resolved_model(providers).name,
            "max_turns": e.max_turns,
            "step_timeout": e.step_timeout,
            **settings_record(e.resolved_model(providers), e.settings),
        }
        for name, e in executors.items()
        if isinstance(e, ModelExecutor)
    }


def review_record(review: AnswerReview | None) -> dict[str, Any] | None:
    """The final answer's review as the log keeps it (the checks by name)."""
    if review is None:
        return None
    return {
        "checks": [getattr(c, "__name__", type(c).__name__) for c in review.checks],
        "rubric": review.rubric,
        "judge": None if review.judge is None else str(getattr(review.judge, "name", review.judge)),
        "checklist": list(review.checklist),
        "max_rounds": review.max_rounds,
        "judge_settings": review.judge_settings.as_dict(),
    }


def judge_record(acceptance: Acceptance, providers: Providers) -> dict[str, Any]:
    """The steps' judge, when there is one, as the log keeps it."""
    judge = acceptance.judge
    if judge is None:
        return {}
    model = resolve_model(judge, providers=providers)
    return {"judge": {"model": model.name, **settings_record(model, acceptance.judge_settings)}}


def approvals_record(approvals: Approvals, *, has_store: bool, raises: bool) -> dict[str, Any]:
    """Which questions the agent's runs ask, and whether they suspend or raise caps."""
    return {
        "plan": approvals.plan,
        "steps": approvals.steps,
        "ask": approvals.approver is not None or (approvals.deferred and has_store),
        "suspends": has_store and approvals.approver is None and approvals.when_waiting == "suspend",
        "raises": raises,
    }
