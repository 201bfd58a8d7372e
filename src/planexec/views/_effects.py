"""A step's effect as the engine applies it, from the tools' flags the log records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planexec.plan import Step
from planexec.views._models import EffectView

__all__ = ["effect_of", "runs_on"]


def _flag(spec: Mapping[str, Any] | None, name: str) -> bool:
    return bool(spec.get(name, False)) if spec is not None else False


def effect_of(step: Step, specs: Mapping[str, Mapping[str, Any]]) -> EffectView:
    """How the engine treats ``step``: a write when the plan says so, when its tool has a side
    effect, or (a model-driven step) when a tool it may call has one; with its tool's flags."""
    spec = specs.get(step.tool) if step.tool is not None else None
    through = [name for name in step.allowed_tools if step.tool is None and _flag(specs.get(name), "side_effect")]
    changes = step.effect == "write" or _flag(spec, "side_effect") or bool(through)
    sensitive = _flag(spec, "sensitive")
    requires = _flag(spec, "requires_approval")
    idempotent = _flag(spec, "idempotent")
    words = ["write" if changes else "read"]
    if sensitive:
        words.append("sensitive")
    if requires:
        words.append("requires approval")
    if idempotent and changes:
        words.append("idempotent")
    if through:
        words.append("through " + ", ".join(through))
    return EffectView(
        changes_world=changes,
        label=" · ".join(words),
        declared=step.effect,
        sensitive=sensitive,
        requires_approval=requires,
        idempotent=idempotent,
        through=through,
    )


def runs_on(step: Step) -> str:
    return f"tool {step.tool}" if step.tool else f"model ({step.executor or 'default executor'})"
