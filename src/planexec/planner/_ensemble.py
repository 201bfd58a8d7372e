"""Planner ensembles: the stronger models a planner hands planning to, and when."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from planexec.errors import Problem, UsageError
from planexec.models import Model

__all__ = ["ENSEMBLE_TRIGGERS", "Ensemble", "EnsembleTrigger"]

EnsembleTrigger = Literal["repair_failed", "low_confidence", "replan", "acceptance_failed"]
"""When an ensemble hands planning to its next model: ``repair_failed`` (an answer still fails its
checks after every repair), ``low_confidence`` (an answer's confidence is under the ensemble's
``confidence_below``), ``replan`` (a patch after a failure), ``acceptance_failed`` (a patch after a
step's result failed its acceptance checks)."""

ENSEMBLE_TRIGGERS: tuple[EnsembleTrigger, ...] = ("repair_failed", "low_confidence", "replan", "acceptance_failed")


@dataclass(frozen=True, kw_only=True)
class Ensemble:
    """The models a planner escalates to, in order, after its own ``model`` (the cheap, fast one).

    ``escalate_to``: the next models, strongest last. ``escalate_on``: the triggers that hand a
    request to the next model (see :data:`EnsembleTrigger`); all of them by default.
    ``confidence_below``: the confidence under which ``low_confidence`` escalates.

    A request starts with the planner's own model, or, for a patch after a failure, one model further
    for each replan (``replan``) or each step that failed acceptance (``acceptance_failed``) so far;
    within a request, ``repair_failed`` and ``low_confidence`` move on to the next model. The last
    model behaves as a single planner does: it gives up after its repairs, and its low confidence
    goes to the run's own confidence floor.
    """

    escalate_to: Sequence[Model | str]
    escalate_on: Sequence[EnsembleTrigger] = ENSEMBLE_TRIGGERS
    confidence_below: float = 0.5

    def __post_init__(self) -> None:
        problems: list[Problem] = []

        def add(where: str, message: str) -> None:
            problems.append(Problem(code="ensemble", where=where, message=message))

        models = self.escalate_to
        if isinstance(models, str) or not isinstance(models, Sequence):
            add("escalate_to", "must be a list of models or model strings")
        else:
            if not models:
                add("escalate_to", "names no model: give at least one model to escalate to")
            for i, m in enumerate(models):
                if not isinstance(m, str) and not callable(getattr(m, "request", None)):
                    add(f"escalate_to.{i}", f"{type(m).__name__} is not a model (nothing with a request method)")
                elif isinstance(m, str) and not m.strip():
                    add(f"escalate_to.{i}", "an empty model string")
        triggers = self.escalate_on
        if isinstance(triggers, str) or not isinstance(triggers, Sequence | frozenset | set):
            add("escalate_on", f"must be a list of triggers among {', '.join(ENSEMBLE_TRIGGERS)}")
        else:
            for t in triggers:
                if t not in ENSEMBLE_TRIGGERS:
                    add("escalate_on", f"{t!r} is not one of {', '.join(ENSEMBLE_TRIGGERS)}")
        c = self.confidence_below
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c <= 1:
            add("confidence_below", "must be a number from 0 to 1")
        if problems:
            raise UsageError("invalid planner ensemble", problems)
        object.__setattr__(self, "escalate_to", tuple(models))
        object.__setattr__(self, "escalate_on", tuple(dict.fromkeys(triggers)))

    def on(self, trigger: EnsembleTrigger) -> bool:
        return trigger in self.escalate_on
