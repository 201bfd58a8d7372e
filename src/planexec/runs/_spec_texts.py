"""Reading an agent spec given as texts — the command line's flags, a spec recorded before spec
version 10, a spec written by hand — into its typed values. Each reader returns what it could read
and adds what is wrong to a shared :class:`Problems`, so that every problem is listed at once;
``where`` is the spec's field (``policy``, ``budget.steps``, ``tools 'pkg.mod:TOOLS'``)."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, Literal, cast

from planexec._util.strict_json import loads as strict_loads
from planexec.errors import UsageError
from planexec.models import ModelSettings
from planexec.planner import ENSEMBLE_TRIGGERS, PLANNER_POLICIES, EnsembleTrigger
from planexec.runs._problems import Problems
from planexec.runs._spec_values import (
    EnsembleRule,
    ImportRef,
    LimitRule,
    MCPCommand,
    MCPHeader,
    MCPServerRef,
    MCPUrl,
    ModelRef,
    ReviewRule,
    Rules,
    TrustRule,
)
from planexec.runtime import Budget, Escalation

__all__ = [
    "APPLIES_TO_ENSEMBLE",
    "APPLIES_TO_EXECUTOR",
    "BUDGET_FIELDS",
    "REPLANS",
    "RULE_FLAGS",
    "RULE_LISTS",
    "RULE_TEXTS",
    "UNBOUNDED",
    "VARIABLE",
    "read_fields",
    "read_headers",
    "read_mcp_text",
    "rule_texts",
]

BUDGET_FIELDS: Mapping[str, Literal["int", "float"]] = {
    "model_calls": "int",
    "input_tokens": "int",
    "output_tokens": "int",
    "cost": "float",
    "wall_time": "float",
    "tool_calls": "int",
    "steps": "int",
    "replans": "int",
}
"""The :class:`Budget` caps a spec may set, and whether each is a whole number."""

UNBOUNDED = "none"
"""What a budget value takes to lift its cap (``steps: "none"``)."""

REPLANS = ("on_failure", "after_each_step", "never")
TURN_FORMATS = ("nested", "flat")
LOW_CONFIDENCE = ("ask", "stop")
ON_FAIL = ("patch", "retry", "review")
ON_BUDGET = ("auto", "ask", "stop")
OVER_FORECAST = ("replan", "ask", "run")
UNTRUSTED_ANSWERS = ("label", "ask", "withhold")

RULE_TEXTS = (
    "turn_format",
    "confidence_floor",
    "on_low_confidence",
    "on_fail",
    "fail_retries",
    "review_rubric",
    "review_rounds",
    "judge",
    "confidence_below",
    "on_budget",
    "over_forecast",
    "extractor",
    "untrusted_answer",
)
"""Rules given as one text each."""
RULE_LISTS = ("review_checks", "review_items", "escalate_to", "escalate_on", "trusted_tools")
"""Rules given as a list of texts."""
RULE_FLAGS = ("sealed", "untrusted_effects")
"""Rules given as true or false."""


def _text(raw: Any) -> str | None:
    """A value given as text, or a number given as one (read the same way); None for None."""
    if raw is None or isinstance(raw, str):
        return raw
    return repr(raw)


def _cap(name: str, raw: Any, problems: Problems) -> tuple[bool, int | float | None]:
    """Whether the budget cap ``raw`` reads, and its value (None: ``none``, no cap)."""
    where, kind = f"budget.{name}", BUDGET_FIELDS[name]
    text = _text(raw)
    if text is None or text.strip().lower() == UNBOUNDED:
        return True, None
    try:
        value: int | float = int(text) if kind == "int" else float(text)
    except ValueError:
        what = "a whole number" if kind == "int" else "a number"
        problems.add(where, f"{text!r} is not {what} (or {UNBOUNDED!r} for no cap)")
        return False, None
    if not math.isfinite(value):
        problems.add(where, f"{text!r} is not a finite number (write {UNBOUNDED!r} for no cap)")
        return False, None
    if value < 0:
        problems.add(where, f"{text!r} must not be negative")
        return False, None
    return True, value


def read_budget(values: Any, base: Mapping[str, int | float | None], problems: Problems) -> dict[str, Any]:
    """``base`` with the caps ``values`` gives (texts or numbers by :class:`Budget` field; ``none``
    or None lifts a cap); a cap not given keeps ``base``'s."""
    if not isinstance(values, Mapping):
        problems.add("budget", "must map budget caps to numbers")
        return dict(base)
    caps = dict(base)
    ok = True
    for name in values:
        if name not in BUDGET_FIELDS:
            problems.add(f"budget.{name}", f"is not a budget cap: {', '.join(BUDGET_FIELDS)}")
            ok = False
    for name in BUDGET_FIELDS:
        if name in values:
            read, value = _cap(name, values[name], problems)
            ok = ok and read
            if read:
                caps[name] = value
    if ok:
        try:
            Budget(**cast(dict[str, Any], caps))
        except UsageError as e:
            problems.add_usage_error("budget", e)
    return caps


def read_settings(where: str, raws: Any, base: ModelSettings, problems: Problems) -> ModelSettings:
    """``base`` with ``KEY=VALUE`` texts over it (a later key wins; ``extra.NAME=VALUE`` sets one
    provider extra; ``null`` unsets a key); ``base`` when any is wrong, every problem added."""
    if isinstance(raws, ModelSettings):
        return raws
    data: dict[str, Any] = base.as_dict()
    ok = True
    for raw in raws:
        key, sep, text = str(raw).partition("=")
        key = key.strip()
        if not sep or not key:
            problems.add(where, f"{raw!r} is not KEY=VALUE (e.g. temperature=0.2)")
            ok = False
            continue
        value = _setting_value(text)
        if key.startswith("extra.") and len(key) > len("extra."):
            extra = data.get("extra")
            data["extra"] = extra = dict(extra) if isinstance(extra, Mapping) else {}
            if value is None:
                extra.pop(key[len("extra.") :], None)
            else:
                extra[key[len("extra.") :]] = value
        elif value is None:
            data.pop(key, None)
        else:
            data[key] = value
    try:
        settings = ModelSettings.from_dict(data)
    except UsageError as e:
        for p in e.problems:
            problems.add(where, f"{p.where}: {p.message}")
        return base
    return settings if ok else base


def _setting_value(text: str) -> Any:
    """JSON when ``text`` is JSON (numbers, lists, null …), else the text itself."""
    try:
        return strict_loads(text.strip(), max_depth=20, max_chars=100_000)
    except ValueError:
        return text


def read_seconds(where: str, raw: Any, problems: Problems) -> float | None:
    """A positive number of seconds, or None for no limit (unset, or ``none``)."""
    text = _text(raw)
    if text is None or text.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(text)
    except ValueError:
        problems.add(where, f"{text!r} is not a number of seconds (or {UNBOUNDED!r} for no limit)")
        return None
    if not (math.isfinite(value) and value > 0):
        problems.add(where, f"{text!r} must be a positive number of seconds (or {UNBOUNDED!r} for no limit)")
        return None
    return value


def read_fraction(where: str, raw: Any, problems: Problems) -> float | None:
    """A number from 0 to 1, or None (unset, or ``none``)."""
    text = _text(raw)
    if text is None or text.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(text)
    except ValueError:
        problems.add(where, f"{text!r} is not a number from 0 to 1")
        return None
    if not (math.isfinite(value) and 0 <= value <= 1):
        problems.add(where, f"{text!r} must be from 0 to 1")
        return None
    return value


def read_count(where: str, raw: Any, problems: Problems, *, default: int) -> int:
    """A whole number of at least 1; ``default`` when unset (or wrong, with a problem)."""
    text = _text(raw)
    if text is None:
        return default
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        problems.add(where, f"{_text(raw)!r} must be a whole number from 1 to 999999")
        return default
    return int(text)


def read_choice(where: str, raw: Any, choices: tuple[str, ...], problems: Problems, default: str) -> Any:
    """``raw`` when it is one of ``choices``; ``default`` (with a problem) when it is not."""
    if raw in choices:
        return raw
    problems.add(where, f"{raw!r} is not one of {', '.join(choices)}")
    return default


def read_model(where: str, raw: Any, problems: Problems) -> ModelRef | None:
    if raw is None or isinstance(raw, ModelRef):
        return raw
    if isinstance(raw, str):
        return ModelRef(raw)
    problems.add(where, f"is a {type(raw).__name__}, not a model string")
    return None


def read_refs(where: str, raws: Any, problems: Problems) -> tuple[ImportRef, ...]:
    """``module:attr`` references (each typed already or written as text)."""
    found: list[ImportRef] = []
    for raw in _items(where, raws, problems):
        ref = raw if isinstance(raw, ImportRef) else ImportRef.parse(raw) if isinstance(raw, str) else None
        if ref is None:
            problems.add(f"{where} {raw!r}", "use the form package.module:attribute")
        else:
            found.append(ref)
    return tuple(found)


def _items(where: str, raws: Any, problems: Problems) -> Sequence[Any]:
    if isinstance(raws, str) or not isinstance(raws, Sequence):
        problems.add(where, f"is a {type(raws).__name__}, not a list")
        return ()
    return raws


def read_mcp_text(server: str, problems: Problems) -> MCPServerRef | None:
    """An MCP server from its text: an ``http://`` or ``https://`` URL, else a command line."""
    where = f"mcp {server!r}"
    if server.startswith(("http://", "https://")):
        return MCPUrl(server)
    if "://" in server.split(" ", 1)[0]:
        problems.add(where, "an MCP server's URL is http:// or https://")
        return None
    try:
        words = shlex.split(server)
    except ValueError as e:
        problems.add(where, f"cannot read {server!r} as a command line: {e}")
        return None
    if not words:
        problems.add(where, "an MCP server is a command line or an http:// or https:// URL")
        return None
    return MCPCommand(tuple(words))


def read_mcp(raws: Any, problems: Problems) -> tuple[MCPServerRef, ...]:
    found: list[MCPServerRef] = []
    for raw in _items("mcp", raws, problems):
        server = raw if isinstance(raw, MCPCommand | MCPUrl) else read_mcp_text(str(raw), problems)
        if server is not None:
            found.append(server)
    return tuple(found)


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A ``${VAR}`` reference to the environment in a header's value."""
_SECRET_HEADER = re.compile(r"authorization|cookie|key|token|secret|password", re.IGNORECASE)


def read_headers(raws: Any, problems: Problems) -> tuple[MCPHeader, ...]:
    """Headers for the MCP servers given by URL (typed, or ``NAME: VALUE`` texts). A header that
    carries a credential must name a variable: the spec is recorded with every run, and a secret
    written out in it would be too."""
    found: list[MCPHeader] = []
    for raw in _items("mcp_headers", raws, problems):
        if isinstance(raw, MCPHeader):
            header, colon = raw, ":"
        else:
            name, colon, value = str(raw).partition(":")
            header = MCPHeader(name.strip(), value.strip())
        where = f"mcp_headers {header.name if colon else str(raw).split(':', 1)[0]!r}"
        if not colon or not _HEADER_NAME.fullmatch(header.name):
            problems.add(where, "a header is NAME: VALUE, NAME letters, digits and - (e.g. 'X-Team: ops')")
        elif any(ord(c) < 32 or ord(c) == 127 for c in header.value):
            problems.add(where, "a header's value holds no control characters")
        elif _SECRET_HEADER.search(header.name) and not VARIABLE.search(header.value):
            name = header.name
            problems.add(
                where,
                f"{name} carries a credential: give it from the environment, e.g. '{name}: Bearer ${{MCP_TOKEN}}' "
                "(the spec, recorded with the run, keeps the reference, not the secret)",
            )
        else:
            found.append(header)
    return tuple(found)


def read_rules(texts: Any, base: Rules, problems: Problems) -> Rules:
    """``base`` with the rules ``texts`` gives over it, key by key (the keys of :data:`RULE_TEXTS`,
    :data:`RULE_LISTS` and :data:`RULE_FLAGS`)."""
    if isinstance(texts, Rules):  # checked as if it were given as texts
        texts, base = rule_texts(texts), Rules()
    if not isinstance(texts, Mapping):
        problems.add("rules", "the spec has an unreadable 'rules'; give it again", code="spec")
        return base
    known = (*RULE_TEXTS, *RULE_LISTS, *RULE_FLAGS)
    for key in texts:
        if key not in known:
            problems.add("rules", f"the spec has an unreadable 'rules.{key}'; give it again", code="spec")
    given = {key: value for key, value in texts.items() if key in known}
    rules = base
    if "turn_format" in given:
        turn = read_choice("turn_format", given["turn_format"], TURN_FORMATS, problems, rules.turn_format)
        rules = replace(rules, turn_format=turn)
    for key in ("sealed", "untrusted_effects"):
        if key in given and not isinstance(given[key], bool):
            problems.add(key, f"{given[key]!r} is not true or false")
            del given[key]
    if "sealed" in given:
        rules = replace(rules, sealed=given["sealed"])
    if "extractor" in given:
        rules = replace(rules, extractor=read_model("extractor", given["extractor"], problems))
    rules = _rule_groups(given, rules, problems)
    if rules.ensemble is not None and not rules.ensemble.escalate_to:
        for key in ("escalate_on", "confidence_below"):
            if key in given:
                problems.add(key, APPLIES_TO_ENSEMBLE)
    return rules


def rule_texts(rules: Rules) -> dict[str, Any]:
    """Typed rules as the texts :func:`read_rules` reads (so that they are checked the same way)."""
    texts: dict[str, Any] = {"turn_format": rules.turn_format, "sealed": rules.sealed}
    if rules.extractor is not None:
        texts["extractor"] = rules.extractor
    if (escalation := rules.escalation) is not None:
        texts |= {
            "confidence_floor": escalation.confidence_floor,
            "on_low_confidence": escalation.on_low_confidence,
            "on_fail": escalation.on_fail,
            "fail_retries": escalation.retries,
        }
    if (limits := rules.limits) is not None:
        texts |= {"on_budget": limits.on_budget, "over_forecast": limits.over_forecast}
    if (trust := rules.trust) is not None:
        texts |= {
            "trusted_tools": trust.trusted_tools,
            "untrusted_effects": trust.untrusted_effects,
            "untrusted_answer": trust.answer,
        }
    if (review := rules.review) is not None:
        texts |= {
            "review_checks": review.checks,
            "review_rubric": review.rubric,
            "review_items": review.checklist,
            "judge": review.judge,
            "review_rounds": review.max_rounds,
        }
    if (ensemble := rules.ensemble) is not None:
        texts["escalate_to"] = ensemble.escalate_to
        if ensemble.escalate_on is not None:
            texts["escalate_on"] = ensemble.escalate_on
        if ensemble.confidence_below is not None:
            texts["confidence_below"] = ensemble.confidence_below
    return texts


def _rule_groups(given: Mapping[str, Any], rules: Rules, problems: Problems) -> Rules:
    """``rules`` with the groups ``given`` changes (each group made when one of its keys is given)."""
    readers: tuple[tuple[str, Callable[[Mapping[str, Any], Any, Problems], Any]], ...] = (
        ("escalation", _escalation),
        ("limits", _limits),
        ("trust", _trust),
        ("review", _review),
        ("ensemble", _ensemble),
    )
    for name, reader in readers:
        if any(key in given for key in _GROUP_KEYS[name]):
            rules = replace(rules, **{name: reader(given, getattr(rules, name), problems)})
    return rules


_GROUP_KEYS = {
    "escalation": ("confidence_floor", "on_low_confidence", "on_fail", "fail_retries"),
    "limits": ("on_budget", "over_forecast"),
    "trust": ("trusted_tools", "untrusted_effects", "untrusted_answer"),
    "review": ("review_checks", "review_rubric", "review_items", "judge", "review_rounds"),
    "ensemble": ("escalate_to", "escalate_on", "confidence_below"),
}


def _escalation(given: Mapping[str, Any], base: Escalation | None, problems: Problems) -> Escalation:
    now = base if base is not None else Escalation()
    fields = asdict(now)
    if "confidence_floor" in given:
        fields["confidence_floor"] = read_fraction("confidence_floor", given["confidence_floor"], problems)
    if "on_low_confidence" in given:
        low = read_choice(
            "on_low_confidence", given["on_low_confidence"], LOW_CONFIDENCE, problems, now.on_low_confidence
        )
        fields["on_low_confidence"] = low
    if "on_fail" in given:
        fields["on_fail"] = read_choice("on_fail", given["on_fail"], ON_FAIL, problems, now.on_fail)
    if "fail_retries" in given:
        fields["retries"] = read_count("fail_retries", given["fail_retries"], problems, default=now.retries)
    return Escalation(**fields)


def _limits(given: Mapping[str, Any], base: LimitRule | None, problems: Problems) -> LimitRule:
    now = base if base is not None else LimitRule()
    if "on_budget" in given:
        now = replace(now, on_budget=read_choice("on_budget", given["on_budget"], ON_BUDGET, problems, now.on_budget))
    if "over_forecast" in given:
        over = read_choice("over_forecast", given["over_forecast"], OVER_FORECAST, problems, now.over_forecast)
        now = replace(now, over_forecast=over)
    return now


def _trust(given: Mapping[str, Any], base: TrustRule | None, problems: Problems) -> TrustRule:
    now = base if base is not None else TrustRule()
    if "trusted_tools" in given:
        now = replace(
            now, trusted_tools=tuple(str(t) for t in _items("trusted_tools", given["trusted_tools"], problems))
        )
    if "untrusted_effects" in given:
        now = replace(now, untrusted_effects=given["untrusted_effects"])
    if "untrusted_answer" in given:
        answer = read_choice("untrusted_answer", given["untrusted_answer"], UNTRUSTED_ANSWERS, problems, now.answer)
        now = replace(now, answer=answer)
    return now


def _review(given: Mapping[str, Any], base: ReviewRule | None, problems: Problems) -> ReviewRule:
    now = base if base is not None else ReviewRule()
    if "review_checks" in given:
        now = replace(now, checks=read_refs("review_checks", given["review_checks"], problems))
    if "review_rubric" in given:
        now = replace(now, rubric=given["review_rubric"])
    if "review_items" in given:
        now = replace(now, checklist=tuple(str(i) for i in _items("review_items", given["review_items"], problems)))
    if "judge" in given:
        now = replace(now, judge=read_model("judge", given["judge"], problems))
    if "review_rounds" in given:
        now = replace(now, max_rounds=read_count("review_rounds", given["review_rounds"], problems, default=2))
    return now


def _ensemble(given: Mapping[str, Any], base: EnsembleRule | None, problems: Problems) -> EnsembleRule:
    now = base if base is not None else EnsembleRule()
    if "escalate_to" in given:
        models = [read_model("escalate_to", m, problems) for m in _items("escalate_to", given["escalate_to"], problems)]
        now = replace(now, escalate_to=tuple(m for m in models if m is not None))
    if "escalate_on" in given:
        triggers = tuple(str(t) for t in _items("escalate_on", given["escalate_on"], problems))
        for trigger in triggers:
            if trigger not in ENSEMBLE_TRIGGERS:
                problems.add("escalate_on", f"{trigger!r} is not one of {', '.join(ENSEMBLE_TRIGGERS)}")
        known = cast(tuple[EnsembleTrigger, ...], tuple(t for t in triggers if t in ENSEMBLE_TRIGGERS))
        now = replace(now, escalate_on=known or None)
    if "confidence_below" in given:
        now = replace(now, confidence_below=read_fraction("confidence_below", given["confidence_below"], problems))
    return now


def read_fields(given: Mapping[str, Any], base: Mapping[str, Any], problems: Problems) -> dict[str, Any]:
    """The typed fields of a spec: ``base``'s, with ``given`` read over them. A given value may be
    typed already or written as text (the way a command line or a spec before version 10 gives it);
    texts change ``base`` the way a command line's flags change a recorded spec: budget caps one by
    one, model settings after the base's, rules key by key; the rest replace ``base``'s."""
    fields = dict(base)
    for key in _ORDER:
        if key in given:
            fields[key] = _READERS[key](given[key], fields[key], problems)
    if fields["executor"] is None:
        settings = given.get("executor_settings")
        typed = isinstance(settings, ModelSettings)
        if (settings != base["executor_settings"]) if typed else bool(settings):
            problems.add("executor_settings", APPLIES_TO_EXECUTOR)
        if "step_timeout" in given and fields["step_timeout"] is not None:
            problems.add("step_timeout", APPLIES_TO_EXECUTOR)
    return fields


APPLIES_TO_EXECUTOR = "applies to the executor: name the executor's model too"
APPLIES_TO_ENSEMBLE = "applies to the planner's ensemble: name a model to escalate to too"


def _flag(key: str) -> Callable[[Any, Any, Problems], Any]:
    def read(raw: Any, old: Any, problems: Problems) -> Any:
        if isinstance(raw, bool):
            return raw
        problems.add(key, f"{raw!r} is not true or false")
        return old

    return read


def _texts(key: str) -> Callable[[Any, Any, Problems], Any]:
    def read(raw: Any, old: Any, problems: Problems) -> Any:
        return tuple(str(t) for t in _items(key, raw, problems))

    return read


def _optional_text(key: str) -> Callable[[Any, Any, Problems], Any]:
    def read(raw: Any, old: Any, problems: Problems) -> Any:
        if raw is None or isinstance(raw, str):
            return raw
        problems.add(key, f"is a {type(raw).__name__}, not text")
        return old

    return read


_READERS: Mapping[str, Callable[[Any, Any, Problems], Any]] = {
    "policy": lambda raw, old, p: read_choice("policy", raw, PLANNER_POLICIES.names(), p, old),
    "replan": lambda raw, old, p: read_choice("replan", raw, REPLANS, p, old),
    "budget": read_budget,
    "planner_settings": lambda raw, old, p: read_settings("planner_settings", raw, old, p),
    "executor_settings": lambda raw, old, p: read_settings("executor_settings", raw, old, p),
    "step_timeout": lambda raw, old, p: read_seconds("step_timeout", raw, p),
    "rules": read_rules,
    "planner": lambda raw, old, p: read_model("planner", raw, p),
    "executor": lambda raw, old, p: read_model("executor", raw, p),
    "tools": lambda raw, old, p: read_refs("tools", raw, p),
    "executors": lambda raw, old, p: read_refs("executors", raw, p),
    "mcp": lambda raw, old, p: read_mcp(raw, p),
    "mcp_headers": lambda raw, old, p: read_headers(raw, p),
    "memory": _flag("memory"),
    "approve_plan": _flag("approve_plan"),
    "constraints": _texts("constraints"),
    "cwd": _optional_text("cwd"),
}
_ORDER = tuple(_READERS)
"""The order fields are read in, so that problems are listed as the builder used to find them."""
