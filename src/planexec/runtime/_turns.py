"""A session's turns as runs see them: what a turn's run records of its session, the record of the
earlier turns its planner is shown, and the budget a turn may still spend.

A turn is a run whose ``run_started`` config holds ``{"session": {"id", "turn", "earlier",
"budget", "session_budget", "record_chars", "sealed"}}``: the session, the turn's number (from 1),
the record of the turns before it (text, fixed when the turn starts, so that resuming or replaying
the turn shows the planner the same thing), the turn's caps (so that a resumed turn keeps them),
and the session's caps and the bound of its record (so that a replay of the session can check the
turn's caps and rebuild its record; turns recorded by earlier versions lack these two). ``sealed``
(present only when true): the record was made for a sealed planner — each earlier turn by its goal
and how it ended, never by what its steps returned or its answer (which quotes them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from planexec._util.clip import clip
from planexec.log import RunResult, RunState
from planexec.runtime._budget import Budget
from planexec.trust import TextIndex, words

__all__ = ["RECORD_CHARS", "SessionRecord", "carries_untrusted", "describe_turns", "session_record", "turn_budget"]

RECORD_CHARS = 6_000
"""How long the record of a session's earlier turns may be (the newest turns are kept whole)."""

_OUTPUT_CHARS = 300
"""The most of one step's output the record of a turn shows."""


@dataclass(frozen=True, kw_only=True)
class SessionRecord:
    """What a turn's run records of its session."""

    id: str
    turn: int
    earlier: str | None = None
    budget: Budget | None = None
    """The turn's caps."""
    session_budget: Budget | None = None
    """The caps on the whole session the turn ran under (None: none, or not recorded)."""
    record_chars: int | None = None
    """The bound the record of the earlier turns was made within (None: not recorded)."""
    sealed: bool = False
    """Whether the record of the earlier turns was made for a sealed planner."""
    untrusted: bool = False
    """Whether the record of the earlier turns carries text their runs did not trust (what a
    tool returned, an answer written after reading it): the planner's reading of it is untrusted."""

    def as_metadata(self) -> dict[str, Any]:
        record: dict[str, Any] = {"id": self.id, "turn": self.turn}
        if self.earlier:
            record["earlier"] = self.earlier
        if self.budget is not None:
            record["budget"] = self.budget.as_dict()
        if self.session_budget is not None:
            record["session_budget"] = self.session_budget.as_dict()
        if self.record_chars is not None:
            record["record_chars"] = self.record_chars
        if self.sealed:
            record["sealed"] = True
        if self.untrusted:
            record["untrusted"] = True
        return {"session": record}


def session_record(metadata: Mapping[str, Any]) -> SessionRecord | None:
    """The session record in a run's metadata, or None (none, or not one this code can read)."""
    record = metadata.get("session") if isinstance(metadata, Mapping) else None
    if not isinstance(record, Mapping):
        return None
    sid, turn, earlier, chars = record.get("id"), record.get("turn"), record.get("earlier"), record.get("record_chars")
    if not isinstance(sid, str) or not sid or isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        return None
    return SessionRecord(
        id=sid,
        turn=turn,
        earlier=earlier if isinstance(earlier, str) and earlier else None,
        budget=_caps(record.get("budget")),
        session_budget=_caps(record.get("session_budget")),
        record_chars=chars if isinstance(chars, int) and not isinstance(chars, bool) and chars >= 0 else None,
        sealed=record.get("sealed") is True,
        untrusted=record.get("untrusted") is True,
    )


def _caps(caps: Any) -> Budget | None:
    """The caps a record holds, or None (none, or not caps this code can read: a record written by
    hand or by another version; the agent's budget then)."""
    if not isinstance(caps, Mapping):
        return None
    known = {f.name for f in fields(Budget)}
    try:
        return Budget(**{k: v for k, v in caps.items() if k in known})
    except Exception:
        return None


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _describe_turn(number: int, result: RunResult, *, full: bool, sealed: bool = False) -> str:
    goal = result.goal
    lines = [f"Turn {number}: {clip(' '.join(goal.split()), 500)}"]
    if sealed:
        lines.append(f"  ended: {result.stop.kind}")
        return "\n".join(lines)
    if full:
        for step_id, rec in result.steps.items():
            if rec.status != "succeeded":
                continue
            call = rec.step.tool or rec.executor or "step"
            args = _json(rec.args) if rec.args else ""
            lines.append(f"  {step_id}: {call}({clip(args, 200)}) -> {clip(_json(rec.output), _OUTPUT_CHARS)}")
    if result.answer is not None:
        lines.append(f"  answer: {clip(' '.join(result.answer.split()), 800 if full else 200)}")
    if result.stop.kind != "goal_met":
        lines.append(f"  stopped: {result.stop.kind}")
    return "\n".join(lines)


def carries_untrusted(record: str | None, turns: Sequence[RunResult]) -> bool:
    """Whether ``record`` (the record of ``turns``) carries the text of a value their runs did not
    trust: an output or an answer labelled untrusted, or not labelled at all (an older log)."""
    if not record:
        return False
    index = TextIndex([record])
    goals = TextIndex([t.goal for t in turns])
    for result in turns:
        pieces = [
            clip(_json(rec.output), _OUTPUT_CHARS)
            for rec in result.steps.values()
            if rec.status == "succeeded" and (rec.output_provenance is None or not rec.output_provenance.trusted)
        ]
        label = result.answer_provenance
        if result.answer is not None and (label is None or not label.trusted):
            pieces.append(result.answer)
        if any(index.carries(words(piece), goals) for piece in pieces):
            return True
    return False


def describe_turns(turns: Sequence[RunResult], limit: int = RECORD_CHARS, *, sealed: bool = False) -> str | None:
    """The record of a session's turns so far, at most about ``limit`` characters: the newest turns
    with what their steps did, older ones by their goal and answer, the oldest left out (and
    counted). ``sealed``: for a sealed planner, each turn by its goal and how it ended only."""
    if not turns:
        return None
    room = max(0, limit - 40)  # for the line that says how many turns were left out
    parts: list[str] = []
    used = 0
    for index in range(len(turns) - 1, -1, -1):
        number = index + 1
        text = _describe_turn(number, turns[index], full=True, sealed=sealed)
        if used + len(text) > room:
            text = _describe_turn(number, turns[index], full=False, sealed=sealed)
        if used + len(text) > room:
            parts.append(f"(turns 1 to {number}: left out)")
            break
        parts.append(text)
        used += len(text) + 1
    return "Earlier in this conversation:\n" + "\n".join(reversed(parts))


_USED_OF: dict[str, Callable[[RunState], float]] = {
    "model_calls": lambda s: s.model_calls,
    "input_tokens": lambda s: s.usage.input_tokens,
    "output_tokens": lambda s: s.usage.output_tokens,
    "cost": lambda s: s.cost,
    "wall_time": lambda s: s.active_time,
    "tool_calls": lambda s: s.tool_calls,
    "steps": lambda s: s.steps_started,
    "replans": lambda s: s.replans,
}


def turn_budget(agent: Budget, turn: Budget | None, session: Budget | None, turns: Sequence[RunState]) -> Budget:
    """A turn's caps: the turn's own (else the agent's), each lowered to what the session's cap
    still allows after ``turns``; a cap the session has used up becomes 0 (the turn stops at once,
    with ``budget_exhausted``)."""
    own = turn if turn is not None else agent
    if session is None:
        return own
    caps: dict[str, Any] = {}
    for name, cap in own.as_dict().items():
        total = getattr(session, name)
        if total is None:
            caps[name] = cap
            continue
        spent = sum(_USED_OF[name](r) for r in turns)
        left = max(0, total - spent)
        left = left if isinstance(total, float) else int(left)
        caps[name] = left if cap is None else min(cap, left)
    return Budget(**caps)
