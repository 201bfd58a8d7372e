"""Plans: the typed, versioned contract between the planner and the executors.

Bindings — how a step uses an earlier step's output in its arguments:

* ``"${fetch}"`` — exactly one binding: the whole output, with its type kept.
* ``"${fetch.items.0.name}"`` — a path: object fields by name, list items by index.
* ``"Found ${count} rows"`` — inside a longer string: rendered as text (JSON for non-strings).
* ``"$${"`` — a literal ``${``.

A bound step must be among the step's dependencies.

Answer templates — a final answer written before the outputs it quotes exist (a sealed plan's
``answer``, plan memory's remembered answers): ``{{fetch}}``, ``{{fetch.items.0.name}}`` and
``{{fetch|str}}`` stand for outputs; :func:`fill_template` fills them in one pass, and
:func:`template_problems` checks a planner's template.

Checks: ``check_steps`` lists every problem of a whole list of steps; ``IncrementalChecker`` checks
steps one at a time as they stream in (dependencies first), each in time proportional to that step.
Regexes in a plan (``matches`` checks, ``pattern`` in schemas) use RE2 syntax; schemas in a plan may
use only local ``$ref``s.
"""

from planexec.plan._bindings import BindingError, CompiledArgs, Ref, compile_args, render_text
from planexec.plan._checks import CheckContext, capped, changes_world, check_steps, validate_steps
from planexec.plan._incremental import IncrementalChecker
from planexec.plan._plan import (
    FLAT_KEYS,
    HANDOFF_ID,
    PLAIN_PLAN_VERSION,
    PLAN_SCHEMA_VERSION,
    Author,
    FinalAnswer,
    FlatTurn,
    Handoff,
    Plan,
    PlanDraft,
    Turn,
    handoff_step,
    plan_json_schema,
)
from planexec.plan._schemas import judge
from planexec.plan._step import Check, Contains, FitsSchema, Matches, NonEmpty, OnFail, Predicate, Step
from planexec.plan._template import (
    ANSWER_CHARS,
    ANSWER_VALUE_CHARS,
    MAX_PLACEHOLDERS,
    MAX_TEMPLATE_CHARS,
    PLACEHOLDER,
    WHOLE_PLACEHOLDER,
    Placeholder,
    fill_template,
    placeholders,
    render_answer,
    render_value,
    template_problems,
)

__all__ = [
    "ANSWER_CHARS",
    "ANSWER_VALUE_CHARS",
    "FLAT_KEYS",
    "HANDOFF_ID",
    "MAX_PLACEHOLDERS",
    "MAX_TEMPLATE_CHARS",
    "PLACEHOLDER",
    "PLAIN_PLAN_VERSION",
    "PLAN_SCHEMA_VERSION",
    "WHOLE_PLACEHOLDER",
    "Author",
    "BindingError",
    "Check",
    "CheckContext",
    "CompiledArgs",
    "Contains",
    "FinalAnswer",
    "FitsSchema",
    "FlatTurn",
    "Handoff",
    "IncrementalChecker",
    "Matches",
    "NonEmpty",
    "OnFail",
    "Placeholder",
    "Plan",
    "PlanDraft",
    "Predicate",
    "Ref",
    "Step",
    "Turn",
    "capped",
    "changes_world",
    "check_steps",
    "compile_args",
    "fill_template",
    "handoff_step",
    "judge",
    "placeholders",
    "plan_json_schema",
    "render_answer",
    "render_text",
    "render_value",
    "template_problems",
    "validate_steps",
]
