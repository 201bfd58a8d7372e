"""A ReAct baseline agent: one model in a tool-calling loop, with no plan, under the same budgets,
tool checks and stop reasons as a planner–executor run — the yardstick ``planexec eval --agent
react`` measures planexec against."""

from planexec.react._agent import DEFAULT_REACT_INSTRUCTIONS, ReactAgent, ReactResult

__all__ = [
    "DEFAULT_REACT_INSTRUCTIONS",
    "ReactAgent",
    "ReactResult",
]
