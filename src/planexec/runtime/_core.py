"""What a run is configured with, and what its parts — planning, steps, humans, model calls,
recovery — see of the loop that drives them.

The loop (``_engine.Engine``) satisfies :class:`Core` and each part's own protocol, which adds
what that part alone needs; no part imports the loop, so each can be read, and changed, without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from planexec.executor import Acceptance, Executor, ExecutorProfile
from planexec.log import Event, RunState
from planexec.memory import PlanMemory
from planexec.models import Providers
from planexec.planner import Planner
from planexec.runtime._budget import Budget
from planexec.runtime._settings import AnswerReview, Approvals, Escalation, Limits, RunContext
from planexec.runtime._world import World
from planexec.telemetry import RunTelemetry, Telemetry
from planexec.tools import Toolset
from planexec.trust import TrustPolicy

__all__ = ["Core", "EngineConfig"]


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Everything a run is configured with, fixed for the run (its tools may change between
    planning rounds: see ``current_tools``)."""

    planner: Planner
    tools: Toolset
    executors: Mapping[str, Executor]
    default_executor: str | None
    budget: Budget
    limits: Limits
    acceptance: Acceptance
    approvals: Approvals
    context: RunContext
    metadata: Mapping[str, Any]
    escalation: Escalation = field(default_factory=Escalation)
    review: AnswerReview | None = None
    providers: Providers = field(default_factory=Providers.default)
    """What model calls are charged and which limits they keep to."""
    current_tools: Callable[[], Toolset] | None = None
    """The tools as they are now, for tools that may change while the run goes on (an MCP
    server's listing): read when a planning round starts. None: ``tools`` for the whole run."""
    telemetry: Telemetry = field(default_factory=Telemetry)
    """What the run sends to OpenTelemetry and the ``planexec`` logger."""
    agent_name: str = "planexec"
    """The agent's name on spans and metrics (``gen_ai.agent.name``)."""
    conversation: str | None = None
    """For a session's turn: the record of the turns before it, which the planner sees."""
    conversation_untrusted: bool = False
    """Whether that record carries text the earlier turns did not trust (see ``Trust.read``)."""
    workflows: frozenset[str] = frozenset()
    """The names of the tools in ``tools`` that are workflows: a step that calls one hands off the
    rest of the work, and its output ends the run as the final answer."""
    executor_profiles: Mapping[str, ExecutorProfile] | None = None
    """What the planner is told about each executor, as a log recorded it (a replay); None: as
    the executors themselves say (``executor_profile``)."""
    memory: PlanMemory | None = None
    """Plan memory: asked before the first plan, told how the run went (None: no memory)."""
    trust: TrustPolicy | None = field(default_factory=TrustPolicy)
    """How the run treats untrusted values (see :mod:`planexec.trust`). None: nothing is labelled
    and no trust rule is checked — a replay of a log written before labels existed, so that it
    reproduces that log exactly."""


class Core(Protocol):
    """What every part of a run sees of the loop: its configuration, its state folded from the log,
    the world outside it, and the way to add an event to the log."""

    config: EngineConfig
    run_id: str
    state: RunState
    world: World
    budget: Budget
    """The caps that hold for this run (a replay lifts the wall-time cap)."""
    can_ask_humans: bool
    telemetry: RunTelemetry | None
    """The run's spans, metrics and log records; None when it has none to make."""

    def emit(self, event: Event) -> None:
        """Add ``event`` to the log (and the state), and tell whoever listens."""

    def now(self) -> float:
        """The time to stamp an event with (the recorded one in a replay)."""

    def new_id(self) -> str:
        """A fresh id (the recorded one in a replay)."""

    def wake(self) -> None:
        """Have the loop look again at what can run."""
