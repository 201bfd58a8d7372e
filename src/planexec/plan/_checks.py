"""Static checks: everything that can be known wrong about a plan before anything runs.

All problems are collected, never just the first: the planner gets the whole list back for repair.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import jsonschema

from planexec._errors import PlanInvalid, Problem
from planexec.plan._bindings import compile_args
from planexec.plan._step import FitsSchema, Matches, Predicate, Step
from planexec.tools._toolset import Toolset

__all__ = ["CheckContext", "ExecutorKind", "check_steps", "validate_steps"]

ExecutorKind = Literal["tools", "model"]


@dataclass(frozen=True, kw_only=True)
class CheckContext:
    """What the checks compare a plan against."""

    tools: Toolset
    executors: Mapping[str, ExecutorKind] = field(default_factory=dict)
    default_executor: str | None = None
    """The executor for steps that name neither a tool nor an executor (None: such steps are errors)."""
    finished: Collection[str] = ()
    """Ids of steps that already finished in earlier plan versions; new steps may depend on them."""
    finished_steps: Mapping[str, Step] = field(default_factory=dict)
    """Their definitions, when known: a plan may list a finished step again unchanged (it stays
    finished), but may not give its id to a different step."""
    max_steps: int | None = None
    """How many more steps the budget allows."""
    predicates: Collection[str] | None = None
    """Names of the acceptance predicates configured; None skips that check."""


def validate_steps(steps: Sequence[Step], ctx: CheckContext) -> None:
    """Raise ``PlanInvalid`` listing every problem, or return when there is none."""
    problems = check_steps(steps, ctx)
    if problems:
        raise PlanInvalid("the plan failed its static checks", problems)


def check_steps(steps: Sequence[Step], ctx: CheckContext) -> list[Problem]:
    """Every problem with ``steps`` (the unfinished part of a plan) in ``ctx``."""
    problems: list[Problem] = []
    ids: dict[str, Step] = {}
    for s in steps:
        where = f"step {s.id!r}"
        if s.id in ids:
            problems.append(Problem(code="duplicate_id", where=where, message="two steps have this id"))
            continue
        if s.id in ctx.finished and ctx.finished_steps.get(s.id) != s:
            problems.append(
                Problem(code="finished_id", where=where, message="a finished step has this id; choose a new id")
            )
        ids[s.id] = s

    if ctx.max_steps is not None and len(ids) > ctx.max_steps:
        problems.append(
            Problem(
                code="budget_steps",
                where="plan",
                message=f"the plan has {len(ids)} steps to run; the step budget allows {ctx.max_steps}",
            )
        )

    known = set(ids) | set(ctx.finished)
    for s in steps:  # every step, duplicates too: each one's own problems are reported
        problems += _check_routing(s, ctx)
        for dep in s.depends_on:
            if dep == s.id:
                problems.append(Problem(code="self_dependency", where=f"step {s.id!r}", message="depends on itself"))
            elif dep not in known:
                problems.append(
                    Problem(
                        code="missing_dependency", where=f"step {s.id!r}", message=f"depends on unknown step {dep!r}"
                    )
                )
        problems += _check_acceptance(s, ctx)

    problems += _check_cycles(ids)

    for s in steps:
        problems += _check_args(s, ctx, known, ids)
    return problems


def _check_routing(s: Step, ctx: CheckContext) -> list[Problem]:
    where = f"step {s.id!r}"
    out: list[Problem] = []
    if s.executor is not None and s.executor not in ctx.executors:
        listing = ", ".join(sorted(ctx.executors)) or "none"
        out.append(
            Problem(code="unknown_executor", where=where, message=f"unknown executor {s.executor!r} (known: {listing})")
        )
    if s.tool is not None:
        if s.tool not in ctx.tools:
            listing = ", ".join(sorted(ctx.tools.names)) or "none"
            out.append(Problem(code="unknown_tool", where=where, message=f"unknown tool {s.tool!r} (known: {listing})"))
        if s.executor is not None and ctx.executors.get(s.executor) == "model":
            out.append(
                Problem(
                    code="executor_kind",
                    where=where,
                    message=f"executor {s.executor!r} runs model steps; a step with a tool needs a tool executor",
                )
            )
    elif s.executor is None and ctx.default_executor is None:
        out.append(
            Problem(
                code="no_tool_or_executor",
                where=where,
                message="names neither a tool nor an executor, and no default executor is configured",
            )
        )
    elif s.executor is not None and ctx.executors.get(s.executor) == "tools":
        out.append(Problem(code="executor_kind", where=where, message=f"tool executor {s.executor!r} needs a tool"))
    return out


def _check_acceptance(s: Step, ctx: CheckContext) -> list[Problem]:
    where = f"step {s.id!r}"
    out: list[Problem] = []
    schemas = [c.json_schema for c in s.checks if isinstance(c, FitsSchema)]
    if s.output_schema is not None:
        schemas.append(s.output_schema)
    for schema in schemas:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            out.append(Problem(code="invalid_schema", where=where, message=f"invalid JSON Schema: {e.message}"))
    for c in s.checks:
        if isinstance(c, Matches):
            try:
                re.compile(c.pattern)
            except re.error as e:
                out.append(Problem(code="invalid_pattern", where=where, message=f"invalid pattern {c.pattern!r}: {e}"))
        elif isinstance(c, Predicate) and ctx.predicates is not None and c.name not in ctx.predicates:
            listing = ", ".join(sorted(ctx.predicates)) or "none"
            out.append(
                Problem(
                    code="unknown_predicate", where=where, message=f"unknown predicate {c.name!r} (known: {listing})"
                )
            )
    return out


def _check_cycles(steps: Mapping[str, Step]) -> list[Problem]:
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(steps, white)
    problems: list[Problem] = []
    seen_cycles: set[frozenset[str]] = set()

    for root in steps:
        if color[root] != white:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        color[root] = grey
        while stack:
            node, i = stack[-1]
            deps = [d for d in steps[node].depends_on if d in steps and d != node]
            if i < len(deps):
                stack[-1] = (node, i + 1)
                nxt = deps[i]
                if color[nxt] == white:
                    color[nxt] = grey
                    stack.append((nxt, 0))
                    path.append(nxt)
                elif color[nxt] == grey:
                    cycle = path[path.index(nxt) :]
                    key = frozenset(cycle)
                    if key not in seen_cycles:
                        seen_cycles.add(key)
                        problems.append(
                            Problem(
                                code="cycle",
                                where=f"step {min(cycle)!r}",
                                message="dependency cycle (→ reads 'depends on'): " + " → ".join([*cycle, cycle[0]]),
                            )
                        )
            else:
                color[node] = black
                stack.pop()
                path.pop()
    return problems


def _reaches(steps: Mapping[str, Step], start: Step, target: str) -> bool:
    """Whether ``target`` is among the transitive dependencies of ``start`` (cycle-safe)."""
    if target in start.depends_on:
        return True
    seen: set[str] = set()
    stack = list(start.depends_on)
    while stack:
        sid = stack.pop()
        if sid == target:
            return True
        if sid in seen or sid not in steps:
            continue
        seen.add(sid)
        stack.extend(steps[sid].depends_on)
    return False


def _check_args(s: Step, ctx: CheckContext, known: set[str], steps: Mapping[str, Step]) -> list[Problem]:
    where = f"step {s.id!r}"
    compiled = compile_args(s.args, where=f"step {s.id!r} args")
    out = list(compiled.problems)
    bound: set[str] = set()
    for loc, ref in compiled.refs:
        bound.add(".".join(map(str, loc)))
        if ref.step_id not in known:
            out.append(
                Problem(code="binding_missing_step", where=where, message=f"{ref} binds unknown step {ref.step_id!r}")
            )
        elif not _reaches(steps, s, ref.step_id):
            out.append(
                Problem(
                    code="binding_not_in_depends_on",
                    where=where,
                    message=f"{ref} binds step {ref.step_id!r}, which is not in depends_on",
                )
            )
    if s.tool is not None and s.tool in ctx.tools:
        _, arg_problems = ctx.tools.get(s.tool).check_args(s.args)
        for p in arg_problems:
            if any(p.where == b or p.where.startswith(b + ".") for b in bound):
                continue  # a bound value is checked when it is known, just before the call
            at = f" {p.where}" if p.where else ""
            out.append(Problem(code="invalid_arguments", where=where, message=f"argument{at}: {p.message}"))
    return out
