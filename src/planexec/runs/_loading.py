"""Turning the texts of an agent spec into planexec objects: model strings, ``module:attr``
references to tools and checks, budgets, model settings and numbers. Each loader returns what it
could build and adds what is wrong to a shared :class:`Problems`, so that every problem is listed
at once; ``where`` is the spec's field (``planner``, ``budget.steps``, ``tools 'pkg.mod:TOOLS'``)."""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from planexec._util.strict_json import loads as strict_loads
from planexec.errors import UsageError
from planexec.executor import Executor
from planexec.models import Model, ModelSettings, Providers, resolve_model
from planexec.runs._problems import Problems
from planexec.runtime import Budget
from planexec.tools import Tool, Toolset

__all__ = [
    "BUDGET_FIELDS",
    "UNBOUNDED",
    "importable",
    "load_checks",
    "load_model",
    "load_tools",
    "parse_budget",
    "parse_choice",
    "parse_count",
    "parse_fraction",
    "parse_seconds",
    "parse_settings",
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


def _number(field: str, kind: str, raw: str, problems: Problems) -> int | float | None:
    """The value, or None for ``none``; a wrong value is added to ``problems`` (and gives None)."""
    where = f"budget.{field}"
    if raw.strip().lower() == UNBOUNDED:
        return None
    try:
        value: int | float = int(raw) if kind == "int" else float(raw)
    except ValueError:
        what = "a whole number" if kind == "int" else "a number"
        problems.add(where, f"{raw!r} is not {what} (or {UNBOUNDED!r} for no cap)")
        return None
    if not math.isfinite(value):
        problems.add(where, f"{raw!r} is not a finite number (write {UNBOUNDED!r} for no cap)")
        return None
    if value < 0:
        problems.add(where, f"{raw!r} must not be negative")
        return None
    return value


def parse_budget(values: Mapping[str, str | None], problems: Problems) -> Budget | None:
    """A :class:`Budget` from raw texts by field name; None when any is wrong. A field not given
    keeps its default cap; ``none`` lifts it."""
    fields: dict[str, Any] = {}
    ok = True
    for name in values:
        if name not in BUDGET_FIELDS:
            problems.add(f"budget.{name}", f"is not a budget cap: {', '.join(BUDGET_FIELDS)}")
            ok = False
    for name, kind in BUDGET_FIELDS.items():
        raw = values.get(name)
        if raw is None:
            continue
        before = len(problems)
        value = _number(name, kind, raw, problems)
        ok = ok and len(problems) == before
        fields[name] = value
    if not ok:
        return None
    try:
        return Budget(**fields)
    except UsageError as e:
        problems.add_usage_error("budget", e)
        return None


def parse_settings(where: str, raws: Sequence[str], problems: Problems) -> ModelSettings | None:
    """:class:`ModelSettings` from ``KEY=VALUE`` texts (a later key wins; ``extra.NAME=VALUE`` sets
    one provider extra; ``null`` unsets a key); None when any is wrong, every problem added."""
    data: dict[str, Any] = {}
    ok = True
    for raw in raws:
        key, sep, text = raw.partition("=")
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
        return None
    return settings if ok else None


def _setting_value(text: str) -> Any:
    """JSON when ``text`` is JSON (numbers, lists, null …), else the text itself."""
    try:
        return strict_loads(text.strip(), max_depth=20, max_chars=100_000)
    except ValueError:
        return text


def parse_seconds(where: str, raw: str | None, problems: Problems) -> float | None:
    """A positive number of seconds, or None for no limit (unset, or ``none``)."""
    if raw is None or raw.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(raw)
    except ValueError:
        problems.add(where, f"{raw!r} is not a number of seconds (or {UNBOUNDED!r} for no limit)")
        return None
    if not (math.isfinite(value) and value > 0):
        problems.add(where, f"{raw!r} must be a positive number of seconds (or {UNBOUNDED!r} for no limit)")
        return None
    return value


def parse_fraction(where: str, raw: str | None, problems: Problems) -> float | None:
    """A number from 0 to 1, or None (unset, or ``none``)."""
    if raw is None or raw.strip().lower() == UNBOUNDED:
        return None
    try:
        value = float(raw)
    except ValueError:
        problems.add(where, f"{raw!r} is not a number from 0 to 1")
        return None
    if not (math.isfinite(value) and 0 <= value <= 1):
        problems.add(where, f"{raw!r} must be from 0 to 1")
        return None
    return value


def parse_count(where: str, raw: str | None, problems: Problems, *, default: int) -> int | None:
    """A whole number of at least 1; ``default`` when unset."""
    if raw is None:
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        problems.add(where, f"{raw!r} must be a whole number from 1 to 999999")
        return None
    return int(text)


def parse_choice(where: str, raw: str, choices: tuple[str, ...], problems: Problems) -> str | None:
    if raw in choices:
        return raw
    problems.add(where, f"{raw!r} is not one of {', '.join(choices)}")
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


def load_model(where: str, spec: str, problems: Problems, providers: Providers | None = None) -> Model | None:
    """A model from a model string (``scripted:replies.json``, ``object:pkg.module:attr``, …),
    resolved through ``providers`` (the default ones when None)."""
    _importable_here()
    try:
        return resolve_model(spec, providers=providers)
    except UsageError as e:
        problems.add_usage_error(where, e)
    except Exception as e:
        problems.add(where, f"cannot load model {spec!r}: {type(e).__name__}: {e}")
    return None


def _tools_in(value: Any, where: str, problems: Problems) -> list[Tool | Toolset]:
    if isinstance(value, Tool | Toolset):
        return [value]
    if isinstance(value, list | tuple | set | frozenset):
        found: list[Tool | Toolset] = []
        for index, item in enumerate(value):
            if isinstance(item, Tool | Toolset):
                found.append(item)
            else:
                problems.add(where, f"item {index} {_not_a_tool(item)}")
        return found
    problems.add(where, _not_a_tool(value))
    return []


def _not_a_tool(value: Any) -> str:
    if callable(value) and hasattr(value, "__name__"):
        return f"{value.__name__!r} is a plain function, not a tool: decorate it with @planexec.tool"
    return f"is a {type(value).__name__}, not a Tool, a Toolset or a list of tools"


_MISSING = object()


def _imported(where: str, ref: str, problems: Problems) -> Any:
    """What a ``module:attr`` reference names; ``_MISSING`` (with a problem) when it names nothing."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        problems.add(where, "use the form package.module:attribute")
        return _MISSING
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as e:
        problems.add(where, f"cannot import module {module_name!r}: {e}")
        return _MISSING
    except (Exception, SystemExit) as e:  # a module's own code may even try to end the process
        problems.add(where, f"importing {module_name!r} raised {type(e).__name__}: {e}")
        return _MISSING
    walked = module_name
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            problems.add(where, f"{walked!r} has no attribute {part!r}")
            return _MISSING
        except Exception as e:
            problems.add(where, f"reading {walked}.{part} raised {type(e).__name__}: {e}")
            return _MISSING
        walked = f"{walked}.{part}"
    return value


def load_checks(refs: Sequence[str], problems: Problems) -> tuple[Callable[[str], Any], ...]:
    """The final answer's checks named by ``module:attr`` references; each must be callable."""
    _importable_here()
    found: list[Callable[[str], Any]] = []
    for ref in refs:
        where = f"review_checks {ref!r}"
        value = _imported(where, ref, problems)
        if value is _MISSING:
            continue
        if not callable(value):
            problems.add(where, f"is a {type(value).__name__}, not a function of the answer")
            continue
        found.append(value)
    return tuple(found)


def load_tools(refs: Sequence[str], problems: Problems) -> list[Tool | Toolset]:
    """The tools named by ``module:attr`` references; every bad reference is a problem."""
    _importable_here()
    found: list[Tool | Toolset] = []
    for ref in refs:
        where = f"tools {ref!r}"
        value = _imported(where, ref, problems)
        if value is not _MISSING:
            found += _tools_in(value, where, problems)
    if found:
        try:
            Toolset(*found)
        except UsageError as e:
            problems.add_usage_error("tools", e)
    return found


def load_executors(refs: Sequence[str], problems: Problems) -> list[Executor]:
    """The executors named by ``module:attr`` references (each an executor or a list of them);
    every bad reference is a problem, and so is a name two of them share."""
    _importable_here()
    found: list[Executor] = []
    seen: set[str] = set()
    for ref in refs:
        where = f"executors {ref!r}"
        value = _imported(where, ref, problems)
        if value is _MISSING:
            continue
        items = list(value) if isinstance(value, list | tuple) else [value]
        for index, item in enumerate(items):
            at = f"item {index} " if isinstance(value, list | tuple) else ""
            problem = _not_an_executor(item)
            if problem is not None:
                problems.add(where, f"{at}{problem}")
            elif item.name in seen:
                problems.add("executors", f"two executors are named {item.name!r}")
            else:
                seen.add(item.name)
                found.append(item)
    return found


def _not_an_executor(item: Any) -> str | None:
    """Why ``item`` cannot be routed steps to (None: it can): an executor with a name of text."""
    if isinstance(item, type):
        return f"is the class {item.__name__}, not an executor: make one, e.g. {item.__name__}()"
    try:
        if not isinstance(item, Executor):
            return f"is a {type(item).__name__}, not an executor or a list of executors"
        name = item.name
    except Exception as e:  # an object that raises when its attributes are read
        return f"cannot be read as an executor: {type(e).__name__}: {e}"
    if not isinstance(name, str) or not name.strip():
        return f"has the name {name!r}: an executor's name must be non-empty text"
    return None
