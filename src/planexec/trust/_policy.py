"""Trust policies: which values may steer which effects, and what happens to a call that breaks one."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec._util.clip import clip
from planexec.errors import Problem, UsageError
from planexec.trust._provenance import Provenance
from planexec.trust._rules import ArgumentRule, GoalText, Trusted, rule_from_record

__all__ = [
    "EVERY_ARGUMENT",
    "TrustPolicy",
    "Violation",
    "ViolationRule",
    "check_call",
    "record_rules",
    "rule_problems",
    "rules_from_record",
]

EVERY_ARGUMENT = "*"
"""In a tool's argument rules: the rule for every argument the rules do not name. ``"*":
Trusted()`` also holds the call itself to it: a call that a planner asked for after reading
untrusted text, or that a model asked for after reading it, breaks it even with no argument."""

ViolationRule = Literal["argument_rule", "untrusted_effect"]
"""``argument_rule``: an argument broke a rule the developer set; ``untrusted_effect``: a call
that changes the world would take an untrusted value (the default rule, asked about whenever a
human can be asked)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    """An argument of a call that broke a rule: which tool, which argument (``*`` for the call
    itself), the rule and why, and the argument's label."""

    tool: str
    argument: str
    rule: ViolationRule
    requires: str
    """What the rule requires, in words (``trusted values only``)."""
    reason: str
    """Why the argument fails it."""
    provenance: Provenance
    step_id: str | None = None
    call_id: str | None = None
    """For a call a model-driven step made: the model's id for the call."""

    def __str__(self) -> str:
        where = "the call" if self.argument == EVERY_ARGUMENT else f"argument {self.argument!r}"
        return f"{self.tool}: {where} ({self.provenance}) breaks the rule {self.requires!r}: {self.reason}"


ToolRules = Mapping[str, ArgumentRule]


@dataclass(frozen=True, kw_only=True)
class TrustPolicy:
    """How a run treats values it does not trust.

    ``rules``: argument rules for tools by name — for tools you do not own (an MCP server's, a
    library's) or on top of a tool's own ``argument_rules``; both hold. Each maps argument names
    (or ``"*"``, see :data:`EVERY_ARGUMENT`) to an :class:`~planexec.trust.ArgumentRule`.
    ``trusted_tools``: tools whose output is trusted, besides those declared ``trusted=True``.
    ``on_violation``: what happens to a call that breaks a rule — ``ask`` a human (shown each
    argument's label and the rule it breaks; with nobody to ask, it is refused) or ``refuse`` it
    (the call is not made and the run stops ``refused``, naming the tool, the argument and its
    label). ``untrusted_effects``: whenever a human can be asked, a call that changes the world
    is asked about when one of its arguments is untrusted, or a planner wrote the step after
    reading untrusted text (False: only the rules ask).

    ``answer``: what happens to a final answer that holds text the run does not trust (a tool's
    output it quotes, or a planner's or model's words written after reading one) — ``label``: it
    is returned with its label (``RunResult.answer_provenance``), as every answer is; ``ask``: a
    human is shown it with its label before the run ends with it (a yes returns it, confirmed; a
    no, or nobody to ask, withholds its untrusted parts); ``withhold``: its untrusted parts are
    left out — a template's placeholders of untrusted outputs say so in their place, and an answer
    a planner or model wrote after reading untrusted text is withheld whole
    (``RunResult.withheld`` names what was; the outputs stay in the run's log)."""

    rules: Mapping[str, ToolRules] = field(default_factory=dict)
    trusted_tools: Collection[str] = ()
    on_violation: Literal["ask", "refuse"] = "ask"
    untrusted_effects: bool = True
    answer: Literal["label", "ask", "withhold"] = "label"

    def __post_init__(self) -> None:
        problems: list[Problem] = []

        def add(where: str, message: str) -> None:
            problems.append(Problem(code="trust", where=where, message=message))

        if not isinstance(self.rules, Mapping):
            add("rules", "must map tool names to {argument: rule}")
        else:
            for tool, rules in self.rules.items():
                if not isinstance(tool, str) or not tool:
                    add("rules", f"{tool!r} is not a tool's name")
                    continue
                problems += rule_problems(rules, None, where=f"rules.{tool}")
        trusted: object = self.trusted_tools
        if isinstance(trusted, str) or not isinstance(trusted, Collection):
            add("trusted_tools", "must be a list of tool names")
        else:
            for name in trusted:
                if not isinstance(name, str) or not name:
                    add("trusted_tools", f"{name!r} is not a tool's name")
            object.__setattr__(self, "trusted_tools", frozenset(n for n in trusted if isinstance(n, str)))
        if self.on_violation not in ("ask", "refuse"):
            add("on_violation", "must be 'ask' or 'refuse'")
        if not isinstance(self.untrusted_effects, bool):
            add("untrusted_effects", "must be True or False")
        if not isinstance(self.answer, str) or self.answer not in ("label", "ask", "withhold"):
            add("answer", "must be 'label', 'ask' or 'withhold'")
        if problems:
            raise UsageError("invalid trust policy", problems)
        object.__setattr__(self, "rules", {tool: dict(rules) for tool, rules in self.rules.items()})

    def tool_problems(self, tools: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
        """What is wrong with the policy for these tools (name → JSON Schema of its arguments):
        rules for tools there are not, or for arguments a tool does not take."""
        problems = []
        for tool, rules in self.rules.items():
            if tool not in tools:
                known = ", ".join(sorted(tools)[:20]) or "none"
                problems.append(
                    Problem(code="trust", where=f"rules.{tool}", message=f"no tool is named so (tools: {known})")
                )
                continue
            problems += rule_problems(rules, tools[tool], where=f"rules.{tool}")
        for name in sorted(self.trusted_tools):
            if name not in tools:
                problems.append(Problem(code="trust", where="trusted_tools", message=f"no tool is named {name!r}"))
        return problems

    def record(self) -> dict[str, Any]:
        """The policy as JSON data, for the run's log."""
        return {
            "rules": {tool: record_rules(rules) for tool, rules in self.rules.items()},
            "trusted_tools": sorted(self.trusted_tools),
            "on_violation": self.on_violation,
            "untrusted_effects": self.untrusted_effects,
            "answer": self.answer,
        }

    @classmethod
    def from_record(cls, data: Mapping[str, Any], served: Callable[[str], ArgumentRule] | None = None) -> TrustPolicy:
        """The policy a log records (see :func:`rule_from_record` for ``served``)."""
        rules = data.get("rules")
        trusted = data.get("trusted_tools")
        return cls(
            rules={
                str(tool): rules_from_record(r, served)
                for tool, r in (rules.items() if isinstance(rules, Mapping) else ())
                if isinstance(r, Mapping)
            },
            trusted_tools=[str(n) for n in trusted] if isinstance(trusted, list) else (),
            on_violation="refuse" if data.get("on_violation") == "refuse" else "ask",
            untrusted_effects=bool(data.get("untrusted_effects", True)),
            answer=answer if (answer := data.get("answer")) in ("ask", "withhold") else "label",
        )


def record_rules(rules: ToolRules) -> dict[str, Any]:
    """A tool's argument rules as JSON data."""
    return {arg: rule.record() for arg, rule in rules.items()}


def rules_from_record(
    data: Mapping[str, Any], served: Callable[[str], ArgumentRule] | None = None
) -> dict[str, ArgumentRule]:
    """A tool's argument rules as the log records them."""
    return {str(arg): rule_from_record(r, served) for arg, r in data.items() if isinstance(r, Mapping)}


def rule_problems(rules: object, parameters: Mapping[str, Any] | None, *, where: str) -> list[Problem]:
    """What is wrong with a tool's argument rules: not a mapping, a rule that is not one, or
    (given the tool's JSON Schema) an argument the tool does not take."""
    problems: list[Problem] = []

    def add(at: str, message: str) -> None:
        problems.append(Problem(code="trust", where=at, message=message))

    if not isinstance(rules, Mapping):
        add(where, "must map argument names (or '*') to rules such as Trusted()")
        return problems
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    known = set(properties) if isinstance(properties, Mapping) else None
    open_ended = isinstance(parameters, Mapping) and parameters.get("additionalProperties") not in (None, False)
    for arg, rule in rules.items():
        at = f"{where}.{arg}"
        if not isinstance(arg, str) or not arg:
            add(where, f"{arg!r} is not an argument's name")
            continue
        if not isinstance(rule, ArgumentRule):
            add(at, f"{clip(repr(rule), 60)} is not a rule: use Trusted(), InGoal(), Allowed(...) or a | of them")
            continue
        problems += [Problem(code="trust", where=at, message=p) for p in rule.problems()]
        if known is not None and arg != "*" and arg not in known and not open_ended:
            listed = ", ".join(sorted(known)[:20]) or "none"
            add(at, f"the tool takes no argument {arg!r} (its arguments: {listed})")
    return problems


def check_call(
    tool: str,
    rules: ToolRules,
    args: Mapping[str, Any],
    labels: Mapping[str, Provenance],
    call: Provenance,
    goal: GoalText,
    *,
    step_id: str | None = None,
    call_id: str | None = None,
) -> list[Violation]:
    """Every rule an argument of the call breaks. ``labels``: each argument's label; ``call``: the
    label of the call itself (who asked for it), which ``*`` rules judge too."""
    found: list[Violation] = []
    every = rules.get(EVERY_ARGUMENT)
    for name in args:
        rule = rules.get(name, every)
        if rule is None:
            continue
        label = labels.get(name, call)
        reason = rule.check(args[name], label, goal)
        if reason is not None:
            found.append(
                Violation(
                    tool=tool,
                    argument=name,
                    rule="argument_rule",
                    requires=rule.describe(),
                    reason=reason,
                    provenance=label,
                    step_id=step_id,
                    call_id=call_id,
                )
            )
    if isinstance(every, Trusted) and not call.trusted:
        reason = (
            f"the call was asked for by {', '.join(str(s) for s in call.untrusted_sources) or 'an untrusted source'}"
        )
        found.append(
            Violation(
                tool=tool,
                argument=EVERY_ARGUMENT,
                rule="argument_rule",
                requires=every.describe(),
                reason=reason,
                provenance=call,
                step_id=step_id,
                call_id=call_id,
            )
        )
    return found
