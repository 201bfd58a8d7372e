"""The gate before a step runs: the confidence gate, step approvals and trust rules.

Gates come from the developer's configuration: a tool that ``requires_approval``,
``Approvals(steps=...)``, plan approval, side-effecting steps a patch adds, trust rules and
untrusted values steering effects. A plan may make a step stricter (``approval: "always"``) but
never lift a gate: ``"never"`` is read as ``"auto"``. A human who is asked sees the step's
arguments exactly as they will be sent, and where each comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from planexec.executor import StepError, StepFailure
from planexec.log import QuestionRule
from planexec.plan import Step
from planexec.runtime._core import Core
from planexec.runtime._decisions import recorded_decision
from planexec.runtime._humans import Humans
from planexec.runtime._settings import ApprovalRequest
from planexec.runtime._trust import Trust, TrustRefused
from planexec.tools import Tool
from planexec.trust import Provenance, Violation

__all__ = ["GateLoop", "StepGate"]


class GateLoop(Core, Protocol):
    """What the gate sees of the loop, beyond :class:`Core`."""

    humans: Humans
    trust: Trust

    def side_effecting(self, step: Step) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Findings:
    """Why a step's gate would ask about it."""

    tool: Tool | None
    required: bool
    """The step, its tool or the run's approvals ask about every such step."""
    broken: tuple[Violation, ...]
    untrusted: tuple[Violation, ...]
    unapproved: bool
    patched: bool
    low: bool
    """The step's confidence is under the run's threshold."""

    @property
    def sensitive(self) -> bool:
        return self.tool is not None and self.tool.sensitive


class StepGate:
    """Decides whether a step may run, asking a human where the configuration says so."""

    def __init__(self, engine: GateLoop) -> None:
        self._engine = engine

    def _gated(self, tool: str | None) -> bool:
        """Whether every call of ``tool`` passes the gate (as the run's tools are now)."""
        tools = self._engine.config.tools
        if tool is None or tool not in tools:
            return False
        spec = tools.get(tool)
        return spec.sensitive or spec.requires_approval

    def may_ask(self, step: Step) -> bool:
        """Whether ``gate`` can do anything for ``step`` (a cheap test that spares most steps a wait)."""
        if step.approval == "always" or step.confidence is not None or self._gated(step.tool):
            return True
        engine = self._engine
        approvals = engine.config.approvals
        if approvals.steps == "all":
            return True
        trust = engine.trust
        if trust.on and trust.rule_sets(step.tool):
            return True
        if not engine.side_effecting(step):
            return False
        if trust.asks_about_effects():
            return True
        return approvals.plan or (approvals.patched_effects and engine.can_ask_humans and len(engine.state.plans) > 1)

    async def gate(self, step: Step, args: dict[str, Any], labels: dict[str, Provenance] | None = None) -> str | None:
        """Raise ``StepFailure`` when the step may not run (``TrustRefused`` when it breaks a trust
        rule and is refused). ``args``: the step's arguments as they will be sent, ``labels`` where
        each comes from (a human is shown exactly these). Returns who said yes, when a human let
        the step through."""
        engine = self._engine
        found = self._findings(step, args, labels)
        policy = engine.config.trust
        if found.broken and (not engine.can_ask_humans or (policy is not None and policy.on_violation == "refuse")):
            raise TrustRefused(found.broken)
        if not self._asks(step, found):
            return None
        if not engine.can_ask_humans:
            self._nobody_to_ask(step, found)
            return None
        why, rule = self._why(step, found)
        return await self._ask(step, why, rule, args, labels, (*found.broken, *found.untrusted))

    def _findings(self, step: Step, args: dict[str, Any], labels: dict[str, Provenance] | None) -> _Findings:
        engine = self._engine
        tool = self._tool_of(step)
        approvals = engine.config.approvals
        required = (
            step.approval == "always" or (tool is not None and tool.requires_approval) or approvals.steps == "all"
        )
        broken, untrusted = self._trust_findings(step, args, labels)
        return _Findings(
            tool=tool,
            required=required,
            broken=broken,
            untrusted=untrusted,
            unapproved=self._unapproved(step),
            patched=engine.can_ask_humans and self._patched(step),
            low=step.confidence is not None and step.confidence < engine.config.limits.confidence_threshold,
        )

    def _asks(self, step: Step, found: _Findings) -> bool:
        """Whether the gate asks about the step (or refuses it, when nobody can be asked)."""
        steps = self._engine.config.approvals.steps
        return (
            found.required
            or found.unapproved
            or found.patched
            or bool(found.broken)
            or bool(found.untrusted)
            or (found.sensitive and (found.low or steps == "sensitive"))
        )

    def _nobody_to_ask(self, step: Step, found: _Findings) -> None:
        """The gate would ask, and nobody can be asked: refuse the step, or let it run where only
        a sensitive tool would have been asked about."""
        if found.sensitive and found.low and not found.required and not found.unapproved:
            threshold = self._engine.config.limits.confidence_threshold
            raise StepFailure(
                StepError(
                    kind="low_confidence",
                    message=f"sensitive step not run: confidence {step.confidence:.2f} is under "
                    f"{threshold:.2f} and no human can approve it",
                )
            )
        if not (found.required or found.unapproved):
            return  # a sensitive tool is asked about only when someone can be asked
        raise StepFailure(
            StepError(kind="rejected", message="the step needs a human's approval and no approver is configured")
        )

    def _why(self, step: Step, found: _Findings) -> tuple[str, QuestionRule]:
        """The question's reason and rule: the first of the gates that asks."""
        tool = found.tool
        steps = self._engine.config.approvals.steps
        if found.sensitive and found.low:
            return f"low confidence ({step.confidence:.2f}) on a sensitive step", "low_confidence"
        if tool is not None and tool.requires_approval:
            return f"tool {tool.name} always needs approval", "tool_requires_approval"
        if found.broken:
            return f"an argument breaks a trust rule: {found.broken[0]}", "argument_rule"
        if found.unapproved:
            return "a step that changes the world, added after the plan was approved", "unapproved_change"
        if found.patched:
            return "a step that changes the world, added or changed by a patch", "patched_effect"
        if found.sensitive and (found.low or steps == "sensitive"):
            return f"sensitive tool {tool.name if tool else step.tool}", "sensitive_tool"
        if step.approval == "always":
            return "approval policy always", "step_always"
        if steps == "all":
            return f"approval policy {steps!r}", "all_steps"
        return "a step that changes the world, steered by untrusted values", "untrusted_effect"

    async def _ask(
        self,
        step: Step,
        why: str,
        rule: QuestionRule,
        args: dict[str, Any],
        labels: dict[str, Provenance] | None,
        violations: tuple[Violation, ...],
    ) -> str:
        """Ask a human about the step (or take the answer given before a restart); who said yes."""
        engine = self._engine
        humans = engine.humans
        version = engine.state.steps[step.id].plan_version
        earlier = humans.earlier(step.id, "step", version)
        humans.waiting_steps.add(step.id)
        engine.wake()
        try:
            if earlier is not None and earlier.approved is not None:
                decision = recorded_decision(earlier)
            else:
                request = ApprovalRequest(
                    approval_id="",
                    run_id=engine.run_id,
                    subject="step",
                    step=step,
                    reason=why,
                    rule=rule,
                    args=args,
                    provenance=labels,
                    violations=violations,
                )
                decision = await humans.ask(request, version=version, existing=earlier)
        finally:
            humans.waiting_steps.discard(step.id)
        if not decision.approved:
            raise StepFailure(StepError(kind="rejected", message=f"a human rejected the step: {decision.reason}"))
        return decision.by or "human"

    def _tool_of(self, step: Step) -> Tool | None:
        tools = self._engine.config.tools
        return tools.get(step.tool) if step.tool is not None and step.tool in tools else None

    def _patched(self, step: Step) -> bool:
        """Whether ``step`` changes the world and a patch (a plan version after the first) added or
        changed it, against the plan a human last approved, or else the run's first plan: the
        planner had read the run's results by then, and no human saw the step."""
        engine = self._engine
        approvals = engine.config.approvals
        state = engine.state
        if approvals.plan or not approvals.patched_effects or not state.plans or not engine.side_effecting(step):
            return False
        version = state.steps[step.id].plan_version
        first = state.plans[0]
        if version <= first.version:
            return False
        base = state.last_approved_plan() or first
        before = next((s for s in base.steps if s.id == step.id), None)
        return before != step

    def _unapproved(self, step: Step) -> bool:
        """Whether ``step`` changes the world and came after the plan a human approved: with plan
        approval on, an approval covers only the plan versions it showed."""
        engine = self._engine
        if not engine.config.approvals.plan or not engine.side_effecting(step):
            return False
        version = engine.state.steps[step.id].plan_version
        return not any(
            a.subject == "plan" and a.approved and a.plan_version == version for a in engine.state.approvals.values()
        )

    def _trust_findings(
        self, step: Step, args: dict[str, Any], labels: dict[str, Provenance] | None
    ) -> tuple[tuple[Violation, ...], tuple[Violation, ...]]:
        """The trust rules the step's call breaks, and what the default rule on untrusted effects
        finds (only when a human can be asked)."""
        engine = self._engine
        trust = engine.trust
        if not trust.on or labels is None or step.tool is None:
            return (), ()
        call = trust.written(step.id)
        broken = trust.violations(step.tool, args, labels, call, step_id=step.id)
        untrusted: tuple[Violation, ...] = ()
        if trust.asks_about_effects() and engine.side_effecting(step):
            named = {v.argument for v in broken}  # an argument that breaks a rule is listed once, for the rule
            found = trust.untrusted_effect(step.tool, labels, call, step_id=step.id)
            untrusted = tuple(v for v in found if v.argument not in named)
        return broken, untrusted
