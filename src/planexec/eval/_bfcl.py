"""BFCL's multi-turn tasks as an evaluation suite: each BFCL task a task whose world is a
:class:`planexec.bfcl.TaskRun` — the task's API classes made fresh for each run, its turns, BFCL's
checks after each turn — and whose planner (or ReAct model), when the suite names none, is the
oracle that plans the ground truth.

In a suite file, ``bfcl:`` takes the place of ``tasks:``::

    name: bfcl-base
    bfcl: {category: multi_turn_base, limit: 20}
    defaults: {planner: "openai:gpt-4.1", policy: step, budget: {cost: 0.5}}

``planexec eval bfcl:multi_turn_base --planner openai:gpt-4.1`` builds the same from the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from planexec.bfcl import CATEGORIES, BfclTask, Oracle, ReactOracle, TaskRun, load_tasks
from planexec.errors import Problem, UsageError
from planexec.eval._matchers import CheckOutcome
from planexec.eval._world import Role, TaskWorld
from planexec.models import Model
from planexec.tools import Tool

__all__ = ["BFCL_KEYS", "BfclTaskWorld", "bfcl_tasks"]

BFCL_KEYS = ("category", "ids", "limit", "fail_one")
"""What a suite's ``bfcl:`` mapping may hold."""


class BfclTaskWorld:
    """One run of a BFCL task, as :class:`~planexec.eval.TaskWorld` asks."""

    def __init__(self, task: BfclTask, *, fail_one: int | None = None) -> None:
        self.run = TaskRun(task, fail_one=fail_one)
        self._tools: dict[frozenset[str], list[Tool]] = {}
        self._oracles: list[Oracle | ReactOracle] = []

    def tools(self, turn: int) -> Sequence[Tool]:
        held = self.run.held_back(turn)
        if held not in self._tools:
            self._tools[held] = self.run.tools(turn)
        return self._tools[held]

    def goal(self, turn: int) -> str:
        return self.run.goal(turn)

    def begin_turn(self, turn: int) -> None:
        self.run.begin_turn(turn)
        for oracle in self._oracles:
            oracle.next_turn(turn)

    def check_turn(self, turn: int) -> CheckOutcome:
        verdict = self.run.check(turn)
        if verdict.get("valid"):
            return CheckOutcome(name="bfcl", passed=True, detail="")
        why = f"{verdict.get('error_type', 'invalid')}: {verdict.get('error_message', '')}".rstrip(": ")
        return CheckOutcome(name="bfcl", passed=False, detail=why)

    def stand_in(self, role: Role) -> Model | None:
        oracle: Oracle | ReactOracle = (
            Oracle(self.run.task, self.run.world) if role == "planner" else ReactOracle(self.run.task, self.run.world)
        )
        self._oracles.append(oracle)
        return oracle.model


def _world(task: BfclTask, fail_one: int | None) -> Callable[[], TaskWorld]:
    return lambda: BfclTaskWorld(task, fail_one=fail_one)


def bfcl_tasks(spec: Any, where: str = "bfcl") -> tuple[list[tuple[BfclTask, Callable[[], TaskWorld]]], list[Problem]]:
    """The tasks a suite's ``bfcl:`` mapping asks for, each with its world factory; or the problems."""
    problems: list[Problem] = []

    def add(key: str, message: str) -> None:
        problems.append(Problem(code="suite", where=f"{where}.{key}" if key else where, message=message))

    if not isinstance(spec, Mapping):
        add("", f"must be a mapping of {', '.join(BFCL_KEYS)}")
        return [], problems
    for key in spec:
        if key not in BFCL_KEYS:
            add(str(key)[:60], f"unknown key (known: {', '.join(BFCL_KEYS)})")
    category = spec.get("category", "multi_turn_base")
    if category not in CATEGORIES:
        add("category", f"{str(category)[:60]!r} is not one of {', '.join(CATEGORIES)}")
    ids = spec.get("ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids) or not ids):
        add("ids", "must be a non-empty list of BFCL task ids")
        ids = None
    elif ids is not None and len(set(ids)) < len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        add("ids", f"names a task more than once: {', '.join(twice)[:200]}")
        ids = None
    limit = spec.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        add("limit", "must be a whole number of at least 1")
        limit = None
    fail_one = spec.get("fail_one")
    if fail_one is not None and (isinstance(fail_one, bool) or not isinstance(fail_one, int) or fail_one < 0):
        add("fail_one", "must be a seed: a whole number of at least 0")
    if problems:
        return [], problems
    try:
        tasks = load_tasks(category, ids=ids)
    except UsageError as e:
        return [], [Problem(code=p.code, where=f"{where}.{p.where}", message=p.message) for p in e.problems]
    if limit is not None:
        tasks = tasks[:limit]
    return [(task, _world(task, fail_one)) for task in tasks], []
