"""Re-binding a remembered plan to a new goal: what differs between the two goals, and whether
every difference is a value the plan's arguments hold.

The goals are split into words (file names, decimals and hyphenated words whole) and punctuation,
and aligned. Each run of differing words is a candidate parameter: ``report.txt`` → ``notes.txt``.
A candidate the plan's arguments hold — as a whole value, or as a whole word inside a text — is a
parameter, and the new value takes its place. A difference the arguments do not hold (other
wording, another verb, an added condition) cannot be re-bound: such a goal may mean something
else, so the plan is only shown to the planner as an example. Words that differ only in case are
aligned as the same word, and re-bound where the plan holds them (``report.txt`` → ``REPORT.TXT``).

Every value is replaced in one pass (a new value is never replaced again) and lands as plain
text: a ``${step}`` it holds is escaped in the arguments, a ``{{step}}`` broken up in the answer
template, and the bindings and placeholders already there are left as they are.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planexec.plan import (
    MAX_TEMPLATE_CHARS,
    PLACEHOLDER,
    WHOLE_PLACEHOLDER,
    Step,
    compile_args,
    render_answer,
    render_value,
)

__all__ = ["MAX_TEMPLATE_CHARS", "Rebound", "align", "answer_template", "rebind", "render_answer"]

_TOKEN = re.compile(r"\w+(?:[./'@:-]\w+)*|[^\w\s]", re.UNICODE)
_BINDING = re.compile(r"(\$\{[^}]*\})")
_PLACEHOLDER = PLACEHOLDER
"""``{{step_id}}``: the step's output as JSON (text as it is); ``{{step_id|str}}``: as Python
writes it (``None``, ``True``, ``3.0``), for an answer that quoted it so (see
:mod:`planexec.plan`'s answer templates, which fill them)."""
_PLACEHOLDERS = WHOLE_PLACEHOLDER
_STARTS = r"(?<!\w)(?<!\w[./'@:-])"
_ENDS = r"(?!\w)(?![./'@:-]\w)"
"""Around a whole word of ``_TOKEN``: ``5`` is no word of ``1.5``, nor ``a.txt`` of ``my-a.txt``."""

_VERDICT = re.compile(
    r"yes|no|not|true|false|none|neither|both|correct|incorrect|same|equal|different|more|less|fewer|most|least"
    r"|larger|smaller|bigger|greater|higher|lower|longer|shorter|above|below|over|under|exceeds|than|\w+n't"
)
"""Words of an answer that judge the outputs (a comparison, a check): such an answer is no template."""

MAX_ALIGNED_WORDS = 160
"""Goals whose differing stretch (between their common start and end) is longer than this many
words are not aligned word by word: the alignment's time grows with the cube of it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rebound:
    """A plan re-bound to a new goal: its steps, its answer template, and what was replaced."""

    steps: tuple[Step, ...]
    answer: str | None
    bindings: tuple[tuple[str, str], ...]
    """Each parameter, as (the remembered goal's value, the new goal's)."""
    same: float
    """The share of the goals' words that are the same in both (the rest are the parameters)."""


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group().casefold(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def align(old: str, new: str) -> tuple[list[tuple[str, str]], list[str], float] | None:
    """The differing spans of two goals: replacements (old text, new text), the differences that
    replace nothing (words only one goal has), and the share of words the goals have in common.
    Words that differ only in case come last among the replacements, as (old word, new word).
    None when the goals differ over more than ``MAX_ALIGNED_WORDS`` words."""
    a, b = _tokens(old), _tokens(new)
    start = 0
    while start < min(len(a), len(b)) and a[start][0] == b[start][0]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end][0] == b[-1 - end][0]:
        end += 1
    if max(len(a), len(b)) - start - end > MAX_ALIGNED_WORDS:
        return None
    matcher = difflib.SequenceMatcher(
        None, [t for t, _, _ in a[start : len(a) - end]], [t for t, _, _ in b[start : len(b) - end]], autojunk=False
    )
    opcodes = [("equal", 0, start, 0, start)] if start else []
    opcodes += [(op, i1 + start, i2 + start, j1 + start, j2 + start) for op, i1, i2, j1, j2 in matcher.get_opcodes()]
    if end:
        opcodes.append(("equal", len(a) - end, len(a), len(b) - end, len(b)))
    pairs: list[tuple[str, str]] = []
    cased: list[tuple[str, str]] = []
    loose: list[str] = []
    words = max(sum(1 for t, _, _ in a if t[0].isalnum() or t[0] == "_"), sum(1 for t, _, _ in b if t[0].isalnum()))
    same = 0
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            same += sum(1 for t, _, _ in a[i1:i2] if t[0].isalnum() or t[0] == "_")
            for (_, s1, e1), (_, s2, e2) in zip(a[i1:i2], b[j1:j2], strict=True):
                if old[s1:e1] != new[s2:e2]:
                    cased.append((old[s1:e1], new[s2:e2]))
            continue
        old_text = old[a[i1][1] : a[i2 - 1][2]] if i2 > i1 else ""
        new_text = new[b[j1][1] : b[j2 - 1][2]] if j2 > j1 else ""
        if op == "replace" and old_text.strip() and new_text.strip():
            pairs.append((old_text, new_text))
        else:
            loose.append(old_text or new_text)
    return pairs + cased, loose, (same / words if words else 1.0)


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


class _Replacer:
    """Replaces the goals' differing values in one pass; ``used`` says which old values were found."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.new: dict[str, str] = {}
        self.clash: str | None = None
        for old, new in pairs:
            if self.new.setdefault(old, new) != new:
                self.clash = f"the goals' value {old!r} becomes both {self.new[old]!r} and {new!r}"
        self.used: set[str] = set()
        self.refused: list[str] = []
        olds = sorted(self.new, key=len, reverse=True)  # the longest first: a value within a value loses
        self._words = re.compile(_STARTS + "(?:" + "|".join(map(re.escape, olds)) + ")" + _ENDS) if olds else None

    def text(self, value: str, *, keep: re.Pattern[str] = _BINDING, escape: tuple[str, str] = ("${", "$${")) -> str:
        """``value`` re-bound, the parts ``keep`` matches left as they are, and ``escape`` applied
        to each new value (so that it lands as plain text)."""
        parts = keep.split(value)
        for n, part in enumerate(parts):
            if n % 2:
                continue  # a binding to an earlier output (a placeholder of the answer) is left as it is
            if part in self.new:
                self.used.add(part)
                parts[n] = self.new[part].replace(*escape)
            elif self._words is not None:
                parts[n] = self._words.sub(lambda m: self._word(m.group(), escape), part)
        return "".join(parts)

    def _word(self, old: str, escape: tuple[str, str]) -> str:
        self.used.add(old)
        return self.new[old].replace(*escape)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            for old, new in self.new.items():
                if _number(old) == value:  # "30" in the goal is 30.0 in a plan that takes a float
                    replaced = _number(new)
                    if replaced is None:
                        self.refused.append(f"{old!r} is a number in the plan, {new!r} is not")
                        return value
                    if isinstance(value, float):
                        replaced = float(replaced)
                    elif isinstance(replaced, float):
                        if not replaced.is_integer():
                            self.refused.append(f"the plan holds {old!r} as a whole number, {new!r} is not one")
                            return value
                        replaced = int(replaced)
                    self.used.add(old)
                    return replaced
                if value and _number(old) == -value:  # the goal's "-5" is "-" and "5": which one it meant is unknown
                    self.refused.append(f"the plan holds {value!r}, the goal's {old!r} with the other sign")
            return value
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, Mapping):
            return {k: self.value(v) for k, v in value.items()}
        return value


def rebind(old_goal: str, new_goal: str, steps: tuple[Step, ...], answer: str | None) -> Rebound | str:
    """``steps`` (and the answer template) re-bound from ``old_goal`` to ``new_goal``, or why
    they cannot be (a text naming the first difference no argument holds)."""
    aligned = align(old_goal, new_goal)
    if aligned is None:
        return f"the goals differ over more than {MAX_ALIGNED_WORDS} words"
    pairs, loose, same = aligned
    if loose:
        return f"the goals differ by {loose[0]!r}, which is no value of the plan"
    replacer = _Replacer(pairs)
    if replacer.clash is not None:
        return replacer.clash
    new_args = []
    for step in steps:
        args = replacer.value(dict(step.args))
        before, after = compile_args(step.args), compile_args(args)
        if (before.refs, before.problems) != (after.refs, after.problems):
            return f"a new value would be read as a binding in the arguments of step {step.id!r}"
        new_args.append(args)
    if replacer.refused:
        return replacer.refused[0]
    held = set(replacer.used)  # only the arguments count: a value a description holds changes nothing run
    for old, new in pairs:
        if old not in held and old.casefold() != new.casefold():
            return f"the goals differ by {old!r}, which is no value of the plan"
    new_steps = [
        step.model_copy(update={"args": args, "description": replacer.text(step.description, escape=("", ""))})
        for step, args in zip(steps, new_args, strict=True)
    ]
    new_answer = None if answer is None else replacer.text(answer, keep=_PLACEHOLDERS, escape=("{{", "{ {"))
    if new_answer is not None and _PLACEHOLDER.findall(new_answer) != _PLACEHOLDER.findall(answer or ""):
        new_answer = None  # a new value next to a brace made a placeholder: the planner writes the answer
    bindings = tuple(p for p in pairs if p[0] in held or p[0].casefold() != p[1].casefold())
    return Rebound(steps=tuple(new_steps), answer=new_answer, bindings=bindings, same=same)


def answer_template(answer: str, outputs: Mapping[str, Any], goal: str) -> str | None:
    """``answer`` with each step output it quotes replaced by ``{{step_id}}``; None when the
    answer holds a number or a quoted value that comes neither from an output nor from the goal,
    or a verdict (``yes``, ``not``, ``more`` …: ``_VERDICT``) — it was worked out from the
    outputs, and would be stale for other outputs — or is longer than ``MAX_TEMPLATE_CHARS``."""
    if len(answer) > MAX_TEMPLATE_CHARS:
        return None
    template = answer.replace("{{", "{ {")
    quoted: dict[str, str] = {}
    renderings = [(render_value(v), "{{" + sid + "}}") for sid, v in outputs.items()]
    renderings += [
        (str(v), "{{" + sid + "|str}}")
        for sid, v in outputs.items()
        if v is None or (isinstance(v, bool | int | float) and str(v) != render_value(v))
    ]
    for text, placeholder in sorted(renderings, key=lambda p: -len(p[0])):
        if text.strip() and (len(text) >= 2 or text.isdigit()) and text in template:  # big outputs it quotes not
            quoted.setdefault(text, placeholder)
    if quoted:  # in one pass: a placeholder put in is never searched again
        texts = re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, quoted)) + r")(?!\w)")
        template = texts.sub(lambda m: quoted[m.group()], template)
    literal = _PLACEHOLDER.sub(" ", template)
    goal_words = {t for t, _, _ in _tokens(goal)}
    for token, _, _ in _tokens(literal):
        if (_number(token) is not None and token not in goal_words) or _VERDICT.fullmatch(token):
            return None
    return template
