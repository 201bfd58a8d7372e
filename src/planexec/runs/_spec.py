"""An agent described by texts — model strings, ``module:attr`` tool references, policies, budget
caps, model settings and the pattern's rules — recorded with each run it starts, so that any
process can build the agent again from the run's log (to resume it, fork it or answer it).

``planexec run`` records an :class:`AgentSpec` in the run's metadata (``metadata["cli"]``); a
server registering agents from spec files reads the same fields with :meth:`AgentSpec.from_dict`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from planexec.errors import Problem, UsageError
from planexec.executor import ModelExecutor
from planexec.log import Event, RunStarted
from planexec.mcp import MCPHttp, MCPStdio, MCPToolset
from planexec.models import Model, ModelSettings, Providers, missing_keys, unsupported_settings
from planexec.planner import ENSEMBLE_TRIGGERS, Ensemble, EnsembleTrigger, Planner, PolicyName, ReplanPolicy, TurnFormat
from planexec.runs._loading import (
    importable,
    load_checks,
    load_executors,
    load_model,
    load_tools,
    parse_budget,
    parse_choice,
    parse_count,
    parse_fraction,
    parse_seconds,
    parse_settings,
)
from planexec.runs._problems import Problems
from planexec.runs._scripted import absolute_model_string, calls_made, rest_of_script
from planexec.runtime import Agent, AnswerReview, Approvals, Escalation, Limits
from planexec.store import RunStore
from planexec.tools import Toolset
from planexec.trust import TrustPolicy

__all__ = [
    "LOW_CONFIDENCE",
    "ON_FAIL",
    "POLICIES",
    "REPLANS",
    "RULE_FLAGS",
    "RULE_LISTS",
    "RULE_TEXTS",
    "SPEC_VERSION",
    "TURN_FORMATS",
    "AgentSpec",
    "Recorded",
    "build_agent",
    "dropped_settings",
    "read_mcp_servers",
    "recorded_spec",
]

SPEC_VERSION = 9
"""Version of the recorded spec (1: first version; 2: planner_settings, executor_settings and
step_timeout; 3: the rules, under ``rules``; 4: mcp and mcp_headers; 5: the planner's ensemble,
as the rules escalate_to, escalate_on and confidence_below; 6: executors and memory; 7: sealed
planning, as the rules sealed (true or false) and extractor (a model string); 8: trust, as the
rules trusted_tools (tool names) and untrusted_effects (true or false); 9: what an untrusted
answer does, as the rule untrusted_answer (label, ask or withhold). What an earlier version lacks
reads as unset)."""

POLICIES = ("upfront", "step")
REPLANS = ("on_failure", "after_each_step", "never")
TURN_FORMATS = ("nested", "flat")
LOW_CONFIDENCE = ("ask", "stop")
ON_FAIL = ("patch", "retry", "review")
ON_BUDGET = ("auto", "ask", "stop")
OVER_FORECAST = ("replan", "ask", "run")

RULE_TEXTS = (
    "turn_format",
    "confidence_floor",
    "on_low_confidence",
    "on_fail",
    "fail_retries",
    "review_rubric",
    "review_rounds",
    "judge",
    "confidence_below",
    "on_budget",
    "over_forecast",
    "extractor",
    "untrusted_answer",
)
"""Rules given as one text each."""
RULE_LISTS = ("review_checks", "review_items", "escalate_to", "escalate_on", "trusted_tools")
"""Rules given as a list of texts."""
RULE_FLAGS = ("sealed", "untrusted_effects")
"""Rules given as true or false."""

METADATA_KEY = "cli"
"""Where in a run's metadata its spec is recorded."""


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """How to build an agent, as texts; recorded with each run it starts.

    ``planner``/``executor``/``rules["judge"]``/``rules["escalate_to"]``/``rules["extractor"]`` are model strings
    (``scripted:FILE`` is made absolute when recorded); ``tools`` are ``module:attr`` references imported from ``cwd``;
    ``budget`` maps :class:`~planexec.Budget` fields to numbers as text (``"none"`` lifts a cap);
    settings are ``KEY=VALUE`` texts, a later key winning. ``mcp``: MCP servers whose tools the
    agent uses, each a command line (spawned, spoken to over stdio) or an ``http://`` or ``https://`` URL
    (streamable HTTP); added in spec version 4. ``mcp_headers``: ``NAME: VALUE`` headers sent to
    every URL server, ``${VAR}`` in a value read from the environment when the agent is built
    (the spec keeps the reference, never the value). ``executors``: ``module:attr`` references to
    executors (or lists of them) steps may be routed to, such as a
    :class:`~planexec.executor.RayExecutor` named ``tools`` that runs every tool step on a Ray
    cluster; ``memory``: the agent remembers plans that met their goals in its run store and
    reuses them (:class:`~planexec.memory.PlanMemory`; whoever runs the agent gives it the memory:
    ``planexec worker`` one shared by all its runs); both added in spec version 6.
    """

    planner: str | None = None
    executor: str | None = None
    tools: tuple[str, ...] = ()
    mcp: tuple[str, ...] = ()
    mcp_headers: tuple[str, ...] = ()
    executors: tuple[str, ...] = ()
    memory: bool = False
    policy: str = "upfront"
    replan: str = "on_failure"
    budget: Mapping[str, str] = field(default_factory=dict)
    """Raw budget values by :class:`Budget` field."""
    approve_plan: bool = False
    constraints: tuple[str, ...] = ()
    cwd: str | None = None
    """The directory ``module:attr`` references are imported from."""
    planner_settings: tuple[str, ...] = ()
    """Raw ``KEY=VALUE`` model settings of the planner; a later key wins."""
    executor_settings: tuple[str, ...] = ()
    """Raw ``KEY=VALUE`` model settings of the executor; a later key wins."""
    step_timeout: str | None = None
    """The executor's raw whole-step timeout."""
    rules: Mapping[str, Any] = field(default_factory=dict)
    """The rules given: turn format, escalation, the planner's ensemble, sealed planning and the
    answer's review (texts, tuples of texts for ``review_checks``, ``review_items``,
    ``escalate_to`` and ``escalate_on``, true or false for ``sealed``)."""

    def recorded(self) -> AgentSpec:
        """This spec as it is recorded: scripted model files made absolute, ``cwd`` filled in."""
        rules = dict(self.rules)
        for key in ("judge", "extractor"):
            if isinstance(rules.get(key), str):
                rules[key] = absolute_model_string(rules[key])
        if isinstance(rules.get("escalate_to"), tuple):
            rules["escalate_to"] = tuple(absolute_model_string(m) for m in rules["escalate_to"])
        return AgentSpec(
            planner=absolute_model_string(self.planner) if self.planner is not None else None,
            executor=absolute_model_string(self.executor) if self.executor is not None else None,
            tools=self.tools,
            mcp=self.mcp,
            mcp_headers=self.mcp_headers,
            executors=self.executors,
            memory=self.memory,
            policy=self.policy,
            replan=self.replan,
            budget=dict(self.budget),
            approve_plan=self.approve_plan,
            constraints=self.constraints,
            cwd=self.cwd if self.cwd is not None else os.getcwd(),
            planner_settings=self.planner_settings,
            executor_settings=self.executor_settings,
            step_timeout=self.step_timeout,
            rules=rules,
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON data (with its version), as recorded and as a spec file holds it."""
        return {
            "version": SPEC_VERSION,
            "planner": self.planner,
            "executor": self.executor,
            "tools": list(self.tools),
            "mcp": list(self.mcp),
            "mcp_headers": list(self.mcp_headers),
            "executors": list(self.executors),
            "memory": self.memory,
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

    def metadata(self) -> dict[str, Any]:
        """What ``Agent.start(metadata=...)`` records so that the run can be picked up anywhere."""
        return {METADATA_KEY: self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "spec") -> AgentSpec:
        """A spec from JSON data (:meth:`to_dict`'s, any earlier version); raises
        :class:`~planexec.UsageError` listing every key that cannot be read."""
        problems = Problems()
        spec = _from_dict(data, where, problems)
        problems.raise_if_any("the agent spec cannot be read")
        return spec


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _from_dict(data: Mapping[str, Any], where: str, problems: Problems) -> AgentSpec:
    """A spec from recorded data; every key that cannot be read is a problem (and reads as unset)."""
    bad: list[str] = []
    if not isinstance(data, Mapping):
        problems.add(where, f"is a {type(data).__name__}, not an object of spec fields")
        return AgentSpec()
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SPEC_VERSION:
        bad.append("version")

    def text(key: str, default: str | None) -> str | None:
        value = data.get(key, default)
        if value is None or isinstance(value, str):
            return value
        bad.append(key)
        return default

    tools = _strings(data.get("tools", []))
    mcp = _strings(data.get("mcp", []))
    mcp_headers = _strings(data.get("mcp_headers", []))
    executors = _strings(data.get("executors", []))
    constraints = _strings(data.get("constraints", []))
    planner_settings = _strings(data.get("planner_settings", []))
    executor_settings = _strings(data.get("executor_settings", []))
    budget = data.get("budget", {})
    if not isinstance(budget, Mapping) or not all(isinstance(v, str) for v in budget.values()):
        bad.append("budget")
        budget = {}
    approve_plan = data.get("approve_plan", False)
    if not isinstance(approve_plan, bool):
        bad.append("approve_plan")
        approve_plan = False
    memory = data.get("memory", False)
    if not isinstance(memory, bool):
        bad.append("memory")
        memory = False
    rules: dict[str, Any] = {}
    raw_rules = data.get("rules", {})
    if not isinstance(raw_rules, Mapping):
        bad.append("rules")
        raw_rules = {}
    for key, value in raw_rules.items():
        if key in RULE_TEXTS and isinstance(value, str):
            rules[key] = value
        elif key in RULE_LISTS and _strings(value) is not None:
            rules[key] = _strings(value)
        elif key in RULE_FLAGS and isinstance(value, bool):
            rules[key] = value
        else:
            bad.append(f"rules.{key}")
    known = {
        "version",
        "planner",
        "executor",
        "tools",
        "mcp",
        "mcp_headers",
        "executors",
        "memory",
        "policy",
        "replan",
        "budget",
        "approve_plan",
        "constraints",
        "cwd",
        "planner_settings",
        "executor_settings",
        "step_timeout",
        "rules",
    }
    bad += [str(key) for key in data if key not in known]
    spec = AgentSpec(
        planner=text("planner", None),
        executor=text("executor", None),
        tools=tools if tools is not None else (),
        mcp=mcp if mcp is not None else (),
        mcp_headers=mcp_headers if mcp_headers is not None else (),
        executors=executors if executors is not None else (),
        memory=memory,
        policy=text("policy", "upfront") or "upfront",
        replan=text("replan", "on_failure") or "on_failure",
        budget=dict(budget),
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
        ("mcp", mcp),
        ("mcp_headers", mcp_headers),
        ("executors", executors),
        ("constraints", constraints),
        ("planner_settings", planner_settings),
        ("executor_settings", executor_settings),
    )
    bad += [key for key, value in listed if value is None]
    for key in bad:
        problems.add(where, f"the spec has an unreadable {key!r}; give it again", code="spec")
    return spec


def mcp_toolsets(
    servers: Sequence[str], cwd: str | None, problems: Problems, *, headers: Sequence[str] = ()
) -> list[MCPToolset]:
    """A toolset for each MCP server: a URL is reached over streamable HTTP (with ``headers``:
    ``NAME: VALUE`` texts, ``${VAR}`` read from the environment), anything else is a command line
    spawned (from ``cwd``) and spoken to over stdio."""
    toolsets = []
    sent = mcp_headers(headers, problems)
    if headers and not any(s.startswith(("http://", "https://")) for s in servers):
        problems.add("mcp_headers", "headers are sent to MCP servers given by URL, and none is given")
    for server in servers:
        where = f"mcp {server!r}"
        try:
            if server.startswith(("http://", "https://")):
                toolsets.append(MCPToolset(server=MCPHttp(url=server, headers=sent)))
                continue
            if "://" in server.split(" ", 1)[0]:
                problems.add(where, "an MCP server's URL is http:// or https://")
                continue
            words = shlex.split(server)
        except ValueError as e:
            problems.add(where, f"cannot read {server!r} as a command line: {e}")
            continue
        except UsageError as e:
            problems.add_usage_error(where, e)
            continue
        if not words:
            problems.add(where, "an MCP server is a command line or an http:// or https:// URL")
            continue
        toolsets.append(MCPToolset(server=MCPStdio(command=words[0], args=tuple(words[1:]), cwd=cwd)))
    return toolsets


def read_mcp_servers(servers: Sequence[str], cwd: str | None) -> tuple[list[MCPToolset], list[Problem]]:
    """The toolsets of MCP servers given as texts (a command line, or an http:// or https:// URL;
    the forms of ``AgentSpec.mcp``), not yet open; and every problem with the texts, each under
    ``mcp 'TEXT'``."""
    problems = Problems()
    toolsets = mcp_toolsets(servers, cwd, problems)
    return toolsets, list(problems)


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRET_HEADER = re.compile(r"authorization|cookie|key|token|secret|password", re.IGNORECASE)


def mcp_headers(headers: Sequence[str], problems: Problems) -> dict[str, str]:
    """``NAME: VALUE`` texts as headers, ``${VAR}`` in a value replaced by the environment's. A
    header that carries a credential must name a variable: the spec is recorded with every run,
    and a secret written out in it would be too."""
    sent: dict[str, str] = {}
    for text in headers:
        where = f"mcp_headers {text.split(':', 1)[0]!r}"
        name, colon, value = text.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _HEADER_NAME.fullmatch(name):
            problems.add(where, "a header is NAME: VALUE, NAME letters, digits and - (e.g. 'X-Team: ops')")
            continue
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            problems.add(where, "a header's value holds no control characters")
            continue
        if _SECRET_HEADER.search(name) and not _VARIABLE.search(value):
            problems.add(
                where,
                f"{name} carries a credential: give it from the environment, e.g. '{name}: Bearer ${{MCP_TOKEN}}' "
                "(the spec, recorded with the run, keeps the reference, not the secret)",
            )
            continue
        missing = [v for v in _VARIABLE.findall(value) if v not in os.environ]
        if missing:
            problems.add(where, f"the environment has no {', '.join(missing)}")
            continue
        sent[name] = _VARIABLE.sub(lambda m: os.environ[m.group(1)], value)
    return sent


def _from_log(first: RunStarted) -> AgentSpec:
    """What a run that recorded no spec says about itself."""
    budget = {name: str(value) for name, value in first.budget.items() if value is not None}
    return AgentSpec(policy=first.policy, replan=first.replan, budget=budget, constraints=first.constraints)


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """The spec a run recorded: ``own`` is False when the run recorded none (then ``spec`` is what
    its first event says); ``problems`` lists the recorded fields that could not be read."""

    spec: AgentSpec
    own: bool
    problems: tuple[Problem, ...] = ()


async def recorded_spec(store: RunStore, first: RunStarted) -> Recorded:
    """The spec a run recorded (a fork records none: its origin's is used)."""
    seen: set[str] = set()
    current = first
    while True:
        recorded = current.config.get(METADATA_KEY)
        if isinstance(recorded, dict):
            problems = Problems()
            spec = _from_dict(recorded, f"run {current.run_id}", problems)
            return Recorded(spec=spec, own=True, problems=tuple(problems))
        origin = current.config.get("forked_from")
        if not isinstance(origin, str) or origin in seen:
            return Recorded(spec=_from_log(first), own=False)
        seen.add(origin)
        log = await store.read(origin)
        if not log or not isinstance(log[0].event, RunStarted):
            return Recorded(spec=_from_log(first), own=False)
        current = log[0].event


def _model(
    where: str,
    spec: str,
    *,
    role: str,
    recorded: str | None,
    used: Sequence[Event],
    problems: Problems,
    providers: Providers | None,
) -> Model | None:
    """The model ``spec`` names; a scripted model the run recorded skips the replies it used."""
    model = load_model(where, spec, problems, providers)
    for missing in missing_keys([model]):
        problems.add(where, str(missing))
    if model is None or recorded is None or absolute_model_string(spec) != recorded:
        return model
    return rest_of_script(spec, model, calls_made(used, role=role, model=model.name))


def build_agent(
    spec: AgentSpec,
    *,
    store: RunStore,
    approvals: Approvals | None = None,
    recorded: Recorded | None = None,
    used: Sequence[Event] = (),
    needs_tools: Sequence[str] = (),
    providers: Providers | None = None,
) -> Agent:
    """The agent ``spec`` describes, logging to ``store``; raises :class:`~planexec.UsageError`
    listing every problem (those of ``recorded`` first). Model strings are resolved through
    ``providers`` (the default ones when None), which the agent also charges and limits by.

    ``recorded``: what the run recorded, when picking a run up; a scripted model it names skips
    the replies the events ``used`` show it gave. ``needs_tools``: tools the run used.
    """
    problems = Problems(recorded.problems if recorded is not None else ())
    if spec.cwd:
        importable(spec.cwd)
    policy = parse_choice("policy", spec.policy, POLICIES, problems)
    replan = parse_choice("replan", spec.replan, REPLANS, problems)
    budget = parse_budget(spec.budget, problems)
    planner_settings = parse_settings("planner_settings", spec.planner_settings, problems)
    executor_settings = parse_settings("executor_settings", spec.executor_settings, problems)
    step_timeout = parse_seconds("step_timeout", spec.step_timeout, problems)
    turn_format = parse_choice("turn_format", spec.rules.get("turn_format", "nested"), TURN_FORMATS, problems)
    sealed = spec.rules.get("sealed", False) is True
    if sealed and policy == "step":
        problems.add("sealed", "a sealed planner plans upfront: it reads no result to choose a next step from")
    escalation = _escalation(spec.rules, problems)
    limits = _limits(spec.rules, problems)
    untrusted_answer = _untrusted_answer(spec.rules, problems)
    review = _review(spec.rules, problems, providers)
    if spec.executor is None:
        for where, given in (("executor_settings", bool(spec.executor_settings)), ("step_timeout", bool(step_timeout))):
            if given:
                problems.add(where, "applies to the executor: name the executor's model too")
    planner = None
    own = recorded.spec if recorded is not None and recorded.own else None
    ensemble = _ensemble(spec.rules, own, used, problems, providers)
    if spec.planner is None:
        needed = "the run records no planner model" if recorded is not None else "a planning model is required"
        problems.add("planner", f"{needed}, e.g. scripted:replies.json")
    else:
        planner = _model(
            "planner",
            spec.planner,
            role="planner",
            recorded=own.planner if own else None,
            used=used,
            problems=problems,
            providers=providers,
        )
    extractor = None
    if isinstance(spec.rules.get("extractor"), str):
        if not sealed:
            problems.add("extractor", "an extractor serves a sealed planner: give sealed too")
        extractor = _model(
            "extractor",
            spec.rules["extractor"],
            role="executor",
            recorded=own.rules.get("extractor") if own else None,
            used=used,
            problems=problems,
            providers=providers,
        )
    executor = None
    if spec.executor is not None:
        executor = _model(
            "executor",
            spec.executor,
            role="executor",
            recorded=own.executor if own else None,
            used=used,
            problems=problems,
            providers=providers,
        )
    before = len(problems)
    tools = load_tools(spec.tools, problems)
    routed = load_executors(spec.executors, problems)
    servers = mcp_toolsets(spec.mcp, spec.cwd, problems, headers=spec.mcp_headers)
    if needs_tools and not servers and len(problems) == before:  # an MCP server's tools are listed when it starts
        have = Toolset(*tools).names
        missing = [name for name in needs_tools if name not in have]
        if missing:
            which = "a tool that is not given" if len(missing) == 1 else "tools that are not given"
            problems.add("tools", f"the run used {which}: {', '.join(missing)}")
    summary = "cannot build the agent"
    problems.raise_if_any(summary)
    if None in (planner, policy, replan, turn_format, planner_settings, executor_settings):
        raise UsageError(summary, list(problems))  # not reached: each is None only with a problem
    assert planner is not None
    assert planner_settings is not None
    assert executor_settings is not None
    try:
        return Agent(
            Planner(
                model=planner,
                policy=cast(PolicyName, policy),
                replan=cast(ReplanPolicy, replan),
                settings=planner_settings,
                turn_format=cast(TurnFormat, turn_format),
                ensemble=ensemble,
                sealed=sealed,
                extractor=extractor,
            ),
            tools=[*tools, *servers],
            executor=(
                ModelExecutor(model=executor, settings=executor_settings, step_timeout=step_timeout)
                if executor is not None
                else None
            ),
            executors=routed,
            budget=budget,
            approvals=approvals if approvals is not None else Approvals(deferred=True, plan=spec.approve_plan),
            store=store,
            escalation=escalation,
            review=review,
            providers=providers,
            limits=limits if limits is not None else Limits(),
            trust=TrustPolicy(
                trusted_tools=tuple(spec.rules.get("trusted_tools", ())),
                untrusted_effects=spec.rules.get("untrusted_effects", True) is not False,
                answer=cast(Any, untrusted_answer),
            ),
        )
    except UsageError as e:
        problems.add_usage_error("", e)
        raise UsageError(summary, list(problems)) from None


_REVIEW_WHERE = {
    "checks": "review_checks",
    "rubric": "review_rubric",
    "judge": "judge",
    "checklist": "review_items",
    "max_rounds": "review_rounds",
}


ENSEMBLE_RULES = ("escalate_to", "escalate_on", "confidence_below")


def _ensemble(
    rules: Mapping[str, Any],
    own: AgentSpec | None,
    used: Sequence[Event],
    problems: Problems,
    providers: Providers | None,
) -> Ensemble | None:
    """The planner's ensemble the rules give (the models to escalate to, on which triggers, under
    which confidence); None when they give none."""
    if not any(key in rules for key in ENSEMBLE_RULES):
        return None
    before = len(problems)
    named = tuple(rules.get("escalate_to", ()))
    if not named:
        for key in ("escalate_on", "confidence_below"):
            if key in rules:
                problems.add(key, "applies to the planner's ensemble: name a model to escalate to too")
    recorded = tuple(own.rules.get("escalate_to", ())) if own is not None else ()
    models: list[Model] = []
    for i, spec in enumerate(named):
        model = _model(
            "escalate_to",
            spec,
            role="planner",
            recorded=recorded[i] if i < len(recorded) else None,
            used=used,
            problems=problems,
            providers=providers,
        )
        if model is not None:
            models.append(model)
    triggers = tuple(rules.get("escalate_on", ENSEMBLE_TRIGGERS))
    for trigger in triggers:
        if trigger not in ENSEMBLE_TRIGGERS:
            problems.add("escalate_on", f"{trigger!r} is not one of {', '.join(ENSEMBLE_TRIGGERS)}")
    below = parse_fraction("confidence_below", rules.get("confidence_below"), problems)
    if len(problems) > before:
        return None
    return Ensemble(
        escalate_to=models,
        escalate_on=cast(tuple[EnsembleTrigger, ...], triggers),
        confidence_below=0.5 if below is None else below,
    )


def _escalation(rules: Mapping[str, Any], problems: Problems) -> Escalation | None:
    """The escalation rules given; None (the defaults) when none is given."""
    if not any(key in rules for key in ("confidence_floor", "on_low_confidence", "on_fail", "fail_retries")):
        return None
    before = len(problems)
    floor = parse_fraction("confidence_floor", rules.get("confidence_floor"), problems)
    low = parse_choice("on_low_confidence", rules.get("on_low_confidence", "ask"), LOW_CONFIDENCE, problems)
    on_fail = parse_choice("on_fail", rules.get("on_fail", "patch"), ON_FAIL, problems)
    retries = parse_count("fail_retries", rules.get("fail_retries"), problems, default=1)
    if len(problems) > before:
        return None
    return Escalation(
        confidence_floor=floor,
        on_low_confidence=cast(Any, low),
        on_fail=cast(Any, on_fail),
        retries=cast(int, retries),
    )


UNTRUSTED_ANSWERS = ("label", "ask", "withhold")


def _untrusted_answer(rules: Mapping[str, Any], problems: Problems) -> str:
    """What the rules say a final answer holding untrusted text does (``label`` when unset)."""
    raw = rules.get("untrusted_answer", "label")
    return parse_choice("untrusted_answer", raw, UNTRUSTED_ANSWERS, problems) or "label"


def _limits(rules: Mapping[str, Any], problems: Problems) -> Limits | None:
    """The limits the rules give (what a cap reached and a plan forecast over a cap do); None
    (the defaults) when they give none."""
    if not any(key in rules for key in ("on_budget", "over_forecast")):
        return None
    before = len(problems)
    on_budget = parse_choice("on_budget", rules.get("on_budget", "auto"), ON_BUDGET, problems)
    over = parse_choice("over_forecast", rules.get("over_forecast", "replan"), OVER_FORECAST, problems)
    if len(problems) > before:
        return None
    return Limits(on_budget=cast(Any, on_budget), over_forecast=cast(Any, over))


def _review(rules: Mapping[str, Any], problems: Problems, providers: Providers | None) -> AnswerReview | None:
    """The final answer's review the rules give; None when they give none."""
    keys = ("review_checks", "review_rubric", "review_items", "judge", "review_rounds")
    if not any(key in rules for key in keys):
        return None
    before = len(problems)
    checks = load_checks(tuple(rules.get("review_checks", ())), problems)
    judge = rules.get("judge")
    judge_model = load_model("judge", judge, problems, providers) if judge is not None else None
    if judge_model is not None:
        for missing in missing_keys([judge_model]):
            problems.add("judge", str(missing))
    rounds = parse_count("review_rounds", rules.get("review_rounds"), problems, default=2)
    failed = len(problems) > before
    try:  # checked even when a rule failed, so that every problem is listed at once
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
                problems.add(_REVIEW_WHERE.get(p.where.partition("[")[0], "review_checks"), p.message)
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
