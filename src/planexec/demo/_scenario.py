"""The whole demo, put together: files, tools, a scripted planner and analyst, and the agent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planexec.demo._analyst import analyst_reply
from planexec.demo._files import FAILING_RUN, ScenarioFiles, write_scenario_files
from planexec.demo._pace import Pace
from planexec.demo._planner import planner_reply
from planexec.demo._tools import demo_tools
from planexec.executor import ModelExecutor
from planexec.models import FunctionModel, Model
from planexec.planner import Planner
from planexec.runtime import Agent, AnswerCheck, AnswerReview, Approvals, Budget
from planexec.store import RunStore
from planexec.trust import TrustPolicy

__all__ = ["CONSTRAINTS", "GOAL", "Demo", "build_demo", "names_a_written_patch"]

GOAL = (
    f"Audit the failing customer onboarding workflow (run {FAILING_RUN}): collect the logs, "
    "inspect the failing branch, find the root cause and draft a fix."
)
CONSTRAINTS = (
    "Change nothing in the source tree: write the fix as a patch under fixes/ for review.",
    "Keep the fix to the smallest change that makes the failing branch work again.",
)


@dataclass(frozen=True, kw_only=True)
class Demo:
    """The demo scenario, ready to run: ``await demo.agent.run(demo.goal, constraints=demo.constraints)``."""

    agent: Agent
    goal: str
    constraints: tuple[str, ...]
    files: ScenarioFiles
    planner: FunctionModel
    analyst: FunctionModel

    @property
    def workdir(self) -> Path:
        return self.files.root

    def fix_files(self) -> list[Path]:
        """The patches written so far, by name."""
        return sorted(self.files.path(self.files.fixes).glob("*.patch"))


def names_a_written_patch(files: ScenarioFiles) -> AnswerCheck:
    """The answer's review: a reviewer must be able to find the fix, so the answer names a patch
    that was written under fixes/."""

    def names_the_patch(answer: str) -> str | None:
        written = sorted(p.relative_to(files.root).as_posix() for p in files.path(files.fixes).glob("*.patch"))
        if not written:
            return f"no patch was written under {files.fixes}/"
        if not any(name in answer for name in written):
            return f"the answer must name the patch a reviewer should read ({', '.join(written)})"
        return None

    return names_the_patch


def build_demo(
    workdir: Path,
    *,
    pace: float = 1.0,
    seed: int = 7,
    approvals: Approvals | None = None,
    store: RunStore | str | None = "default",
    planner_model: Model | str | None = None,
    executor_model: Model | str | None = None,
) -> Demo:
    """Write the scenario's files into ``workdir`` and build the agent that audits them.

    ``pace`` scales the simulated latency of models and tools (0: none); it changes how fast the
    demo runs, never what it does. ``store``: where the run is logged (the default store, a URL,
    a store, or None for memory only). ``planner_model`` and ``executor_model`` replace the
    scripted models with real ones (``openai:gpt-4o``, ``ollama:qwen2.5``, …): the same files and
    tools, a real planner and analyst.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    files = write_scenario_files(workdir)
    timing = Pace(pace, seed=seed)
    planner = FunctionModel(
        planner_reply,
        name="demo-planner",
        latency=lambda _request: timing.delay(0.1, 0.3),
        cost_per_million=(3.0, 15.0),
    )
    analyst = FunctionModel(
        analyst_reply,
        name="demo-analyst",
        latency=lambda _request: timing.delay(0.05, 0.2),
        cost_per_million=(0.25, 1.25),
    )
    agent = Agent(
        Planner(model=planner_model or planner, record_chars=4000),
        tools=demo_tools(files, timing),
        executor=ModelExecutor(model=executor_model or analyst, name="analyst", tools=("inspect_branch",)),
        budget=Budget(model_calls=20, tool_calls=30, cost=0.5, wall_time=120.0, replans=2),
        review=AnswerReview(checks=(names_a_written_patch(files),)),
        approvals=approvals,
        store=store,
        # its one effect writes a drafted patch into the work directory for a reviewer to read:
        # what the logs say may shape the patch, and the reviewer is the human who decides on it
        trust=TrustPolicy(untrusted_effects=False),
    )
    return Demo(agent=agent, goal=GOAL, constraints=CONSTRAINTS, files=files, planner=planner, analyst=analyst)
