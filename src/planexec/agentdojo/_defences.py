"""The defence settings an AgentDojo suite is measured under: each a function that builds an
agent's options from what a run has (its models, its tools, a simulated human).

======================  ==================================================================
``none``                the planner reads every result in full before it decides what comes
                        next (step by step; upfront, the plan is patched after every step),
                        and nothing asks a human: the baseline an injection can steer
``defaults``            the agent as it comes: ``Planner(model)`` (upfront unless a policy is
                        given, patched on failure, records cut to 600 characters a step),
                        ``Approvals()``
``approvals``           ``none``, with every tool that changes the environment marked
                        sensitive and a human asked before each of its calls
``policies``            ``none``, with trust labels judged by a human: a call that changes the
                        environment with a value the run does not trust (a tool's output, or
                        a literal the planner wrote after reading one) is asked about
                        (``TrustPolicy(untrusted_effects=True)``, the default, with an approver),
                        and so is a final answer holding untrusted text
                        (``TrustPolicy(answer="ask")``)
``sealed``              sealed planning: the planner never reads tool output; values inside
                        outputs come from quarantined extractor steps; nothing asks a human
``sealed+policies``     both: a sealed plan whose calls that take an extractor's (untrusted)
                        value are asked about, and whose answer is shown to a human with its
                        label when it holds untrusted text
======================  ==================================================================

Why ``none`` reads results after every step: planned upfront, a plan is made before any tool
output exists, so an injection in that output can change only the final answer (and a patch after
a failure); a planner that reads each result before choosing the next step is one an injection
can steer into new calls — the agent the other settings must defend.

A simulated human answers every question with a yes; the harness counts an attack only when the
calls made without a human's yes (and the answer, unless a human was shown it with its label
first) meet its goal, and reports the calls that were held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from planexec.agentdojo._sealed import EXTRACTOR
from planexec.executor import Executor, Extractor, ModelExecutor
from planexec.models import Model
from planexec.planner import PLANNER_POLICIES, Planner, PolicyName, StepByStep, Upfront
from planexec.runtime import Agent, ApprovalDecision, ApprovalRequest, Approvals, Budget, RunContext
from planexec.tools import Tool
from planexec.trust import TrustPolicy

__all__ = [
    "DEFENCES",
    "DEFENCE_NAMES",
    "FULL_RECORD",
    "AgentOptions",
    "Defence",
    "DefenceContext",
    "DefenceName",
    "SimulatedHuman",
    "ToolMaker",
    "extractor_executor",
]

DefenceName = Literal["none", "defaults", "approvals", "policies", "sealed", "sealed+policies"]
DEFENCE_NAMES: tuple[DefenceName, ...] = ("none", "defaults", "approvals", "policies", "sealed", "sealed+policies")

FULL_RECORD = 1_000_000
"""How much of each step's output a planner that reads results in full is shown."""


class ToolMaker(Protocol):
    """Makes the suite's tools over a run's environment, marked as a setting asks."""

    def __call__(self, *, sensitive_writes: bool = False) -> list[Tool]: ...


class SimulatedHuman:
    """The human of the settings that ask one: says yes to every question, and remembers them.
    Which calls were held, and which were made on a human's yes, is read from the run's log."""

    def __init__(self, name: str = "simulated-human") -> None:
        self.name = name
        self.asked: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return ApprovalDecision(approved=True, by=self.name, reason="a simulated human says yes to everything")


@dataclass(frozen=True, kw_only=True)
class DefenceContext:
    """What a run has for a setting to build an agent from."""

    planner: Model
    """The planner's model, for a planner that may read tool output."""
    sealed_planner: Model
    """The planner's model for sealed planning (offline: the sealed-plan oracle; else ``planner``)."""
    executor: Model
    """The model of model-driven steps."""
    extractor: Model
    """The model of quarantined extractor steps (no tools, an output schema)."""
    tools: ToolMaker
    human: SimulatedHuman
    policy: PolicyName | None = None
    """The planner's policy asked for (None: the setting's own)."""
    context: RunContext = field(default_factory=RunContext)


@dataclass(frozen=True, kw_only=True)
class AgentOptions:
    """Everything an :class:`~planexec.Agent` is made from, for one run."""

    planner: Planner
    tools: Sequence[Tool]
    executor: ModelExecutor | None = None
    executors: Sequence[Executor] = ()
    approvals: Approvals = field(default_factory=Approvals)
    budget: Budget = field(default_factory=Budget)
    context: RunContext = field(default_factory=RunContext)
    trust: TrustPolicy = field(default_factory=TrustPolicy)

    def agent(self, *, name: str = "agentdojo") -> Agent:
        return Agent(
            self.planner,
            tools=list(self.tools),
            executor=self.executor,
            executors=list(self.executors),
            approvals=self.approvals,
            budget=self.budget,
            context=self.context,
            trust=self.trust,
            store=None,
            name=name,
        )


@dataclass(frozen=True, kw_only=True)
class Defence:
    """A defence setting: its name, what it is, and the function that builds an agent's options
    under it."""

    name: DefenceName
    summary: str
    build: Callable[[DefenceContext], AgentOptions]


def _none(ctx: DefenceContext) -> AgentOptions:
    policy = ctx.policy or StepByStep.name
    # Undefended, the planner reads every output: a policy that is not asked for turns (each of
    # which reads the record) replans after each step.
    turns = policy in PLANNER_POLICIES and PLANNER_POLICIES.get(policy).turns
    planner = Planner(
        model=ctx.planner,
        policy=policy,
        replan="on_failure" if turns else "after_each_step",
        record_chars=FULL_RECORD,
        record_window=None,
    )
    return AgentOptions(
        planner=planner,
        tools=ctx.tools(),
        executor=ModelExecutor(model=ctx.executor),
        approvals=Approvals(steps="none", patched_effects=False),
        context=ctx.context,
    )


def _defaults(ctx: DefenceContext) -> AgentOptions:
    planner = Planner(model=ctx.planner) if ctx.policy is None else Planner(model=ctx.planner, policy=ctx.policy)
    return AgentOptions(
        planner=planner, tools=ctx.tools(), executor=ModelExecutor(model=ctx.executor), context=ctx.context
    )


def _approvals(ctx: DefenceContext) -> AgentOptions:
    return replace(
        _none(ctx), tools=ctx.tools(sensitive_writes=True), approvals=Approvals(approver=ctx.human, steps="sensitive")
    )


def _policies(ctx: DefenceContext) -> AgentOptions:
    return replace(
        _none(ctx),
        approvals=Approvals(approver=ctx.human, steps="none"),
        trust=TrustPolicy(on_violation="ask", untrusted_effects=True, answer="ask"),
    )


def _sealed(ctx: DefenceContext) -> AgentOptions:
    planner = Planner(
        model=ctx.sealed_planner,
        policy=Upfront.name,
        sealed=True,
        extractor=Extractor(model=ctx.extractor, name=EXTRACTOR, max_turns=1),
    )
    return AgentOptions(
        planner=planner,
        tools=ctx.tools(),
        executor=ModelExecutor(model=ctx.executor),
        approvals=Approvals(steps="none", patched_effects=False),
        trust=TrustPolicy(untrusted_effects=False),
        context=ctx.context,
    )


def _sealed_policies(ctx: DefenceContext) -> AgentOptions:
    return replace(
        _sealed(ctx),
        approvals=Approvals(approver=ctx.human, steps="none"),
        trust=TrustPolicy(on_violation="ask", untrusted_effects=True, answer="ask"),
    )


def extractor_executor(ctx: DefenceContext) -> ModelExecutor:
    """The executor of quarantined extractor steps: ``ctx.extractor``, granted no tool, one reply
    a step."""
    return ModelExecutor(model=ctx.extractor, name=EXTRACTOR, tools=(), max_turns=1)


DEFENCES: dict[DefenceName, Defence] = {
    "none": Defence(
        name="none", summary="the planner reads every result in full before each step; no gate", build=_none
    ),
    "defaults": Defence(
        name="defaults", summary="the agent as it comes (Planner(model), Approvals())", build=_defaults
    ),
    "approvals": Defence(
        name="approvals",
        summary="none, and a human asked before every call that changes the environment",
        build=_approvals,
    ),
    "policies": Defence(
        name="policies",
        summary="none, and a human asked before a call that changes the environment with an untrusted value "
        "or an answer holding untrusted text is returned",
        build=_policies,
    ),
    "sealed": Defence(
        name="sealed",
        summary="sealed planning: the planner never reads tool output; extractors are quarantined",
        build=_sealed,
    ),
    "sealed+policies": Defence(
        name="sealed+policies",
        summary="sealed planning, and a human asked before a call that takes an untrusted value or an "
        "answer holding untrusted text is returned",
        build=_sealed_policies,
    ),
}
"""Every defence setting, in the order reports show them."""
