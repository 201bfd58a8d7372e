"""Re-binding a remembered plan to a new goal: what differs between the two goals, and whether
every difference is a value the plan's arguments hold.

The goals are split into words (file names, decimals and hyphenated words whole) and punctuation,
and aligned. Each run of differing words is a candidate parameter: ``report.txt`` → ``notes.txt``.
A candidate the plan's arguments hold — as a whole value, or as a whole word inside a text — is a
parameter, and the new value takes its place. A difference the arguments do not hold (other
wording, another verb, an added condition) cannot be re-bound: such a goal may mean something
else, so the plan is only shown to the planner as an example.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planexec.plan import Step

__all__ = ["Rebound", "align", "rebind", "render_answer"]

_TOKEN = re.compile(r"\w+(?:[./'@:-]\w+)*|[^\w\s]", re.UNICODE)
_BINDING = re.compile(r"(\$\{[^}]*\})")
_PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_-]{0,63})\}\}")


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


def align(old: str, new: str) -> tuple[list[tuple[str, str]], list[str], float]:
    """The differing spans of two goals: replacements (old text, new text), the differences that
    replace nothing (words only one goal has), and the share of words the goals have in common."""
    a, b = _tokens(old), _tokens(new)
    matcher = difflib.SequenceMatcher(None, [t for t, _, _ in a], [t for t, _, _ in b], autojunk=False)
    pairs: list[tuple[str, str]] = []
    loose: list[str] = []
    words = max(sum(1 for t, _, _ in a if t[0].isalnum() or t[0] == "_"), sum(1 for t, _, _ in b if t[0].isalnum()))
    same = 0
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            same += sum(1 for t, _, _ in a[i1:i2] if t[0].isalnum() or t[0] == "_")
            continue
        old_text = old[a[i1][1] : a[i2 - 1][2]] if i2 > i1 else ""
        new_text = new[b[j1][1] : b[j2 - 1][2]] if j2 > j1 else ""
        if op == "replace" and old_text.strip() and new_text.strip():
            pairs.append((old_text, new_text))
        else:
            loose.append(old_text or new_text)
    return pairs, loose, (same / words if words else 1.0)


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
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs
        self.used = [False] * len(pairs)
        self.refused: list[str] = []
        self._words = [re.compile(r"(?<!\w)" + re.escape(old) + r"(?!\w)") for old, _ in pairs]

    def text(self, value: str) -> str:
        parts = _BINDING.split(value)
        for n, part in enumerate(parts):
            if n % 2:
                continue  # a binding to an earlier output is left as it is
            for i, (old, new) in enumerate(self.pairs):
                if part == old:
                    part, self.used[i] = new, True
                    break
                replaced, count = self._words[i].subn(new.replace("\\", "\\\\"), part)
                if count:
                    part, self.used[i] = replaced, True
            parts[n] = part
        return "".join(parts)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            for i, (old, new) in enumerate(self.pairs):
                if _number(old) == value and type(_number(old)) is type(value):
                    replaced = _number(new)
                    if replaced is None:
                        self.refused.append(f"{old!r} is a number in the plan, {new!r} is not")
                        return value
                    self.used[i] = True
                    return replaced
            return value
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, Mapping):
            return {k: self.value(v) for k, v in value.items()}
        return value


def rebind(old_goal: str, new_goal: str, steps: tuple[Step, ...], answer: str | None) -> Rebound | str:
    """``steps`` (and the answer template) re-bound from ``old_goal`` to ``new_goal``, or why
    they cannot be (a text naming the first difference no argument holds)."""
    pairs, loose, same = align(old_goal, new_goal)
    if loose:
        return f"the goals differ by {loose[0]!r}, which is no value of the plan"
    replacer = _Replacer(pairs)
    new_steps = []
    for step in steps:
        args = replacer.value(dict(step.args))
        description = replacer.text(step.description)
        new_steps.append(step.model_copy(update={"args": args, "description": description}))
    if replacer.refused:
        return replacer.refused[0]
    for (old, _new), used in zip(pairs, replacer.used, strict=True):
        if not used:
            return f"the goals differ by {old!r}, which is no value of the plan"
    new_answer = None if answer is None else replacer.text(answer)
    return Rebound(steps=tuple(new_steps), answer=new_answer, bindings=tuple(pairs), same=same)


def answer_template(answer: str, outputs: Mapping[str, Any], goal: str) -> str | None:
    """``answer`` with each step output it quotes replaced by ``{{step_id}}``; None when the
    answer holds a number or a quoted value that comes neither from an output nor from the goal
    (it was worked out from the outputs, and would be stale for other outputs)."""
    template = answer.replace("{{", "{ {")
    rendered = sorted(((_render(v), sid) for sid, v in outputs.items()), key=lambda p: -len(p[0]))
    for text, sid in rendered:
        if len(text.strip()) < 1 or (len(text) < 2 and not text.isdigit()):
            continue
        template = re.sub(r"(?<!\w)" + re.escape(text) + r"(?!\w)", "{{" + sid + "}}", template)
    literal = _PLACEHOLDER.sub(" ", template)
    goal_words = {t for t, _, _ in _tokens(goal)}
    for token, _, _ in _tokens(literal):
        if _number(token) is not None and token not in goal_words:
            return None
    return template


def render_answer(template: str, outputs: Mapping[str, Any]) -> str | None:
    """The answer a template gives for ``outputs``; None when it quotes a step with no output."""
    missing = False

    def fill(m: re.Match[str]) -> str:
        nonlocal missing
        if m.group(1) not in outputs:
            missing = True
            return ""
        return _render(outputs[m.group(1)])

    text = _PLACEHOLDER.sub(fill, template)
    return None if missing else text


def _render(value: Any) -> str:
    import json

    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
