"""The oracle planner: a function-backed test model that plans each turn's remaining ground-truth
calls — no model is reachable here, and the full path (planner → static checks → scheduler →
executor → journal → store) is what is under test.

From a request it reads what it is asked (``planner.propose``: the turn's plan; ``planner.patch``:
after a failure, the calls of the turn not done yet; ``planner.finish``: the answer). Calls to
different classes do not touch each other's state, so each call depends only on the one before it
of the same class: calls to other classes run in parallel.
"""

from __future__ import annotations

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
        self.model = FunctionModel(self._reply, name="bfcl-oracle")

    def calls(self, turn: int) -> list[Call]:
        return [parse_call(text, self.world.signature_of) for text in self.task.ground_truth[turn]]

    def remaining(self) -> list[Call]:
        """The turn's calls not done yet: its ground truth less the calls that succeeded, in order."""
        done = list(self.world.done[self.turn])
        left = []
        for call in self.calls(self.turn):
            if call in done:
                done.remove(call)
            else:
                left.append(call)
        return left

    def _reply(self, request: ModelRequest) -> Any:
        self.planner_calls += 1
        if request.purpose == "planner.finish":
            results = self.world.results[self.turn]
            return {"answer": results[-1] if results else "done"}
        self._plans += 1
        calls = self.remaining()
        if not calls:
            return {"reason": "every call of the turn is done", "steps": []}
        owner_of = self.world._owner
        steps = []
        last_of: dict[str, str] = {}
        for index, (name, kwargs) in enumerate(calls):
            step_id = f"t{self.turn + 1}p{self._plans}c{index + 1}"
            owner = owner_of.get(name, name)
            steps.append(
                {
                    "id": step_id,
                    "description": f"{name} for turn {self.turn + 1}",
                    "tool": name,
                    "args": kwargs,
                    "depends_on": [last_of[owner]] if owner in last_of else [],
                }
            )
            last_of[owner] = step_id
        return {"reason": f"the ground truth of turn {self.turn + 1}", "steps": steps}
