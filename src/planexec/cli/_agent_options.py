"""The options that say how to build an agent (models, tools, policy, budgets), shared by ``run``,
``resume`` and ``replay``, and the typed value they are collected into."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from planexec.cli._options import BUDGET_FLAGS, Problems, Refused
from planexec.errors import UsageError
from planexec.log import Event
from planexec.planner import ENSEMBLE_TRIGGERS, PLANNER_POLICIES, Upfront
from planexec.runs import RULE_FLAGS, RULE_LISTS, RULE_TEXTS, AgentSpec, ModelRef, Recorded, build_agent
from planexec.runtime import DEFAULT_CAPS, Agent, Approvals
from planexec.store import RunStore

__all__ = ["AgentFlags", "agent_options", "build", "live_options"]

F = TypeVar("F", bound=Callable[..., Any])

_BUDGET_HELP = {
    "model_calls": ("N", "Cap on model calls (planner, executors and judge together)."),
    "input_tokens": ("N", "Cap on input tokens sent to models."),
    "output_tokens": ("N", "Cap on output tokens from models."),
    "cost": ("USD", "Cap on model cost, in US dollars."),
    "wall_time": ("SECONDS", "Cap on wall-clock time for the whole run."),
    "tool_calls": ("N", "Cap on tool calls, retries included."),
    "steps": ("N", "Cap on steps started."),
    "replans": ("N", "Cap on plan patches after failures."),
}

_KEYS = (
    "planner_spec",
    "executor_spec",
    "tool_refs",
    "executor_refs",
    "mcp_commands",
    "mcp_urls",
    "mcp_headers",
    "policy",
    "replan",
    "approve_plan",
    "planner_settings",
    "executor_settings",
    "step_timeout",
    "turn_format",
    "confidence_floor",
    "on_low_confidence",
    "on_fail",
    "fail_retries",
    "review_checks",
    "review_rubric",
    "review_items",
    "review_rounds",
    "judge_spec",
    "escalate_to",
    "escalate_on",
    "confidence_below",
    "on_budget",
    "over_forecast",
    "sealed",
    "extractor_spec",
    "trusted_tools",
    "untrusted_effects",
    "untrusted_answer",
)

SETTING_HELP = (
    "(repeatable): temperature, max_tokens, top_p, stop, seed, reasoning_effort, timeout, or extra.NAME "
    "for a provider's own parameter; VALUE is JSON or text, null unsets the key."
)


@dataclass(frozen=True, kw_only=True)
class AgentFlags:
    """What a command line says about the agent; None (or empty) where it says nothing."""

    planner: str | None = None
    executor: str | None = None
    tools: tuple[str, ...] = ()
    executors: tuple[str, ...] = ()
    """``module:attr`` references of executors steps may be routed to (``--executors``)."""
    mcp: tuple[str, ...] = ()
    """MCP servers: command lines (``--mcp``) and URLs (``--mcp-url``), in that order."""
    mcp_headers: tuple[str, ...] = ()
    """``NAME: VALUE`` headers for the URL servers (``--mcp-header``)."""
    policy: str | None = None
    replan: str | None = None
    budget: Mapping[str, str] = field(default_factory=dict)
    """Raw budget flag values by :class:`Budget` field."""
    approve_plan: bool | None = None
    planner_settings: tuple[str, ...] = ()
    """Raw ``KEY=VALUE`` model settings of the planner, in the order given."""
    executor_settings: tuple[str, ...] = ()
    """Raw ``KEY=VALUE`` model settings of the executor, in the order given."""
    step_timeout: str | None = None
    """The raw whole-step timeout of the executor (``none`` lifts it)."""
    turn_format: str | None = None
    confidence_floor: str | None = None
    on_low_confidence: str | None = None
    on_fail: str | None = None
    fail_retries: str | None = None
    review_checks: tuple[str, ...] = ()
    """``module:attr`` references of the final answer's deterministic checks."""
    review_rubric: str | None = None
    review_items: tuple[str, ...] = ()
    """The final answer's checklist for a human reviewer."""
    review_rounds: str | None = None
    judge: str | None = None
    escalate_to: tuple[str, ...] = ()
    """The planner's ensemble: the models it hands planning to, in order."""
    escalate_on: tuple[str, ...] = ()
    """The ensemble's triggers (raw; all of them when none is given)."""
    confidence_below: str | None = None
    """The ensemble's raw confidence under which ``low_confidence`` escalates."""
    on_budget: str | None = None
    """What a cap the run reaches does: ``auto``, ``ask`` or ``stop`` (raw)."""
    over_forecast: str | None = None
    """What a plan whose forecast passes a cap does: ``replan``, ``ask`` or ``run`` (raw)."""
    sealed: bool | None = None
    """Sealed planning (``--sealed``/``--no-sealed``)."""
    extractor: str | None = None
    """The model of a sealed planner's quarantined extractor (``--extractor``)."""
    trusted_tools: tuple[str, ...] = ()
    """Tools whose output is trusted (``--trusted-tool``, repeatable)."""
    untrusted_effects: bool | None = None
    """Whether a call that changes the world with untrusted values is asked about
    (``--untrusted-effects``/``--no-untrusted-effects``)."""
    untrusted_answer: str | None = None
    """What a final answer holding untrusted text does: ``label``, ``ask`` or ``withhold``
    (``--untrusted-answer``, raw)."""

    @classmethod
    def take(cls, values: dict[str, Any]) -> AgentFlags:
        """Remove this group's options from a command's keyword arguments and collect them."""
        budget = {flag.field: values.pop(flag.field) for flag in BUDGET_FLAGS if flag.field in values}
        own = {key: values.pop(key, None) for key in _KEYS}
        return cls(
            planner=own["planner_spec"],
            executor=own["executor_spec"],
            tools=tuple(own["tool_refs"] or ()),
            executors=tuple(own["executor_refs"] or ()),
            mcp=(*(own["mcp_commands"] or ()), *(own["mcp_urls"] or ())),
            mcp_headers=tuple(own["mcp_headers"] or ()),
            policy=own["policy"],
            replan=own["replan"],
            budget={name: raw for name, raw in budget.items() if raw is not None},
            approve_plan=own["approve_plan"],
            planner_settings=tuple(own["planner_settings"] or ()),
            executor_settings=tuple(own["executor_settings"] or ()),
            step_timeout=own["step_timeout"],
            turn_format=own["turn_format"],
            confidence_floor=own["confidence_floor"],
            on_low_confidence=own["on_low_confidence"],
            on_fail=own["on_fail"],
            fail_retries=own["fail_retries"],
            review_checks=tuple(own["review_checks"] or ()),
            review_rubric=own["review_rubric"],
            review_items=tuple(own["review_items"] or ()),
            review_rounds=own["review_rounds"],
            judge=own["judge_spec"],
            escalate_to=tuple(own["escalate_to"] or ()),
            escalate_on=tuple(own["escalate_on"] or ()),
            confidence_below=own["confidence_below"],
            on_budget=own["on_budget"],
            over_forecast=own["over_forecast"],
            sealed=own["sealed"],
            extractor=own["extractor_spec"],
            trusted_tools=tuple(own["trusted_tools"] or ()),
            untrusted_effects=own["untrusted_effects"],
            untrusted_answer=own["untrusted_answer"],
        )

    def spec_for_run(self, constraints: Sequence[str]) -> AgentSpec:
        """The spec ``planexec run`` records: these flags, with their defaults."""
        return AgentSpec(constraints=tuple(constraints), cwd=os.getcwd()).with_texts(self.texts()).recorded()

    def applied_to(self, spec: AgentSpec) -> AgentSpec:
        """``spec`` with what these flags say instead (budget flags one by one, settings after the
        recorded ones, rules key by key)."""
        return spec.with_texts(self.texts())

    def texts(self) -> dict[str, Any]:
        """What these flags say, by spec field, read into the spec's typed values by
        :meth:`AgentSpec.with_texts` (every problem kept for the build to list)."""
        given: dict[str, Any] = {
            "budget": dict(self.budget),
            "planner_settings": self.planner_settings,
            "executor_settings": self.executor_settings,
            "rules": self._rules(),
        }
        for key in ("planner", "executor"):
            if getattr(self, key) is not None:
                given[key] = ModelRef(getattr(self, key)).absolute()
        for key in ("tools", "executors", "mcp", "mcp_headers"):
            if getattr(self, key):
                given[key] = getattr(self, key)
        for key in ("policy", "replan", "approve_plan", "step_timeout"):
            if getattr(self, key) is not None:
                given[key] = getattr(self, key)
        return given

    def _rules(self) -> dict[str, Any]:
        """The rule flags that were given (a list flag only when given at least once)."""
        given: dict[str, Any] = {key: getattr(self, key) for key in RULE_TEXTS if getattr(self, key) is not None}
        given |= {key: tuple(getattr(self, key)) for key in RULE_LISTS if getattr(self, key)}
        given |= {key: getattr(self, key) for key in RULE_FLAGS if getattr(self, key) is not None}
        for key in ("judge", "extractor"):
            if getattr(self, key) is not None:
                given[key] = ModelRef(getattr(self, key)).absolute()
        if self.escalate_to:
            given["escalate_to"] = tuple(ModelRef(m).absolute() for m in self.escalate_to)
        return given


def build(
    spec: AgentSpec,
    *,
    store: RunStore,
    approvals: Approvals,
    recorded: Recorded | None = None,
    used: Sequence[Event] = (),
    needs_tools: Sequence[str] = (),
    problems: Problems | None = None,
) -> Agent:
    """The agent ``spec`` describes; raises :class:`Refused` listing every problem, each under the
    flag that gives the value at fault (with ``problems`` found before)."""
    problems = problems if problems is not None else Problems()
    try:
        agent = build_agent(
            spec, store=store, approvals=approvals, recorded=recorded, used=used, needs_tools=needs_tools
        )
    except UsageError as e:
        problems.add_problems(e.problems)
        raise Refused(problems) from None
    if problems:
        raise Refused(problems)
    return agent


def agent_options(*, for_run: bool) -> Callable[[F], F]:
    """The model, tool, policy and budget options. For ``run`` they have defaults; elsewhere every
    one is optional and overrides what the run recorded."""
    later = "" if for_run else " Default: as the run recorded it."
    options = [
        *_model_options(later),
        *_planning_options(for_run, later),
        *_setting_options(for_run, later),
        *_rule_options(for_run=for_run, later=later),
        *_budget_options(for_run, later),
    ]

    def apply(fn: F) -> F:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return apply


def _budget_options(for_run: bool, later: str) -> list[Callable[[F], F]]:
    """A cap of the run's budget each."""
    options = []
    for flag in BUDGET_FLAGS:
        metavar, text = _BUDGET_HELP[flag.field]
        if for_run:
            cap = DEFAULT_CAPS.get(flag.field)
            text += f" Default: {cap:g}; 'none' lifts the cap." if cap is not None else " Default: no cap."
        options.append(click.option(flag.flag, flag.field, metavar=metavar, default=None, help=text + later))
    return options


def _model_options(later: str) -> list[Callable[[F], F]]:
    """The models, tools, executors and MCP servers."""
    return [
        click.option(
            "--planner", "planner_spec", metavar="MODEL", help="The planning model, e.g. scripted:replies.json." + later
        ),
        click.option(
            "--executor", "executor_spec", metavar="MODEL", help="The model for steps that name no tool." + later
        ),
        click.option(
            "--tools",
            "tool_refs",
            multiple=True,
            metavar="MODULE:ATTR",
            help="A Tool, a Toolset or a list of tools to import (repeatable)." + later,
        ),
        click.option(
            "--executors",
            "executor_refs",
            multiple=True,
            metavar="MODULE:ATTR",
            help="An executor, or a list of executors, that steps may be routed to, e.g. a RayExecutor named "
            "'tools' that runs every tool step on a Ray cluster (repeatable)." + later,
        ),
        click.option(
            "--mcp",
            "mcp_commands",
            multiple=True,
            metavar='"COMMAND ARGS…"',
            help="An MCP server to start (a command line, quoted) whose tools the agent may use, over stdio "
            "(repeatable)." + later,
        ),
        click.option(
            "--mcp-header",
            "mcp_headers",
            multiple=True,
            metavar='"NAME: VALUE"',
            help="A header sent to every --mcp-url server (repeatable); ${VAR} in VALUE is read from the "
            "environment, and a credential (Authorization, a key or token) must be given that way." + later,
        ),
        click.option(
            "--mcp-url",
            "mcp_urls",
            multiple=True,
            metavar="URL",
            help="An MCP server over streamable HTTP whose tools the agent may use (repeatable)." + later,
        ),
    ]


def _planning_options(for_run: bool, later: str) -> list[Callable[[F], F]]:
    """How the planner plans, and what untrusted values may do."""
    return [
        click.option(
            "--policy",
            default=Upfront.name if for_run else None,
            show_default=for_run,
            metavar="[" + "|".join(PLANNER_POLICIES.names()) + "]",
            help="The whole plan at once, or a step per turn." + later,
        ),
        click.option(
            "--turn-format",
            default=None,
            metavar="[nested|flat]",
            help="The turn schema sent to a step-by-step planner: nested ({thought, step, stop, answer}) or the "
            "flat {thought, next_step, tool, arguments, stop, confidence}; answers in either form are accepted."
            + (" Default: nested." if for_run else later),
        ),
        click.option(
            "--sealed/--no-sealed",
            "sealed",
            default=None,
            help="Sealed planning: the planner never reads a tool's or a model's output nor an error's text; it "
            "plans upfront, results flow by bindings and an answer template."
            + (" Default: off." if for_run else later),
        ),
        click.option(
            "--untrusted-answer",
            "untrusted_answer",
            metavar="[label|ask|withhold]",
            default=None,
            help="A final answer that holds untrusted text (a tool's output it quotes, or words the planner wrote "
            "after reading one): returned with its label, shown to a human first (a no, or nobody to ask, "
            "withholds its untrusted parts), or returned with its untrusted parts withheld."
            + (" Default: label." if for_run else later),
        ),
        click.option(
            "--untrusted-effects/--no-untrusted-effects",
            "untrusted_effects",
            default=None,
            help="Ask a human before a call that changes the world takes a value that came from untrusted text "
            "(a tool's output, a model that read it), or that the planner wrote after reading such text."
            + (" Default: on (questions are asked when a human can answer them)." if for_run else later),
        ),
        click.option(
            "--trusted-tool",
            "trusted_tools",
            multiple=True,
            metavar="NAME",
            help="A tool whose output is trusted (repeatable): values it returns may steer effects without a "
            "human's yes. By default a tool's output is not trusted." + later,
        ),
        click.option(
            "--extractor",
            "extractor_spec",
            metavar="MODEL",
            default=None,
            help="With --sealed: the model of the quarantined extractor, which pulls values out of steps' outputs "
            "for later steps (no tools; its reply must fit the step's output schema)." + later,
        ),
        click.option(
            "--replan",
            default="on_failure" if for_run else None,
            show_default=for_run,
            metavar="[on_failure|after_each_step|never]",
            help="When the plan is patched." + later,
        ),
    ]


def _setting_options(for_run: bool, later: str) -> list[Callable[[F], F]]:
    """The models' settings and the executor's step timeout."""
    return [
        click.option(
            "--planner-setting",
            "planner_settings",
            multiple=True,
            metavar="KEY=VALUE",
            help="A model setting of the planner, KEY=VALUE " + SETTING_HELP + later,
        ),
        click.option(
            "--executor-setting",
            "executor_settings",
            multiple=True,
            metavar="KEY=VALUE",
            help="A model setting of the executor, KEY=VALUE " + SETTING_HELP + later,
        ),
        click.option(
            "--step-timeout",
            metavar="SECONDS",
            default=None,
            help="Seconds a whole model-driven step may take (every model turn and tool call in it); past "
            "it the step fails as a timeout. 'none' lifts it." + (" Default: none." if for_run else later),
        ),
    ]


def _rule_options(*, for_run: bool, later: str) -> list[Callable[[F], F]]:
    """The pattern's rules: escalation when the planner cannot go on, and the final answer's review."""

    def default(text: str) -> str:
        return f" Default: {text}." if for_run else later

    options: list[Callable[[F], F]] = [
        click.option(
            "--confidence-floor",
            metavar="0..1",
            default=None,
            help="A planner's turn or plan whose confidence is under this is not acted on (see "
            "--on-low-confidence); 'none' lifts it." + default("none"),
        ),
        click.option(
            "--on-low-confidence",
            metavar="[ask|stop]",
            default=None,
            help="Under the confidence floor: ask a human (stop when nobody can be asked) or stop the run "
            "escalated." + default("ask"),
        ),
        click.option(
            "--on-fail",
            metavar="[patch|retry|review]",
            default=None,
            help="When a step's result fails its checks: the planner patches the plan, the step runs again "
            "(then patch), or a human reviews the result (patch when nobody can be asked)." + default("patch"),
        ),
        click.option(
            "--on-budget",
            metavar="[auto|ask|stop]",
            default=None,
            help="When the run reaches a cap: ask a human to raise it (the run is saved and goes on once raised: "
            "planexec approve RUN ID --raise NAME=CAP), or stop; auto asks only at an interactive terminal."
            + default("auto"),
        ),
        click.option(
            "--over-forecast",
            metavar="[replan|ask|run]",
            default=None,
            help="A plan whose cost forecast passes a cost or token cap: sent back for a cheaper one, asked "
            "about, or run." + default("replan"),
        ),
        click.option(
            "--fail-retries",
            metavar="N",
            default=None,
            help="How often --on-fail retry runs a step again." + default("1"),
        ),
    ]
    return [*options, *_review_options(later, default), *_ensemble_options(later)]


def _review_options(later: str, default: Callable[[str], str]) -> list[Callable[[F], F]]:
    """The final answer's review: checks, a judge's rubric, a human's checklist, rounds."""
    return [
        click.option(
            "--review-check",
            "review_checks",
            multiple=True,
            metavar="MODULE:ATTR",
            help="A check the final answer must pass before the run ends goal_met (repeatable): a function of "
            "the answer returning None or True to accept, or a reason to refuse." + later,
        ),
        click.option(
            "--review-rubric",
            metavar="TEXT",
            default=None,
            help="A rubric the --judge model grades the final answer against." + later,
        ),
        click.option(
            "--judge", "judge_spec", metavar="MODEL", default=None, help="The model for --review-rubric." + later
        ),
        click.option(
            "--review-item",
            "review_items",
            multiple=True,
            metavar="TEXT",
            help="An item of the checklist a human ticks or fails before the final answer is released "
            "(repeatable)." + later,
        ),
        click.option(
            "--review-rounds",
            metavar="N",
            default=None,
            help="How often a refused final answer goes back to the planner before the run stops escalated."
            + default("2"),
        ),
    ]


def _ensemble_options(later: str) -> list[Callable[[F], F]]:
    """The planner's ensemble: the stronger models planning is handed to, and when."""
    return [
        click.option(
            "--escalate-to",
            "escalate_to",
            multiple=True,
            metavar="MODEL",
            help="A model the planner hands planning to when its own model fails (repeatable; in order, strongest "
            "last): --planner plans first, as the cheap model of an ensemble." + later,
        ),
        click.option(
            "--escalate-on",
            "escalate_on",
            multiple=True,
            metavar="[" + "|".join(ENSEMBLE_TRIGGERS) + "]",
            help="When the ensemble hands planning to the next model (repeatable)."
            + (later or " Default: all of them."),
        ),
        click.option(
            "--confidence-below",
            metavar="0..1",
            default=None,
            help="The confidence under which the ensemble hands a plan or turn to the next model (low_confidence)."
            + (later or " Default: 0.5."),
        ),
    ]


def live_options(fn: F) -> F:
    """How a run is shown while it runs, and whether anyone may be asked at the terminal."""
    fn = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")(fn)
    fn = click.option(
        "--no-input",
        is_flag=True,
        help="Never ask at the terminal: save questions in the run's log and suspend the run (exit status 3).",
    )(fn)
    return click.option("--no-live", is_flag=True, help="Print one line per event instead of the live task board.")(fn)
