"""Plan memory in a run: what the memory offers before the first plan, the answer of a reused
plan, and what the memory is told when the run ends.

The memory is asked once, when the first planning round starts; what it offered is logged
(``plan_recalled``) before anything else of the round, so a resumed run uses the same offer and a
replay takes it from the log, never from the memory.

* **direct**: the re-bound steps must pass today's static checks against today's tools; then they
  are the first plan version (``author: memory``) with no planner call. When every plan version is
  the memory's, every step succeeded and nobody said anything new, the final answer is the
  remembered answer's template filled with the new outputs (else the planner writes it).
  A direct plan that fails the checks is reported to the memory as a failed reuse and becomes a
  guided one.
* **guided**: the planner's first request shows the remembered plan as a worked example.

A session's turn after the first is never reused directly: its meaning depends on the turns
before it. The memory failing (a store that cannot be reached, an embedder that raises) never
fails the run: it is logged on the ``planexec.memory`` logger and the run plans as usual.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from planexec._util.clip import clip
from planexec.log import Event, ModelCalled, PlanRecalled, RunState
from planexec.memory import render_answer
from planexec.plan import PlanDraft, check_steps
from planexec.planner import PlanningContext

if TYPE_CHECKING:
    from planexec.runtime._core import Core, EngineConfig

__all__ = ["direct_plan", "guided_example", "memory_answer", "recall_for", "report_to_memory", "with_example"]

_log = logging.getLogger("planexec.memory")


async def recall_for(engine: Core, ctx: PlanningContext) -> PlanRecalled | None:
    """What the memory offers for the run's goal (logged), or None. Asked once per run."""
    state = engine.state
    if state.recalled is not None:
        return state.recalled
    event = await engine.world.recall(lambda: _ask(engine, ctx))
    if event is not None:
        engine.emit(event)
    return event


async def _ask(engine: Core, ctx: PlanningContext) -> PlanRecalled | None:
    memory = engine.config.memory
    if memory is None:
        return None
    goal = ctx.goal
    try:
        recall = await memory.recall(goal, tools=ctx.tools.names, constraints=ctx.constraints)
    except Exception as e:  # the memory is a help, never a reason for a run to fail
        _log.warning("plan memory could not be asked for run %s: %s: %s", engine.run_id, type(e).__name__, e)
        return None
    if recall is None:
        return None
    mode = recall.mode
    why = recall.why_not_direct
    steps = recall.steps
    if mode == "direct" and engine.config.conversation is not None:
        mode, why, steps = "guided", "a turn of a session depends on the turns before it", recall.entry.steps
    if mode == "direct":
        problems = check_steps(list(steps), ctx.current_checks())
        if problems:
            why = clip("today's checks refuse it: " + "; ".join(map(str, problems)), 500)
            mode, steps = "guided", recall.entry.steps
            await _report(engine.config, recall.entry.id, ok=False, why=why)
    return PlanRecalled(
        at=engine.now(),
        entry_id=recall.entry.id,
        goal=recall.entry.goal,
        similarity=recall.similarity,
        mode=mode,
        steps=tuple(steps),
        answer=recall.answer if mode == "direct" else None,
        bindings=recall.bindings if mode == "direct" else (),
        why_not_direct=why,
    )


def direct_plan(event: PlanRecalled) -> PlanDraft:
    """The first plan of a direct reuse."""
    shown = f" ({', '.join(f'{a} → {b}' for a, b in event.bindings)})" if event.bindings else ""
    reason = clip(f"the plan of memory entry {event.entry_id}, similarity {event.similarity:.2f}{shown}", 500)
    return PlanDraft.model_construct(
        reason=reason, steps=list(event.steps), confidence=None, question=None, give_up=None
    )


def guided_example(event: PlanRecalled) -> str:
    """The worked example a guided reuse shows the planner."""
    steps = [s.model_dump(mode="json", exclude_defaults=True) for s in event.steps]
    return (
        "A plan that met a similar goal before (similarity "
        f"{event.similarity:.2f}). Use it as a worked example: keep what fits this goal, change what does not.\n"
        f"Its goal: {clip(event.goal, 2_000)}\n"
        f"Its steps: {clip(json.dumps(steps, ensure_ascii=False, separators=(',', ':')), 20_000)}"
    )


def memory_answer(state: RunState) -> str | None:
    """The final answer of a direct reuse that went as remembered, from its template; None: the
    planner writes it."""
    event = state.recalled
    if event is None or event.mode != "direct" or event.answer is None:
        return None
    if not state.plans or any(p.author != "memory" for p in state.plans):
        return None
    if state.information or state.reviews or state.suspended is not None:
        return None
    if not state.steps or any(rec.status != "succeeded" for rec in state.steps.values()):
        return None
    return render_answer(event.answer, state.outputs)


def with_example(ctx: PlanningContext, event: PlanRecalled | None) -> PlanningContext:
    return ctx if event is None or event.mode != "guided" else replace(ctx, example=guided_example(event))


async def report_to_memory(config: EngineConfig, run_id: str, state: RunState, events: Sequence[Event]) -> None:
    """Tell the memory how the run went: a direct reuse's success or failure (and a guided one's
    success) against its entry; a run that met its goal with a plan of its own is remembered."""
    memory = config.memory
    if memory is None or not state.finished or state.stop is None:
        return
    met = state.stop.kind == "goal_met"
    event = state.recalled
    if event is not None:
        if event.mode == "direct":
            as_remembered = all(p.author == "memory" for p in state.plans)
            ok = met and as_remembered
            why = None
            if not ok:
                failed = [r for r in state.steps.values() if r.status == "failed" and r.error is not None]
                why = (
                    f"step {failed[0].id} failed: {failed[0].error.message}"  # type: ignore[union-attr]
                    if failed
                    else f"the run stopped {state.stop.kind}: {state.stop.detail}"
                )
            await _report(config, event.entry_id, ok=ok, why=why)
            if ok:
                return
        elif met:
            await _report(config, event.entry_id, ok=True, why=None)
    if not met or not state.plans:
        return
    last = state.plans[-1]
    steps = [s for s in last.steps if (rec := state.steps.get(s.id)) is not None and rec.status == "succeeded"]
    planner_calls = sum(1 for e in events if isinstance(e, ModelCalled) and e.role == "planner")
    try:
        await memory.remember(
            goal=state.goal,
            constraints=state.constraints,
            steps=steps,
            answer=state.answer,
            outputs=state.outputs,
            run_id=run_id,
            cost=state.cost,
            planner_calls=planner_calls,
            plan_versions=len(state.plans),
        )
    except Exception as e:
        _log.warning("plan memory could not keep run %s: %s: %s", run_id, type(e).__name__, e)


async def _report(config: EngineConfig, entry_id: str, *, ok: bool, why: str | None) -> None:
    memory = config.memory
    if memory is None:
        return
    try:
        await memory.reused(entry_id, ok=ok, why=why)
    except Exception as e:
        _log.warning("plan memory could not record a reuse of %s: %s: %s", entry_id, type(e).__name__, e)
