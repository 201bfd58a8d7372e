"""Reading a suite: YAML (or a mapping built in Python) to a checked :class:`Suite`.

The whole suite is checked before anything runs, and every problem is reported at once in one
:class:`SuiteInvalid`: unknown keys, keys given twice, missing goals, duplicate ids, model strings
and tool references that do not resolve, numbers out of their range (NaN, infinities, booleans and
texts are not numbers), patterns that do not compile, unknown fault profiles, MCP server entries
that cannot be read … Tool names only the suite's MCP servers can supply are checked once a run of
the suite has started them (see :mod:`planexec.eval._mcp`). A file, or a mapping, beyond the
bounds of :mod:`planexec.eval._limits` (size, aliases, nesting) is refused before any of that,
with the limit it goes beyond.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, cast

from planexec.bfcl import REACT_TURNS, says_something
from planexec.errors import Problem, UsageError
from planexec.eval._bfcl import bfcl_tasks
from planexec.eval._faults import fault_problems
from planexec.eval._files import read_yaml
from planexec.eval._limits import (
    MAX_CONCURRENCY,
    MAX_NUMBER,
    MAX_REPEAT,
    MAX_RUNS,
    MAX_SEED,
    MAX_STALL_ROUNDS,
    MAX_SUITE_BYTES,
    MAX_TASKS,
    MAX_TOLERANCE,
    MAX_TURNS,
    number_problem,
    shape_problems,
    shown,
)
from planexec.eval._mcp import mcp_entries
from planexec.eval._refs import anchor_model, importable_from, load_check_ref, load_tool_ref, model_problems
from planexec.eval._suite import (
    AGENT_KINDS,
    MATCH_MODES,
    AgentKind,
    AnswerExpectation,
    AnswerReviewSpec,
    EnsembleSpec,
    JudgeCheck,
    MatchMode,
    Suite,
    SuiteInvalid,
    Task,
    Tolerances,
    ToolExpectation,
)
from planexec.models import ModelSettings
from planexec.planner import ENSEMBLE_TRIGGERS
from planexec.runtime import Budget, Escalation, Limits
from planexec.tools import Tool, Toolset

__all__ = ["SUITE_FORMAT_VERSION", "SuiteInvalid", "load_suite", "suite_from_mapping"]

SUITE_FORMAT_VERSION = 1
"""Suite file format (``version:``): 1, the first."""

_SUITE_KEYS = ("version", "name", "seed", "concurrency", "tolerances", "mcp", "defaults", "tasks", "bfcl")
_TASK_KEYS = (
    "goal",
    "turns",
    "constraints",
    "tools",
    "planner",
    "executor",
    "judge",
    "react_model",
    "policy",
    "replan",
    "budget",
    "limits",
    "max_turns",
    "planner_settings",
    "executor_settings",
    "judge_settings",
    "step_timeout",
    "turn_format",
    "sealed",
    "extractor",
    "ensemble",
    "escalation",
    "review",
    "expect_tools",
    "expect_answer",
    "repeat",
    "faults",
)
_SAYS_SOMETHING = "planexec.bfcl:says_something"
_BFCL_OWN = ("goal", "turns", "tools", "expect_tools", "expect_answer")
"""Task fields BFCL's tasks bring themselves (their requests, tools and checks)."""
_MERGED = ("budget", "limits", "planner_settings", "executor_settings", "judge_settings", "escalation")
"""Mapping fields a task merges key by key into the defaults (the others replace them)."""
_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_RANGES: dict[type[Any], dict[str, tuple[float, float]]] = {
    Limits: {
        "max_concurrency": (1, MAX_CONCURRENCY),
        "stall_rounds": (1, MAX_STALL_ROUNDS),
        "repeat_rounds": (1, MAX_STALL_ROUNDS),
        "confidence_threshold": (0, 1),
    },
    Tolerances: {
        "pass_rate": (0, 1),
        "cost": (0, MAX_TOLERANCE),
        "latency": (0, MAX_TOLERANCE),
        "latency_floor": (0, MAX_TOLERANCE),
    },
}
"""The range of each number of a settings object where it is not 0 to ``MAX_NUMBER``."""


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
    reader = _Reader(folder, agent)
    reader.problems += found
    suite = reader.suite(data, path)
    if reader.problems or suite is None:
        raise SuiteInvalid(f"{where} is invalid", reader.problems)
    return suite


class _Reader:
    """Reads a suite, collecting every problem instead of stopping at the first."""

    def __init__(self, root: Path, agent: AgentKind) -> None:
        self.root = root
        self.agent = agent
        self.problems: list[Problem] = []
        self._models: dict[str, list[Problem]] = {}
        self._tools: dict[str, list[Tool]] = {}
        self.mcp: tuple[str, ...] = ()
        """The suite's MCP servers: tool names only they can supply are checked once they list them."""

    def add(self, where: str, message: str, code: str = "suite") -> None:
        self.problems.append(Problem(code=code, where=where, message=message))

    def unknown_keys(self, data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
        for key in data:
            if key not in known:
                name = key if isinstance(key, str) and len(key) <= 60 else shown(key)
                self.add(f"{where}.{name}" if where else str(name), f"unknown key (known: {', '.join(known)})")

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
        self.unknown_keys(defaults, _TASK_KEYS, "defaults")
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
            self.unknown_keys(raw, ("id", *_TASK_KEYS), where)
            task = self.task(_merge(defaults, raw), _Where(where, raw), task_id if isinstance(task_id, str) else "")
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
            self.task({**defaults, "goal": "-"}, _Where("bfcl", {}), "bfcl", stand_in=True)
        tasks = []
        for bfcl_task, world in found:
            where = _Where(f"bfcl ({bfcl_task.id})", {})
            first, *rest = bfcl_task.turns or ("",)
            raw = {"max_turns": REACT_TURNS, **defaults, "goal": first}  # ReAct: a model call per dependent call
            task = self.task(raw, where, bfcl_task.id, stand_in=True)
            if task is not None:
                # A turn may need no call (its ground truth is empty): a plan of no step, which a
                # run accepts only when its answer is reviewed.
                review = task.review or AnswerReviewSpec(checks=(says_something,), check_refs=(_SAYS_SOMETHING,))
                tasks.append(replace(task, goal=first, turns=tuple(rest), world=world, review=review))
        return tasks

    # -- one task ------------------------------------------------------------------------------

    def task(self, data: Mapping[str, Any], where: _Where, task_id: str, *, stand_in: bool = False) -> Task | None:
        """``stand_in``: the task's world gives the models it names none for."""
        before = len(self.problems)
        goal = data.get("goal")
        if not stand_in and (not isinstance(goal, str) or not goal.strip()):
            self.add(f"{where.task}.goal", "is required: the goal to run, as text")
        turns = self.strings(data.get("turns", []), where("turns"))
        if turns is not None and not all(t.strip() for t in turns):
            self.add(where("turns"), "each turn must be a non-empty request")
        elif turns is not None and len(turns) >= MAX_TURNS:
            self.add(where("turns"), f"holds {len(turns):,} turns; at most {MAX_TURNS - 1:,} after the goal")
        constraints = self.strings(data.get("constraints", []), where("constraints"))
        refs, tools = self.tools(data.get("tools", []), where("tools"))
        react = self.agent == "react"
        uses = {
            "planner": not react,
            "executor": not react or data.get("react_model") is None,
            "judge": True,
            "react_model": react,
            "extractor": not react,
        }
        models = {key: self.model(data.get(key), where(key), load=used) for key, used in uses.items()}
        react_model = models["react_model"]
        if self.agent == "planexec" and data.get("planner") is None and not stand_in:
            self.add(f"{where.task}.planner", "is required to run with the planexec agent, e.g. scripted:planner.json")
        if self.agent == "react" and react_model is None and data.get("executor") is None and not stand_in:
            self.add(
                f"{where.task}.react_model", "is required to run with --agent react (or give the task an executor)"
            )
        policy = self.choice(data.get("policy", "upfront"), ("upfront", "step"), where("policy"))
        replan = self.choice(
            data.get("replan", "on_failure"), ("on_failure", "after_each_step", "never"), where("replan")
        )
        budget = self.typed(Budget, data.get("budget", {}), where("budget"))
        limits = self.typed(Limits, data.get("limits", {}), where("limits"))
        max_turns = self.integer(data.get("max_turns", 10), where("max_turns"), minimum=1, maximum=MAX_TURNS)
        repeat = self.integer(data.get("repeat", 1), where("repeat"), minimum=1, maximum=MAX_REPEAT)
        settings = {
            role: self.settings(data.get(f"{role}_settings", {}), where(f"{role}_settings"))
            for role in ("planner", "executor", "judge")
        }
        step_timeout = data.get("step_timeout")
        if step_timeout is not None:
            message = number_problem(step_timeout, whole=False, minimum=0, maximum=MAX_NUMBER)
            if message is None and step_timeout <= 0:
                message = "must be a positive number of seconds"
            if message is not None:
                self.add(where("step_timeout"), message)
        turn_format = self.choice(data.get("turn_format", "nested"), ("nested", "flat"), where("turn_format"))
        sealed = data.get("sealed", False)
        if not isinstance(sealed, bool):
            self.add(where("sealed"), "must be true or false")
        elif models["extractor"] is not None and not sealed and not react:
            self.add(where("extractor"), "an extractor serves a sealed planner: give sealed: true too")
        elif sealed and policy == "step":
            self.add(where("sealed"), "a sealed planner plans upfront: give policy: upfront")
        ensemble = self.ensemble(data.get("ensemble"), where("ensemble"), load=uses["planner"])
        escalation = self.escalation(data.get("escalation", {}), where("escalation"))
        review = self.review(data.get("review"), where("review"), models["judge"])
        expect_tools = self.expect_tools(data.get("expect_tools"), where("expect_tools"), tools)
        expect_answer = self.expect_answer(data.get("expect_answer"), where("expect_answer"), models["judge"])
        faults = data.get("faults")
        if faults is not None:
            self.problems += fault_problems(faults, where("faults"))
        if len(self.problems) > before:
            return None
        return Task(
            id=task_id,
            goal=str(goal),
            turns=tuple(turns or ()),
            constraints=tuple(constraints or ()),
            tool_refs=refs,
            tools=tools,
            planner=models["planner"],
            executor=models["executor"],
            judge=models["judge"],
            react_model=react_model,
            policy=cast(Any, policy),
            replan=cast(Any, replan),
            budget=cast(Budget, budget),
            limits=cast(Limits, limits),
            max_turns=cast(int, max_turns),
            planner_settings=cast(ModelSettings, settings["planner"]),
            executor_settings=cast(ModelSettings, settings["executor"]),
            judge_settings=cast(ModelSettings, settings["judge"]),
            step_timeout=step_timeout,
            turn_format=cast(Any, turn_format),
            sealed=sealed is True,
            extractor=models["extractor"],
            ensemble=ensemble,
            escalation=cast(Escalation, escalation),
            review=review,
            expect_tools=expect_tools,
            expect_answer=expect_answer,
            repeat=cast(int, repeat),
            faults=faults,
        )

    def model(self, value: Any, where: str, *, load: bool = True) -> Any:
        """A model spec with its scripted paths anchored in the suite's folder; a model the agent will
        use (``load``) is resolved once per string to check it (nothing is sent to it)."""
        if value is None:
            return None
        if isinstance(value, str) and not load:
            if not value.strip():
                self.add(where, "must be a model string")
                return None
            return anchor_model(value, self.root)
        if isinstance(value, str):
            value = anchor_model(value, self.root)
            if value not in self._models:
                self._models[value] = model_problems(value, "")
            self.problems += [Problem(code=p.code, where=where, message=p.message) for p in self._models[value]]
            return value
        found = model_problems(value, where)
        self.problems += found
        return value

    def tools(self, value: Any, where: str) -> tuple[tuple[str, ...], Toolset]:
        if isinstance(value, str | Tool | Toolset):
            value = [value]
        if not isinstance(value, list | tuple):
            self.add(where, "must be a list of module:attribute references")
            return (), Toolset()
        refs: list[str] = []
        found: list[Tool | Toolset] = []
        for item in value:
            if isinstance(item, Tool | Toolset):
                found.append(item)
            elif isinstance(item, str):
                refs.append(item)
                if item not in self._tools:
                    problems: list[Problem] = []
                    self._tools[item] = load_tool_ref(item, self.root, where, problems)
                    self.problems += problems
                found += self._tools[item]
            else:
                self.add(where, f"{shown(item)} is not a module:attribute reference")
        try:
            return tuple(refs), Toolset(*found)
        except UsageError as e:
            self.problems += [Problem(code="tools", where=where, message=p.message) for p in e.problems]
            return tuple(refs), Toolset()

    def ensemble(self, value: Any, where: str, *, load: bool) -> EnsembleSpec | None:
        """The planner's ensemble: escalate_to (models, in order), escalate_on (triggers),
        confidence_below (0 to 1)."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.add(where, "must be a mapping of escalate_to, escalate_on and confidence_below")
            return None
        self.unknown_keys(value, ("escalate_to", "escalate_on", "confidence_below"), where)
        before = len(self.problems)
        named = value.get("escalate_to")
        if isinstance(named, str):
            named = [named]
        models = []
        if not isinstance(named, list) or not named:
            self.add(f"{where}.escalate_to", "must name at least one model to hand planning to")
        else:
            models = [self.model(m, f"{where}.escalate_to.{i}", load=load) for i, m in enumerate(named)]
        triggers = value.get("escalate_on", list(ENSEMBLE_TRIGGERS))
        if isinstance(triggers, str):
            triggers = [triggers]
        found = self.strings(triggers, f"{where}.escalate_on") or []
        for trigger in found:
            if trigger not in ENSEMBLE_TRIGGERS:
                self.add(f"{where}.escalate_on", f"{shown(trigger)} is not one of {', '.join(ENSEMBLE_TRIGGERS)}")
        below = value.get("confidence_below", 0.5)
        message = number_problem(below, whole=False, minimum=0, maximum=1)
        if message is not None:
            self.add(f"{where}.confidence_below", message)
        if len(self.problems) > before:
            return None
        return EnsembleSpec(
            escalate_to=tuple(models),
            escalate_on=cast(Any, tuple(dict.fromkeys(found))),
            confidence_below=float(below),
        )

    def escalation(self, value: Any, where: str) -> Escalation | None:
        """The escalation rules: confidence_floor (0 to 1), on_low_confidence, on_fail, retries."""
        if not isinstance(value, Mapping):
            self.add(where, "must be a mapping of confidence_floor, on_low_confidence, on_fail, retries")
            return None
        self.unknown_keys(value, ("confidence_floor", "on_low_confidence", "on_fail", "retries"), where)
        before = len(self.problems)
        floor = value.get("confidence_floor")
        message = number_problem(floor, whole=False, minimum=0, maximum=1, nullable=True)
        if message is not None:
            self.add(f"{where}.confidence_floor", message)
        low = self.choice(value.get("on_low_confidence", "ask"), ("ask", "stop"), f"{where}.on_low_confidence")
        on_fail = self.choice(value.get("on_fail", "patch"), ("patch", "retry", "review"), f"{where}.on_fail")
        retries = self.integer(value.get("retries", 1), f"{where}.retries", minimum=1, maximum=MAX_REPEAT)
        if on_fail == "review":
            self.add(f"{where}.on_fail", "review needs a human, and nobody is at hand during an evaluation")
        if len(self.problems) > before:
            return None
        return Escalation(
            confidence_floor=floor,
            on_low_confidence=cast(Any, low),
            on_fail=cast(Any, on_fail),
            retries=cast(int, retries),
        )

    def review(self, value: Any, where: str, judge_model: Any) -> AnswerReviewSpec | None:
        """The final answer's review: checks (module:attr references), rubric, max_rounds."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.add(where, "must be a mapping of checks, rubric and max_rounds")
            return None
        if "checklist" in value:
            self.add(f"{where}.checklist", "needs a human reviewer, and nobody is at hand during an evaluation")
        self.unknown_keys(value, ("checks", "rubric", "max_rounds", "checklist"), where)
        before = len(self.problems)
        refs = value.get("checks", [])
        if isinstance(refs, str):
            refs = [refs]
        refs = self.strings(refs, f"{where}.checks") or []
        checks = [check for ref in refs for check in load_check_ref(ref, self.root, f"{where}.checks", self.problems)]
        rubric = value.get("rubric")
        if rubric is not None and (not isinstance(rubric, str) or not rubric.strip()):
            self.add(f"{where}.rubric", "must be text: what a good answer is, in words")
        if rubric is not None and judge_model is None:
            self.add(f"{where}.rubric", "needs a judge model: the task's 'judge' (e.g. scripted:judge.json)")
        if not refs and rubric is None:
            self.add(where, "needs checks or a rubric")
        rounds = self.integer(value.get("max_rounds", 2), f"{where}.max_rounds", minimum=1, maximum=MAX_TURNS)
        if len(self.problems) > before:
            return None
        return AnswerReviewSpec(
            checks=tuple(checks), check_refs=tuple(refs), rubric=rubric, max_rounds=cast(int, rounds)
        )

    def expect_tools(self, value: Any, where: str, tools: Toolset) -> ToolExpectation | None:
        if value is None:
            return None
        if isinstance(value, list):
            value = {"match": "strict", "tools": value}
        if not isinstance(value, Mapping):
            self.add(where, "must be a mapping with 'match' and 'tools', or a list of tool names (strict)")
            return None
        self.unknown_keys(value, ("match", "tools"), where)
        match = self.choice(value.get("match", "strict"), MATCH_MODES, f"{where}.match")
        names = self.strings(value.get("tools"), f"{where}.tools")
        if names is None:
            return None
        unknown = [n for n in names if n not in tools]
        if unknown and len(tools) and not self.mcp:  # else checked when the servers have listed their tools
            self.add(f"{where}.tools", f"not among the task's tools: {', '.join(unknown)}")
        return ToolExpectation(match=cast(MatchMode, match), tools=tuple(names)) if match else None

    def expect_answer(self, value: Any, where: str, judge_model: Any) -> AnswerExpectation | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = {"exact": value}
        if not isinstance(value, Mapping):
            self.add(where, "must be a mapping with one of exact, contains, regex, and/or judge")
            return None
        self.unknown_keys(value, ("exact", "contains", "regex", "judge", "ignore_case"), where)
        given = [key for key in ("exact", "contains", "regex") if value.get(key) is not None]
        if len(given) > 1:
            self.add(where, f"give at most one of exact, contains, regex (not {' and '.join(given)})")
        if not given and value.get("judge") is None:
            self.add(where, "needs one of exact, contains, regex or judge")
        exact = value.get("exact")
        if exact is not None and (isinstance(exact, bool) or not isinstance(exact, str | int | float)):
            self.add(f"{where}.exact", "must be text")
        contains = value.get("contains")
        if isinstance(contains, str):
            contains = [contains]
        texts = self.strings(contains, f"{where}.contains") if contains is not None else []
        regex = value.get("regex")
        ignore_case = value.get("ignore_case", False)
        if not isinstance(ignore_case, bool):
            self.add(f"{where}.ignore_case", "must be true or false")
        if regex is not None and not isinstance(regex, str):
            self.add(f"{where}.regex", "must be text: a regular expression")
        elif regex is not None:
            try:
                re.compile(str(regex))
            except re.error as e:
                self.add(f"{where}.regex", f"does not compile: {e}")
        judge = self.judge(value.get("judge"), f"{where}.judge", judge_model)
        return AnswerExpectation(
            exact=None if exact is None else str(exact),
            contains=tuple(texts or ()),
            regex=None if regex is None else str(regex),
            judge=judge,
            ignore_case=ignore_case is True,
        )

    def judge(self, value: Any, where: str, judge_model: Any) -> JudgeCheck | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = {"rubric": value}
        if not isinstance(value, Mapping):
            self.add(where, "must be a mapping with a 'rubric'")
            return None
        self.unknown_keys(value, ("rubric", "model"), where)
        rubric = value.get("rubric")
        if not isinstance(rubric, str) or not rubric.strip():
            self.add(f"{where}.rubric", "is required: what a good answer is, in words")
        model = self.model(value.get("model"), f"{where}.model")
        if model is None and judge_model is None:
            self.add(where, "needs a judge model: the task's 'judge' (e.g. scripted:judge.json) or judge.model")
        return JudgeCheck(rubric=str(rubric), model=model)

    # -- small values ---------------------------------------------------------------------------

    def tolerances(self, value: Any) -> Tolerances | None:
        result = self.typed(Tolerances, value, "tolerances")
        return cast(Tolerances, result) if result is not None else None

    def typed(self, kind: type[Any], value: Any, where: str) -> Any:
        """An instance of the dataclass ``kind`` from a mapping of its fields, each number checked
        against its range (see ``_RANGES``); ``None`` only where the field allows it."""
        if not isinstance(value, Mapping):
            self.add(where, f"must be a mapping of {', '.join(f.name for f in fields(kind))}")
            return None
        known = {f.name: f for f in fields(kind)}
        self.unknown_keys(value, tuple(known), where)
        before = len(self.problems)
        good: dict[str, Any] = {}
        for key, item in value.items():
            if key not in known:
                continue
            kind_of = str(known[key].type)
            low, high = _RANGES.get(kind, {}).get(key, (0, MAX_NUMBER))
            whole = kind_of.startswith("int")
            message = number_problem(item, whole=whole, minimum=low, maximum=high, nullable="None" in kind_of)
            if message is not None:
                self.add(f"{where}.{key}", message)
            else:
                good[key] = item
        try:
            built = kind(**good)  # its own checks too, on the numbers that passed these
        except UsageError as e:
            self.problems += [Problem(code=p.code, where=f"{where}.{p.where}", message=p.message) for p in e.problems]
            return None
        return built if len(self.problems) == before else None

    def settings(self, value: Any, where: str) -> ModelSettings | None:
        """A role's model settings, from a mapping of their fields (in Python, also a ModelSettings)."""
        if isinstance(value, ModelSettings):
            return value
        try:
            return ModelSettings.from_dict(value, where=where)
        except UsageError as e:
            self.problems += e.problems
            return None

    def integer(self, value: Any, where: str, *, minimum: int, maximum: int) -> int | None:
        message = number_problem(value, whole=True, minimum=minimum, maximum=maximum)
        if message is not None:
            self.add(where, message)
            return None
        return cast(int, value)

    def choice(self, value: Any, choices: tuple[str, ...], where: str) -> str | None:
        if value in choices:
            return str(value)
        self.add(where, f"{shown(value)} is not one of {', '.join(choices)}")
        return None

    def strings(self, value: Any, where: str) -> list[str] | None:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.add(where, "must be a list of strings")
            return None
        return list(value)


class _Where:
    """Where a task's field is written: in the task, or in the suite's defaults when the task does
    not set it (so that a bad default is named once, where it is)."""

    def __init__(self, task: str, own: Mapping[str, Any]) -> None:
        self.task = task
        self.own = own

    def __call__(self, key: str) -> str:
        return f"{self.task}.{key}" if key in self.own else f"defaults.{key}"


def _merge(defaults: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, Any]:
    """The task's fields over the defaults; ``budget`` and ``limits`` merge key by key."""
    merged = {**defaults, **task}
    for key in _MERGED:
        base, own = defaults.get(key), task.get(key)
        if isinstance(base, Mapping) and isinstance(own, Mapping):
            merged[key] = {**base, **own}
    return merged
