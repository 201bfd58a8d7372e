"""An offline demo: a support team's agent audits a failing customer workflow.

Everything is local and scripted: the scenario's files are written into a work directory, the tools
read and write them, and the planner and executor are function models that answer from what they
are sent. ``planexec demo`` runs it with a live task board; tests run it through the Python API.
"""

from planexec.demo._files import FAILING_RUN, ScenarioFiles, write_scenario_files
from planexec.demo._pace import Pace
from planexec.demo._scenario import CONSTRAINTS, GOAL, Demo, build_demo, names_a_written_patch
from planexec.demo._tools import demo_tools

__all__ = [
    "CONSTRAINTS",
    "FAILING_RUN",
    "GOAL",
    "Demo",
    "Pace",
    "ScenarioFiles",
    "build_demo",
    "demo_tools",
    "names_a_written_patch",
    "write_scenario_files",
]
