"""The run's planning policy: the registered planner policy its planner names.

The policies themselves — what the loop asks at each point of a run, and how each answers — are
in :mod:`planexec.planner` (``PLANNER_POLICIES``): a new one is one class registered there, and
neither the loop nor this module changes. What is the runtime's own is a sealed planner's final
answer, filled in from the plan's answer template rather than asked for.
"""

from __future__ import annotations

from planexec.log import RunState
from planexec.planner import PLANNER_POLICIES, Asked, PlanKind, Planner, PlannerPolicy, PlanningContext, RoundAfter
from planexec.runtime._sealed import sealed_answer

__all__ = ["PlanKind", "PlanningPolicy", "Sealed", "policy_of"]

PlanningPolicy = PlannerPolicy
"""What the loop asks the run's policy (see :class:`planexec.planner.PlannerPolicy`)."""


class Sealed(PlannerPolicy):
    """A policy followed by a sealed planner: the policy's rounds, and a final answer the run fills
    in from the plan's answer template — the planner is never asked for it, so it never reads an
    output."""

    __slots__ = ("_policy",)

    def __init__(self, policy: PlannerPolicy) -> None:
        super().__init__(policy.replan)
        self._policy = policy

    def when_idle(self) -> PlanKind:
        return self._policy.when_idle()

    def after_step(self) -> bool:
        return self._policy.after_step()

    def replans_failures(self) -> bool:
        return self._policy.replans_failures()

    def news_round(self, state: RunState) -> PlanKind | None:
        return self._policy.news_round(state)

    def round_after(self, event: RoundAfter) -> PlanKind:
        return self._policy.round_after(event)

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        if kind == "finish":
            return sealed_answer(ctx.state)
        return await self._policy.ask(planner, kind, ctx, why)


def policy_of(planner: Planner) -> PlanningPolicy:
    """The policy ``planner`` names, looked up in ``PLANNER_POLICIES`` (a sealed planner's wrapped
    in :class:`Sealed`)."""
    policy = PLANNER_POLICIES.get(planner.policy)(planner.replan)
    return Sealed(policy) if planner.sealed else policy
