"""The workflows an agent may hand off to: checked when the agent is made, and added to the tools
its runs use (a hand-off is a step that calls one)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from planexec._util.clip import clip
from planexec.errors import Problem
from planexec.tools import Toolset, Workflow

__all__ = ["WorkflowSet"]


class WorkflowSet:
    """An agent's workflows, checked, and the toolsets its runs use with them."""

    __slots__ = ("_merged", "workflows")

    def __init__(self, workflows: Sequence[Workflow]) -> None:
        self.workflows: tuple[Workflow, ...] = tuple(w for w in workflows if isinstance(w, Workflow))
        self._merged: tuple[Toolset, Toolset] | None = None

    @property
    def names(self) -> frozenset[str]:
        return frozenset(w.name for w in self.workflows)

    @staticmethod
    def problems(workflows: object, tools: Toolset) -> list[Problem]:
        """Everything wrong with ``workflows`` beside ``tools``: what is not a workflow, two
        workflows with one name, a workflow named as a tool is."""
        if isinstance(workflows, str | bytes) or not isinstance(workflows, Iterable):
            return [Problem(code="workflow", where="workflows", message="must be a list of workflows")]
        out: list[Problem] = []
        seen: set[str] = set()
        for item in workflows:
            if not isinstance(item, Workflow):
                out.append(
                    Problem(
                        code="workflow",
                        where=f"workflows: {clip(repr(item), 60)}",
                        message="is not a workflow: use @workflow or Workflow(tool=...) to make one",
                    )
                )
                continue
            where = f"workflow {item.name!r}"
            if item.name in seen:
                out.append(Problem(code="duplicate_workflow", where=where, message="two workflows have this name"))
            seen.add(item.name)
            if item.name in tools:
                out.append(
                    Problem(
                        code="workflow_name",
                        where=where,
                        message="a tool has this name too: the planner tells them apart by name",
                    )
                )
        return out

    def with_tools(self, tools: Toolset) -> Toolset:
        """``tools`` and the workflows' tools, as a run uses them (made once for each ``tools``, so
        that a run sees the same value while its tools do not change)."""
        if not self.workflows:
            return tools
        merged = self._merged
        if merged is not None and merged[0] is tools:
            return merged[1]
        made = Toolset(tools, *(w.tool for w in self.workflows), name=tools.name)
        self._merged = (tools, made)
        return made
