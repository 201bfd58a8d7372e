"""Turning command-line values into planexec objects, collecting every problem instead of the first.

Each loader returns what it could build and appends what is wrong to a shared list, so that a bad
invocation is answered with the whole list at once.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from planexec._util.strict_json import loads as strict_loads
from planexec.errors import UsageError
from planexec.models import Model, ModelSettings, resolve_model
from planexec.runtime import Budget
from planexec.tools import Tool, Toolset

__all__ = [
    "BUDGET_FLAGS",
    "Problems",
    "Refused",
    "importable",
    "load_model",
    "load_tools",
    "parse_budget",
    "parse_choice",
    "parse_seconds",
    "parse_settings",
]


class Problems(list[str]):
    """Everything wrong with one invocation."""

    @classmethod
    def of(cls, flag: str, message: str) -> Problems:
        problems = cls()
        problems.add(flag, message)
        return problems

    def add(self, flag: str, message: str) -> None:
        self.append(f"{flag}: {message}" if flag else message)

    def add_usage_error(self, flag: str, error: UsageError) -> None:
        if error.problems:
            for p in error.problems:
                self.add(flag, f"{error.summary}: {p}")
        else:
            self.add(flag, error.summary)


class _Refused(Exception):
    """A command cannot go on because of what it was given; it exits with status 2 listing every
    problem. Internal to the command line: ``run_command`` catches it, so it never leaves a command."""

    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


Refused = _Refused
"""The name the commands raise and catch it by."""


@dataclass(frozen=True, slots=True)
class _BudgetFlag:
    flag: str
    field: str
    kind: Literal["int", "float"]


BUDGET_FLAGS: tuple[_BudgetFlag, ...] = (
    _BudgetFlag("--max-model-calls", "model_calls", "int"),
    _BudgetFlag("--max-input-tokens", "input_tokens", "int"),
    _BudgetFlag("--max-output-tokens", "output_tokens", "int"),
    _BudgetFlag("--max-cost", "cost", "float"),
    _BudgetFlag("--max-time", "wall_time", "float"),
    _BudgetFlag("--max-tool-calls", "tool_calls", "int"),
    _BudgetFlag("--max-steps", "steps", "int"),
    _BudgetFlag("--max-replans", "replans", "int"),
)
"""The budget options of ``planexec run`` and the :class:`Budget` field each one sets."""


UNBOUNDED = "none"
"""What a budget flag takes to lift its cap (``--max-steps none``)."""


def _number(flag: _BudgetFlag, raw: str, problems: Problems) -> int | float | None:
    """The flag's value, or None for ``none``; a wrong value is added to ``problems`` (and gives None)."""
    if raw.strip().lower() == UNBOUNDED:
        return None
    try:
        value: int | float = int(raw) if flag.kind == "int" else float(raw)
    except ValueError:
        what = "a whole number" if flag.kind == "int" else "a number"
        problems.add(flag.flag, f"{raw!r} is not {what} (or {UNBOUNDED!r} for no cap)")
        return None
    if not math.isfinite(value):
        problems.add(flag.flag, f"{raw!r} is not a finite number (write {UNBOUNDED!r} for no cap)")
        return None
    if value < 0:
        problems.add(flag.flag, f"{raw!r} must not be negative")
        return None
    return value


def parse_budget(values: Mapping[str, str | None], problems: Problems) -> Budget | None:
    """A :class:`Budget` from the raw flag values (by field name); None when any value is wrong.
    A flag not given keeps its default cap; ``none`` lifts it."""
    fields: dict[str, Any] = {}
    ok = True
    for flag in BUDGET_FLAGS:
        raw = values.get(flag.field)
        if raw is None:
            continue
        before = len(problems)
        value = _number(flag, raw, problems)
        ok = ok and len(problems) == before
        fields[flag.field] = value
    if not ok:
        return None
    try:
        return Budget(**fields)
    except UsageError as e:
        problems.add_usage_error("budget", e)
        return None


def parse_settings(flag: str, raws: Sequence[str], problems: Problems) -> ModelSettings | None:
    """:class:`ModelSettings` from ``KEY=VALUE`` texts (a later key wins; ``extra.NAME=VALUE`` sets
    one provider extra; ``null`` unsets a key); None when any is wrong, every problem added."""
    data: dict[str, Any] = {}
    ok = True
    for raw in raws:
        key, sep, text = raw.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.add(flag, f"{raw!r} is not KEY=VALUE (e.g. temperature=0.2)")
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
            problems.add(flag, f"{p.where}: {p.message}")
        return None
    return settings if ok else None


def _setting_value(text: str) -> Any:
    """JSON when ``text`` is JSON (numbers, lists, null …), else the text itself."""
    try:
        return strict_loads(text.strip(), max_depth=20, max_chars=100_000)
    except ValueError:
        return text


def parse_seconds(flag: str, raw: str | None, problems: Problems) -> float | None:
    """A positive number of seconds, or None for no limit (unset, or ``none``)."""
    if raw is None or raw.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(raw)
    except ValueError:
        problems.add(flag, f"{raw!r} is not a number of seconds (or {UNBOUNDED!r} for no limit)")
        return None
    if not (math.isfinite(value) and value > 0):
        problems.add(flag, f"{raw!r} must be a positive number of seconds (or {UNBOUNDED!r} for no limit)")
        return None
    return value


def parse_fraction(flag: str, raw: str | None, problems: Problems) -> float | None:
    """A number from 0 to 1, or None (unset, or ``none``)."""
    if raw is None or raw.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(raw)
    except ValueError:
        problems.add(flag, f"{raw!r} is not a number from 0 to 1")
        return None
    if not (math.isfinite(value) and 0 <= value <= 1):
        problems.add(flag, f"{raw!r} must be from 0 to 1")
        return None
    return value


def parse_count(flag: str, raw: str | None, problems: Problems, *, default: int) -> int | None:
    """A whole number of at least 1; ``default`` when unset."""
    if raw is None:
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        problems.add(flag, f"{raw!r} must be a whole number from 1 to 999999")
        return None
    return int(text)


def parse_choice(flag: str, raw: str, choices: tuple[str, ...], problems: Problems) -> str | None:
    if raw in choices:
        return raw
    problems.add(flag, f"{raw!r} is not one of {', '.join(choices)}")
    return None


def _importable_here() -> None:
    """Let ``module:attr`` references name modules in the current directory, as ``python -m`` does."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def importable(directory: str) -> None:
    """Let ``module:attr`` references also name modules in ``directory`` (after everything else)."""
    if directory and directory not in sys.path:
        sys.path.append(directory)


def load_model(flag: str, spec: str, problems: Problems) -> Model | None:
    """A model from a model string (``scripted:replies.json``, ``object:pkg.module:attr``, …)."""
    _importable_here()
    try:
        return resolve_model(spec)
    except UsageError as e:
        problems.add_usage_error(flag, e)
    except Exception as e:
        problems.add(flag, f"cannot load model {spec!r}: {type(e).__name__}: {e}")
    return None


def _tools_in(value: Any, ref: str, problems: Problems) -> list[Tool | Toolset]:
    flag = f"--tools {ref!r}"
    if isinstance(value, Tool | Toolset):
        return [value]
    if isinstance(value, list | tuple | set | frozenset):
        found: list[Tool | Toolset] = []
        for index, item in enumerate(value):
            if isinstance(item, Tool | Toolset):
                found.append(item)
            else:
                problems.add(flag, f"item {index} {_not_a_tool(item)}")
        return found
    problems.add(flag, _not_a_tool(value))
    return []


def _not_a_tool(value: Any) -> str:
    if callable(value) and hasattr(value, "__name__"):
        return f"{value.__name__!r} is a plain function, not a tool: decorate it with @planexec.tool"
    return f"is a {type(value).__name__}, not a Tool, a Toolset or a list of tools"


_MISSING = object()


def _imported(flag: str, ref: str, problems: Problems) -> Any:
    """What a ``module:attr`` reference names; ``_MISSING`` (with a problem) when it names nothing."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        problems.add(flag, "use the form package.module:attribute")
        return _MISSING
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as e:
        problems.add(flag, f"cannot import module {module_name!r}: {e}")
        return _MISSING
    except Exception as e:
        problems.add(flag, f"importing {module_name!r} raised {type(e).__name__}: {e}")
        return _MISSING
    walked = module_name
    for part in attr.split("."):
        if not hasattr(value, part):
            problems.add(flag, f"{walked!r} has no attribute {part!r}")
            return _MISSING
        value = getattr(value, part)
        walked = f"{walked}.{part}"
    return value


def load_checks(refs: tuple[str, ...], problems: Problems) -> tuple[Callable[[str], Any], ...]:
    """The final answer's checks named by ``module:attr`` references; each must be callable."""
    _importable_here()
    found: list[Callable[[str], Any]] = []
    for ref in refs:
        flag = f"--review-check {ref!r}"
        value = _imported(flag, ref, problems)
        if value is _MISSING:
            continue
        if not callable(value):
            problems.add(flag, f"is a {type(value).__name__}, not a function of the answer")
            continue
        found.append(value)
    return tuple(found)


def load_tools(refs: tuple[str, ...], problems: Problems) -> list[Tool | Toolset]:
    """The tools named by ``module:attr`` references; every bad reference is a problem."""
    _importable_here()
    found: list[Tool | Toolset] = []
    for ref in refs:
        value = _imported(f"--tools {ref!r}", ref, problems)
        if value is not _MISSING:
            found += _tools_in(value, ref, problems)
    if found:
        try:
            Toolset(*found)
        except UsageError as e:
            problems.add_usage_error("--tools", e)
    return found
