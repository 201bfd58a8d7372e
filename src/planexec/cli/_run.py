"""``planexec run GOAL``: run a goal with models and tools named on the command line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import click

from planexec._errors import UsageError
from planexec.cli import _approve
from planexec.cli._board import Display
from planexec.cli._common import display_for, exit_for, make_console, run_to_end
from planexec.cli._options import BUDGET_FLAGS, Problems, load_model, load_tools, parse_budget, parse_choice
from planexec.cli._report import json_text, print_summary, result_json
from planexec.planner import Planner, PolicyName, ReplanPolicy
from planexec.runtime import Agent, Approvals

__all__ = ["run"]

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
    "replans": ("N", "Cap on plan patches after failures (default 3)."),
}


def _budget_options(fn: F) -> F:
    for flag in reversed(BUDGET_FLAGS):
        metavar, text = _BUDGET_HELP[flag.field]
        fn = click.option(flag.flag, flag.field, metavar=metavar, default=None, help=text)(fn)
    return fn


def _problem_exit(ctx: click.Context, problems: Problems) -> NoReturn:
    click.echo(f"Error: planexec run: {len(problems)} problem(s):", err=True)
    for p in problems:
        click.echo(f"  - {p}", err=True)
    ctx.exit(2)


@click.command()
@click.argument("goal")
@click.option("--planner", "planner_spec", metavar="MODEL", help="The planning model, e.g. scripted:replies.json.")
@click.option("--executor", "executor_spec", metavar="MODEL", help="The model for steps that name no tool.")
@click.option(
    "--tools",
    "tool_refs",
    multiple=True,
    metavar="MODULE:ATTR",
    help="A Tool, a Toolset or a list of tools to import (repeatable).",
)
@click.option(
    "--policy",
    default="upfront",
    show_default=True,
    metavar="[upfront|step]",
    help="The whole plan at once, or a step per turn.",
)
@click.option(
    "--replan",
    default="on_failure",
    show_default=True,
    metavar="[on_failure|after_each_step|never]",
    help="When the plan is patched.",
)
@_budget_options
@click.option(
    "--constraint", "constraints", multiple=True, metavar="TEXT", help="A constraint on the goal (repeatable)."
)
@click.option("--approve-plan", is_flag=True, help="Ask at the terminal before each plan version runs.")
@click.option("--no-live", is_flag=True, help="Print one line per event instead of the live task board.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.pass_context
def run(
    ctx: click.Context,
    /,
    goal: str,
    planner_spec: str | None,
    executor_spec: str | None,
    tool_refs: tuple[str, ...],
    policy: str,
    replan: str,
    constraints: tuple[str, ...],
    approve_plan: bool,
    no_live: bool,
    as_json: bool,
    **budget_values: str | None,
) -> None:
    """Run GOAL with a planner model, tools and budgets.

    MODEL is a model string: scripted:PATH.json (a JSON list of replies), object:pkg.module:attr,
    or provider:name for an installed provider. Exit status: 0 when the goal is met, 1 when the run
    stopped otherwise, 2 when the command line is wrong.
    """
    problems = Problems()
    if not goal.strip():
        problems.add("GOAL", "the goal is empty")
    chosen_policy = parse_choice("--policy", policy, POLICIES, problems)
    chosen_replan = parse_choice("--replan", replan, REPLANS, problems)
    budget = parse_budget(budget_values, problems)
    planner_model = None
    if planner_spec is None:
        problems.add("--planner", "a planning model is required, e.g. --planner scripted:replies.json")
    else:
        planner_model = load_model("--planner", planner_spec, problems)
    executor_model = load_model("--executor", executor_spec, problems) if executor_spec is not None else None
    tools = load_tools(tool_refs, problems)

    console = make_console(as_json=as_json)
    interactive = _approve.is_interactive(console)
    if approve_plan and not interactive:
        problems.add("--approve-plan", "plans can only be approved at a terminal, and the input is not one")
    if problems or planner_model is None or chosen_policy is None or chosen_replan is None:
        _problem_exit(ctx, problems)

    display: Display = display_for(console, no_live=no_live, title="planexec")
    approvals = Approvals()
    if interactive:
        approvals = Approvals(approver=_approve.TerminalApprover(console, display), plan=approve_plan)
    try:
        agent = Agent(
            Planner(
                model=planner_model,
                policy=cast(PolicyName, chosen_policy),
                replan=cast(ReplanPolicy, chosen_replan),
            ),
            tools=tools,
            executor=executor_model,
            budget=budget,
            approvals=approvals,
        )
    except UsageError as e:
        problems.add_usage_error("", e)
        _problem_exit(ctx, problems)

    result = run_to_end(agent, goal, constraints, display)
    if as_json:
        click.echo(json_text(result_json(result)))
    else:
        print_summary(console, result)
    exit_for(ctx, result)
