"""The typed values an :class:`~planexec.runs.AgentSpec` holds besides numbers, flags and texts: a
model named by its model string, a ``module:attr`` reference, an MCP server, a header sent to one,
and the pattern's rules, each group of rules one value. Each value knows its recorded form
(``record``) and reads it back (``read``); reading adds what is wrong to a shared
:class:`~planexec.runs._problems.Problems`, ``where`` naming the spec's field."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from planexec.errors import UsageError
from planexec.planner import ENSEMBLE_TRIGGERS, EnsembleTrigger, TurnFormat
from planexec.runs._problems import Problems
from planexec.runs._scripted import absolute_model_string, script_path
from planexec.runtime import Escalation

__all__ = [
    "EnsembleRule",
    "ImportRef",
    "LimitRule",
    "MCPCommand",
    "MCPHeader",
    "MCPServerRef",
    "MCPUrl",
    "ModelRef",
    "ReviewRule",
    "Rules",
    "TrustRule",
    "read_mcp_server",
    "read_recorded_rules",
]


@dataclass(frozen=True)
class ModelRef:
    """A model, named by its model string (``openai:gpt-4.1``, ``scripted:FILE``,
    ``object:pkg.module:attr``); resolved through the agent's providers when the agent is built."""

    text: str

    def __str__(self) -> str:
        return self.text

    @property
    def script(self) -> str | None:
        """The file of a ``scripted:FILE`` model (None for other models)."""
        return script_path(self.text)

    def absolute(self) -> ModelRef:
        """This reference with a scripted model's file made absolute, so that a run recording it can
        be picked up from elsewhere."""
        return ModelRef(absolute_model_string(self.text))


@dataclass(frozen=True)
class ImportRef:
    """A ``module:attr`` reference to a Python value (tools, executors, a check), imported from the
    spec's ``cwd`` when the agent is built."""

    module: str
    attr: str

    def __str__(self) -> str:
        return f"{self.module}:{self.attr}"

    @classmethod
    def parse(cls, text: str) -> ImportRef | None:
        """The reference ``text`` writes as ``package.module:attribute`` (None when it does not)."""
        module, sep, attr = text.partition(":")
        return cls(module, attr) if sep and module and attr else None

    def record(self) -> dict[str, str]:
        return {"module": self.module, "attr": self.attr}

    @classmethod
    def read(cls, data: Any) -> ImportRef | None:
        if isinstance(data, Mapping) and set(data) == {"module", "attr"}:
            module, attr = data["module"], data["attr"]
            if isinstance(module, str) and isinstance(attr, str) and module and attr:
                return cls(module, attr)
        return None


@dataclass(frozen=True)
class MCPCommand:
    """An MCP server spawned as a command (its words, no shell) and spoken to over stdio."""

    words: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.words)

    def record(self) -> dict[str, Any]:
        return {"command": list(self.words)}


@dataclass(frozen=True)
class MCPUrl:
    """An MCP server reached over streamable HTTP at an ``http://`` or ``https://`` URL."""

    url: str

    def __str__(self) -> str:
        return self.url

    def record(self) -> dict[str, Any]:
        return {"url": self.url}


MCPServerRef = MCPCommand | MCPUrl
"""An MCP server whose tools the agent uses."""


def read_mcp_server(data: Any) -> MCPServerRef | None:
    """An MCP server from its recorded form (None when it is not one)."""
    if isinstance(data, Mapping) and set(data) == {"url"} and isinstance(data["url"], str):
        return MCPUrl(data["url"])
    if isinstance(data, Mapping) and set(data) == {"command"}:
        words = data["command"]
        if isinstance(words, list) and words and all(isinstance(w, str) for w in words):
            return MCPCommand(tuple(words))
    return None


@dataclass(frozen=True)
class MCPHeader:
    """A header sent to every MCP server given by URL; ``${VAR}`` in ``value`` is read from the
    environment when the agent is built (the spec keeps the reference, never the value)."""

    name: str
    value: str

    def __str__(self) -> str:
        return f"{self.name}: {self.value}"

    def record(self) -> dict[str, str]:
        return {"name": self.name, "value": self.value}

    @classmethod
    def read(cls, data: Any) -> MCPHeader | None:
        if isinstance(data, Mapping) and set(data) == {"name", "value"}:
            name, value = data["name"], data["value"]
            if isinstance(name, str) and isinstance(value, str):
                return cls(name, value)
        return None


@dataclass(frozen=True, kw_only=True)
class EnsembleRule:
    """The planner's ensemble: the models planning is handed to, in order, on which triggers (all
    when None), under which confidence (0.5 when None)."""

    escalate_to: tuple[ModelRef, ...] = ()
    escalate_on: tuple[EnsembleTrigger, ...] | None = None
    confidence_below: float | None = None

    @property
    def triggers(self) -> tuple[EnsembleTrigger, ...]:
        return ENSEMBLE_TRIGGERS if self.escalate_on is None else self.escalate_on


@dataclass(frozen=True, kw_only=True)
class ReviewRule:
    """The final answer's review: checks (``module:attr`` functions of the answer), a rubric a
    judge model grades it against, a checklist a human ticks, and how often a refused answer goes
    back to the planner."""

    checks: tuple[ImportRef, ...] = ()
    rubric: str | None = None
    judge: ModelRef | None = None
    checklist: tuple[str, ...] = ()
    max_rounds: int = 2


@dataclass(frozen=True, kw_only=True)
class LimitRule:
    """What a cap the run reaches does, and what a plan forecast over a cap does."""

    on_budget: Literal["auto", "ask", "stop"] = "auto"
    over_forecast: Literal["replan", "ask", "run"] = "replan"


@dataclass(frozen=True, kw_only=True)
class TrustRule:
    """Tools whose output is trusted, whether calls that change the world with untrusted values
    are asked about, and what a final answer holding untrusted text does."""

    trusted_tools: tuple[str, ...] = ()
    untrusted_effects: bool = True
    answer: Literal["label", "ask", "withhold"] = "label"


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The pattern's rules; a group that is None was not given (the agent's defaults apply)."""

    turn_format: TurnFormat = "nested"
    sealed: bool = False
    """Sealed planning: the planner plans upfront and never reads a result."""
    extractor: ModelRef | None = None
    """The model of a sealed planner's quarantined extractor."""
    escalation: Escalation | None = None
    ensemble: EnsembleRule | None = None
    review: ReviewRule | None = None
    limits: LimitRule | None = None
    trust: TrustRule | None = None

    def absolute(self) -> Rules:
        """These rules with scripted models' files made absolute."""
        ensemble, review = self.ensemble, self.review
        return replace(
            self,
            extractor=self.extractor.absolute() if self.extractor is not None else None,
            ensemble=replace(ensemble, escalate_to=tuple(m.absolute() for m in ensemble.escalate_to))
            if ensemble is not None
            else None,
            review=replace(review, judge=review.judge.absolute() if review.judge is not None else None)
            if review is not None
            else None,
        )

    def record(self) -> dict[str, Any]:
        """The rules given, as JSON data: a group or a value left at its default is left out."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                data[f.name] = _recorded(value)
        return data


def _recorded(value: Any) -> Any:
    """A rule's value as JSON data."""
    if isinstance(value, ModelRef):
        return value.text
    if isinstance(value, ImportRef):
        return value.record()
    if isinstance(value, tuple):
        return [_recorded(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _recorded(getattr(value, f.name)) for f in fields(value)}
    return value


_GROUPS: Mapping[str, type] = {
    "escalation": Escalation,
    "ensemble": EnsembleRule,
    "review": ReviewRule,
    "limits": LimitRule,
    "trust": TrustRule,
}


def read_recorded_rules(data: Any, where: str, problems: Problems) -> Rules:
    """Rules from their recorded form (:meth:`Rules.record`); each value that cannot be read is a
    problem and reads as unset. The values' own checks (a choice, a fraction) are the builder's."""
    if not isinstance(data, Mapping):
        problems.add(where, "the spec has an unreadable 'rules'; give it again", code="spec")
        return Rules()
    given: dict[str, Any] = {}
    for key, value in data.items():
        read = _read_rule(str(key), value)
        if read is _UNREADABLE:
            problems.add(where, f"the spec has an unreadable 'rules.{key}'; give it again", code="spec")
        else:
            given[str(key)] = read
    return Rules(**given)


_UNREADABLE = object()


def _read_rule(key: str, value: Any) -> Any:
    """One recorded rule (a value or a group), or ``_UNREADABLE``."""
    if key == "turn_format":
        return value if isinstance(value, str) else _UNREADABLE
    if key == "sealed":
        return value if isinstance(value, bool) else _UNREADABLE
    if key == "extractor":
        return ModelRef(value) if isinstance(value, str) else _UNREADABLE
    kind = _GROUPS.get(key)
    if kind is None or not isinstance(value, Mapping):
        return _UNREADABLE
    known = {f.name: f for f in fields(kind)}
    given: dict[str, Any] = {}
    for name, item in value.items():
        if name not in known:
            return _UNREADABLE
        read = _read_rule_value(f"{key}.{name}", item)
        if read is _UNREADABLE:
            return _UNREADABLE
        given[name] = read
    try:
        return kind(**given)
    except UsageError:  # a group that checks its own values (Escalation)
        return _UNREADABLE


_MODELS = {"ensemble.escalate_to", "review.judge"}
_REFS = {"review.checks"}
_TEXT_LISTS = {"ensemble.escalate_on", "review.checklist", "trust.trusted_tools"}
_FLAGS = {"trust.untrusted_effects"}
_NUMBERS = {"escalation.confidence_floor", "escalation.retries", "ensemble.confidence_below", "review.max_rounds"}


def _read_rule_value(key: str, value: Any) -> Any:
    """One value of a recorded group of rules, or ``_UNREADABLE``."""
    if key == "ensemble.escalate_to":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(ModelRef(v) for v in value) if ok else _UNREADABLE
    if key == "review.judge":
        return None if value is None else ModelRef(value) if isinstance(value, str) else _UNREADABLE
    if key in _REFS:
        refs = [ImportRef.read(v) for v in value] if isinstance(value, list) else [None]
        return tuple(r for r in refs if r is not None) if None not in refs else _UNREADABLE
    if key in _TEXT_LISTS:
        if key == "ensemble.escalate_on" and value is None:
            return None
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else _UNREADABLE
    if key in _FLAGS:
        return value if isinstance(value, bool) else _UNREADABLE
    if key in _NUMBERS:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return value if number or value is None else _UNREADABLE
    return value if isinstance(value, str) or value is None else _UNREADABLE
