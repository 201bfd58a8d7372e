"""Building an agent from the command line, recording how with the run, and building it again
from the log (``resume``, ``replay --fork-at``, ``approve``) with no flags.

``planexec run`` records an :class:`AgentSpec` in the run's metadata (``metadata["cli"]``): the
model strings, tool references, policy, replan policy, budget flags, the planner's and the
executor's model settings and the executor's step timeout, the pattern's rules (turn format,
escalation, the final answer's review), constraints, and the working directory that module
references are imported from. Flags given later override it for that command only (model settings
key by key).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from planexec.cli._agent_options import LOW_CONFIDENCE, ON_FAIL, POLICIES, REPLANS, TURN_FORMATS, AgentFlags
from planexec.cli._options import (
    Problems,
    Refused,
    importable,
    load_checks,
    load_model,
    load_tools,
    parse_budget,
    parse_choice,
    parse_count,
    parse_fraction,
    parse_seconds,
    parse_settings,
)
from planexec.cli._scripted import absolute_model_string, calls_made, rest_of_script
from planexec.errors import UsageError
from planexec.executor import ModelExecutor
from planexec.log import Event, RunStarted
from planexec.models import Model, ModelSettings, missing_keys, unsupported_settings
from planexec.planner import Planner, PolicyName, ReplanPolicy, TurnFormat
from planexec.runtime import Agent, AnswerReview, Approvals, Escalation
from planexec.store import RunStore
from planexec.tools import Toolset

__all__ = ["AgentSpec", "build_agent", "dropped_settings", "recorded_spec"]

SPEC_VERSION = 3
"""Version of the ``cli`` metadata (1: first version; 2: planner_settings, executor_settings and
step_timeout; 3: the rules, under ``rules``. What an earlier version lacks reads as unset)."""

_RULE_TEXTS = (
    "turn_format",
    "confidence_floor",
    "on_low_confidence",
    "on_fail",
    "fail_retries",
    "review_rubric",
    "review_rounds",
    "judge",
)
_RULE_LISTS = ("review_checks", "review_items")


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """How the command line builds an agent; recorded with each run it starts."""

    planner: str | None = None
    executor: str | None = None
    tools: tuple[str, ...] = ()
    policy: str = "upfront"
    replan: str = "on_failure"
    budget: Mapping[str, str] = field(default_factory=dict)
    """Raw budget flag values by :class:`Budget` field."""
    approve_plan: bool = False
    constraints: tuple[str, ...] = ()
    cwd: str | None = None
    """The directory ``module:attr`` references were imported from."""
    planner_settings: tuple[str, ...] = ()
    """Raw ``KEY=VALUE`` model settings of the planner; a later key wins."""
    executor_settings: tuple[str, ...] = ()
    """Raw ``KEY=VALUE`` model settings of the executor; a later key wins."""
    step_timeout: str | None = None
    """The executor's raw whole-step timeout."""
    rules: Mapping[str, Any] = field(default_factory=dict)
    """The raw rule flags that were given: turn format, escalation and the answer's review (texts,
    or lists of texts for ``review_checks`` and ``review_items``)."""

    @classmethod
    def for_run(cls, flags: AgentFlags, constraints: Sequence[str]) -> AgentSpec:
        return cls(
            rules=_rules_of(flags),
            planner=absolute_model_string(flags.planner) if flags.planner is not None else None,
            executor=absolute_model_string(flags.executor) if flags.executor is not None else None,
            tools=flags.tools,
            policy=flags.policy or "upfront",
            replan=flags.replan or "on_failure",
            budget=dict(flags.budget),
            approve_plan=bool(flags.approve_plan),
            constraints=tuple(constraints),
            cwd=os.getcwd(),
            planner_settings=flags.planner_settings,
            executor_settings=flags.executor_settings,
            step_timeout=flags.step_timeout,
        )

    def metadata(self) -> dict[str, Any]:
        """What ``Agent.start(metadata=...)`` records."""
        return {
            "cli": {
                "version": SPEC_VERSION,
                "planner": self.planner,
                "executor": self.executor,
                "tools": list(self.tools),
                "policy": self.policy,
                "replan": self.replan,
                "budget": dict(self.budget),
                "approve_plan": self.approve_plan,
                "constraints": list(self.constraints),
                "cwd": self.cwd,
                "planner_settings": list(self.planner_settings),
                "executor_settings": list(self.executor_settings),
                "step_timeout": self.step_timeout,
                "rules": {k: list(v) if isinstance(v, tuple) else v for k, v in self.rules.items()},
            }
        }

    def with_flags(self, flags: AgentFlags) -> AgentSpec:
        """This spec with what ``flags`` say instead (budget flags one by one)."""
        return replace(
            self,
            planner=absolute_model_string(flags.planner) if flags.planner is not None else self.planner,
            executor=absolute_model_string(flags.executor) if flags.executor is not None else self.executor,
            tools=flags.tools or self.tools,
            policy=flags.policy if flags.policy is not None else self.policy,
            replan=flags.replan if flags.replan is not None else self.replan,
            budget={**self.budget, **flags.budget},
            approve_plan=flags.approve_plan if flags.approve_plan is not None else self.approve_plan,
            planner_settings=self.planner_settings + flags.planner_settings,
            executor_settings=self.executor_settings + flags.executor_settings,
            step_timeout=flags.step_timeout if flags.step_timeout is not None else self.step_timeout,
            rules={**self.rules, **_rules_of(flags)},
        )


def _rules_of(flags: AgentFlags) -> dict[str, Any]:
    """The rule flags that were given (a list flag only when given at least once)."""
    given: dict[str, Any] = {key: getattr(flags, key) for key in _RULE_TEXTS if getattr(flags, key) is not None}
    given |= {key: tuple(getattr(flags, key)) for key in _RULE_LISTS if getattr(flags, key)}
    if flags.judge is not None:
        given["judge"] = absolute_model_string(flags.judge)
    return given


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _from_metadata(data: Mapping[str, Any], run_id: str, problems: Problems) -> AgentSpec:
    """An :class:`AgentSpec` from recorded ``cli`` metadata; anything unreadable is a problem."""
    where = f"run {run_id}"
    bad: list[str] = []

    def text(key: str, default: str | None) -> str | None:
        value = data.get(key, default)
        if value is None or isinstance(value, str):
            return value
        bad.append(key)
        return default

    tools = _strings(data.get("tools", []))
    constraints = _strings(data.get("constraints", []))
    planner_settings = _strings(data.get("planner_settings", []))
    executor_settings = _strings(data.get("executor_settings", []))
    budget = data.get("budget", {})
    if not isinstance(budget, dict) or not all(isinstance(v, str) for v in budget.values()):
        bad.append("budget")
        budget = {}
    approve_plan = data.get("approve_plan", False)
    if not isinstance(approve_plan, bool):
        bad.append("approve_plan")
        approve_plan = False
    rules: dict[str, Any] = {}
    raw_rules = data.get("rules", {})
    if not isinstance(raw_rules, dict):
        bad.append("rules")
        raw_rules = {}
    for key, value in raw_rules.items():
        if key in _RULE_TEXTS and isinstance(value, str):
            rules[key] = value
        elif key in _RULE_LISTS and _strings(value) is not None:
            rules[key] = _strings(value)
        else:
            bad.append(f"rules.{key}")
    spec = AgentSpec(
        planner=text("planner", None),
        executor=text("executor", None),
        tools=tools if tools is not None else (),
        policy=text("policy", "upfront") or "upfront",
        replan=text("replan", "on_failure") or "on_failure",
        budget=budget,
        approve_plan=approve_plan,
        constraints=constraints if constraints is not None else (),
        cwd=text("cwd", None),
        planner_settings=planner_settings if planner_settings is not None else (),
        executor_settings=executor_settings if executor_settings is not None else (),
        step_timeout=text("step_timeout", None),
        rules=rules,
    )
    listed = (
        ("tools", tools),
        ("constraints", constraints),
        ("planner_settings", planner_settings),
        ("executor_settings", executor_settings),
    )
    bad += [key for key, value in listed if value is None]
    for key in bad:
        problems.add(where, f"the recorded command line has an unreadable {key!r}; give it as a flag")
    return spec


def _from_log(first: RunStarted) -> AgentSpec:
    """What a run that was not started by ``planexec run`` says about itself."""
    budget = {name: str(value) for name, value in first.budget.items() if value is not None}
    return AgentSpec(policy=first.policy, replan=first.replan, budget=budget, constraints=first.constraints)


async def recorded_spec(store: RunStore, first: RunStarted, problems: Problems) -> tuple[AgentSpec, bool]:
    """The spec a run recorded, and whether it recorded one (a fork records none: its origin's is used)."""
    seen: set[str] = set()
    current = first
    while True:
        cli = current.config.get("cli")
        if isinstance(cli, dict):
            return _from_metadata(cli, current.run_id, problems), True
        origin = current.config.get("forked_from")
        if not isinstance(origin, str) or origin in seen:
            return _from_log(first), False
        seen.add(origin)
        log = await store.read(origin)
        if not log or not isinstance(log[0].event, RunStarted):
            return _from_log(first), False
        current = log[0].event


def _model(
    flag: str, spec: str, *, role: str, recorded: str | None, used: Sequence[Event], problems: Problems
) -> Model | None:
    """The model ``spec`` names; a scripted model the run recorded skips the replies it used."""
    model = load_model(flag, spec, problems)
    for missing in missing_keys([model]):
        problems.add(flag, str(missing))
    if model is None or recorded is None or absolute_model_string(spec) != recorded:
        return model
    try:
        return rest_of_script(spec, model, calls_made(used, role=role, model=model.name))
    except Exception as e:
        problems.add(flag, f"cannot read the script again: {type(e).__name__}: {e}")
        return None


def build_agent(
    spec: AgentSpec,
    *,
    store: RunStore,
    approvals: Approvals,
    recorded: AgentSpec | None = None,
    used: Sequence[Event] = (),
    needs_tools: Sequence[str] = (),
    picked_up: bool = False,
    problems: Problems | None = None,
) -> Agent:
    """The agent ``spec`` describes, logging to ``store``; raises :class:`Refused` listing every
    problem (with ``problems`` found before).

    ``recorded``: the spec the run recorded, when picking a run up; a scripted model it names
    skips the replies the events ``used`` show it gave. ``needs_tools``: tools the run used.
    ``picked_up``: the agent goes on with a stored run (``resume``, ``replay``, ``approve``).
    """
    problems = problems if problems is not None else Problems()
    if spec.cwd:
        importable(spec.cwd)
    policy = parse_choice("--policy", spec.policy, POLICIES, problems)
    replan = parse_choice("--replan", spec.replan, REPLANS, problems)
    budget = parse_budget(spec.budget, problems)
    planner_settings = parse_settings("--planner-setting", spec.planner_settings, problems)
    executor_settings = parse_settings("--executor-setting", spec.executor_settings, problems)
    step_timeout = parse_seconds("--step-timeout", spec.step_timeout, problems)
    turn_format = parse_choice("--turn-format", spec.rules.get("turn_format", "nested"), TURN_FORMATS, problems)
    escalation = _escalation(spec.rules, problems)
    review = _review(spec.rules, problems)
    if spec.executor is None:
        for flag, given in (
            ("--executor-setting", bool(spec.executor_settings)),
            ("--step-timeout", step_timeout is not None),
        ):
            if given:
                problems.add(flag, "applies to the executor: name its model with --executor")
    planner = None
    if spec.planner is None:
        needed = "the run records no planner model" if picked_up else "a planning model is required"
        problems.add("--planner", f"{needed}, e.g. --planner scripted:replies.json")
    else:
        planner = _model(
            "--planner",
            spec.planner,
            role="planner",
            recorded=recorded.planner if recorded else None,
            used=used,
            problems=problems,
        )
    executor = None
    if spec.executor is not None:
        executor = _model(
            "--executor",
            spec.executor,
            role="executor",
            recorded=recorded.executor if recorded else None,
            used=used,
            problems=problems,
        )
    before = len(problems)
    tools = load_tools(spec.tools, problems)
    if needs_tools and len(problems) == before:
        have = Toolset(*tools).names
        missing = [name for name in needs_tools if name not in have]
        if missing:
            which = "a tool that is not given" if len(missing) == 1 else "tools that are not given"
            problems.add("--tools", f"the run used {which}: {', '.join(missing)}")
    if problems or planner is None or policy is None or replan is None or turn_format is None:
        raise Refused(problems)
    if planner_settings is None or executor_settings is None:  # never without a problem added
        raise Refused(problems)
    try:
        return Agent(
            Planner(
                model=planner,
                policy=cast(PolicyName, policy),
                replan=cast(ReplanPolicy, replan),
                settings=planner_settings,
                turn_format=cast(TurnFormat, turn_format),
            ),
            tools=tools,
            executor=(
                ModelExecutor(model=executor, settings=executor_settings, step_timeout=step_timeout)
                if executor is not None
                else None
            ),
            budget=budget,
            approvals=approvals,
            store=store,
            escalation=escalation,
            review=review,
        )
    except UsageError as e:
        problems.add_usage_error("", e)
        raise Refused(problems) from None


_RULE_FLAGS = {
    "confidence_floor": "--confidence-floor",
    "on_low_confidence": "--on-low-confidence",
    "on_fail": "--on-fail",
    "retries": "--fail-retries",
    "checks": "--review-check",
    "rubric": "--review-rubric",
    "judge": "--judge",
    "checklist": "--review-item",
    "max_rounds": "--review-rounds",
}


def _escalation(rules: Mapping[str, Any], problems: Problems) -> Escalation | None:
    """The escalation rules the flags give; None (the defaults) when they give none."""
    if not any(key in rules for key in ("confidence_floor", "on_low_confidence", "on_fail", "fail_retries")):
        return None
    before = len(problems)
    floor = parse_fraction("--confidence-floor", rules.get("confidence_floor"), problems)
    low = parse_choice("--on-low-confidence", rules.get("on_low_confidence", "ask"), LOW_CONFIDENCE, problems)
    on_fail = parse_choice("--on-fail", rules.get("on_fail", "patch"), ON_FAIL, problems)
    retries = parse_count("--fail-retries", rules.get("fail_retries"), problems, default=1)
    if len(problems) > before:
        return None
    return Escalation(
        confidence_floor=floor,
        on_low_confidence=cast(Any, low),
        on_fail=cast(Any, on_fail),
        retries=cast(int, retries),
    )


def _review(rules: Mapping[str, Any], problems: Problems) -> AnswerReview | None:
    """The final answer's review the flags give; None when they give none."""
    keys = ("review_checks", "review_rubric", "review_items", "judge", "review_rounds")
    if not any(key in rules for key in keys):
        return None
    before = len(problems)
    checks = load_checks(tuple(rules.get("review_checks", ())), problems)
    judge = rules.get("judge")
    judge_model = load_model("--judge", judge, problems) if judge is not None else None
    if judge_model is not None:
        for missing in missing_keys([judge_model]):
            problems.add("--judge", str(missing))
    rounds = parse_count("--review-rounds", rules.get("review_rounds"), problems, default=2)
    failed = len(problems) > before
    try:  # checked even when a flag failed, so that every problem is listed at once
        review = AnswerReview(
            checks=checks,
            rubric=rules.get("review_rubric"),
            judge=judge_model if judge_model is not None else judge,
            checklist=tuple(rules.get("review_items", ())),
            max_rounds=2 if rounds is None else rounds,
        )
    except UsageError as e:
        for p in e.problems:
            if not (failed and p.where == "review"):  # "set checks ..." only repeats a check that did not load
                problems.add(_RULE_FLAGS.get(p.where.partition("[")[0], "--review-check"), p.message)
        return None
    return None if failed else review


def dropped_settings(agent: Agent) -> list[str]:
    """A line for each model setting a role's model will not send (the run's log records them too)."""
    roles: list[tuple[str, Model, ModelSettings]] = [
        ("planner", agent.planner.resolved_model(), agent.planner.settings)
    ]
    roles += [
        (f"executor {name!r}", e.resolved_model(), e.settings)
        for name, e in agent.executors.items()
        if isinstance(e, ModelExecutor)
    ]
    return [
        f"the {role}'s {setting} is not sent: {why}"
        for role, model, settings in roles
        for setting, why in unsupported_settings(model, settings).items()
    ]
