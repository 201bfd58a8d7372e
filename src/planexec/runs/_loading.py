"""Loading what an agent spec refers to: models by their model strings, and the values
``module:attr`` references name (tools, executors, the final answer's checks). Each loader returns
what it could load and adds what is wrong to a shared :class:`Problems`, so that every problem is
listed at once; ``where`` is the spec's field (``planner``, ``tools 'pkg.mod:TOOLS'``)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from planexec.errors import UsageError
from planexec.executor import Executor
from planexec.models import Model, Providers, resolve_model
from planexec.runs._problems import Problems
from planexec.runs._spec_values import ImportRef
from planexec.tools import Tool, Toolset

__all__ = ["importable", "load_checks", "load_executors", "load_model", "load_tools"]


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


def _imported(where: str, ref: ImportRef, problems: Problems) -> Any:
    """What a ``module:attr`` reference names; ``_MISSING`` (with a problem) when it names nothing."""
    module_name, attr = ref.module, ref.attr
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


def load_checks(refs: Sequence[ImportRef], problems: Problems) -> tuple[Callable[[str], Any], ...]:
    """The final answer's checks named by ``module:attr`` references; each must be callable."""
    _importable_here()
    found: list[Callable[[str], Any]] = []
    for ref in refs:
        where = f"review_checks {str(ref)!r}"
        value = _imported(where, ref, problems)
        if value is _MISSING:
            continue
        if not callable(value):
            problems.add(where, f"is a {type(value).__name__}, not a function of the answer")
            continue
        found.append(value)
    return tuple(found)


def load_tools(refs: Sequence[ImportRef], problems: Problems) -> list[Tool | Toolset]:
    """The tools named by ``module:attr`` references; every bad reference is a problem."""
    _importable_here()
    found: list[Tool | Toolset] = []
    for ref in refs:
        where = f"tools {str(ref)!r}"
        value = _imported(where, ref, problems)
        if value is not _MISSING:
            found += _tools_in(value, where, problems)
    if found:
        try:
            Toolset(*found)
        except UsageError as e:
            problems.add_usage_error("tools", e)
    return found


def load_executors(refs: Sequence[ImportRef], problems: Problems) -> list[Executor]:
    """The executors named by ``module:attr`` references (each an executor or a list of them);
    every bad reference is a problem, and so is a name two of them share."""
    _importable_here()
    found: list[Executor] = []
    seen: set[str] = set()
    for ref in refs:
        where = f"executors {str(ref)!r}"
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
