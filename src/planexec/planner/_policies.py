"""Planner policies: when the loop consults the planner, and what it asks it for.

The loop reaches the same points in every run — nothing is running, a step finished, a step
failed, news arrived, the final answer was refused — and at each it asks the run's policy what
to do. A policy is one class: a subclass of :class:`PlannerPolicy` that names itself, says in a
line what it does, answers the loop's questions, and is registered with
:func:`planner_policy`. Everything else that knows of policies — ``Planner(policy=...)``, the
command line's choices, evaluation suites, BFCL and AgentDojo settings, their error messages —
reads :data:`PLANNER_POLICIES`, so the loop and they do not change when a policy is added::

    @planner_policy
    class Cautious(Upfront):
        name = "cautious"
        description = "the whole plan at once, patched after every step"

        def after_step(self) -> bool:
            return True
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

from planexec.errors import Problem, UsageError
from planexec.log import RunState
from planexec.plan import PlanDraft, Turn

if TYPE_CHECKING:
    from planexec.planner._context import PlanningContext
    from planexec.planner._planner import Planner

__all__ = [
    "PLANNER_POLICIES",
    "Asked",
    "PlanKind",
    "PlannerPolicy",
    "PolicyName",
    "PolicyRegistry",
    "RoundAfter",
    "StepByStep",
    "Upfront",
    "planner_policy",
]

PolicyName = str
"""The name of a registered planner policy (see :data:`PLANNER_POLICIES`)."""

PlanKind = Literal["initial", "failure", "after_step", "turn", "finish", "information", "review"]
"""Why a planning round starts (logged with the round)."""

Asked = PlanDraft | Turn | str
"""What a planning round brings back: a plan (or patch), a turn, or the final answer."""

RoundAfter = Literal["news_before_answer", "answer_refused"]
"""What a policy is asked the next round after: news that came while the answer was written, or a
refused answer."""


class PlannerPolicy(ABC):
    """A way of planning: what the loop, the planner and the forecast ask of it.

    A subclass sets ``name`` (what ``Planner(policy=...)`` and the command line call it),
    ``description`` (one line for help texts and reports) and ``plans`` (how it plans, as in "a
    planner that plans upfront"), and answers the loop's questions. ``turns``: the planner is
    asked for one step per turn (the turn schema, a windowed record) rather than for a plan.
    ``sealed_conflict``: why a sealed planner cannot follow it (None: it can). An instance serves
    one run, with the planner's ``replan`` setting.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    plans: ClassVar[str]
    turns: ClassVar[bool] = False
    sealed_conflict: ClassVar[str | None] = None

    __slots__ = ("replan",)

    def __init__(self, replan: str) -> None:
        self.replan = replan

    @abstractmethod
    def when_idle(self) -> PlanKind:
        """Nothing runs, nobody plans, no step waits: the round to start."""

    @abstractmethod
    def after_step(self) -> bool:
        """Whether a step that finished well starts a planning round."""

    def replans_failures(self) -> bool:
        """Whether a failed step goes back to the planner (else the run stops)."""
        return self.replan != "never"

    @abstractmethod
    def news_round(self, state: RunState) -> PlanKind | None:
        """News arrived while nothing was being planned: the round to start now, or None to let
        the next round read it."""

    @abstractmethod
    def round_after(self, event: RoundAfter) -> PlanKind:
        """The round that follows news that came while the answer was written, or a refused answer."""

    @abstractmethod
    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        """Consult the planner for a round of ``kind``."""


P = TypeVar("P", bound=type[PlannerPolicy])


class PolicyRegistry:
    """The planner policies by name, in the order they were registered."""

    def __init__(self) -> None:
        self._policies: dict[str, type[PlannerPolicy]] = {}

    def register(self, policy: P) -> P:
        """Add ``policy`` under its ``name``; raises :class:`UsageError` listing what is wrong with it."""
        problems = [Problem(code="policy", where=where, message=m) for where, m in self._problems(policy)]
        if problems:
            raise UsageError("invalid planner policy", problems)
        self._policies[policy.name] = policy
        return policy

    def _problems(self, policy: type[PlannerPolicy]) -> Iterator[tuple[str, str]]:
        where = getattr(policy, "__qualname__", repr(policy))
        if not isinstance(policy, type) or not issubclass(policy, PlannerPolicy):
            yield where, "is not a subclass of PlannerPolicy"
            return
        own = vars(policy)
        for attribute in ("name", "description", "plans"):
            value = own.get(attribute)
            if not isinstance(value, str) or not value.strip():
                yield f"{where}.{attribute}", "give the class its own, as non-empty text"
        name = own.get("name")
        known = self._policies.get(name) if isinstance(name, str) else None
        if known is not None and known is not policy:
            yield f"{where}.name", f"{name!r} is the name of {known.__qualname__} already"
        if inspect.isabstract(policy):
            missing = ", ".join(sorted(policy.__abstractmethods__))
            yield where, f"does not say what the loop asks of it: {missing}"

    def remove(self, name: str) -> None:
        """Forget the policy called ``name`` (nothing when there is none)."""
        self._policies.pop(name, None)

    def get(self, name: str) -> type[PlannerPolicy]:
        """The policy called ``name``; raises :class:`UsageError` naming the known ones."""
        policy = self._policies.get(name)
        if policy is None:
            message = f"{name!r} is not one of {', '.join(self.names())}"
            raise UsageError("unknown planner policy", [Problem(code="planner", where="policy", message=message)])
        return policy

    def names(self) -> tuple[str, ...]:
        """Every policy's name, in the order they were registered."""
        return tuple(self._policies)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._policies

    def __iter__(self) -> Iterator[type[PlannerPolicy]]:
        return iter(tuple(self._policies.values()))

    def sealable(self) -> tuple[type[PlannerPolicy], ...]:
        """The policies a sealed planner can follow."""
        return tuple(p for p in self._policies.values() if p.sealed_conflict is None)

    def how_sealed(self) -> str:
        """How a sealed planner plans, in words ("upfront")."""
        return " or ".join(p.plans for p in self.sealable())

    def unsealable(self, name: object) -> str | None:
        """Why a sealed planner cannot follow the policy called ``name`` (None: it can, or no
        policy is called that)."""
        policy = self._policies.get(name) if isinstance(name, str) else None
        return None if policy is None else policy.sealed_conflict


PLANNER_POLICIES = PolicyRegistry()
"""Every planner policy, by name: the one place that knows which there are."""

planner_policy = PLANNER_POLICIES.register
"""Register a :class:`PlannerPolicy` subclass under its name (a class decorator)."""


@planner_policy
class Upfront(PlannerPolicy):
    """The whole DAG at once; patched when steps fail (and, with ``after_each_step``, after each
    step), then a final answer once every step finished."""

    name = "upfront"
    description = "the whole plan at once, patched when steps fail, then the final answer"
    plans = "upfront"

    __slots__ = ()

    def when_idle(self) -> PlanKind:
        return "finish"

    def after_step(self) -> bool:
        return self.replan == "after_each_step"

    def news_round(self, state: RunState) -> PlanKind | None:
        return "information" if state.plan is not None else None

    def round_after(self, event: RoundAfter) -> PlanKind:
        return "information" if event == "news_before_answer" else "review"

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        if kind == "initial":
            return await planner.propose(ctx)
        if kind in ("failure", "after_step", "information", "review"):
            return await planner.patch(ctx, why)
        return await planner.finish(ctx)


@planner_policy
class StepByStep(PlannerPolicy):
    """One next step per turn, or the final answer; every turn reads what happened so far."""

    name = "step"
    description = "one next step per turn, each turn reading what happened so far"
    plans = "step by step"
    turns = True
    sealed_conflict = (
        "the step-by-step policy chooses each next step from the results it reads, and a sealed planner reads none"
    )

    __slots__ = ()

    def when_idle(self) -> PlanKind:
        return "turn"

    def after_step(self) -> bool:
        return False  # the next turn follows anyway

    def news_round(self, state: RunState) -> PlanKind | None:
        return None  # the next turn reads it

    def round_after(self, event: RoundAfter) -> PlanKind:
        return "turn"

    async def ask(self, planner: Planner, kind: PlanKind, ctx: PlanningContext, why: str) -> Asked:
        if kind == "finish":
            return await planner.finish(ctx)
        return await planner.turn(ctx)
