"""BFCL's own checks, turn by turn: the instances' state against the ground truth's, and the
ground truth's call results found among the results of the calls made (``state_checker`` and
``response_checker`` of ``bfcl_eval``), with the ground truth run by calling the class methods
directly (BFCL's executor keeps instances in module globals keyed by model name)."""

from __future__ import annotations

import contextlib
from typing import Any

from planexec.bfcl._calls import parse_call
from planexec.bfcl._data import BfclTask
from planexec.bfcl._world import MATH_LOCK, BfclWorld, bfcl_result, new_instances

__all__ = ["GroundTruth", "check_turn"]


class GroundTruth:
    """The ground truth's instances, turn after turn."""

    def __init__(self, task: BfclTask, world: BfclWorld) -> None:
        self.task = task
        self.instances = new_instances(task)
        self._signature_of = world.signature_of

    def run_turn(self, turn: int) -> list[str]:
        """Make the turn's ground-truth calls; their results as BFCL reads them."""
        owner: dict[str, Any] = {}
        for instance in self.instances.values():
            for name in dir(instance):
                if not name.startswith("_") and callable(getattr(instance, name)):
                    owner.setdefault(name, instance)
        results = []
        for text in self.task.ground_truth[turn]:
            name, kwargs = parse_call(text, self._signature_of)
            try:
                with MATH_LOCK if type(owner.get(name)).__name__ == "MathAPI" else contextlib.nullcontext():
                    results.append(bfcl_result(getattr(owner[name], name)(**kwargs)))
            except Exception as e:
                results.append(f"Error during execution: {e}")
        return results


def check_turn(world: BfclWorld, truth: GroundTruth, turn: int, expected: list[str]) -> dict[str, Any]:
    """BFCL's verdict on turn ``turn``: ``{"valid": True}`` or why not."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (  # type: ignore[import-untyped]
        response_checker,
        state_checker,
    )

    if not truth.task.ground_truth[turn]:
        return {"valid": True}
    state = state_checker(world.instances, truth.instances)
    if not state["valid"]:
        return dict(state)
    made = [result for results in world.results[: turn + 1] for result in results]
    return dict(response_checker(made, expected, turn))
