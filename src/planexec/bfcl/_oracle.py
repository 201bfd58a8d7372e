"""The oracle planner: a function-backed test model that plans each turn's remaining ground-truth
calls — no model is reachable here, and the full path (planner → static checks → scheduler →
executor → journal → store) is what is under test.

From a request it reads what it is asked (``planner.propose``: the turn's plan; ``planner.patch``:
after a failure, the plan patched from the execution record: the failed calls again, the rest
kept as it was; ``planner.finish``: the answer). Calls to
different classes do not touch each other's state, so each call depends only on the one before it
of the same class: calls to other classes run in parallel.
"""

from __future__ import annotations

import re
from typing import Any

from planexec.bfcl._calls import Call, parse_call
from planexec.bfcl._data import BfclTask
from planexec.bfcl._world import BfclWorld
from planexec.models import FunctionModel, ModelRequest

__all__ = ["Oracle"]


class Oracle:
    """Plans a task's turns from its ground truth. ``turn`` is the turn under way (the runner sets it)."""

    def __init__(self, task: BfclTask, world: BfclWorld) -> None:
        self.task = task
        self.world = world
        self.turn = 0
        self.planner_calls = 0
        self._plans = 0
        self._current: list[dict[str, Any]] = []
        """The turn's plan as the oracle last made it."""
        self.model = FunctionModel(self._reply, name="bfcl-oracle")

    def next_turn(self, turn: int) -> None:
        self.turn = turn
        self._current = []

    def calls(self, turn: int) -> list[Call]:
        return [parse_call(text, self.world.signature_of) for text in self.task.ground_truth[turn]]

    def _reply(self, request: ModelRequest) -> Any:
        self.planner_calls += 1
        if request.purpose == "planner.finish":
            results = self.world.results[self.turn]
            return {"answer": results[-1] if results else "done"}
        if request.purpose == "planner.patch" and self._current:
            return self._patch(request)
        self._plans += 1
        calls = self.calls(self.turn)
        if not calls:
            return {"reason": "nothing in this turn needs a call", "steps": []}
        owner_of = self.world._owner
        steps = []
        last_of: dict[str, str] = {}
        for index, (name, kwargs) in enumerate(calls):
            step_id = f"t{self.turn + 1}p{self._plans}c{index + 1}"
            owner = owner_of.get(name, name)
            step = {
                "id": step_id,
                "description": f"{name} for turn {self.turn + 1}",
                "tool": name,
                "args": kwargs,
                "depends_on": [last_of[owner]] if owner in last_of else [],
            }
            steps.append(step)
            last_of[owner] = step_id
        self._current = steps
        return {"reason": f"the ground truth of turn {self.turn + 1}", "steps": steps}

    def _patch(self, request: ModelRequest) -> Any:
        """Patch the plan as a careful planner would, from the record: the failed steps again,
        under new ids; every other step not finished kept as it was (a step under way must not
        be dropped: its call may have happened), its dependencies moved to the replacements."""
        self._plans += 1
        failed = set(_failed(request))
        finished = set(_finished(request))
        replaced: dict[str, str] = {}
        steps = []
        for index, step in enumerate(self._current):
            if step["id"] in finished:
                continue
            if step["id"] in failed:
                new_id = f"t{self.turn + 1}p{self._plans}c{index + 1}"
                replaced[step["id"]] = new_id
                steps.append({**step, "id": new_id})
            else:
                steps.append(dict(step))
        for step in steps:
            step["depends_on"] = [replaced.get(d, d) for d in step["depends_on"]]
        self._current = [*[s for s in self._current if s["id"] in finished], *steps]
        return {"reason": "the failed calls again; the rest of the plan as it was", "steps": steps}


_RECORD_LINE = re.compile(r"^- (\S+) ")


def _record_lines(request: ModelRequest) -> list[str]:
    """The finished steps' lines of the request's execution record."""
    text = request.messages[-1].content if request.messages else ""
    return [line.strip() for line in text.split("Not finished:", 1)[0].splitlines() if line.strip().startswith("- ")]


def _failed(request: ModelRequest) -> list[str]:
    return [m.group(1) for line in _record_lines(request) if " ✗ failed" in line and (m := _RECORD_LINE.match(line))]


def _finished(request: ModelRequest) -> list[str]:
    return [m.group(1) for line in _record_lines(request) if " → " in line and (m := _RECORD_LINE.match(line))]
