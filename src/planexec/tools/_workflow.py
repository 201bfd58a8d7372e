"""Workflows: deterministic scripts the planner may hand the rest of a run's work to.

A workflow is a tool with a purpose: the planner cannot call it from an ordinary step, only hand
off to it, as the last step of a plan. Its output is the run's final answer, with no further
planner call. Because the hand-off is a step, it is logged, gated by approvals and run exactly
once like any tool step (see :mod:`planexec.runtime`).

``@workflow`` builds one from a function (sync or async) as ``@tool`` does: the parameters'
schema from the signature and the docstring, the output checked against the return annotation.
It returns the value and registers nothing anywhere; give it to ``Agent(workflows=[...])``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, overload

from planexec.errors import Problem, ToolDefinitionError
from planexec.tools._function import tool
from planexec.tools._tool import RetryPolicy, Tool
from planexec.trust import ArgumentRule

__all__ = ["Workflow", "workflow"]


@dataclass(frozen=True, kw_only=True)
class Workflow:
    """A deterministic script the planner may hand the rest of the work to.

    ``tool``: how it is called (its name, description, argument schema and invoke), as any tool.
    ``read_only``: the workflow changes nothing outside the run (by default it does: its step has
    effect ``write``, so it is journaled with an intent and an idempotency key, and never repeated
    after a crash unless it is ``idempotent``). A ``sensitive`` or ``requires_approval`` tool makes
    the hand-off wait for a human's yes, as the run's approvals say.
    """

    tool: Tool
    read_only: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.tool, Tool):
            raise ToolDefinitionError(
                "invalid workflow",
                [Problem(code="workflow", where=repr(self.tool)[:60], message="tool must be a Tool")],
            )
        if self.tool.side_effect == self.read_only:
            object.__setattr__(self, "tool", dataclasses.replace(self.tool, side_effect=not self.read_only))

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.tool.parameters

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        sensitive: bool = False,
        requires_approval: bool = False,
        idempotent: bool = False,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        trusted: bool = False,
        argument_rules: Mapping[str, ArgumentRule] | None = None,
    ) -> Workflow:
        """A workflow from a sync or async function, as ``@workflow`` makes it."""
        made = tool(
            name=name,
            description=description,
            timeout=timeout,
            retry=retry,
            side_effect=not read_only,
            sensitive=sensitive,
            idempotent=idempotent,
            requires_approval=requires_approval,
            trusted=trusted,
            argument_rules=argument_rules,
        )(fn)
        return cls(tool=made, read_only=read_only)


@overload
def workflow(fn: Callable[..., Any], /) -> Workflow: ...


@overload
def workflow(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    sensitive: bool = False,
    requires_approval: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    trusted: bool = False,
    argument_rules: Mapping[str, ArgumentRule] | None = None,
) -> Callable[[Callable[..., Any]], Workflow]: ...


def workflow(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    sensitive: bool = False,
    requires_approval: bool = False,
    idempotent: bool = False,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    trusted: bool = False,
    argument_rules: Mapping[str, ArgumentRule] | None = None,
) -> Workflow | Callable[[Callable[..., Any]], Workflow]:
    """Make a sync or async function a :class:`Workflow`; use bare (``@workflow``) or with options.

    The function's parameters must be typed and its docstring must say what it does (the planner
    chooses by it): every problem is raised at once as a :class:`ToolDefinitionError`. A
    parameter annotated ``ToolContext`` receives the call's context — its ``idempotency_key`` is
    what a workflow that sends something passes on, or checks, so that it sends once.
    ``trusted=True``: its output (the run's answer) is trusted; ``argument_rules``: rules its
    arguments must pass before the hand-off runs (see :mod:`planexec.trust`).
    """

    def wrap(f: Callable[..., Any]) -> Workflow:
        return Workflow.from_function(
            f,
            name=name,
            description=description,
            read_only=read_only,
            sensitive=sensitive,
            requires_approval=requires_approval,
            idempotent=idempotent,
            timeout=timeout,
            retry=retry,
            trusted=trusted,
            argument_rules=argument_rules,
        )

    if fn is not None:
        return wrap(fn)
    return wrap
