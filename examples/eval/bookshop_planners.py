"""The planners of the example evaluation suite: deterministic stand-ins for a planning model.

A script that only knows the happy path fails as soon as a fault needs a new plan. These answer by
what they are asked, as a model would: the plan when asked for one (again after a reply that had
problems), a patch of the steps that have not succeeded when part of the plan failed — read from
the execution record in the request, as a model reads it — and the answer at the end. Each suite task
names one with ``object:bookshop_planners:<function>``; the function gives each run its own model.
"""

from __future__ import annotations

import re
from typing import Any

from planexec.errors import UnexpectedModelCall
from planexec.models import ModelRequest
from planexec.testing import FunctionModel

_LINE = re.compile(
    r"^- (?P<id>\S+) .*?(?P<done> → | ✗ (?P<end>failed|cancelled))"
    r"|^- (?P<waiting>\S+) .* (?P<state>pending|running|held)(?: \(after [^)]*\))?$",
    re.MULTILINE,
)
"""A step's line in the record: a finished step (its output after ``→``, or ``✗ failed``), or one
not finished yet (its state last)."""


def _statuses(record: str) -> dict[str, str]:
    """Each step's status, as the record shows it last."""
    status: dict[str, str] = {}
    for m in _LINE.finditer(record):
        if m["waiting"] is not None:
            status[m["waiting"]] = m["state"]
        else:
            status[m["id"]] = m["end"] or "succeeded"
    return status


def _step(step_id: str, tool: str, args: dict[str, Any], *after: str, what: str) -> dict[str, Any]:
    return {"id": step_id, "description": what, "tool": tool, "args": args, "depends_on": list(after)}


def planner(
    name: str, plan: list[dict[str, Any]], answer: str, *, patch: list[dict[str, Any]] | None = None
) -> FunctionModel:
    """A planner that proposes ``plan``, answers ``answer``, and patches a failure with the steps of
    ``patch`` (else of ``plan``) that have not succeeded yet, each under a new id (as the planner's
    instructions ask: a patch the same as the last one would be a stall)."""
    patches = 0

    def reply(request: ModelRequest) -> dict[str, Any]:
        nonlocal patches
        if request.purpose == "planner.propose":
            return {"steps": plan}
        if request.purpose == "planner.patch":
            patches += 1
            record = "\n".join(m.content for m in request.messages if m.role == "user")  # repairs come after it
            return {"reason": "run again what did not succeed", "steps": _again(patch or plan, record, patches)}
        if request.purpose == "planner.finish":
            return {"answer": answer}
        raise UnexpectedModelCall(f"the {name} planner was asked for {request.purpose!r}")

    return FunctionModel(reply, name=f"{name}-planner")


def _again(steps: list[dict[str, Any]], record: str, patch: int) -> list[dict[str, Any]]:
    """What is still to do of ``steps``, by the execution record: a step that succeeded (under its
    id or a later one) is left out; one that failed, never ran, or depends on one renamed here
    runs under a new id, ``<id>_<patch>``; one running or waiting keeps the id it has."""
    status = _statuses(record)
    latest = {_base(step_id): step_id for step_id in status}  # the record lists later versions later
    names: dict[str, str] = {}
    renamed: set[str] = set()
    todo: list[dict[str, Any]] = []
    for s in steps:  # dependencies come first
        now = latest.get(s["id"], s["id"])
        state = status.get(now)
        if state == "succeeded":
            names[s["id"]] = now
            continue
        if state in ("running", "pending") and not renamed.intersection(s["depends_on"]):
            names[s["id"]] = now
        else:
            names[s["id"]] = f"{s['id']}_{patch}"
            renamed.add(s["id"])
        todo.append(s)

    def rename(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return re.sub(r"\$\{(\w+)", lambda m: "${" + names.get(m[1], m[1]), value)

    return [
        {
            **s,
            "id": names[s["id"]],
            "args": {key: rename(value) for key, value in s["args"].items()},
            "depends_on": [names.get(d, d) for d in s["depends_on"]],
        }
        for s in todo
    ]


def _base(step_id: str) -> str:
    return re.sub(r"_\d+$", "", step_id)


def spend() -> FunctionModel:
    plan = [
        _step("find", "find_customer", {"name": "Ada"}, what="find Ada's id"),
        _step("orders", "orders_of", {"customer": "${find}"}, "find", what="her orders"),
        _step("sum", "total", {"orders": "${orders}"}, "orders", what="add them up"),
    ]
    return planner("spend", plan, "Ada spent 42.00 euros.")


def compare() -> FunctionModel:
    plan = [
        _step("ada", "orders_of", {"customer": "c-1"}, what="Ada's orders"),
        _step("bob", "orders_of", {"customer": "c-2"}, what="Bob's orders"),
        _step("ada_total", "total", {"orders": "${ada}"}, "ada", what="Ada's total"),
        _step("bob_total", "total", {"orders": "${bob}"}, "bob", what="Bob's total"),
    ]
    return planner("compare", plan, "Ada spent 42.00 euros and Bob 15.50 euros: Ada spent more.")


def restock() -> FunctionModel:
    plan = [_step("count", "stock", {"sku": "B-12"}, what="copies in the warehouse")]
    patch = [_step("archived", "archived_stock", {"sku": "B-12"}, what="copies in the archive")]
    return planner("restock", plan, "7 copies of B-12 are in stock (from last night's archive).", patch=patch)
