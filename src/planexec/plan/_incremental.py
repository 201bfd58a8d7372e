"""Checking a plan one step at a time, as its steps stream in.

``IncrementalChecker(ctx).add(step)`` checks one new step against the steps accepted so far and,
when it has no problem, accepts it. Each ``add`` costs time proportional to that step (its
dependencies, bindings, arguments and acceptance checks), never to the steps before it: ids are in
a dict, and each accepted step keeps the set of steps it comes after as a bitset, so "is the bound
step reached through ``depends_on``" is one bit.

Steps must come dependencies first: a step may depend only on finished steps and on steps already
accepted (anything else is a ``missing_dependency``), so no cycle can form. Added in such an order,
the steps of a plan all pass exactly when :func:`~planexec.plan.check_steps` finds no problem with
the whole list — bar a hand-off (a step that calls a workflow), which is never accepted early: it
must come after every other step, and only the whole plan says which those are.

Use it where steps arrive one by one, such as a planner's answer while it streams::

    checker = IncrementalChecker(ctx)
    for step in streamed_steps:
        problems = checker.add(step)
        if problems:
            break  # stop starting steps early; the whole answer is checked when complete
        start(step)
"""

from __future__ import annotations

from planexec.errors import Problem
from planexec.plan._checks import CheckContext, KnownIds, Rules, capped
from planexec.plan._step import Step

__all__ = ["IncrementalChecker"]


class IncrementalChecker:
    """The steps of one plan, checked and accepted one at a time (see the module docstring)."""

    def __init__(self, ctx: CheckContext) -> None:
        self._rules = Rules(ctx)
        self._max_steps = ctx.max_steps
        self._steps: dict[str, Step] = {}
        self._known = KnownIds(self._steps, self._rules.finished)
        self._bits: dict[str, int] = {}
        """A bit position for every id accepted or depended on."""
        self._ancestors: dict[str, int] = {}
        """For each accepted step, the bits of every step it comes after."""

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps accepted so far, in the order they were added."""
        return tuple(self._steps.values())

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: Step) -> list[Problem]:
        """Every problem ``step`` has as the next step of the plan; with none, it is accepted.

        A step with problems is not accepted: later steps cannot depend on it.
        """
        rules = self._rules
        where = f"step {step.id!r}"
        problems: list[Problem] = []
        arg_problem = rules.args_json(step)
        if step.id in self._steps:
            problems.append(Problem(code="duplicate_id", where=where, message="two steps have this id"))
        else:
            problems += rules.finished_id(step, arg_problem is None)
        if self._max_steps is not None and len(self._steps) + 1 > self._max_steps:
            problems.append(rules.budget(len(self._steps) + 1))
        problems += rules.routing(step)
        if step.tool is not None and step.tool in rules.ctx.workflows:
            problems.append(
                Problem(code="handoff_early", where=where, message="a hand-off starts once the whole plan is known")
            )
        problems += rules.dependencies(step, self._known)
        problems += rules.acceptance(step)
        problems += rules.arguments(step, arg_problem, self._known, self._reaches)
        if problems:
            return capped(problems)
        ancestors = 0
        for dep in step.depends_on:
            ancestors |= 1 << self._bit(dep) | self._ancestors.get(dep, 0)
        self._steps[step.id] = step
        self._ancestors[step.id] = ancestors
        self._bit(step.id)
        return []

    def _reaches(self, step: Step, target: str) -> bool:
        if target in step.depends_on:
            return True
        bit = self._bits.get(target)
        if bit is None:
            return False
        return any(self._ancestors.get(dep, 0) >> bit & 1 for dep in step.depends_on)

    def _bit(self, sid: str) -> int:
        bit = self._bits.get(sid)
        if bit is None:
            bit = self._bits[sid] = len(self._bits)
        return bit
