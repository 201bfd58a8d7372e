"""The options that say how to build an agent (models, tools, policy, budgets), shared by ``run``,
``resume`` and ``replay``, and the typed value they are collected into."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from planexec.cli._options import BUDGET_FLAGS
from planexec.runtime import DEFAULT_CAPS

__all__ = ["POLICIES", "REPLANS", "AgentFlags", "agent_options", "live_options"]

F = TypeVar("F", bound=Callable[..., Any])

POLICIES = ("upfront", "step")
REPLANS = ("on_failure", "after_each_step", "never")

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
    "policy",
    "replan",
    "approve_plan",
    "planner_settings",
    "executor_settings",
    "step_timeout",
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

    @classmethod
    def take(cls, values: dict[str, Any]) -> AgentFlags:
        """Remove this group's options from a command's keyword arguments and collect them."""
        budget = {flag.field: values.pop(flag.field) for flag in BUDGET_FLAGS if flag.field in values}
        own = {key: values.pop(key, None) for key in _KEYS}
        return cls(
            planner=own["planner_spec"],
            executor=own["executor_spec"],
            tools=tuple(own["tool_refs"] or ()),
            policy=own["policy"],
            replan=own["replan"],
            budget={name: raw for name, raw in budget.items() if raw is not None},
            approve_plan=own["approve_plan"],
            planner_settings=tuple(own["planner_settings"] or ()),
            executor_settings=tuple(own["executor_settings"] or ()),
            step_timeout=own["step_timeout"],
        )


def agent_options(*, for_run: bool) -> Callable[[F], F]:
    """The model, tool, policy and budget options. For ``run`` they have defaults; elsewhere every
    one is optional and overrides what the run recorded."""
    later = "" if for_run else " Default: as the run recorded it."

    def apply(fn: F) -> F:
        for flag in reversed(BUDGET_FLAGS):
            metavar, text = _BUDGET_HELP[flag.field]
            if for_run:
                cap = DEFAULT_CAPS.get(flag.field)
                text += f" Default: {cap:g}; 'none' lifts the cap." if cap is not None else " Default: no cap."
            fn = click.option(flag.flag, flag.field, metavar=metavar, default=None, help=text + later)(fn)
        fn = click.option(
            "--step-timeout",
            metavar="SECONDS",
            default=None,
            help="Seconds a whole model-driven step may take (every model turn and tool call in it); past "
            "it the step fails as a timeout. 'none' lifts it." + (" Default: none." if for_run else later),
        )(fn)
        fn = click.option(
            "--executor-setting",
            "executor_settings",
            multiple=True,
            metavar="KEY=VALUE",
            help="A model setting of the executor, KEY=VALUE " + SETTING_HELP + later,
        )(fn)
        fn = click.option(
            "--planner-setting",
            "planner_settings",
            multiple=True,
            metavar="KEY=VALUE",
            help="A model setting of the planner, KEY=VALUE " + SETTING_HELP + later,
        )(fn)
        fn = click.option(
            "--replan",
            default="on_failure" if for_run else None,
            show_default=for_run,
            metavar="[on_failure|after_each_step|never]",
            help="When the plan is patched." + later,
        )(fn)
        fn = click.option(
            "--policy",
            default="upfront" if for_run else None,
            show_default=for_run,
            metavar="[upfront|step]",
            help="The whole plan at once, or a step per turn." + later,
        )(fn)
        fn = click.option(
            "--tools",
            "tool_refs",
            multiple=True,
            metavar="MODULE:ATTR",
            help="A Tool, a Toolset or a list of tools to import (repeatable)." + later,
        )(fn)
        fn = click.option(
            "--executor", "executor_spec", metavar="MODEL", help="The model for steps that name no tool." + later
        )(fn)
        return click.option(
            "--planner", "planner_spec", metavar="MODEL", help="The planning model, e.g. scripted:replies.json." + later
        )(fn)

    return apply


def live_options(fn: F) -> F:
    """How a run is shown while it runs, and whether anyone may be asked at the terminal."""
    fn = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")(fn)
    fn = click.option(
        "--no-input",
        is_flag=True,
        help="Never ask at the terminal: save questions in the run's log and suspend the run (exit status 3).",
    )(fn)
    return click.option("--no-live", is_flag=True, help="Print one line per event instead of the live task board.")(fn)
