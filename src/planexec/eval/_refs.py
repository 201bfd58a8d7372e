"""References in a suite: ``module:attr`` tools and model strings, resolved from the suite's folder,
and a fresh model for every run (scripted models remember how far their script has got)."""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.eval._files import read_json
from planexec.eval._limits import MAX_SCRIPT_BYTES
from planexec.models import FunctionModel, Model, ScriptedModel, resolve_model
from planexec.tools import Tool, Toolset

__all__ = ["anchor_model", "fresh_model", "importable_from", "load_check_ref", "load_tool_ref", "model_problems"]


def importable_from(root: Path) -> None:
    """Put the suite's folder first on ``sys.path``, so its modules are found before others."""
    folder = str(root)
    if folder not in sys.path:
        sys.path.insert(0, folder)


def anchor_model(spec: str, root: Path) -> str:
    """``spec`` with every relative ``scripted:`` path made relative to ``root`` (fallback lists too)."""
    parts = []
    for part in (p.strip() for p in spec.split("|")):
        provider, sep, rest = part.partition(":")
        if provider == "scripted" and sep and rest and not Path(rest).is_absolute():
            part = f"scripted:{root / rest}"
        parts.append(part)
    return " | ".join(parts)


def fresh_model(spec: str | Callable[[], Model]) -> Model:
    """A model for one run: a new one for every call, so runs never share a script's progress.

    A model string is resolved again; an ``object:`` reference to a test double instance is copied.
    """
    if callable(spec) and not isinstance(spec, str):
        model = spec()
        if not isinstance(model, Model):
            raise UsageError(f"{spec!r} did not return a model: it needs a name and an async request() method")
        return model
    model = resolve_model(spec)
    if "object:" in spec and isinstance(model, ScriptedModel | FunctionModel):
        model = copy.deepcopy(model)
        model.calls.clear()
    return model


def model_problems(spec: Any, where: str) -> list[Problem]:
    """What is wrong with a model spec, found by resolving it once (nothing is sent to any model)."""
    if callable(spec) and not isinstance(spec, str):
        return []
    if not isinstance(spec, str) or not spec.strip():
        return [Problem(code="model", where=where, message="must be a model string, e.g. scripted:replies.json")]
    scripts = _script_problems(spec, where)
    if scripts:
        return scripts
    try:
        fresh_model(spec)
    except UsageError as e:
        return [Problem(code="model", where=where, message=f"{e.summary}: {p.message}") for p in e.problems] or [
            Problem(code="model", where=where, message=e.summary)
        ]
    except Exception as e:
        return [Problem(code="model", where=where, message=f"cannot load {spec!r}: {type(e).__name__}: {e}")]
    return []


def _script_problems(spec: str, where: str) -> list[Problem]:
    """What makes a ``scripted:`` file of ``spec`` unsafe to read: too large, or nested too deep.
    (A missing file is left to the model's own loader, which says so.)"""
    problems: list[Problem] = []
    for part in (p.strip() for p in spec.split("|")):
        provider, sep, rest = part.partition(":")
        if provider != "scripted" or not sep or not Path(rest).exists():
            continue
        try:
            read_json(Path(rest), limit=MAX_SCRIPT_BYTES, what=f"the script {rest}", finite=False)
        except UsageError as e:
            problems += [Problem(code="model", where=where, message=f"{e.summary}: {p}") for p in e.problems]
    return problems


_NOTHING = object()


def _resolve_ref(ref: str, where: str, code: str, problems: list[Problem], root: Path | None = None) -> Any:
    """What ``module:attr`` names; ``_NOTHING`` (with a problem appended) when it names nothing.
    With ``root``, a module of that name must be the one in ``root`` when a file for it is there."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        problems.append(Problem(code=code, where=where, message=f"{ref!r}: use the form module:attribute"))
        return _NOTHING
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as e:
        problems.append(Problem(code=code, where=where, message=f"cannot import {module_name!r}: {e}"))
        return _NOTHING
    shadowed = _shadowed(value, module_name, root) if root is not None else None
    if shadowed:
        problems.append(Problem(code=code, where=where, message=shadowed))
        return _NOTHING
    for part in attr.split("."):
        if not hasattr(value, part):
            problems.append(Problem(code=code, where=where, message=f"{ref!r}: no attribute {part!r}"))
            return _NOTHING
        value = getattr(value, part)
    return value


def load_tool_ref(ref: str, root: Path, where: str, problems: list[Problem]) -> list[Tool]:
    """The tools ``module:attr`` names (a Tool, a Toolset or a list of them); problems are appended."""
    value = _resolve_ref(ref, where, "tools", problems, root)
    if value is _NOTHING:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    bad = [i for i, item in enumerate(items) if not isinstance(item, Tool | Toolset)]
    if bad:
        numbers = ", ".join(map(str, bad))
        many = f"items {numbers} of {ref!r} are" if len(bad) > 1 else f"item {numbers} of {ref!r} is"
        what = many if items is value else f"{ref!r} is"
        problems.append(Problem(code="tools", where=where, message=f"{what} not a Tool or a Toolset (use @tool)"))
        return []
    return list(Toolset(*items))


def load_check_ref(ref: str, root: Path, where: str, problems: list[Problem]) -> list[Callable[[str], Any]]:
    """The answer check ``module:attr`` names (a function of the answer); problems are appended."""
    value = _resolve_ref(ref, where, "review", problems, root)
    if value is _NOTHING:
        return []
    if not callable(value):
        message = f"{ref!r} is a {type(value).__name__}, not a function of the answer"
        problems.append(Problem(code="review", where=where, message=message))
        return []
    return [value]


def _shadowed(module: Any, name: str, root: Path) -> str | None:
    """Why ``module`` is not the suite's own module of that name, if a file for it sits in ``root``."""
    local = root / (name.replace(".", "/") + ".py")
    found = getattr(module, "__file__", None)
    if not local.is_file() or found is None or Path(found).resolve() == local.resolve():
        return None
    return f"module {name!r} was already imported from {found}, not from {local}: give the suite's module another name"
