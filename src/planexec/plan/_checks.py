"""Static checks: everything that can be known wrong about a plan before anything runs.

All problems are collected, never just the first: the planner gets the whole list back for repair.
A hostile plan cannot make this slow or large: the checks take time near-linear in the plan's size
(a chain of 10,000 steps, each binding the first, checks in under a second), and at most
:data:`MAX_PROBLEMS_PER_CODE` problems of each code are listed, followed by one that counts the rest.
Arguments must be JSON data at most ``MAX_DEPTH`` levels deep and ``MAX_CHARS`` characters long
(see :mod:`planexec._util.strict_json`); regexes and schemas must pass :mod:`planexec._util.regex` and
:mod:`planexec.plan._schemas`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from planexec._util.clip import clip
from planexec._util.plural import counted
from planexec._util.regex import pattern_problem
from planexec._util.strict_json import MAX_CHARS, MAX_DEPTH, json_problem
from planexec.errors import PlanInvalid, Problem
from planexec.plan._bindings import CompiledArgs, compile_args
from planexec.plan._graph import DependencyGraph, describe_cycle
from planexec.plan._schemas import schema_problems
from planexec.plan._step import FitsSchema, Matches, Predicate, Step
from planexec.tools import Toolset

__all__ = ["MAX_PROBLEMS_PER_CODE", "CheckContext", "ExecutorKind", "changes_world", "check_steps", "validate_steps"]

ExecutorKind = Literal["tools", "model"]

MAX_PROBLEMS_PER_CODE = 20
"""At most this many problems of one code are listed; one more problem of that code says how many
were left out."""

_LISTED_NAMES = 30
"""How many known names (tools, executors, predicates) a problem lists."""


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
    running: Mapping[str, Step] = field(default_factory=dict)
    """Steps under way that may change things outside the run (see :func:`changes_world`), by id.
    They cannot be called back, so they run on whatever a new plan says: a plan may list one again
    unchanged, but may not give its id to a different step."""
    max_steps: int | None = None
    """How many more steps the budget allows."""
    predicates: Collection[str] | None = None
    """Names of the acceptance predicates configured; None skips that check."""
    workflows: Collection[str] = ()
    """Names of the tools in ``tools`` that are workflows: a step that calls one is a hand-off —
    the last step of its plan, at most one a plan — and no model step may call one."""
    sealed: bool = False
    """Sealed planning: no model step may be granted a tool (every tool call is a step of the plan,
    its arguments the planner's own values and bindings)."""
    extractors: Collection[str] = ()
    """Names of the quarantined extractor executors: a step routed to one needs an ``output_schema``."""


def changes_world(step: Step, tools: Toolset) -> bool:
    """Whether running ``step`` may change something outside the run: the plan says so (effect
    ``write``), its tool has a side effect, or it is a model step that may call a tool that has one.

    Idempotent tools count: a call repeated under another step id has another idempotency key."""
    if step.effect == "write":
        return True
    if step.tool is not None:
        return step.tool in tools and tools.get(step.tool).side_effect
    return any(name in tools and tools.get(name).side_effect for name in step.allowed_tools)


def validate_steps(steps: Sequence[Step], ctx: CheckContext) -> None:
    """Raise ``PlanInvalid`` listing every problem, or return when there is none."""
    problems = check_steps(steps, ctx)
    if problems:
        raise PlanInvalid("the plan failed its static checks", problems)


def check_steps(steps: Sequence[Step], ctx: CheckContext) -> list[Problem]:
    """Every problem with ``steps`` (the unfinished part of a plan) in ``ctx``.

    At most ``MAX_PROBLEMS_PER_CODE`` problems of each code are listed (then one that counts the
    rest), and at most ``MAX_CYCLES`` cycles are described.
    """
    rules = Rules(ctx)
    problems: list[Problem] = []
    ids: dict[str, Step] = {}
    args_ok: list[Problem | None] = [rules.args_json(s) for s in steps]
    for s, arg_problem in zip(steps, args_ok, strict=True):
        if s.id in ids:
            problems.append(Problem(code="duplicate_id", where=f"step {s.id!r}", message="two steps have this id"))
            continue
        problems += rules.finished_id(s, arg_problem is None)
        ids[s.id] = s

    if ctx.max_steps is not None and len(ids) > ctx.max_steps:
        problems.append(rules.budget(len(ids)))

    known = KnownIds(ids, rules.finished)
    for s in steps:  # every step, duplicates too: each one's own problems are reported
        problems += rules.routing(s)
        problems += rules.dependencies(s, known)
        problems += rules.acceptance(s)

    graph = DependencyGraph(ids)
    cycles, count = graph.cycles()
    for cycle in cycles:
        problems.append(
            Problem(
                code="cycle",
                where=f"step {min(cycle)!r}",
                message="dependency cycle (→ reads 'depends on'): " + describe_cycle(cycle),
            )
        )
    if count > len(cycles):
        problems.append(
            Problem(code="cycle", where="plan", message=f"{count - len(cycles):,} more dependency cycles are not shown")
        )

    for s, arg_problem in zip(steps, args_ok, strict=True):
        problems += rules.arguments(s, arg_problem, known, graph.reaches)
    problems += rules.handoffs(ids, graph.reaches)
    return capped(problems)


def capped(problems: Iterable[Problem]) -> list[Problem]:
    """``problems`` with at most ``MAX_PROBLEMS_PER_CODE`` of each code, and a count of the rest."""
    seen: dict[str, int] = {}
    out: list[Problem] = []
    for p in problems:
        n = seen[p.code] = seen.get(p.code, 0) + 1
        if n <= MAX_PROBLEMS_PER_CODE:
            out.append(p)
    for code, n in seen.items():
        if n > MAX_PROBLEMS_PER_CODE:
            left = n - MAX_PROBLEMS_PER_CODE
            out.append(
                Problem(
                    code=code,
                    where="plan",
                    message=f"{counted(left, f'more {code!r} problem')} {'is' if left == 1 else 'are'} not listed",
                )
            )
    return out


class KnownIds(Container[str]):
    """The ids a step may depend on: the plan's own steps and the finished ones."""

    def __init__(self, steps: Container[str], finished: Container[str]) -> None:
        self._steps = steps
        self._finished = finished

    def __contains__(self, sid: object) -> bool:
        return sid in self._steps or sid in self._finished


class Rules:
    """The checks of one step, with what they need from the context worked out once."""

    def __init__(self, ctx: CheckContext) -> None:
        self.ctx = ctx
        self.finished = frozenset(ctx.finished)
        self._listings: dict[str, str] = {}

    # -- ids and budget ------------------------------------------------------------------------

    def finished_id(self, s: Step, comparable: bool) -> list[Problem]:
        """A finished step's id, or the id of a running step that cannot be stopped, given to a
        different step (``comparable``: the step's arguments are sane enough to compare)."""
        if s.id in self.finished and (not comparable or self.ctx.finished_steps.get(s.id) != s):
            return [
                Problem(
                    code="finished_id", where=f"step {s.id!r}", message="a finished step has this id; choose a new id"
                )
            ]
        running = self.ctx.running.get(s.id)
        if running is not None and (not comparable or running != s):
            return [
                Problem(
                    code="running_id",
                    where=f"step {s.id!r}",
                    message="a running step that may change things outside the run has this id; it cannot be "
                    "stopped or changed: list it unchanged, or choose a new id",
                )
            ]
        return []

    def budget(self, count: int) -> Problem:
        return Problem(
            code="budget_steps",
            where="plan",
            message=f"the plan has {counted(count, 'step')} to run; the step budget allows {self.ctx.max_steps}",
        )

    # -- routing ---------------------------------------------------------------------------------

    def routing(self, s: Step) -> list[Problem]:
        ctx = self.ctx
        where = f"step {s.id!r}"
        out: list[Problem] = []
        if s.executor is not None and s.executor not in ctx.executors:
            out.append(
                Problem(
                    code="unknown_executor",
                    where=where,
                    message=f"unknown executor {_shown(s.executor)} "
                    f"(known: {self._listing('executors', ctx.executors)})",
                )
            )
        if s.tool is not None:
            if s.tool not in ctx.tools:
                out.append(
                    Problem(
                        code="unknown_tool",
                        where=where,
                        message=f"unknown tool {_shown(s.tool)} (known: {self._listing('tools', ctx.tools.names)})",
                    )
                )
            if s.executor is not None and ctx.executors.get(s.executor) == "model":
                out.append(
                    Problem(
                        code="executor_kind",
                        where=where,
                        message=f"executor {_shown(s.executor)} runs model steps; "
                        "a step with a tool needs a tool executor",
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
            out.append(
                Problem(code="executor_kind", where=where, message=f"tool executor {_shown(s.executor)} needs a tool")
            )
        if s.allowed_tools:
            out += self._allowed_tools(s, where)
            if ctx.sealed and s.tool is None:
                out.append(
                    Problem(
                        code="sealed_tools",
                        where=where,
                        message="a sealed plan grants model steps no tools: call each tool from a step of its own, "
                        "its arguments bound to earlier outputs (an extractor step pulls values out of text)",
                    )
                )
        if s.executor is not None and s.executor in ctx.extractors and s.tool is None and s.output_schema is None:
            out.append(
                Problem(
                    code="extractor_schema",
                    where=where,
                    message=f"an extractor step (executor {_shown(s.executor)}) needs an output_schema: the JSON "
                    "Schema of the values it pulls out",
                )
            )
        return out

    def _allowed_tools(self, s: Step, where: str) -> list[Problem]:
        out: list[Problem] = []
        if s.tool is not None:
            out.append(
                Problem(
                    code="allowed_tools_with_tool",
                    where=where,
                    message=f"calls tool {_shown(s.tool)} and also lists allowed_tools; allowed_tools is only for a "
                    "step with no tool (a model-driven step)",
                )
            )
        seen: set[str] = set()
        for name in s.allowed_tools:
            if name in seen:
                out.append(
                    Problem(
                        code="duplicate_allowed_tool", where=where, message=f"allowed_tools lists {_shown(name)} twice"
                    )
                )
                continue
            seen.add(name)
            if name not in self.ctx.tools:
                out.append(
                    Problem(
                        code="unknown_allowed_tool",
                        where=where,
                        message=f"allowed_tools names unknown tool {_shown(name)} "
                        f"(known: {self._listing('tools', self.ctx.tools.names)})",
                    )
                )
            elif name in self.ctx.workflows:
                out.append(
                    Problem(
                        code="workflow_not_a_tool",
                        where=where,
                        message=f"allowed_tools names workflow {_shown(name)}: a workflow is handed off to "
                        "(handoff), never called by a model step",
                    )
                )
            elif self.ctx.tools.get(name).requires_approval:
                out.append(
                    Problem(
                        code="allowed_tool_needs_approval",
                        where=where,
                        message=f"{_shown(name)} always needs a human's approval: call it from a step of its own",
                    )
                )
        return out

    def dependencies(self, s: Step, known: Container[str]) -> list[Problem]:
        out: list[Problem] = []
        for dep in s.depends_on:
            if dep == s.id:
                out.append(Problem(code="self_dependency", where=f"step {s.id!r}", message="depends on itself"))
            elif dep not in known:
                out.append(
                    Problem(
                        code="missing_dependency",
                        where=f"step {s.id!r}",
                        message=f"depends on unknown step {_shown(dep)}",
                    )
                )
        return out

    def handoffs(self, steps: Mapping[str, Step], reaches: Callable[[Step, str], bool]) -> list[Problem]:
        """A hand-off (a step calling a workflow) is the plan's last step: at most one a plan, after
        every other step, and nothing after it."""
        workflows = self.ctx.workflows
        if not workflows:
            return []
        running = [s for s in self.ctx.running.values() if s.tool in workflows and s.id not in steps]
        found = [*running, *(s for s in steps.values() if s.tool is not None and s.tool in workflows)]
        if not found:
            return []
        out: list[Problem] = []
        last = found[0]
        for extra in found[1:]:
            out.append(
                Problem(
                    code="handoff_twice",
                    where=f"step {extra.id!r}",
                    message=f"calls workflow {_shown(extra.tool or '')} after a hand-off to "
                    f"{_shown(last.tool or '')} (step {last.id!r}): a plan hands off once, as its last step",
                )
            )
        if last.id not in steps:
            return out  # a hand-off under way: it stays, and the run ends when everything has finished
        handing_off = {f.id for f in found}
        before: list[str] = []
        for s in steps.values():
            if s.id in handing_off:
                continue
            if last.id in s.depends_on:
                out.append(
                    Problem(
                        code="after_handoff",
                        where=f"step {s.id!r}",
                        message=f"depends on the hand-off step {last.id!r}: nothing runs after a hand-off, "
                        "whose output is the final answer",
                    )
                )
            elif not reaches(last, s.id):
                before.append(s.id)
        if before:
            listing = ", ".join(repr(sid) for sid in before[:_LISTED_NAMES])
            if len(before) > _LISTED_NAMES:
                listing += f" and {len(before) - _LISTED_NAMES:,} more"
            out.append(
                Problem(
                    code="handoff_not_last",
                    where=f"step {last.id!r}",
                    message=f"hands off to workflow {_shown(last.tool or '')} but does not come after {listing}: "
                    "list them in depends_on (the run ends when the workflow finishes)",
                )
            )
        return out

    # -- acceptance ------------------------------------------------------------------------------

    def acceptance(self, s: Step) -> list[Problem]:
        where = f"step {s.id!r}"
        out: list[Problem] = []
        if s.output_schema is not None:
            out += schema_problems(s.output_schema, where=where, label="output_schema")
        for i, c in enumerate(s.checks):
            if isinstance(c, FitsSchema):
                out += schema_problems(c.json_schema, where=where, label=f"checks[{i}] schema")
            elif isinstance(c, Matches):
                reason = pattern_problem(c.pattern)
                if reason is not None:
                    shown = clip(c.pattern, 120)
                    out.append(
                        Problem(code="invalid_pattern", where=where, message=f"invalid pattern {shown!r}: {reason}")
                    )
            elif isinstance(c, Predicate) and self.ctx.predicates is not None and c.name not in self.ctx.predicates:
                listing = self._listing("predicates", self.ctx.predicates)
                out.append(
                    Problem(
                        code="unknown_predicate",
                        where=where,
                        message=f"unknown predicate {_shown(c.name)} (known: {listing})",
                    )
                )
        return out

    # -- arguments -------------------------------------------------------------------------------

    def args_json(self, s: Step) -> Problem | None:
        """Whether the step's arguments are JSON data within the depth and size limits."""
        if not s.args:
            return None
        return json_problem(s.args, max_depth=MAX_DEPTH, max_chars=MAX_CHARS, where=f"step {s.id!r} args")

    def arguments(
        self,
        s: Step,
        arg_problem: Problem | None,
        known: Container[str],
        reaches: Callable[[Step, str], bool],
    ) -> list[Problem]:
        """Binding syntax, bound steps (known, and reached through ``depends_on``), and the
        arguments against the tool's schema (bound values are checked when known)."""
        if arg_problem is not None:
            return [arg_problem]
        where = f"step {s.id!r}"
        compiled = compile_args(s.args, where=f"step {s.id!r} args")
        out = list(compiled.problems)
        for _, ref in compiled.refs:
            if ref.step_id not in known:
                out.append(
                    Problem(
                        code="binding_missing_step",
                        where=where,
                        message=f"{_shown(str(ref), quote=False)} binds unknown step {ref.step_id!r}",
                    )
                )
            elif not reaches(s, ref.step_id):
                out.append(
                    Problem(
                        code="binding_not_in_depends_on",
                        where=where,
                        message=f"{_shown(str(ref), quote=False)} binds step {ref.step_id!r}, "
                        "which is not in depends_on",
                    )
                )
        if s.tool is not None and s.tool in self.ctx.tools:
            out += self._tool_args(s, compiled, where)
        return out

    def _tool_args(self, s: Step, compiled: CompiledArgs, where: str) -> list[Problem]:
        assert s.tool is not None
        bound = {".".join(map(str, loc)) for loc, _ in compiled.refs}
        _, arg_problems = self.ctx.tools.get(s.tool).check_args(s.args)
        out: list[Problem] = []
        for p in arg_problems:
            if bound and _under(p.where, bound):
                continue  # a bound value is checked when it is known, just before the call
            at = f" {_shown(p.where, quote=False)}" if p.where else ""
            out.append(
                Problem(
                    code="invalid_arguments",
                    where=where,
                    message=f"argument{at}: {_shown(p.message, quote=False, limit=300)}",
                )
            )
        return out

    def _listing(self, kind: str, names: Iterable[str]) -> str:
        text = self._listings.get(kind)
        if text is None:
            ordered = sorted(names)
            text = ", ".join(ordered[:_LISTED_NAMES]) or "none"
            if len(ordered) > _LISTED_NAMES:
                text += f" and {len(ordered) - _LISTED_NAMES:,} more"
            self._listings[kind] = text
        return text


def _shown(text: str, *, quote: bool = True, limit: int = 80) -> str:
    """A name the planner wrote, quoted and cut short for a message."""
    return clip(repr(text) if quote else text, limit)


def _under(location: str, bound: Container[str]) -> bool:
    """Whether ``location`` (``a.b.0``) is a bound location or lies inside one."""
    if location in bound:
        return True
    end = location.find(".")
    while end != -1:
        if location[:end] in bound:
            return True
        end = location.find(".", end + 1)
    return False
