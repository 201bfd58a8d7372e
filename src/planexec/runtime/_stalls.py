"""Stall rules about calls that succeed: a planner going round in circles.

A call is its tool (or, for a model-driven step, its executor and description) with its
arguments; it counts as repeated when it succeeds again with the same output. Two rules:

* ``repeated_success``: the same call succeeded with the same output in ``rounds`` different plan
  versions (planning rounds): the planner keeps asking for what it already has.
* ``ping_pong``: the last four successful calls, each from a later plan version than the one
  before, alternate between two calls (A, B, A, B) with the same outputs each time.

Calls repeated inside one plan version are not a stall: the planner had not seen their outputs.
Only runs with more than one plan version pay for the rules: until a second version appears, the
successes are only remembered, not fingerprinted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from planexec.log import RunState, StallRule, StepRecord

__all__ = ["RepeatWatch"]


class RepeatWatch:
    """Finds calls that succeed again and again with the same output; see the module docstring."""

    __slots__ = ("_first_version", "_history", "_later", "_rounds", "_unsigned", "_versions")

    def __init__(self, rounds: int) -> None:
        self._rounds = rounds
        self._versions: dict[str, set[int]] = {}
        """Each call fingerprint, and the plan versions in which it succeeded."""
        self._history: list[tuple[str, int]] = []
        """Recent successes in the order they finished: (fingerprint, plan version)."""
        self._unsigned: list[StepRecord] = []
        self._first_version: int | None = None
        self._later = False

    def restore(self, state: RunState) -> None:
        """Remember the successes of a run picked up from its log (without judging them again)."""
        done = [r for r in (*state.superseded, *state.steps.values()) if r.status == "succeeded"]
        done.sort(key=lambda r: r.finished_at or 0.0)
        for rec in done:
            self._note(rec)

    def succeeded(self, rec: StepRecord) -> tuple[StallRule, str] | None:
        """Note a step that succeeded; the rule it breaks and why, or None."""
        if not self._note(rec):
            return None
        signature = self._history[-1][0]
        rounds = len(self._versions[signature])
        if rounds >= self._rounds:
            return "repeated_success", (
                f"{_what(rec)} succeeded with the same arguments and the same output in {rounds} planning rounds"
            )
        if len(self._history) >= 4:
            (a1, v1), (b1, v2), (a2, v3), (b2, v4) = self._history[-4:]
            if a1 == a2 and b1 == b2 and a1 != b1 and v1 < v2 < v3 < v4:
                return (
                    "ping_pong",
                    f"the planner alternates between two calls that keep giving the same outputs ({_what(rec)})",
                )
        return None

    def _note(self, rec: StepRecord) -> bool:
        """Remember ``rec``; True once fingerprints are being kept (a second plan version appeared)."""
        if not self._later:
            if self._first_version is None:
                self._first_version = rec.plan_version
            if rec.plan_version == self._first_version:
                self._unsigned.append(rec)
                return False
            self._later = True
            self._sign(self._unsigned)
            self._unsigned = []
        self._sign((rec,))
        return True

    def _sign(self, records: Iterable[StepRecord]) -> None:
        for rec in records:
            signature = _fingerprint(rec)
            self._versions.setdefault(signature, set()).add(rec.plan_version)
            self._history.append((signature, rec.plan_version))
        del self._history[:-4]


def _what(rec: StepRecord) -> str:
    step = rec.step
    return f"tool {step.tool}" if step.tool is not None else f"step {step.id!r} ({step.executor or 'model'})"


def _fingerprint(rec: StepRecord) -> str:
    step = rec.step
    call: Any = ["tool", step.tool] if step.tool is not None else ["model", step.executor, step.description]
    text = json.dumps([call, rec.args, rec.output], sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
