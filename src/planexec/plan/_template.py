"""Answer templates: a final answer written before the outputs it quotes exist, filled in from them.

A template is text with placeholders, each naming a step's output:

* ``{{fetch}}`` — the whole output of step ``fetch``: a string as it is, anything else as JSON;
* ``{{fetch.items.0.name}}`` — a path into it, read as a binding's path is (object fields by name,
  list items by index, negative indexes from the end);
* ``{{fetch|str}}`` (also with a path) — the value as Python writes it (``None``, ``True``, ``3.0``).

Plan memory keeps the answer of a met goal as a template over its steps' outputs; a sealed plan
carries the answer its planner wrote as one. Both are filled by :func:`fill_template`, in one
pass: text an output brings in is never read again, so a ``{{...}}`` inside an output stays as
it is. A template is the planner's text (hostile input): it is at most
:data:`MAX_TEMPLATE_CHARS` long with at most :data:`MAX_PLACEHOLDERS` placeholders, and every
``{{`` in it must open a well-formed placeholder (:func:`template_problems` lists what is wrong).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Container, Mapping
from dataclasses import dataclass
from typing import Any, Final

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec.errors import BindingError, Problem
from planexec.plan._bindings import Ref, lookup

__all__ = [
    "ANSWER_CHARS",
    "ANSWER_VALUE_CHARS",
    "MAX_PLACEHOLDERS",
    "MAX_TEMPLATE_CHARS",
    "PLACEHOLDER",
    "WHOLE_PLACEHOLDER",
    "Placeholder",
    "fill_template",
    "placeholders",
    "render_answer",
    "render_value",
    "template_problems",
]

_SEGMENTS: Final = 32
"""The most path segments a placeholder may have."""

_ID: Final = r"[A-Za-z_][A-Za-z0-9_-]{0,63}"
_PATH: Final = r"(?:\.[^.\s{}|]{1,200}){0," + str(_SEGMENTS) + "}"

PLACEHOLDER: Final = re.compile(r"\{\{(" + _ID + r")(" + _PATH + r")(\|str)?\}\}")
"""A placeholder: the step id, its path (``.a.0``; empty for the whole output), and ``|str``."""

WHOLE_PLACEHOLDER: Final = re.compile(r"(\{\{" + _ID + _PATH + r"(?:\|str)?\}\})")
"""A placeholder as one group (to split a text at its placeholders)."""

MAX_TEMPLATE_CHARS: Final = 20_000
"""The longest template: a longer planner's answer is refused; plan memory keeps no longer one."""

MAX_PLACEHOLDERS: Final = 100
"""The most placeholders a template may hold."""

ANSWER_VALUE_CHARS: Final = 20_000
"""How much of one output a sealed plan's answer quotes; the rest is cut, and counted."""

ANSWER_CHARS: Final = 100_000
"""How much of the outputs a sealed plan's answer quotes in all."""


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One placeholder of a template: the output it names, and whether ``|str`` asks for Python's form."""

    ref: Ref
    python: bool
    text: str
    """As written."""


def placeholders(template: str) -> list[Placeholder]:
    """The well-formed placeholders of ``template``, in order."""
    return [_placeholder(m) for m in PLACEHOLDER.finditer(template)]


def _placeholder(m: re.Match[str]) -> Placeholder:
    path = tuple(m.group(2).split(".")[1:]) if m.group(2) else ()
    return Placeholder(ref=Ref(step_id=m.group(1), path=path), python=m.group(3) is not None, text=m.group())


def template_problems(template: object, known: Container[str], *, where: str = "answer") -> list[Problem]:
    """What is wrong with ``template`` as an answer template over the steps ``known`` (their ids):
    not text, too long, a ``{{`` that opens no well-formed placeholder, too many placeholders, a
    placeholder naming a step that is not known. Every problem is listed."""
    if not isinstance(template, str):
        return [Problem(code="answer_template", where=where, message="an answer template is text")]
    if len(template) > MAX_TEMPLATE_CHARS:
        message = f"the answer template is {len(template):,} characters long; at most {MAX_TEMPLATE_CHARS:,}"
        return [Problem(code="answer_template", where=where, message=message)]
    problems: list[Problem] = []
    found: list[Placeholder] = []
    at = template.find("{{")
    while at >= 0:
        m = PLACEHOLDER.match(template, at)
        if m is None:
            near = clip(template[at : at + 80], 60)
            problems.append(
                Problem(
                    code="answer_template",
                    where=where,
                    message=f"malformed placeholder at {near!r}: write {{{{step_id}}}} or {{{{step_id.field.0}}}} "
                    "(and '{ {' for braces meant as text)",
                )
            )
            at = template.find("{{", at + 2)
            continue
        found.append(_placeholder(m))
        at = template.find("{{", m.end())
    if len(found) > MAX_PLACEHOLDERS:
        message = f"the answer template has {counted(len(found), 'placeholder')}; at most {MAX_PLACEHOLDERS}"
        problems.append(Problem(code="answer_template", where=where, message=message))
    unknown = dict.fromkeys(p.ref.step_id for p in found if p.ref.step_id not in known)
    for step_id in unknown:
        problems.append(
            Problem(
                code="answer_step",
                where=where,
                message=f"the answer template names step {step_id!r}, which is not in the plan "
                "(a placeholder names a step of the plan or a finished one)",
            )
        )
    return problems


def fill_template(
    template: str,
    outputs: Mapping[str, Any],
    *,
    max_value_chars: int | None = None,
    max_chars: int | None = None,
    withhold: Collection[str] = (),
) -> str:
    """``template`` with every placeholder replaced by the output it names, in one pass.

    ``max_value_chars``: how much of one value is written (the rest is cut, and counted);
    ``max_chars``: how much of all values together. Raises :class:`BindingError` listing every
    placeholder that cannot be filled (a step with no output, a path the output does not have).
    ``withhold``: steps whose outputs are not written; a placeholder of one says so instead."""
    problems: list[Problem] = []
    room = [max_chars]

    def fill(m: re.Match[str]) -> str:
        p = _placeholder(m)
        if p.ref.step_id in withhold:
            return withheld_text(p.ref.step_id)
        try:
            value = lookup(p.ref, outputs)
        except LookupError as e:
            problems.append(Problem(code="answer_template", where=p.text, message=str(e)))
            return ""
        try:
            text = str(value) if p.python else render_value(value)
        except (ValueError, TypeError, RecursionError) as e:
            problems.append(Problem(code="answer_template", where=p.text, message=f"cannot be written: {e}"))
            return ""
        return _cut(text, max_value_chars, room)

    filled = PLACEHOLDER.sub(fill, template)
    if problems:
        raise BindingError(problems)
    return filled


def withheld_text(step_id: str) -> str:
    """What an answer says in place of a step's output that was withheld from it."""
    return f"[withheld: step {step_id}'s output is untrusted]"


def render_answer(template: str, outputs: Mapping[str, Any]) -> str | None:
    """The answer ``template`` gives for ``outputs``, whole; None when a placeholder cannot be filled."""
    try:
        return fill_template(template, outputs)
    except BindingError:
        return None


def render_value(value: Any) -> str:
    """How a placeholder writes a value: a string as it is, anything else as JSON (keys in the
    output's own order, as a tool returns them)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _cut(text: str, most: int | None, room: list[int | None]) -> str:
    """``text``, at most ``most`` characters of it and no more than the room left (which it uses up)."""
    left = room[0]
    limit = most if left is None else left if most is None else min(most, left)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"… ({counted(len(text) - limit, 'more character')})"
        limit_used = limit
    else:
        limit_used = len(text)
    if left is not None:
        room[0] = max(0, left - limit_used)
    return text
