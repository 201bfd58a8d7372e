"""Trust labels and the rules on effects they feed.

Every value in a run carries a :class:`Provenance`: where it came from (its :class:`Source`\\ s —
the goal and constraints, the developer's configuration, a tool's output, a model's, a value the
planner wrote, a human's) and whether the run trusts it. The user and the developer are trusted;
a tool's output is not, unless the tool is declared trusted (``@tool(trusted=True)``); what a
model writes is trusted only when everything it read was; a value the planner writes into a step
is trusted only when the planning round that wrote it read no untrusted text; a human's confirmed
value is trusted. Labels follow values through bindings, model-driven steps and the final answer,
and are recorded in the run's log.

Rules say which effects untrusted values may steer: per tool and argument (``@tool(argument_rules=
{"to": Trusted()})``, or :class:`TrustPolicy` ``rules`` for tools you do not own), checked before
every call — a step's, and each call a model-driven step makes. A call that breaks one is never
made silently: it is put to a human, who sees each argument's label and the rule it breaks, or it
is refused and the run stops ``refused`` (:class:`Violation` says what broke which rule).

This package knows values and rules only; :mod:`planexec.runtime` labels a run's values and
enforces the rules.
"""

from planexec.trust._policy import (
    EVERY_ARGUMENT,
    TrustPolicy,
    Violation,
    ViolationRule,
    check_call,
    record_rules,
    rule_problems,
    rules_from_record,
)
from planexec.trust._provenance import Provenance, Source, SourceKind
from planexec.trust._reading import TextIndex, words
from planexec.trust._rules import (
    MAX_ITEMS,
    Allowed,
    AnyOf,
    ArgumentRule,
    GoalText,
    InGoal,
    Trusted,
    rule_from_record,
)

__all__ = [
    "EVERY_ARGUMENT",
    "MAX_ITEMS",
    "Allowed",
    "AnyOf",
    "ArgumentRule",
    "GoalText",
    "InGoal",
    "Provenance",
    "Source",
    "SourceKind",
    "TextIndex",
    "TrustPolicy",
    "Trusted",
    "Violation",
    "ViolationRule",
    "check_call",
    "record_rules",
    "rule_from_record",
    "rule_problems",
    "rules_from_record",
    "words",
]
