"""What changed between two plan versions: steps added, removed, and changed (field by field)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from planexec.plan import Plan, Step

__all__ = ["FieldChange", "PlanDiff", "StepChange", "diff_plans"]


@dataclass(frozen=True, kw_only=True)
class FieldChange:
    name: str
    before: Any
    after: Any


@dataclass(frozen=True, kw_only=True)
class StepChange:
    step_id: str
    fields: tuple[FieldChange, ...]


@dataclass(frozen=True, kw_only=True)
class PlanDiff:
    added: tuple[Step, ...] = ()
    removed: tuple[Step, ...] = ()
    changed: tuple[StepChange, ...] = ()
    kept: tuple[str, ...] = field(default=())
    """Ids of steps that are the same in both versions."""

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def lines(self, *, width: int = 70) -> list[str]:
        """The diff as readable lines: ``+ id``, ``- id``, ``~ id: field: old → new``."""
        out = [f"+ {s.id}: {_runs_on(s)} — {cut(s.description, width)}" for s in self.added]
        out += [f"- {s.id}: {_runs_on(s)} — {cut(s.description, width)}" for s in self.removed]
        for change in self.changed:
            out.append(f"~ {change.step_id}:")
            out += [
                f"    {f.name}: {cut(_show(f.before), width)} → {cut(_show(f.after), width)}" for f in change.fields
            ]
        return out

    def json(self) -> dict[str, Any]:
        return {
            "added": [s.id for s in self.added],
            "removed": [s.id for s in self.removed],
            "changed": [
                {"id": c.step_id, "fields": {f.name: {"from": f.before, "to": f.after} for f in c.fields}}
                for c in self.changed
            ],
            "kept": list(self.kept),
        }


def cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _runs_on(step: Step) -> str:
    return f"tool {step.tool}" if step.tool else f"{step.executor or 'default'} (model)"


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def diff_plans(before: Plan | None, after: Plan) -> PlanDiff:
    """How ``after`` differs from ``before`` (everything is added when there is no ``before``)."""
    if before is None:
        return PlanDiff(added=after.steps)
    old = {s.id: s for s in before.steps}
    new = {s.id: s for s in after.steps}
    changed: list[StepChange] = []
    kept: list[str] = []
    for sid, step in new.items():
        if sid not in old:
            continue
        a, b = old[sid].model_dump(mode="json"), step.model_dump(mode="json")
        fields = tuple(FieldChange(name=k, before=a.get(k), after=b.get(k)) for k in b if a.get(k) != b.get(k))
        if fields:
            changed.append(StepChange(step_id=sid, fields=fields))
        else:
            kept.append(sid)
    return PlanDiff(
        added=tuple(s for sid, s in new.items() if sid not in old),
        removed=tuple(s for sid, s in old.items() if sid not in new),
        changed=tuple(changed),
        kept=tuple(kept),
    )
