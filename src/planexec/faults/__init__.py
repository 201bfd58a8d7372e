"""Seeded fault profiles: inject tool errors, timeouts, malformed outputs, broken planner answers,
unknown tools and rate-limit storms, at the same places every time for the same seed.

    profile = FaultProfile.named("flaky-tools", seed=7)
    agent = Agent(profile.wrap_model(planner_model), tools=profile.wrap_tools([search, fetch]))
"""

from planexec.faults._models import FaultyModel, FaultyStreamingModel, unknown_tool_name
from planexec.faults._profile import PROFILES, FaultProfile, ModelFault, ToolFault
from planexec.faults._tools import MALFORMED, tool_fault_key

__all__ = [
    "MALFORMED",
    "PROFILES",
    "FaultProfile",
    "FaultyModel",
    "FaultyStreamingModel",
    "ModelFault",
    "ToolFault",
    "tool_fault_key",
    "unknown_tool_name",
]
