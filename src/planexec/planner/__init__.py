"""The planner: goal and record in, validated plans, patches, turns and answers out."""

from planexec.planner._planner import (
    ENSEMBLE_TRIGGERS,
    Ensemble,
    EnsembleTrigger,
    Planner,
    PlannerEscalated,
    PlannerGaveUp,
    PlanningContext,
    PolicyName,
    ReplanPolicy,
    TurnFormat,
    with_finished,
)
from planexec.planner._prompt import describe_heard, describe_record

__all__ = [
    "ENSEMBLE_TRIGGERS",
    "Ensemble",
    "EnsembleTrigger",
    "Planner",
    "PlannerEscalated",
    "PlannerGaveUp",
    "PlanningContext",
    "PolicyName",
    "ReplanPolicy",
    "TurnFormat",
    "describe_heard",
    "describe_record",
    "with_finished",
]
