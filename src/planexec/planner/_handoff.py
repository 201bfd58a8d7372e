"""A plan's hand-off to a workflow, made into the step that carries it out.

The upfront planner may end its answer with ``handoff`` (a workflow and its arguments): the rest
of the work is the workflow's, and its output is the final answer. Before the answer is checked,
the hand-off becomes the last step of the plan — it calls the workflow, after every other step
of the answer — so that it is checked, approved, journaled and run like any tool step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planexec._util.clip import clip
from planexec.errors import Problem
from planexec.plan import PlanDraft, handoff_step

if TYPE_CHECKING:
    from planexec.log import RunState
    from planexec.plan import CheckContext

__all__ = ["take_handoff"]

_LISTED = 30


def take_handoff(draft: PlanDraft, checks: CheckContext, state: RunState) -> list[Problem]:
    """Make ``draft``'s hand-off the last of its steps (and clear it); the problems that keep it
    from being one. A draft with no hand-off is left as it is."""
    handoff = draft.handoff
    if handoff is None:
        return []
    if draft.question is not None or draft.give_up is not None:
        return [Problem(code="plan", where="handoff", message="a question or giving up comes with no hand-off")]
    if handoff.workflow not in checks.workflows or handoff.workflow not in checks.tools:
        known = sorted(checks.workflows)
        listing = ", ".join(known[:_LISTED]) or "none"
        if len(known) > _LISTED:
            listing += f" and {len(known) - _LISTED:,} more"
        name = clip(repr(handoff.workflow), 80)
        return [
            Problem(code="unknown_workflow", where="handoff", message=f"unknown workflow {name} (known: {listing})")
        ]
    tool = checks.tools.get(handoff.workflow)
    # a step that never started may be redefined (a patch replaces it); any other keeps its id
    started = {sid for sid, rec in state.steps.items() if rec.status != "pending"}
    taken = {*(s.id for s in draft.steps), *started, *(rec.id for rec in state.superseded)}
    step = handoff_step(
        handoff, after=[s.id for s in draft.steps], taken=taken, effect="write" if tool.side_effect else "read"
    )
    draft.steps = [*draft.steps, step]
    draft.handoff = None
    return []
