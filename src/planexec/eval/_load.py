"""Reading a suite: YAML (or a mapping built in Python) to a checked :class:`Suite`.

The whole suite is checked before anything runs, and every problem is reported at once in one
:class:`SuiteInvalid`: unknown keys, keys given twice, missing goals, duplicate ids, model strings
and tool references that do not resolve, numbers out of their range (NaN, infinities, booleans and
texts are not numbers), patterns that do not compile, unknown fault profiles, MCP server entries
that cannot be read … Tool names only the suite's MCP servers can supply are checked once a run of
the suite has started them (see :mod:`planexec.eval._mcp`). A file, or a mapping, beyond the
bounds of :mod:`planexec.eval._limits` (size, aliases, nesting) is refused before any of that,
with the limit it goes beyond.

A task is read by :mod:`planexec.eval._read_task`, its small values by
:mod:`planexec.eval._read_fields`; here are the suite's own fields and BFCL's tasks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from planexec.bfcl import REACT_TURNS, says_something
from planexec.errors import Problem, UsageError
from planexec.eval._bfcl import bfcl_tasks
from planexec.eval._files import read_yaml
from planexec.eval._limits import MAX_CONCURRENCY, MAX_RUNS, MAX_SEED, MAX_SUITE_BYTES, MAX_TASKS, shape_problems, shown
from planexec.eval._mcp import mcp_entries
from planexec.eval._read_fields import Where
from planexec.eval._read_task import TASK_KEYS, TaskReader
from planexec.eval._refs import importable_from
from planexec.eval._suite import AGENT_KINDS, AgentKind, AnswerReviewSpec, Suite, SuiteInvalid, Task, Tolerances

__all__ = ["SUITE_FORMAT_VERSION", "SuiteInvalid", "load_suite", "suite_from_mapping"]

SUITE_FORMAT_VERSION = 1
"""Suite file format (``version:``): 1, the first."""

_SUITE_KEYS = ("version", "name", "seed", "concurrency", "tolerances", "mcp", "defaults", "tasks", "bfcl")
_SAYS_SOMETHING = "planexec.bfcl:says_something"
_BFCL_OWN = ("goal", "turns", "tools", "expect_tools", "expect_answer")
"""Task fields BFCL's tasks bring themselves (their requests, tools and checks)."""
_MERGED = ("budget", "limits", "planner_settings", "executor_settings", "judge_settings", "escalation")
"""Mapping fields a task merges key by key into the defaults (the others replace them)."""
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


def load_suite(path: str | Path, *, agent: AgentKind = "planexec") -> Suite:
    """Read and check the suite file at ``path`` for runs with ``agent``; raises :class:`SuiteInvalid`."""
    file = Path(path)
    try:
        data, found = read_yaml(file, limit=MAX_SUITE_BYTES, what=f"the suite {file}")
    except UsageError as e:
        raise SuiteInvalid(e.summary, e.problems) from None
    if not isinstance(data, dict):
        raise SuiteInvalid(f"the suite {file} must be a mapping with a 'tasks' list", found)
    data.setdefault("name", file.stem)
    return _checked(data, root=file.resolve().parent, agent=agent, path=file, found=found)


def suite_from_mapping(
    data: Mapping[str, Any], *, root: str | Path, agent: AgentKind = "planexec", path: Path | None = None
) -> Suite:
    """A checked suite from a mapping shaped like a suite file. In Python, ``tools`` may also hold
    Tool values, and model fields functions that return a fresh model for each run."""
    return _checked(data, root=Path(root), agent=agent, path=path, found=[])


def _checked(
    data: Mapping[str, Any], *, root: Path, agent: AgentKind, path: Path | None, found: list[Problem]
) -> Suite:
    where = str(path) if path is not None else "the suite"
    unsafe = shape_problems(data)
    if unsafe:
        raise SuiteInvalid(f"{where} is invalid", [*found, *unsafe])
    folder = root.resolve()
    importable_from(folder)
    reader = _SuiteReader(folder, agent)
    reader.problems += found
    suite = reader.suite(data, path)
    if reader.problems or suite is None:
        raise SuiteInvalid(f"{where} is invalid", reader.problems)
    return suite


class _SuiteReader(TaskReader):
    """Reads a suite, collecting every problem instead of stopping at the first."""

    def suite(self, data: Mapping[str, Any], path: Path | None) -> Suite | None:
        if self.agent not in AGENT_KINDS:
            self.add("agent", f"{self.agent!r} is not one of {', '.join(AGENT_KINDS)}")
        self.unknown_keys(data, _SUITE_KEYS, "")
        version = data.get("version", SUITE_FORMAT_VERSION)
        if version != SUITE_FORMAT_VERSION:
            self.add("version", f"suite format {shown(version)} is not supported (this planexec reads 1)")
        name = data.get("name", "suite")
        if not isinstance(name, str) or not name.strip():
            self.add("name", "must be a non-empty string")
        seed = self.integer(data.get("seed", 0), "seed", minimum=0, maximum=MAX_SEED)
        concurrency = self.integer(data.get("concurrency", 4), "concurrency", minimum=1, maximum=MAX_CONCURRENCY)
        tolerances = self.tolerances(data.get("tolerances", {}))
        self.mcp, found = mcp_entries(data.get("mcp", []), self.root)
        self.problems += found
        defaults = data.get("defaults", {})
        if not isinstance(defaults, Mapping):
            self.add("defaults", "must be a mapping of task fields")
            defaults = {}
        self.unknown_keys(defaults, TASK_KEYS, "defaults")
        raw_tasks = data.get("tasks")
        tasks: list[Task] = []
        if "bfcl" in data:
            if "tasks" in data:
                self.add("tasks", "a suite of BFCL's tasks ('bfcl:') lists no tasks of its own")
            tasks = self.bfcl_tasks(data["bfcl"], defaults)
            raw_tasks = []
        elif not isinstance(raw_tasks, list) or not raw_tasks:
            self.add("tasks", "must be a non-empty list of tasks")
            raw_tasks = []
        if len(raw_tasks) > MAX_TASKS:
            self.add("tasks", f"holds {len(raw_tasks):,} tasks; a suite may hold at most {MAX_TASKS:,} tasks")
        seen: dict[str, str] = {}
        for index, raw in enumerate(raw_tasks):
            where = f"tasks[{index}]"
            if not isinstance(raw, Mapping):
                self.add(where, "must be a mapping with at least 'id' and 'goal'")
                continue
            task_id = raw.get("id")
            if isinstance(task_id, str) and _ID.match(task_id):
                where = f"tasks[{index}] ({task_id})"
                if task_id in seen:
                    self.add(where, f"duplicate id: {seen[task_id]} has it too")
                seen[task_id] = where
            else:
                self.add(f"{where}.id", "must be a name of letters, digits, '_', '-' and '.'")
            self.unknown_keys(raw, ("id", *TASK_KEYS), where)
            task = self.task(_merge(defaults, raw), Where(where, raw), task_id if isinstance(task_id, str) else "")
            if task is not None:
                tasks.append(task)
        runs = sum(t.repeat for t in tasks)
        if runs > MAX_RUNS:
            self.add("tasks", f"asks for {runs:,} runs (every task's repeat added up); at most {MAX_RUNS:,}")
        self.problems = list(dict.fromkeys(self.problems))  # a bad default is reported once, not once per task
        if self.problems or seed is None or concurrency is None or tolerances is None:
            return None
        return Suite(
            name=str(name),
            tasks=tuple(tasks),
            root=self.root,
            path=path,
            seed=seed,
            concurrency=concurrency,
            tolerances=tolerances,
            mcp=self.mcp,
        )

    def bfcl_tasks(self, spec: Any, defaults: Mapping[str, Any]) -> list[Task]:
        """BFCL's tasks (``bfcl:``), each with the suite's defaults; the oracle stands in for a
        planner (or ReAct model) the defaults do not name."""
        for key in _BFCL_OWN:
            if key in defaults:
                self.add(f"defaults.{key}", "BFCL's tasks bring their own requests, tools and checks")
        found, problems = bfcl_tasks(spec)
        self.problems += problems
        if not found:  # the defaults are checked all the same, so that every problem is listed at once
            self.task({**defaults, "goal": "-"}, Where("bfcl", {}), "bfcl", stand_in=True)
        tasks = []
        for bfcl_task, world in found:
            where = Where(f"bfcl ({bfcl_task.id})", {})
            first, *rest = bfcl_task.turns or ("",)
            raw = {"max_turns": REACT_TURNS, **defaults, "goal": first}  # ReAct: a model call per dependent call
            task = self.task(raw, where, bfcl_task.id, stand_in=True)
            if task is not None:
                # A turn may need no call (its ground truth is empty): a plan of no step, which a
                # run accepts only when its answer is reviewed.
                review = task.review or AnswerReviewSpec(checks=(says_something,), check_refs=(_SAYS_SOMETHING,))
                tasks.append(replace(task, goal=first, turns=tuple(rest), world=world, review=review))
        return tasks

    def tolerances(self, value: Any) -> Tolerances | None:
        result = self.typed(Tolerances, value, "tolerances")
        return cast(Tolerances, result) if result is not None else None


def _merge(defaults: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, Any]:
    """The task's fields over the defaults; ``budget`` and ``limits`` merge key by key."""
    merged = {**defaults, **task}
    for key in _MERGED:
        base, own = defaults.get(key), task.get(key)
        if isinstance(base, Mapping) and isinstance(own, Mapping):
            merged[key] = {**base, **own}
    return merged
