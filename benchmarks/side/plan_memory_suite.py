"""The plan-memory suite (W12): 50 single-turn goals made from BFCL's multi_turn_base tasks, kept as
data in ``plan_memory_suite.json`` beside this module.

Each goal is the first turn of a BFCL task, run on the task's initial state and checked with
BFCL's own checks. Half the goals are new tasks (``new``, named ``n01`` … ``n25``); the other half
come back to an earlier goal ``of``:

    repeat       the same words
    reworded     the same request in other words (same parameters, same ground truth)
    new_values   the same request with other parameter values (another directory name, amount or
                 date): ``question_changes`` are replaced in the request and ``call_changes`` in the
                 ground-truth calls, so the ground truth of the new values is known

:func:`check_suite` checks the derived ground truths: each of their calls runs without an error on
the task's initial state, each change matched the text it changes, and BFCL's checks pass the
ground truth planned by the oracle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from planexec.bfcl import BfclTask, TaskRun, load_tasks, run_task

__all__ = ["SUITE_PATH", "Goal", "GoalKind", "check_suite", "load_suite"]

SUITE_PATH = Path(__file__).with_name("plan_memory_suite.json")

GoalKind = Literal["new", "repeat", "reworded", "new_values"]
KINDS: tuple[GoalKind, ...] = ("new", "repeat", "reworded", "new_values")


@dataclass(frozen=True, kw_only=True)
class Goal:
    """One goal of the suite: a single-turn BFCL task (its request, initial state and ground truth)."""

    id: str
    kind: GoalKind
    of: str | None
    """The earlier goal it comes back to (its name, ``n01`` …); None for a new goal."""
    task: BfclTask
    changes: tuple[tuple[str, str], ...] = ()
    """``new_values``: the ground-truth texts replaced, (old, new)."""

    @property
    def request(self) -> str:
        return self.task.turns[0]

    @property
    def calls(self) -> tuple[str, ...]:
        return self.task.ground_truth[0]

    @property
    def comes_back(self) -> bool:
        """Whether it comes back to an earlier goal (the repeated half)."""
        return self.kind != "new"


def _replaced(text: str, changes: list[tuple[str, str]], where: str, problems: list[str]) -> str:
    for old, new in changes:
        if old not in text:
            problems.append(f"{where}: {old!r} is not in {text!r}")
        text = text.replace(old, new)
    return text


def _pairs(value: Any) -> list[tuple[str, str]]:
    return [(str(old), str(new)) for old, new in value or ()]


def load_suite(path: Path = SUITE_PATH, *, limit: int | None = None) -> list[Goal]:
    """The suite's goals in order (the first ``limit`` only, when given); raises ``ValueError``
    listing every goal that cannot be built."""
    data = json.loads(path.read_text(encoding="utf-8"))
    entries: list[dict[str, Any]] = data["goals"][:limit] if limit is not None else data["goals"]
    tasks = {t.id: t for t in load_tasks("multi_turn_base", ids=sorted({e["task"] for e in entries}))}
    problems: list[str] = []
    named: dict[str, Goal] = {}
    goals: list[Goal] = []
    for entry in entries:
        where = f"goal {entry['id']}"
        kind = entry["kind"]
        if kind not in KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
            continue
        source = tasks[entry["task"]]
        single = replace(source, turns=source.turns[:1], ground_truth=source.ground_truth[:1], missed={})
        of = entry.get("of")
        if kind == "new":
            goal = Goal(id=entry["id"], kind="new", of=None, task=replace(single, id=entry["id"]))
            named[entry["name"]] = goal
            goals.append(goal)
            continue
        if of not in named or named[of].task.ground_truth != single.ground_truth:
            problems.append(f"{where}: {of!r} is not an earlier new goal of task {entry['task']}")
            continue
        question = entry.get("question", single.turns[0])
        calls = single.ground_truth[0]
        changes = _pairs(entry.get("call_changes"))
        if kind == "new_values":
            question = _replaced(question, _pairs(entry.get("question_changes")), f"{where} request", problems)
            calls = tuple(_replaced(c, [p for p in changes if p[0] in c], where, []) for c in calls)
            for old, _ in changes:
                if not any(old in c for c in single.ground_truth[0]):
                    problems.append(f"{where}: {old!r} is in no ground-truth call")
        task = replace(single, id=entry["id"], turns=(question,), ground_truth=(calls,))
        goals.append(Goal(id=entry["id"], kind=kind, of=of, task=task, changes=tuple(changes)))
    if problems:
        raise ValueError("the plan-memory suite has problems:\n" + "\n".join(problems))
    return goals


def _refused(result: str) -> bool:
    """Whether a BFCL method answered with an error of its own (``{"error": ...}``)."""
    try:
        data = json.loads(result)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


async def check_suite(goals: list[Goal]) -> list[str]:
    """Problems with the goals' ground truths: a call that fails or answers an error on the
    initial state, or a goal whose ground truth, planned by the oracle and carried out, BFCL's
    checks refuse; empty when there is none."""
    problems: list[str] = []
    for goal in goals:
        results = TaskRun(goal.task).truth.run_turn(0)
        problems += [f"goal {goal.id}: {r}" for r in results if r.startswith("Error during execution") or _refused(r)]
        outcome = await run_task(goal.task)
        if not outcome.valid:
            problems.append(f"goal {goal.id}: BFCL's checks refuse its ground truth: {outcome.error}")
    return problems
