"""The planner: goal and record in, validated plans, patches, turns and answers out."""

from planexec.planner._planner import (
    Planner,
    PlannerGaveUp,
    PlanningContext,
    PolicyName,
    ReplanPolicy,
    TurnFormat,
)

__all__ = ["Planner", "PlannerGaveUp", "PlanningContext", "PolicyName", "ReplanPolicy", "TurnFormat"]
