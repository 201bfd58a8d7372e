"""The planner: goal and record in, validated plans, patches, turns and answers out; and the
registry of planner policies (how a planner plans, and when the run consults it)."""

from planexec.errors import PlannerEscalated, PlannerGaveUp
from planexec.planner._context import PlanningContext, with_finished
from planexec.planner._ensemble import ENSEMBLE_TRIGGERS, Ensemble, EnsembleTrigger
from planexec.planner._planner import Planner, ReplanPolicy, TurnFormat
from planexec.planner._policies import (
    PLANNER_POLICIES,
    Asked,
    PlanKind,
    PlannerPolicy,
    PolicyName,
    PolicyRegistry,
    RoundAfter,
    StepByStep,
    Upfront,
    planner_policy,
)
from planexec.planner._prompt import describe_heard, describe_record

__all__ = [
    "ENSEMBLE_TRIGGERS",
    "PLANNER_POLICIES",
    "Asked",
    "Ensemble",
    "EnsembleTrigger",
    "PlanKind",
    "Planner",
    "PlannerEscalated",
    "PlannerGaveUp",
    "PlannerPolicy",
    "PlanningContext",
    "PolicyName",
    "PolicyRegistry",
    "ReplanPolicy",
    "RoundAfter",
    "StepByStep",
    "TurnFormat",
    "Upfront",
    "describe_heard",
    "describe_record",
    "planner_policy",
    "with_finished",
]
