"""BFCL's multi-turn tasks as a planexec workload: tools built from BFCL's function documentation
over fresh instances of its API classes, each task run as a session (one turn per user request),
checked turn by turn with BFCL's own state and response checks.

    tasks = load_tasks("multi_turn_base")          # the installed bfcl-eval package's 200 tasks
    outcome = await run_task(tasks[0])             # the oracle planner plans the ground truth
    outcome = await run_task(tasks[0], planner="openai:gpt-4.1", policy="step")
    outcome = await run_task(tasks[0], agent="react")   # the ReAct baseline, its oracle calling

``planexec eval bfcl:multi_turn_base`` runs them as an evaluation suite.

Needs ``pip install --no-deps bfcl-eval==2026.3.23 mpmath`` (Apache-2.0).
"""

from planexec.bfcl._calls import parse_call
from planexec.bfcl._data import CATEGORIES, BfclTask, load_tasks
from planexec.bfcl._oracle import Oracle, ReactOracle
from planexec.bfcl._run import (
    MORE_TOOLS,
    REACT_TURNS,
    AgentKind,
    Policy,
    TaskOutcome,
    TaskRun,
    planning_calls,
    run_task,
    says_something,
)
from planexec.bfcl._world import BfclWorld, bfcl_schema

__all__ = [
    "CATEGORIES",
    "MORE_TOOLS",
    "REACT_TURNS",
    "AgentKind",
    "BfclTask",
    "BfclWorld",
    "Oracle",
    "Policy",
    "ReactOracle",
    "TaskOutcome",
    "TaskRun",
    "bfcl_schema",
    "load_tasks",
    "parse_call",
    "planning_calls",
    "run_task",
    "says_something",
]
