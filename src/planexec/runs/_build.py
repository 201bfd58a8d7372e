"""Building the agent an :class:`~planexec.runs.AgentSpec` describes, in one pass: its models
resolved, its references imported, its MCP servers made into toolsets and its rules into the
runtime's objects; every problem found on the way (and those the spec's values had) listed at once."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from planexec.errors import Problem, UsageError
from planexec.executor import Executor, ModelExecutor
from planexec.log import Event
from planexec.mcp import MCPHttp, MCPStdio, MCPToolset
from planexec.models import Model, ModelSettings, Providers, missing_keys, unsupported_settings
from planexec.planner import PLANNER_POLICIES, Ensemble, Planner
from planexec.runs._loading import importable, load_checks, load_executors, load_model, load_tools
from planexec.runs._problems import Problems
from planexec.runs._scripted import calls_made, rest_of_script
from planexec.runs._spec import AgentSpec, Recorded
from planexec.runs._spec_texts import APPLIES_TO_ENSEMBLE, APPLIES_TO_EXECUTOR, VARIABLE, read_mcp_text
from planexec.runs._spec_values import MCPHeader, MCPServerRef, MCPUrl, ModelRef, Rules, TrustRule
from planexec.runtime import Agent, AnswerReview, Approvals, Budget, Limits
from planexec.store import RunStore
from planexec.tools import Tool, Toolset
from planexec.trust import TrustPolicy

__all__ = ["build_agent", "dropped_settings", "mcp_toolsets", "read_mcp_servers"]


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
    listing every problem (those of ``recorded`` first, then those of the spec's values). Model
    strings are resolved through ``providers`` (the default ones when None), which the agent also
    charges and limits by.

    ``recorded``: what the run recorded, when picking a run up; a scripted model it names skips
    the replies the events ``used`` show it gave. ``needs_tools``: tools the run used.
    """
    problems = _Once(recorded.problems if recorded is not None else ())
    problems += [p for p in spec.problems if p not in problems]
    if spec.cwd:
        importable(spec.cwd)
    own = recorded.spec if recorded is not None and recorded.own else None
    build = _Builder(
        spec=spec, own=own, picking_up=recorded is not None, used=used, problems=problems, providers=providers
    )
    review = build.review()
    planner = build.planner()
    executor = build.executor()
    tools, routed, servers = build.tools(needs_tools)
    summary = "cannot build the agent"
    problems.raise_if_any(summary)
    try:
        return Agent(
            planner(),
            tools=[*tools, *servers],
            executor=executor,
            executors=routed,
            budget=Budget(**cast(dict[str, Any], spec.budget)),
            approvals=approvals if approvals is not None else Approvals(deferred=True, plan=spec.approve_plan),
            store=store,
            escalation=spec.rules.escalation,
            review=review,
            providers=providers,
            limits=_limits(spec.rules),
            trust=_trust(spec.rules.trust or TrustRule()),
        )
    except UsageError as e:
        problems.add_usage_error("", e)
        raise UsageError(summary, list(problems)) from None


class _Once(Problems):
    """Problems, each listed once (the spec's values may have said it already)."""

    def add(self, where: str, message: str, *, code: str = "invalid") -> None:
        if Problem(code=code, where=where, message=message) not in self:
            super().add(where, message, code=code)


@dataclass(kw_only=True)
class _Builder:
    """What building one agent needs at each step: the spec, what the run recorded and used, and
    the problems found so far."""

    spec: AgentSpec
    own: AgentSpec | None
    """The spec the run recorded, when picking a run up that recorded one."""
    picking_up: bool
    used: Sequence[Event]
    problems: Problems
    providers: Providers | None

    def model(self, where: str, ref: ModelRef, *, role: str, recorded: ModelRef | None) -> Model | None:
        """The model ``ref`` names; a scripted model the run recorded skips the replies it used."""
        model = load_model(where, ref.text, self.problems, self.providers)
        for missing in missing_keys([model]):
            self.problems.add(where, str(missing))
        if model is None or recorded is None or ref.absolute() != recorded:
            return model
        return rest_of_script(ref.text, model, calls_made(self.used, role=role, model=model.name))

    def planner(self) -> Callable[[], Planner]:
        """What makes the planner once every problem is known (its model, ensemble and extractor
        are loaded now)."""
        spec, rules, own = self.spec, self.spec.rules, self.own
        if rules.sealed and PLANNER_POLICIES.unsealable(spec.policy) is not None:
            self.problems.add("sealed", "a sealed planner plans upfront: it reads no result to choose a next step from")
        if spec.executor is None:
            for where, given in (
                ("executor_settings", spec.executor_settings != ModelSettings()),
                ("step_timeout", spec.step_timeout is not None),
            ):
                if given:
                    self.problems.add(where, APPLIES_TO_EXECUTOR)
        models = self.ensemble()
        model = None
        if spec.planner is None:
            needed = "the run records no planner model" if self.picking_up else "a planning model is required"
            self.problems.add("planner", f"{needed}, e.g. scripted:replies.json")
        else:
            recorded = own.planner if own is not None else None
            model = self.model("planner", spec.planner, role="planner", recorded=recorded)
        extractor = None
        if rules.extractor is not None:
            if not rules.sealed:
                self.problems.add("extractor", "an extractor serves a sealed planner: give sealed too")
            recorded = own.rules.extractor if own is not None else None
            extractor = self.model("extractor", rules.extractor, role="executor", recorded=recorded)

        def make() -> Planner:
            assert model is not None  # made only when no problem was found
            rule = rules.ensemble
            ensemble = None
            if rule is not None:
                below = 0.5 if rule.confidence_below is None else rule.confidence_below
                ensemble = Ensemble(escalate_to=models, escalate_on=rule.triggers, confidence_below=below)
            return Planner(
                model=model,
                policy=spec.policy,
                replan=spec.replan,
                settings=spec.planner_settings,
                turn_format=rules.turn_format,
                ensemble=ensemble,
                sealed=rules.sealed,
                extractor=extractor,
            )

        return make

    def ensemble(self) -> list[Model]:
        """The models of the planner's ensemble the rules give (none when they give none)."""
        rule = self.spec.rules.ensemble
        if rule is None:
            return []
        if not rule.escalate_to:
            for key, given in (("escalate_on", rule.escalate_on), ("confidence_below", rule.confidence_below)):
                if given is not None:
                    self.problems.add(key, APPLIES_TO_ENSEMBLE)
        own = self.own.rules.ensemble if self.own is not None else None
        recorded = own.escalate_to if own is not None else ()
        models = [
            self.model("escalate_to", ref, role="planner", recorded=recorded[i] if i < len(recorded) else None)
            for i, ref in enumerate(rule.escalate_to)
        ]
        return [m for m in models if m is not None]

    def review(self) -> AnswerReview | None:
        """The final answer's review the rules give; None when they give none."""
        rule = self.spec.rules.review
        if rule is None:
            return None
        before = len(self.problems)
        checks = load_checks(rule.checks, self.problems)
        judge = None
        if rule.judge is not None:
            judge = load_model("judge", rule.judge.text, self.problems, self.providers)
            for missing in missing_keys([judge]):
                self.problems.add("judge", str(missing))
        failed = len(self.problems) > before
        try:  # checked even when a reference failed, so that every problem is listed at once
            return AnswerReview(
                checks=checks,
                rubric=rule.rubric,
                judge=judge if judge is not None else None if rule.judge is None else rule.judge.text,
                checklist=rule.checklist,
                max_rounds=rule.max_rounds,
            )
        except UsageError as e:
            for p in e.problems:
                if not (failed and p.where == "review"):  # "set checks ..." only repeats a check that did not load
                    self.problems.add(_REVIEW_WHERE.get(p.where.partition("[")[0], "review_checks"), p.message)
            return None

    def executor(self) -> ModelExecutor | None:
        spec = self.spec
        if spec.executor is None:
            return None
        recorded = self.own.executor if self.own is not None else None
        model = self.model("executor", spec.executor, role="executor", recorded=recorded)
        if model is None:
            return None
        return ModelExecutor(model=model, settings=spec.executor_settings, step_timeout=spec.step_timeout)

    def tools(self, needs_tools: Sequence[str]) -> tuple[list[Tool | Toolset], list[Executor], list[MCPToolset]]:
        """The tools and executors the spec imports and its MCP servers' toolsets; the tools the
        run used must be among them (an MCP server's tools are listed only once it starts)."""
        spec = self.spec
        before = len(self.problems)
        tools = load_tools(spec.tools, self.problems)
        routed = load_executors(spec.executors, self.problems)
        servers = mcp_toolsets(spec.mcp, spec.cwd, self.problems, headers=spec.mcp_headers)
        if needs_tools and not servers and len(self.problems) == before:
            have = Toolset(*tools).names
            missing = [name for name in needs_tools if name not in have]
            if missing:
                which = "a tool that is not given" if len(missing) == 1 else "tools that are not given"
                self.problems.add("tools", f"the run used {which}: {', '.join(missing)}")
        return tools, routed, servers


_REVIEW_WHERE = {
    "checks": "review_checks",
    "rubric": "review_rubric",
    "judge": "judge",
    "checklist": "review_items",
    "max_rounds": "review_rounds",
}


def _limits(rules: Rules) -> Limits:
    limit = rules.limits
    return Limits() if limit is None else Limits(on_budget=limit.on_budget, over_forecast=limit.over_forecast)


def _trust(rule: TrustRule) -> TrustPolicy:
    return TrustPolicy(trusted_tools=rule.trusted_tools, untrusted_effects=rule.untrusted_effects, answer=rule.answer)


def mcp_toolsets(
    servers: Sequence[MCPServerRef], cwd: str | None, problems: Problems, *, headers: Sequence[MCPHeader] = ()
) -> list[MCPToolset]:
    """A toolset for each MCP server: a URL is reached over streamable HTTP (with ``headers``,
    ``${VAR}`` read from the environment), a command is spawned (from ``cwd``) and spoken to over
    stdio."""
    toolsets = []
    sent = _header_values(headers, problems)
    if headers and not any(isinstance(s, MCPUrl) for s in servers):
        problems.add("mcp_headers", "headers are sent to MCP servers given by URL, and none is given")
    for server in servers:
        try:
            if isinstance(server, MCPUrl):
                toolsets.append(MCPToolset(server=MCPHttp(url=server.url, headers=sent)))
            else:
                words = server.words
                toolsets.append(MCPToolset(server=MCPStdio(command=words[0], args=words[1:], cwd=cwd)))
        except UsageError as e:
            problems.add_usage_error(f"mcp {str(server)!r}", e)
    return toolsets


def _header_values(headers: Sequence[MCPHeader], problems: Problems) -> dict[str, str]:
    """The headers as sent: ``${VAR}`` in a value replaced by the environment's."""
    sent: dict[str, str] = {}
    for header in headers:
        missing = [v for v in VARIABLE.findall(header.value) if v not in os.environ]
        if missing:
            problems.add(f"mcp_headers {header.name!r}", f"the environment has no {', '.join(missing)}")
            continue
        sent[header.name] = VARIABLE.sub(lambda m: os.environ[m.group(1)], header.value)
    return sent


def read_mcp_servers(servers: Sequence[str], cwd: str | None) -> tuple[list[MCPToolset], list[Problem]]:
    """The toolsets of MCP servers given as texts (a command line, or an http:// or https:// URL),
    not yet open; and every problem with the texts, each under ``mcp 'TEXT'``."""
    problems = Problems()
    refs = [read_mcp_text(server, problems) for server in servers]
    toolsets = mcp_toolsets([r for r in refs if r is not None], cwd, problems)
    return toolsets, list(problems)


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
