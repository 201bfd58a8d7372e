"""Trust labels in a run: what each value is labelled, what a planner's request carried, and
which trust rules a call breaks (see :mod:`planexec.trust` for the labels and the rules).

Every label is a function of the run's log: a tool step's output is its tool's (trusted only for
a trusted tool); a model-driven step's output is trusted only when everything it read was (what
the plan wrote into it, its arguments, each tool result it was given); a value the plan wrote is
the planner's, trusted only when the planning round that wrote it read no untrusted text — which
:meth:`Trust.read` decides from the text of the request the planner was sent, whatever planner
built it. A replay and a resumed run label every value exactly as the run did.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from planexec.errors import BindingError
from planexec.executor import StepError
from planexec.log import RunState, StepRecord
from planexec.models import ModelRequest
from planexec.plan import CompiledArgs, Step, compile_args, placeholders, render_text
from planexec.runtime._core import Core
from planexec.tools import Tool, Toolset
from planexec.trust import (
    ArgumentRule,
    GoalText,
    Provenance,
    Source,
    TextIndex,
    TrustPolicy,
    Violation,
    check_call,
    words,
)

__all__ = ["Trust", "TrustRefused"]

_NOT_STARTED_BY_ENGINE = frozenset({"rejected", "untrusted", "budget", "low_confidence"})
"""Failures whose text the engine wrote (or a human gave): their label is the developer's."""

_RECORD_WORDS = (
    "pending running held succeeded failed cancelled dropped Record Not finished Budget left no caps "
    "model_calls input_tokens output_tokens cost wall_time tool_calls steps replans earlier outputs not shown "
    "executor model tool error"
)
"""planexec's own words in what a planner is shown: a value that is one of them carries nothing new."""


class TrustRefused(Exception):
    """Internal: a call broke a trust rule and is not made; the run stops ``refused``."""

    def __init__(self, violations: tuple[Violation, ...]) -> None:
        self.violations = violations
        super().__init__("; ".join(map(str, violations)))


class _Loop(Core, Protocol):
    goal: str
    constraints: tuple[str, ...]

    def side_effecting(self, step: Step) -> bool: ...


class Trust:
    """The run's side of trust labels and rules. ``policy`` None: the run labels nothing (a replay
    of a log written before labels existed), so that it reproduces that log exactly."""

    def __init__(self, engine: _Loop, policy: TrustPolicy | None) -> None:
        self._engine = engine
        self.policy = policy
        self._words: dict[tuple[Any, ...], list[str]] = {}
        self._tool_texts: tuple[Toolset, str] | None = None

    @property
    def on(self) -> bool:
        return self.policy is not None

    @property
    def _state(self) -> RunState:
        return self._engine.state

    # -- labels -------------------------------------------------------------------------------

    def _tool(self, name: str | None) -> Tool | None:
        tools = self._engine.config.tools
        return tools.get(name) if name is not None and name in tools else None

    def tool_trusted(self, name: str | None) -> bool:
        """Whether tool ``name``'s output is trusted (declared so, or by the policy)."""
        tool = self._tool(name)
        policy = self.policy
        return (tool is not None and tool.trusted) or (policy is not None and name in policy.trusted_tools)

    def written(self, step_id: str) -> Provenance:
        """The label of what the plan wrote into step ``step_id`` (its literal values, and the call
        it asks for): the planner's (trusted only when it had read no untrusted text when it wrote
        the step), a human's (an edited plan), or plan memory's; confirmed by the human who
        approved the plan version the step came in."""
        state = self._state
        rec = state.steps.get(step_id)
        version = rec.plan_version if rec is not None else None
        author = next((p.author for p in state.plans if p.version == version), "planner")
        if author == "human":
            return Provenance.of(Source(kind="human", trusted=True, step=step_id))
        if author == "memory":
            return Provenance.of(Source(kind="memory", trusted=True, step=step_id))
        tainted = rec is not None and rec.tainted
        label = Provenance.of(Source(kind="planner", trusted=not tainted, step=step_id))
        if tainted:
            label = Provenance(trusted=False, sources=(*label.sources, *state.plan_reads.get(version or 0, ())))
            for approval in state.approvals.values():
                if approval.subject == "plan" and approval.approved and approval.plan_version == version:
                    return label.confirmed(approval.by or "human")
        return label

    def output_of(self, step_id: str) -> Provenance:
        """The label of step ``step_id``'s output (untrusted when the log does not say)."""
        rec = self._state.steps.get(step_id)
        if rec is not None and rec.output_provenance is not None:
            return rec.output_provenance
        tool = rec.step.tool if rec is not None else None
        if tool is None:
            return Provenance.of(Source(kind="model", trusted=False, step=step_id))
        return Provenance.of(Source(kind="tool", trusted=False, step=step_id, tool=tool))

    def arguments(self, step: Step, compiled: CompiledArgs | None = None) -> dict[str, Provenance]:
        """Each argument's label, as the step's bindings resolve."""
        compiled = compiled if compiled is not None else compile_args(step.args)
        return compiled.provenance(self.written(step.id), self.output_of)

    def tool_output(self, step: Step) -> Provenance:
        """The label of a tool step's output: its tool's."""
        return Provenance.of(Source(kind="tool", trusted=self.tool_trusted(step.tool), step=step.id, tool=step.tool))

    def human_output(self, step_id: str) -> Provenance:
        """The label of an output a human gave (an uncertain effect marked done)."""
        return Provenance.of(Source(kind="human", trusted=True, step=step_id))

    def _model_inputs(self, rec: StepRecord) -> list[Provenance]:
        inputs = [self.written(rec.id), *(rec.provenance or {}).values()]
        inputs += [c.output_provenance for c in rec.tool_calls if c.output_provenance is not None]
        return inputs

    def model_label(self, step_id: str) -> Provenance:
        """The label of what a model-driven step's model writes, as of what it has read so far."""
        rec = self._state.steps[step_id]
        read = Provenance.union(self._model_inputs(rec))
        trusted = read.trusted
        return Provenance(
            trusted=trusted,
            sources=(Source(kind="model", trusted=trusted, step=step_id), *read.untrusted_sources),
            confirmed_by=None,
        )

    def output(self, step: Step) -> Provenance:
        """The label of ``step``'s output once it has run."""
        if step.tool is not None:
            return self.tool_output(step)
        return self.model_label(step.id)

    def failure(self, step: Step, error: StepError, started: bool) -> Provenance:
        """The label of a failed step's text (its error, and the output it failed with)."""
        if not started and error.kind in _NOT_STARTED_BY_ENGINE:
            return Provenance.of(Source(kind="config", trusted=True, step=step.id))
        if not started:  # a binding or argument problem quotes the outputs it binds
            refs = dict.fromkeys(ref.step_id for _loc, ref in compile_args(step.args).refs)
            return Provenance.union([self.written(step.id), *(self.output_of(sid) for sid in refs)])
        return self.output(step)

    def inner_output(self, tool: Tool, step_id: str, call_id: str) -> Provenance:
        """The label of a tool call's output, made by a model-driven step."""
        trusted = self.tool_trusted(tool.name)
        return Provenance.of(Source(kind="tool", trusted=trusted, step=step_id, tool=tool.name, call=call_id))

    def template_answer(self, template: str, writer: Provenance) -> Provenance:
        """The label of an answer filled in from ``template``: its writer's, and each output it quotes."""
        quoted = dict.fromkeys(p.ref.step_id for p in placeholders(template))
        return Provenance.union([writer, *(self.output_of(sid) for sid in quoted)])

    def answer(self, state: RunState) -> Provenance:
        """The label of the planner's final answer: trusted when the round that wrote it read no
        untrusted text (what it read is among its sources)."""
        read = state.round_read
        planner = Source(kind="planner", trusted=not read)
        return Provenance(trusted=not read, sources=(planner, *read))

    # -- rules ----------------------------------------------------------------------------------

    def rule_sets(self, tool: str | None) -> list[Mapping[str, ArgumentRule]]:
        """The rules a call of ``tool`` must pass: its own, and the policy's for it (both hold)."""
        found: list[Mapping[str, ArgumentRule]] = []
        known = self._tool(tool)
        if known is not None and known.argument_rules:
            found.append(known.argument_rules)
        if self.policy is not None and tool is not None and tool in self.policy.rules:
            found.append(self.policy.rules[tool])
        return found

    def violations(
        self,
        tool: str,
        args: Mapping[str, Any],
        labels: Mapping[str, Provenance],
        call: Provenance,
        *,
        step_id: str,
        call_id: str | None = None,
    ) -> tuple[Violation, ...]:
        """The rules a call breaks (a replay takes the verdicts of rules it cannot rebuild from its log)."""
        sets = self.rule_sets(tool)
        if not sets:
            return ()
        goal = GoalText(goal=self._engine.goal, constraints=self._engine.constraints)

        def check() -> tuple[Violation, ...]:
            found: list[Violation] = []
            for rules in sets:
                for v in check_call(tool, rules, args, labels, call, goal, step_id=step_id, call_id=call_id):
                    if v not in found:
                        found.append(v)
            return tuple(found)

        if any(_served(rule) for rules in sets for rule in rules.values()):  # rules a record stands in for
            return self._engine.world.violations(step_id, call_id, check)
        return check()

    def untrusted_effect(
        self,
        tool: str,
        labels: Mapping[str, Provenance],
        call: Provenance,
        *,
        step_id: str,
        call_id: str | None = None,
    ) -> tuple[Violation, ...]:
        """What makes a call that changes the world one the default rule asks about: each untrusted
        argument, and the call itself when who asked for it was untrusted. An argument the
        developer set a rule on is judged by that rule alone (and the call, by a ``*`` rule)."""
        sets = self.rule_sets(tool)
        if any("*" in rules for rules in sets):
            return ()
        ruled = {name for rules in sets for name in rules}
        labels = {name: label for name, label in labels.items() if name not in ruled}
        requires = "a human's yes before a call that changes the world takes untrusted values"
        found = [
            Violation(
                tool=tool,
                argument=name,
                rule="untrusted_effect",
                requires=requires,
                reason=f"it comes from {_named(label)}",
                provenance=label,
                step_id=step_id,
                call_id=call_id,
            )
            for name, label in labels.items()
            if not label.trusted
        ]
        if not call.trusted:
            found.append(
                Violation(
                    tool=tool,
                    argument="*",
                    rule="untrusted_effect",
                    requires=requires,
                    reason=f"the call was asked for by {_named(call)}",
                    provenance=call,
                    step_id=step_id,
                    call_id=call_id,
                )
            )
        return tuple(found)

    def asks_about_effects(self) -> bool:
        """Whether the default rule is on, and a human can be asked."""
        policy = self.policy
        return policy is not None and policy.untrusted_effects and self._engine.can_ask_humans

    # -- what a planner's request carried ------------------------------------------------------

    def read(self, request: ModelRequest) -> tuple[Source, ...]:
        """The untrusted sources whose text ``request`` carries (empty: it carried none).

        The request's messages (bar the system instructions) are looked through for the text of
        every untrusted value the run holds — step outputs, errors whose text came from tools or
        models, tool results a model step read, what a planner wrote after reading untrusted text
        — and a value counts when a run of its words is there that the trusted texts (the goal, the
        constraints, what humans said, the tools' descriptions, what a clean planner wrote) do not
        explain. See :mod:`planexec.trust._reading`."""
        if not self.on:
            return ()
        items = list(self._untrusted_items())
        if not items:
            return ()
        index = TextIndex(m.content for m in request.messages if m.role != "system" and m.content)
        trusted = TextIndex(self._trusted_texts())
        found: list[Source] = []
        for key, sources, text in items:
            if all(s in found for s in sources):
                continue
            if index.carries(self._words_of(key, text), trusted):
                found += [s for s in sources if s not in found]
        return tuple(found)

    def _words_of(self, key: tuple[Any, ...], text: str) -> list[str]:
        cached = self._words.get(key)
        if cached is None:
            cached = self._words[key] = words(text)
        return cached

    def _untrusted_items(self) -> Iterable[tuple[tuple[Any, ...], tuple[Source, ...], str]]:
        """Each untrusted text the run holds: a key to cache its words by, its sources, the text."""
        state = self._state
        conversation = self._engine.config.conversation
        if conversation and self._engine.config.conversation_untrusted:
            yield ("conversation",), (Source(kind="session", trusted=False),), conversation
        for rec in (*state.superseded, *state.steps.values()):
            label = rec.output_provenance
            base = (rec.id, rec.plan_version, rec.finished_at)
            if label is not None and not label.trusted and rec.done:
                sources = label.untrusted_sources or label.sources
                if rec.output is not None:
                    yield (*base, "output"), sources, _text(rec.output)
                if rec.error is not None:
                    yield (*base, "error"), sources, rec.error.message
            if rec.attempt_errors and not self.tool_trusted(rec.step.tool):
                source = (Source(kind="tool", trusted=False, step=rec.id, tool=rec.step.tool),)
                for i, error in enumerate(rec.attempt_errors):
                    yield (*base, "attempt", i), source, error.message
            for call in rec.tool_calls:
                out = call.output_provenance
                if out is None or out.trusted:
                    continue
                key = (rec.id, call.call_id, call.at)
                if call.output is not None:
                    yield (*key, "output"), out.sources, _text(call.output)
                if call.error is not None:
                    yield (*key, "error"), out.sources, call.error.message
            if rec.tainted:
                source = (Source(kind="planner", trusted=False, step=rec.id),)
                yield (*base, "written", id(rec.step)), source, _step_text(rec.step)

    def _trusted_texts(self) -> list[str]:
        """What a request may carry that the run trusts: the goal and constraints, what humans
        said, the tools' and executors' descriptions, the planner's instructions, what a clean
        planner wrote."""
        engine = self._engine
        state = self._state
        texts = [engine.goal, *engine.constraints, _RECORD_WORDS, engine.config.planner.instructions]
        texts += [info.text for info in state.information]
        for approval in state.approvals.values():
            texts += [t for t in (approval.text, approval.decision_reason) if t]
        texts.append(self._tools_text(engine.config.tools))
        for rec in (*state.superseded, *state.steps.values()):
            texts.append(rec.id)
            if not rec.tainted:
                texts.append(_step_text(rec.step))
        for plan in state.plans:
            if plan.version not in state.plan_reads:
                texts.append(plan.reason)
        return texts

    def _tools_text(self, tools: Toolset) -> str:
        known = self._tool_texts
        if known is not None and known[0] is tools:
            return known[1]
        parts = []
        for t in tools:
            parts += [t.name, t.description, json.dumps(dict(t.parameters), ensure_ascii=False, default=str)]
        text = "\n".join(parts)
        self._tool_texts = (tools, text)
        return text


def _served(rule: ArgumentRule) -> bool:
    """Whether ``rule`` is a replay's stand-in for a rule the log could not hold (a function)."""
    return bool(getattr(rule, "served", False))


def _named(label: Provenance) -> str:
    return ", ".join(str(s) for s in label.untrusted_sources) or "an untrusted source"


def _text(value: Any) -> str:
    try:
        return render_text(value)
    except BindingError:
        return ""


def _step_text(step: Step) -> str:
    parts = [step.description, step.thought or "", step.expected or "", _text(step.args)]
    return "\n".join(p for p in parts if p)
