"""Argument rules: what a tool's argument must be, or come from, for a call to go ahead.

Each rule judges one argument of one call — its value as it will be sent and its label — and
says why it fails (or passes). Rules are the developer's: nothing a model writes can loosen one.

* :class:`Trusted` — the value is trusted: it came only from the user, the developer, trusted
  tools and a planner that had read no untrusted text, or a human confirmed it.
* :class:`InGoal` — the value appears in the goal or a constraint, as a whole (not as part of a
  longer word, address or number); a list passes when every item does.
* :class:`Allowed` — the value is one of an allow-list (a collection, or a function the
  developer writes); a list passes when every item does.
* ``a | b`` (:class:`AnyOf`) — either rule passes.

Every check costs bounded time, whatever the value: text is compared character by character (no
Unicode folding: look-alike characters are other characters), and a list of more than
``MAX_ITEMS`` items fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planexec._util.clip import clip
from planexec.trust._provenance import Provenance

__all__ = ["MAX_ITEMS", "Allowed", "AnyOf", "ArgumentRule", "GoalText", "InGoal", "Trusted"]

MAX_ITEMS = 10_000
"""The most items of a list value a rule checks; a longer list fails the rule."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True, kw_only=True, slots=True)
class GoalText:
    """What the user asked, as the rules read it: the goal and each constraint."""

    goal: str
    constraints: tuple[str, ...] = ()

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.goal, *self.constraints)


class ArgumentRule:
    """A rule one argument of a tool call must pass. Combine rules with ``|`` (either passes)."""

    __slots__ = ()

    name: str = "rule"

    def check(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        """Why the argument fails this rule, or None when it passes."""
        raise NotImplementedError

    def describe(self) -> str:
        """The rule in a few words, as a human is shown it."""
        return self.name

    def record(self) -> dict[str, Any]:
        """The rule as JSON data, for the run's log (a replay rebuilds it from this)."""
        return {"rule": self.name}

    def problems(self) -> list[str]:
        """What is wrong with the rule as the developer wrote it (empty when nothing)."""
        return []

    def __or__(self, other: ArgumentRule) -> AnyOf:
        if not isinstance(other, ArgumentRule):
            return NotImplemented
        left = self.rules if isinstance(self, AnyOf) else (self,)
        right = other.rules if isinstance(other, AnyOf) else (other,)
        return AnyOf(rules=(*left, *right))


@dataclass(frozen=True, slots=True)
class Trusted(ArgumentRule):
    """The value must be trusted, or confirmed by a human (see :class:`Provenance`)."""

    name: str = field(default="trusted", init=False, repr=False)

    def check(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        if provenance.trusted:
            return None
        came = ", ".join(str(s) for s in provenance.untrusted_sources) or "an untrusted source"
        return f"it comes from {came}, which is not trusted"

    def describe(self) -> str:
        return "trusted values only"


@dataclass(frozen=True, slots=True)
class InGoal(ArgumentRule):
    """The value must appear in the goal or one of the constraints as a whole: the characters
    around it there must not continue it (a letter, a digit, or one of ``_ - . @ + / : % & = ? # ~``
    — except a ``.``, ``,``, ``;``, ``:``, ``!`` or ``?`` that ends a sentence), and it must not
    begin or end with white space. A list passes when each of its items does; anything but text
    fails.

    Text is compared character by character; ``ignore_case`` makes ``A``–``Z`` equal to ``a``–``z``
    (ASCII letters only: other characters, look-alikes included, must be the same)."""

    ignore_case: bool = False
    name: str = field(default="in_goal", init=False, repr=False)

    def check(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        items, problem = _items(value)
        if problem is not None:
            return problem
        texts = goal.texts
        if self.ignore_case:
            texts = tuple(t.translate(_ASCII_LOWER) for t in texts)
        for item in items:
            if not isinstance(item, str):
                return f"{_shown(item)} is not text: only text can appear in the goal"
            wanted = item.translate(_ASCII_LOWER) if self.ignore_case else item
            if not wanted.strip():
                return "an empty value appears in no goal"
            if wanted != wanted.strip():
                return f"{_shown(item)} begins or ends with white space: the goal names no such value"
            if not any(_appears(wanted, text) for text in texts):
                return f"{_shown(item)} does not appear in the goal or its constraints"
        return None

    def describe(self) -> str:
        return "values that appear in the goal" + (" (ignoring case)" if self.ignore_case else "")

    def record(self) -> dict[str, Any]:
        return {"rule": self.name, "ignore_case": self.ignore_case}

    def problems(self) -> list[str]:
        return [] if isinstance(self.ignore_case, bool) else ["ignore_case must be True or False"]


@dataclass(frozen=True, slots=True)
class Allowed(ArgumentRule):
    """The value must be one of ``values``: a collection of text, numbers, booleans or None
    (compared as JSON compares them: ``1`` and ``1.0`` alike, ``True`` and ``1`` not), or a
    function of the value that returns ``True`` for a value it allows (anything else, or an
    error, refuses it; it is called in the run's event loop, so it must be quick). A list passes
    when each of its items does.

    ``ignore_case`` makes ``A``–``Z`` equal to ``a``–``z`` in text of the collection (ASCII letters
    only). ``label`` names the list for humans (``"the team's addresses"``)."""

    values: Collection[Any] | Callable[[Any], bool]
    ignore_case: bool = False
    label: str | None = None
    name: str = field(default="allowed", init=False, repr=False)
    _keys: frozenset[tuple[str, Any]] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = self.values
        if callable(values) or not _is_collection(values):
            return
        keys = set()
        for v in values:
            key = _key(v, self.ignore_case)
            if key is not None:
                keys.add(key)
        object.__setattr__(self, "_keys", frozenset(keys))

    def check(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        items, problem = _items(value)
        if problem is not None:
            return problem
        values = self.values
        for item in items:
            if callable(values):
                try:
                    verdict = values(item)
                except Exception as e:
                    return f"{_shown(item)} is not allowed: the allow-list's check raised {type(e).__name__}"
                if verdict is not True:
                    return f"{_shown(item)} is not in {self._named()}"
            else:
                key = _key(item, self.ignore_case)
                if key is None:
                    return f"{_shown(item)} cannot be in an allow-list (only text, numbers, booleans and null)"
                if key not in self._keys:
                    return f"{_shown(item)} is not in {self._named()}"
        return None

    def _named(self) -> str:
        return self.label or "the allow-list"

    def describe(self) -> str:
        named = self.label or (
            f"an allow-list of {len(self._keys):,} values"
            if not callable(self.values)
            else f"the allow-list {_callable_name(self.values)}"
        )
        return f"values in {named}" + (" (ignoring case)" if self.ignore_case else "")

    def record(self) -> dict[str, Any]:
        data: dict[str, Any] = {"rule": self.name, "ignore_case": self.ignore_case, "label": self.label}
        if callable(self.values):
            data["check"] = _callable_name(self.values)
        else:
            data["values"] = sorted((v for _kind, v in self._keys), key=lambda v: (type(v).__name__, str(v)))
        return data

    def problems(self) -> list[str]:
        found = []
        values = self.values
        if not callable(values):
            if not _is_collection(values):
                found.append("values must be a collection (a set, a list …) of values, or a function")
            else:
                bad = [v for v in values if _key(v, False) is None]
                if bad:
                    found.append(
                        f"values must be text, numbers, booleans or None: {_shown(bad[0])} is not"
                        + (f" (and {len(bad) - 1:,} more)" if len(bad) > 1 else "")
                    )
        if not isinstance(self.ignore_case, bool):
            found.append("ignore_case must be True or False")
        if self.label is not None and (not isinstance(self.label, str) or not self.label.strip()):
            found.append("label must be non-empty text, or None")
        return found


@dataclass(frozen=True, slots=True)
class AnyOf(ArgumentRule):
    """Either of ``rules`` passes (made with ``|``: ``InGoal() | Allowed({...})``). A list passes
    when each of its items passes one of them (an address from the goal beside one from the
    allow-list)."""

    rules: tuple[ArgumentRule, ...]
    name: str = field(default="any_of", init=False, repr=False)

    def check(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        whole = self._first_pass(value, provenance, goal)
        if whole is None or not isinstance(value, list | tuple):
            return whole
        items, problem = _items(value)
        if problem is not None:
            return problem
        for item in items:
            reason = self._first_pass(item, provenance, goal)
            if reason is not None:
                return reason
        return None

    def _first_pass(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        reasons = []
        for rule in self.rules:
            reason = rule.check(value, provenance, goal)
            if reason is None:
                return None
            reasons.append(reason)
        return "; and ".join(reasons)

    def describe(self) -> str:
        return " or ".join(r.describe() for r in self.rules)

    def record(self) -> dict[str, Any]:
        return {"rule": self.name, "rules": [r.record() for r in self.rules]}

    def problems(self) -> list[str]:
        rules: object = self.rules
        if not isinstance(rules, tuple) or not rules:
            return ["rules must be a non-empty tuple of rules"]
        found = []
        for i, rule in enumerate(rules):
            if not isinstance(rule, ArgumentRule):
                found.append(f"rules[{i}]: {type(rule).__name__} is not a rule")
            else:
                found += [f"rules[{i}]: {p}" for p in rule.problems()]
        return found


def rule_from_record(data: Mapping[str, Any], served: Callable[[str], ArgumentRule] | None = None) -> ArgumentRule:
    """A rule as the log records it. An allow-list that was a function cannot be rebuilt: it
    becomes ``served(description)`` (a replay's stand-in), or a rule every value fails."""
    kind = data.get("rule")
    if kind == "trusted":
        return Trusted()
    if kind == "in_goal":
        return InGoal(ignore_case=bool(data.get("ignore_case", False)))
    if kind == "any_of":
        rules = data.get("rules")
        listed = rules if isinstance(rules, list) else []
        return AnyOf(rules=tuple(rule_from_record(r, served) for r in listed if isinstance(r, Mapping)) or (Trusted(),))
    if kind == "allowed" and "values" in data and isinstance(data["values"], list):
        label = data.get("label")
        return Allowed(
            values=frozenset(v for v in data["values"] if _key(v, False) is not None),
            ignore_case=bool(data.get("ignore_case", False)),
            label=label if isinstance(label, str) and label.strip() else None,
        )
    described = str(data.get("check") or kind or "a rule")
    if served is not None:
        return served(described)
    return Allowed(values=lambda _value: False, label=f"{described} (not recorded)")


def _is_collection(values: object) -> bool:
    return isinstance(values, Collection) and not isinstance(values, str | bytes | Mapping)


def _key(value: Any, ignore_case: bool) -> tuple[str, Any] | None:
    """A value as an allow-list compares it (None: a value no allow-list holds)."""
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("number", value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return ("number", int(value) if value.is_integer() else value)
    if isinstance(value, str):
        return ("text", value.translate(_ASCII_LOWER) if ignore_case else value)
    return None


def _items(value: Any) -> tuple[Sequence[Any], str | None]:
    """The items a rule judges: the value, or each item of a list; or why none can be."""
    if isinstance(value, list | tuple):
        if len(value) > MAX_ITEMS:
            return (), f"a list of {len(value):,} items is more than the {MAX_ITEMS:,} a rule checks"
        for item in value:
            if isinstance(item, list | tuple | dict):
                return (), "a list of lists or objects cannot be checked against the rule: give a list of values"
        return value, None
    if isinstance(value, dict):
        return (), "an object cannot be checked against the rule: give a value or a list of values"
    return (value,), None


def _shown(value: Any) -> str:
    return clip(repr(value), 80)


def _callable_name(fn: Any) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{name}" if isinstance(module, str) else str(name)


_CONTINUES = frozenset("_-.@+/:%&=?#~")
"""Characters that continue a word, an address or a number (besides letters and digits)."""
_ENDS_SENTENCE = frozenset(".,;:!?")
_CLOSES = frozenset(")]}\"'>»”’")


def _continues(char: str) -> bool:
    return char.isalnum() or char in _CONTINUES


def _appears(value: str, text: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole (see :class:`InGoal`)."""
    if len(value) > len(text):
        return False
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        before_ok = start == 0 or not _continues(text[start - 1]) or not _continues(value[0])
        after_ok = end == len(text) or not _continues(value[-1]) or _ends(text, end)
        if before_ok and after_ok:
            return True
        start = text.find(value, start + 1)
    return False


def _ends(text: str, end: int) -> bool:
    """Whether what follows position ``end`` of ``text`` ends the value: a character that does not
    continue it, or a sentence's end (``.``, ``,`` …) followed by space, a closing mark or nothing."""
    char = text[end]
    if not _continues(char):
        return True
    if char not in _ENDS_SENTENCE:
        return False
    after = end + 1
    while after < len(text) and text[after] in _ENDS_SENTENCE:
        after += 1
    return after == len(text) or text[after].isspace() or text[after] in _CLOSES
