"""A task's world: fresh instances of its API classes, loaded with its initial state, and planexec
tools built from BFCL's function documentation (through ``Tool.from_schema``: nothing is
written per function), each call's result kept as BFCL's checker reads results."""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planexec.bfcl._data import BfclTask, bfcl_root
from planexec.errors import ToolError
from planexec.tools import RetryPolicy, Tool

__all__ = ["CLASS_DOCS", "CLASS_MODULES", "MATH_LOCK", "BfclWorld", "bfcl_schema", "new_instances"]

_BACKEND = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

CLASS_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
"""The multi-turn API classes and the modules that define them."""

CLASS_DOCS = {name: f"{module}.json" for name, module in CLASS_MODULES.items()}
"""Where each class's function documentation is (``data/multi_turn_func_doc/``)."""

_STATELESS = frozenset({"MathAPI"})

_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def bfcl_schema(schema: Any) -> Any:
    """BFCL's JSON Schema-like parameters as JSON Schema: its own type names (``dict``,
    ``float``, ``tuple``, ``any``) become JSON Schema's."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "type" and isinstance(value, str):
                mapped = _TYPES.get(value, value)
                if mapped is not None:
                    out[key] = mapped
            elif key in ("properties",) and isinstance(value, dict):
                out[key] = {name: bfcl_schema(sub) for name, sub in value.items()}
            elif key == "required" and isinstance(value, list):
                out[key] = list(value)
            else:
                out[key] = bfcl_schema(value)
        return out
    if isinstance(schema, list):
        return [bfcl_schema(v) for v in schema]
    return schema


def new_instances(task: BfclTask) -> dict[str, Any]:
    """Fresh instances of the task's classes, in their initial state."""
    instances = {}
    for name in task.involved_classes:
        module = importlib.import_module(f"{_BACKEND}.{CLASS_MODULES[name]}")
        instance = getattr(module, name)()
        if name not in _STATELESS:
            instance._load_scenario(copy.deepcopy(task.initial_config.get(name, {})), long_context=task.long_context)
            # Some classes load missing state from module-level defaults without copying them: an
            # instance must own its state, or one task's calls show up in another's instances.
            vars(instance).update(copy.deepcopy(vars(instance)))
        instances[name] = instance
    return instances


def bfcl_result(value: Any) -> str:
    """A call's result as BFCL's checker compares it: text as it is, a dict as JSON, else ``str``."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if value is None:
        return "null"
    return "object"


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class BfclWorld:
    """The instances a task's calls change, its tools, and the results of the calls made."""

    def __init__(self, task: BfclTask) -> None:
        self.task = task
        self.instances = new_instances(task)
        self.results: list[list[str]] = [[]]
        """Each turn's call results, as BFCL reads them (``next_turn`` starts a new list)."""
        self.done: list[list[tuple[str, dict[str, Any]]]] = [[]]
        """Each turn's calls that succeeded: (function, arguments)."""
        self.fail_once: tuple[int, str, dict[str, Any]] | None = None
        """A call (turn, function, arguments) to fail once, as a tool that errs would, before it
        changes anything: a fault a planner must plan around."""
        self.injected = 0
        self._docs = _docs_of(task.involved_classes)
        self._owner = {name: class_name for class_name in task.involved_classes for name in self._docs[class_name]}

    def signature_of(self, name: str) -> inspect.Signature | None:
        owner = self._owner.get(name)
        if owner is None:
            return None
        return inspect.signature(getattr(self.instances[owner], name))

    def next_turn(self) -> None:
        self.results.append([])
        self.done.append([])

    def tools(
        self,
        *,
        hidden: frozenset[str] = frozenset(),
        widened: dict[str, dict[str, str]] | None = None,
        retry: RetryPolicy | None = None,
    ) -> list[Tool]:
        """The task's tools: every documented function of its classes but the excluded ones
        (and ``hidden``, held back for a later turn). ``widened``: per function, parameters that
        also accept another JSON type (where BFCL's own ground truth passes one its
        documentation does not allow). ``retry``: how transient failures are tried again."""
        made = []
        for class_name in self.task.involved_classes:
            for name, doc in self._docs[class_name].items():
                if name in self.task.excluded or name in hidden:
                    continue
                schema = bfcl_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
                for param, extra in (widened or {}).get(name, {}).items():
                    prop = schema.get("properties", {}).get(param)
                    if isinstance(prop, dict) and isinstance(prop.get("type"), str):
                        prop["type"] = [prop["type"], extra]
                made.append(
                    Tool.from_schema(
                        name,
                        " ".join(str(doc.get("description", name)).split()),
                        schema,
                        self._caller(class_name, name),
                        retry=retry or RetryPolicy(),
                    )
                )
        return made

    def widened_for_ground_truth(self) -> dict[str, dict[str, str]]:
        """The parameters whose ground-truth values the documentation does not allow, and the
        JSON type each such value has (so that the ground truth can be planned as it is)."""
        from planexec.bfcl._calls import parse_call

        tools = {t.name: t for t in self.tools()}
        widened: dict[str, dict[str, str]] = {}
        for calls in self.task.ground_truth:
            for text in calls:
                name, kwargs = parse_call(text, self.signature_of)
                tool = tools.get(name)
                if tool is None:
                    continue
                checked, _ = tool.check_args(kwargs)
                if checked is not None:
                    continue
                for param, value in kwargs.items():
                    declared = tool.parameters.get("properties", {}).get(param, {})
                    if isinstance(declared, dict) and declared.get("type") != _json_type(value):
                        widened.setdefault(name, {})[param] = _json_type(value)
        return widened

    def _caller(self, class_name: str, name: str) -> Callable[..., Any]:
        def call(**kwargs: Any) -> Any:
            if self.fail_once is not None and self.fail_once == (len(self.results) - 1, name, kwargs):
                self.fail_once = None
                self.injected += 1
                raise ToolError(f"injected fault: {name} failed before it did anything")
            asked = copy.deepcopy(kwargs)  # what the call was asked: a method may change its arguments
            method = getattr(self.instances[class_name], name)
            try:
                if class_name == "MathAPI":
                    _refuse_endless_math(name, kwargs)
                with MATH_LOCK if class_name == "MathAPI" else contextlib.nullcontext():
                    value = method(**kwargs)
            except Exception as e:  # BFCL counts it as the call's result; the step fails
                self.results[-1].append(f"Error during execution: {e}")
                raise ToolError(str(e) or type(e).__name__) from None  # named by the tool already
            self.results[-1].append(bfcl_result(value))
            self.done[-1].append((name, asked))
            return _json_safe(value)

        call.__name__ = name
        return call


MATH_LOCK = threading.Lock()
"""Held by every call of MathAPI's: some set mpmath's precision for the whole process, so that two
at once (runs in parallel, each call in a worker thread) could read each other's."""

MAX_PRECISION = 10_000
"""The most digits ``square_root`` and ``logarithm`` are asked for (BFCL's tasks ask for a few)."""

MAX_POWER_DIGITS = 4300
"""The most digits of a power of whole numbers (Python's default limit on writing one as text)."""


def _refuse_endless_math(name: str, kwargs: dict[str, Any]) -> None:
    """Raise for a MathAPI call that would hold the interpreter for minutes or hours, in one C call
    no timeout interrupts: a power of whole numbers with more digits than Python writes as text,
    or a root or logarithm to more than ``MAX_PRECISION`` digits."""
    if name == "power":
        base, exponent = kwargs.get("base"), kwargs.get("exponent")
        if type(base) is int and type(exponent) is int and exponent > 0 and abs(base) > 1:
            digits = exponent * math.log10(abs(base))
            if digits > MAX_POWER_DIGITS:
                raise ValueError(f"the result would have about {digits:.3g} digits")
    elif name in ("square_root", "logarithm"):
        precision = kwargs.get("precision")
        if isinstance(precision, int | float) and precision > MAX_PRECISION:
            raise ValueError(f"a precision of more than {MAX_PRECISION:,} digits")


_DOC_CACHE: dict[str, dict[str, dict[str, Any]]] = {}


def _docs_of(classes: tuple[str, ...]) -> dict[str, dict[str, dict[str, Any]]]:
    folder = bfcl_root() / "data" / "multi_turn_func_doc"
    found = {}
    for class_name in classes:
        if class_name not in _DOC_CACHE:
            _DOC_CACHE[class_name] = _read_docs(folder / CLASS_DOCS[class_name])
        found[class_name] = _DOC_CACHE[class_name]
    return found


def _read_docs(path: Path) -> dict[str, dict[str, Any]]:
    docs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            docs[doc["name"]] = doc
    return docs
