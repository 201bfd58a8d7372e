"""What the run's configuration says about a step: whether it may change the world, and what
happens when its result fails its checks (run again, reviewed by a human, or failed)."""

from __future__ import annotations

from typing import Protocol

from planexec.plan import Step
from planexec.runtime._core import EngineConfig

__all__ = ["RulesLoop", "StepRules"]


class RulesLoop(Protocol):
    """What the rules read of the loop: its configuration as it is now, and whether a human can
    be asked."""

    config: EngineConfig
    can_ask_humans: bool


class StepRules:
    """The developer's rules for steps, as the run's configuration (and its tools now) give them."""

    def __init__(self, engine: RulesLoop) -> None:
        self._engine = engine

    def side_effecting(self, step: Step) -> bool:
        """Whether running ``step`` may change something outside the run."""
        if step.effect == "write":
            return True
        tools = self._engine.config.tools
        return step.tool is not None and step.tool in tools and tools.get(step.tool).side_effect

    def fail_rule(self, step: Step) -> str:
        """What happens when ``step``'s result fails its checks: the plan's rule for the step, unless
        the developer's rule is a human review (a plan cannot lift it)."""
        rule = self._engine.config.escalation.on_fail
        return rule if rule == "review" or step.on_fail is None else step.on_fail

    def retries_on_fail(self, step: Step) -> int:
        """Attempts more a step whose result failed its checks gets: only when running it again is safe."""
        if self.fail_rule(step) != "retry":
            return 0
        config = self._engine.config
        tools = config.tools
        idempotent = step.tool is not None and step.tool in tools and tools.get(step.tool).idempotent
        if self.side_effecting(step) and not idempotent:
            return 0
        for name in step.allowed_tools:  # a model step may have called a tool that changes the world
            if name in tools and tools.get(name).side_effect and not tools.get(name).idempotent:
                return 0
        return config.escalation.retries

    def reviews_on_fail(self, step: Step) -> bool:
        """Whether a human reviews ``step``'s result when it fails its checks (someone must be able to)."""
        return self.fail_rule(step) == "review" and self._engine.can_ask_humans
