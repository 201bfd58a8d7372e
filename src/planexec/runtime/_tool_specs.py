"""Tools as a log records them: the spec of each tool a run may use (in ``run_started`` and in
``tools_changed``), the stand-in a replay uses for a recorded tool, and what changed between two
sets of tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planexec.errors import UsageError
from planexec.log import ToolsChanged
from planexec.tools import Tool, ToolContext, Toolset
from planexec.trust import ArgumentRule, GoalText, Provenance, record_rules, rules_from_record

__all__ = ["ServedRule", "stand_in_tool", "tool_spec", "tools_changed", "with_change"]


@dataclass(frozen=True, slots=True)
class ServedRule(ArgumentRule):
    """A replay's stand-in for a rule the log could not hold (an allow-list that is a function):
    its verdicts are taken from the log."""

    description: str
    served: bool = field(default=True, init=False)
    name: str = field(default="served", init=False, repr=False)

    def check(self, value: Any, provenance: Provenance, goal: GoalText) -> str | None:
        return None

    def describe(self) -> str:
        return self.description


def tool_spec(tool: Tool) -> dict[str, Any]:
    """What the log records of ``tool``: how a model sees it, and its safety flags."""
    return {
        **tool.spec(),
        "output_schema": dict(tool.output_schema) if tool.output_schema is not None else None,
        "side_effect": tool.side_effect,
        "sensitive": tool.sensitive,
        "idempotent": tool.idempotent,
        "requires_approval": tool.requires_approval,
        **({"trusted": True} if tool.trusted else {}),
        **({"argument_rules": record_rules(tool.argument_rules)} if tool.argument_rules else {}),
    }


def stand_in_tool(spec: Mapping[str, Any]) -> Tool:
    """A recorded tool for a replay: seen as the run saw it, never called."""

    async def invoke(args: dict[str, Any], ctx: ToolContext) -> Any:
        raise UsageError(f"a replay does not call tools (asked {spec['name']})")

    return Tool(
        name=spec["name"],
        description=spec.get("description") or spec["name"],
        parameters=spec.get("parameters", {"type": "object"}),
        invoke=invoke,
        output_schema=spec.get("output_schema"),
        side_effect=bool(spec.get("side_effect", False)),
        sensitive=bool(spec.get("sensitive", False)),
        idempotent=bool(spec.get("idempotent", False)),
        requires_approval=bool(spec.get("requires_approval", False)),
        trusted=bool(spec.get("trusted", False)),
        argument_rules=recorded_rules(spec.get("argument_rules")),
    )


def recorded_rules(data: Any) -> dict[str, ArgumentRule]:
    """Argument rules as a log records them (rules it could not hold are served from the log)."""
    if not isinstance(data, Mapping):
        return {}
    return rules_from_record(data, served)


def served(description: str) -> ArgumentRule:
    return ServedRule(description=description)


def tools_changed(before: Toolset, after: Toolset, *, at: float) -> ToolsChanged | None:
    """The event that takes a run from ``before`` to ``after``; None when they are the same."""
    old = {t.name: tool_spec(t) for t in before}
    new = {t.name: tool_spec(t) for t in after}
    changed = tuple(spec for name, spec in new.items() if old.get(name) != spec)
    removed = tuple(name for name in old if name not in new)
    if not changed and not removed:
        return None
    return ToolsChanged(at=at, tools=changed, removed=removed)


def with_change(tools: Toolset, change: ToolsChanged) -> Toolset:
    """``tools`` as ``change`` leaves them, the new and redefined ones as replay stand-ins."""
    replaced = {str(spec.get("name", "")) for spec in change.tools} | set(change.removed)
    return Toolset(*(t for t in tools if t.name not in replaced), *(stand_in_tool(spec) for spec in change.tools))
