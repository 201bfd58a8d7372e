"""Reading one task of a suite (its own fields over the suite's defaults) to a checked :class:`Task`:
its models, how it plans and runs, and what it expects of a run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from planexec.eval._faults import fault_problems
from planexec.eval._limits import MAX_NUMBER, MAX_REPEAT, MAX_TURNS, number_problem, shown
from planexec.eval._read_fields import FieldReader, Where
from planexec.eval._refs import load_check_ref
from planexec.eval._suite import (
    MATCH_MODES,
    AnswerExpectation,
    AnswerReviewSpec,
    EnsembleSpec,
    JudgeCheck,
    MatchMode,
    Task,
    ToolExpectation,
)
from planexec.planner import ENSEMBLE_TRIGGERS, PLANNER_POLICIES, Upfront
from planexec.runtime import Budget, Escalation, Limits
from planexec.tools import Toolset

__all__ = ["TASK_KEYS", "TaskReader"]

TASK_KEYS = (
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
"""The fields of a task (besides its ``id``), in a task or in the suite's defaults."""


class TaskReader(FieldReader):
    """Reads a suite's tasks, collecting every problem instead of stopping at the first."""

    def task(self, data: Mapping[str, Any], where: Where, task_id: str, *, stand_in: bool = False) -> Task | None:
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
        models = self.task_models(data, where, stand_in=stand_in)
        run = self.task_run(data, where)
        planning = self.task_planning(data, where, models, run["policy"])
        expected = self.task_expected(data, where, tools, models["judge"])
        if len(self.problems) > before:
            return None
        return Task(
            id=task_id,
            goal=str(goal),
            turns=tuple(turns or ()),
            constraints=tuple(constraints or ()),
            tool_refs=refs,
            tools=tools,
            **models,
            **run,
            **planning,
            **expected,
        )

    def task_models(self, data: Mapping[str, Any], where: Where, *, stand_in: bool) -> dict[str, Any]:
        """The task's models (planner, executor, judge, react_model, extractor): those the agent
        uses are resolved to check them."""
        react = self.agent == "react"
        uses = {
            "planner": not react,
            "executor": not react or data.get("react_model") is None,
            "judge": True,
            "react_model": react,
            "extractor": not react,
        }
        models = {key: self.model(data.get(key), where(key), load=used) for key, used in uses.items()}
        if self.agent == "planexec" and data.get("planner") is None and not stand_in:
            self.add(f"{where.task}.planner", "is required to run with the planexec agent, e.g. scripted:planner.json")
        if react and models["react_model"] is None and data.get("executor") is None and not stand_in:
            self.add(
                f"{where.task}.react_model", "is required to run with --agent react (or give the task an executor)"
            )
        return models

    def task_run(self, data: Mapping[str, Any], where: Where) -> dict[str, Any]:
        """How the task's runs plan and are bounded: policy, replan, budget, limits, turns,
        repeats, the roles' model settings, the step timeout and the turn format."""
        policy = self.choice(data.get("policy", Upfront.name), PLANNER_POLICIES.names(), where("policy"))
        replan = self.choice(
            data.get("replan", "on_failure"), ("on_failure", "after_each_step", "never"), where("replan")
        )
        budget = self.typed(Budget, data.get("budget", {}), where("budget"))
        limits = self.typed(Limits, data.get("limits", {}), where("limits"))
        max_turns = self.integer(data.get("max_turns", 10), where("max_turns"), minimum=1, maximum=MAX_TURNS)
        repeat = self.integer(data.get("repeat", 1), where("repeat"), minimum=1, maximum=MAX_REPEAT)
        settings = {
            f"{role}_settings": self.settings(data.get(f"{role}_settings", {}), where(f"{role}_settings"))
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
        return {
            "policy": policy,
            "replan": replan,
            "budget": budget,
            "limits": limits,
            "max_turns": max_turns,
            "repeat": repeat,
            **settings,
            "step_timeout": step_timeout,
            "turn_format": turn_format,
        }

    def task_planning(
        self, data: Mapping[str, Any], where: Where, models: Mapping[str, Any], policy: str | None
    ) -> dict[str, Any]:
        """Sealed planning (with its extractor) and the planner's ensemble."""
        sealed = data.get("sealed", False)
        if not isinstance(sealed, bool):
            self.add(where("sealed"), "must be true or false")
        elif models["extractor"] is not None and not sealed and self.agent != "react":
            self.add(where("extractor"), "an extractor serves a sealed planner: give sealed: true too")
        elif sealed and PLANNER_POLICIES.unsealable(policy) is not None:
            give = " or ".join(p.name for p in PLANNER_POLICIES.sealable())
            self.add(where("sealed"), f"a sealed planner plans {PLANNER_POLICIES.how_sealed()}: give policy: {give}")
        ensemble = self.ensemble(data.get("ensemble"), where("ensemble"), load=self.agent != "react")
        return {"sealed": sealed is True, "ensemble": ensemble}

    def task_expected(self, data: Mapping[str, Any], where: Where, tools: Toolset, judge: Any) -> dict[str, Any]:
        """Escalation, the answer's review, what a run is expected to do, and the faults injected."""
        escalation = self.escalation(data.get("escalation", {}), where("escalation"))
        review = self.review(data.get("review"), where("review"), judge)
        expect_tools = self.expect_tools(data.get("expect_tools"), where("expect_tools"), tools)
        expect_answer = self.expect_answer(data.get("expect_answer"), where("expect_answer"), judge)
        faults = data.get("faults")
        if faults is not None:
            self.problems += fault_problems(faults, where("faults"))
        return {
            "escalation": cast(Escalation, escalation),
            "review": review,
            "expect_tools": expect_tools,
            "expect_answer": expect_answer,
            "faults": faults,
        }

    # -- a task's parts ---------------------------------------------------------------------------

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
