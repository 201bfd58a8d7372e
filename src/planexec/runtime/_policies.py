"""Planner policies: when the loop consults the planner, and what it asks for.

The loop reaches the same points in every run — nothing is running, a step finished, a step
failed, news arrived, the final answer was refused — and at each it asks the run's policy what
to do. A new policy is one class here (and a name for ``Planner(policy=...)``); the loop does not
change.
"""

from __future__ import annotations

from typing import Literal, Protocol

from planexec.log import RunState
from planexec.plan import PlanDraft, Turn
from planexec.planner import Planner, PlanningContext
from planexec.runtime._sealed import sealed_answer

__all__ = ["PlanKind", "PlanningPolicy", "SealedUpfront", "StepByStep", "Upfront", "policy_of"]

PlanKind = Literal["initial", "failure", "after_step", "turn", "finish", "information", "review"]
"""Why a planning round starts (logged with the round)."""

Asked = PlanDraft | Turn | str


class PlanningPolicy(Protocol):
    """What the loop asks the run's policy."""

    def when_idle(self) -> PlanKind:
        """Nothing runs, nobody plans, no step waits: the round to start."""
        ...

    def after_step(self) -> bool:
        """Whether a step that finished well starts a planning round."""
        ...

    def replans_failures(self) -> bool:
        """Whether a failed step goes back to the planner (else the run stops)."""
        ...

    def news_round(self, state: RunState) -> PlanKind | None:
        """News arrived while nothing was being planned: the round to start now, or None to let
        the next round read it."""
        ...

    def round_after(self, event: Literal["news_before_answer", "answer_refused"]) -> PlanKind:
        """The round that follows news that came while the answer was written, or a refused answer."""
        ...

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        """Consult the planner for a round of ``kind``."""
        ...


class Upfront:
    """The whole DAG at once; patched when steps fail (and, with ``after_each_step``, after each
    step), then a final answer once every step finished."""

    __slots__ = ("_replan",)

    def __init__(self, replan: str) -> None:
        self._replan = replan

    def when_idle(self) -> PlanKind:
        return "finish"

    def after_step(self) -> bool:
        return self._replan == "after_each_step"

    def replans_failures(self) -> bool:
        return self._replan != "never"

    def news_round(self, state: RunState) -> PlanKind | None:
        return "information" if state.plan is not None else None

    def round_after(self, event: Literal["news_before_answer", "answer_refused"]) -> PlanKind:
        return "information" if event == "news_before_answer" else "review"

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        if kind == "initial":
            return await planner.propose(ctx)
        if kind in ("failure", "after_step", "information", "review"):
            return await planner.patch(ctx, why)
        return await planner.finish(ctx)


class SealedUpfront(Upfront):
    """The upfront policy of a sealed planner: the whole DAG at once, patched as ``replan`` says,
    and a final answer the run fills in from the plan's answer template — the planner is never
    asked for it, so it never reads an output."""

    __slots__ = ()

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        if kind == "finish":
            return sealed_answer(ctx.state)
        return await super().ask(planner, kind, ctx, why)


class StepByStep:
    """One next step per turn, or the final answer; every turn reads what happened so far."""

    __slots__ = ("_replan",)

    def __init__(self, replan: str) -> None:
        self._replan = replan

    def when_idle(self) -> PlanKind:
        return "turn"

    def after_step(self) -> bool:
        return False  # the next turn follows anyway

    def replans_failures(self) -> bool:
        return self._replan != "never"

    def news_round(self, state: RunState) -> PlanKind | None:
        return None  # the next turn reads it

    def round_after(self, event: Literal["news_before_answer", "answer_refused"]) -> PlanKind:
        return "turn"

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        if kind == "finish":
            return await planner.finish(ctx)
        return await planner.turn(ctx)


def policy_of(planner: Planner) -> PlanningPolicy:
    """The policy ``planner`` names (a sealed planner's is :class:`SealedUpfront`)."""
    if planner.policy == "step":
        return StepByStep(planner.replan)
    return SealedUpfront(planner.replan) if planner.sealed else Upfront(planner.replan)
