"""The oracle planner: a function-backed test model that plans each turn's remaining ground-truth
calls — no model is reachable here, and the full path (planner → static checks → scheduler →
executor → journal → store) is what is under test.

From a request it reads what it is asked (``planner.propose``: the turn's plan; ``planner.patch``:
after a failure, the plan patched from the execution record: the failed calls again, the rest
kept as it was; ``planner.turn``, the step-by-step policy: the next call, or the same call again
after it failed, or the answer; ``planner.finish``: the answer). Calls to different classes do not
touch each other's state, so each call depends only on the one before it of the same class: calls
to other classes run in parallel.

A turn whose request needs a function BFCL holds back until a later turn (``miss_func``) is
planned as a model that does not know it would plan it: with the missing function, which the
plan's checks refuse as an unknown tool; asked again, the oracle plans nothing and answers that no
tool can do it.

:class:`ReactOracle` is the same knowledge as a ReAct model: each reply asks for the next wave of
calls (one call per class, the classes' calls together), then answers.
"""

from __future__ import annotations

import re
from typing import Any

from planexec.bfcl._calls import Call, parse_call
from planexec.bfcl._data import BfclTask
from planexec.bfcl._world import BfclWorld
from planexec.models import FunctionModel, ModelRequest, ModelResponse, ToolCall

__all__ = ["Oracle", "ReactOracle"]

_CANNOT = "No tool I have can do that yet."


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
        self._issued: list[tuple[str, int]] = []
        """Step-by-step policy: the steps issued this turn (id, index of the call)."""
        self._refused = False
        """This turn's plan named a function not available yet, and was refused."""
        self.model = FunctionModel(self._reply, name="bfcl-oracle")

    def next_turn(self, turn: int) -> None:
        self.turn = turn
        self._current = []
        self._issued = []
        self._refused = False

    def calls(self, turn: int) -> list[Call]:
        return [parse_call(text, self.world.signature_of) for text in self.task.ground_truth[turn]]

    def wanted(self) -> list[Call]:
        """The calls this turn's request asks for: its ground truth, or, when the turn needs a
        function held back until the next turn (``miss_func``: the ground truth is empty now and the
        next turn carries the request out), the next turn's calls, a call of the missing function
        first (a step-by-step planner asks for it before anything else is done)."""
        calls = self.calls(self.turn)
        upcoming = self.task.missed.get(self.turn + 1)
        if not calls and upcoming and self.turn + 1 < len(self.task.ground_truth):
            later = self.calls(self.turn + 1)
            missing = [call for call in later if call[0] in upcoming] or [(upcoming[0], {})]
            return [missing[0], *(call for call in later if call is not missing[0])]
        return calls

    def _answer(self) -> dict[str, Any]:
        if self._refused:
            return {"answer": _CANNOT}
        results = self.world.results[self.turn]
        return {"answer": results[-1] if results else "done"}

    def _reply(self, request: ModelRequest) -> Any:
        self.planner_calls += 1
        if request.purpose == "planner.finish":
            return self._answer()
        if _was_refused(request):
            self._refused = True
            if request.purpose == "planner.turn":
                return {"thought": "no tool can do it", "stop": True, "answer": _CANNOT}
            return {"reason": "no tool available can do what is asked", "steps": []}
        if request.purpose == "planner.turn":
            return self._turn(request)
        if request.purpose == "planner.patch" and self._current:
            return self._patch(request)
        self._plans += 1
        calls = self.wanted()
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

    def _turn(self, request: ModelRequest) -> Any:
        """The step-by-step policy: the call after the last that succeeded, the same call again
        under a new id when it failed, or the answer when the turn's calls are done."""
        calls = self.wanted()
        if self._issued:
            last_id, last_index = self._issued[-1]
            index = last_index if last_id in _failed(request) else last_index + 1
        else:
            index = 0
        if index >= len(calls):
            return {"thought": "the turn's calls are made", "stop": True, **self._answer()}
        name, kwargs = calls[index]
        step_id = f"t{self.turn + 1}s{len(self._issued) + 1}"
        self._issued.append((step_id, index))
        step = {"id": step_id, "description": f"{name} for turn {self.turn + 1}", "tool": name, "args": kwargs}
        return {"thought": f"call {index + 1} of {len(calls)}", "confidence": 1.0, "step": step}

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


class ReactOracle:
    """The ground truth as a ReAct model would call it: each reply the next wave of calls (the
    next call of each class, together), then the answer. A call that failed is asked for again."""

    def __init__(self, task: BfclTask, world: BfclWorld) -> None:
        self.task = task
        self.world = world
        self.turn = 0
        self.model_calls = 0
        self._oracle = Oracle(task, world)
        self._next = 0
        self._asked: list[tuple[str, int]] = []
        self.model = FunctionModel(self._reply, name="bfcl-react-oracle")

    def next_turn(self, turn: int) -> None:
        self.turn = turn
        self._oracle.next_turn(turn)
        self._asked = []

    def _reply(self, request: ModelRequest) -> Any:
        self.model_calls += 1
        failed = {
            m.tool_call_id for m in request.messages if m.role == "tool" and m.tool_call_id and _failed_call(m.content)
        }
        latest = {index: call_id for call_id, index in self._asked}  # each call's last asking
        redo = sorted(index for index, call_id in latest.items() if call_id in failed)
        done = {index for index, call_id in latest.items() if call_id not in failed}
        calls = self._oracle.wanted()
        if self._oracle.calls(self.turn) != calls:  # held back until a later turn: no tool can do it
            return _CANNOT
        owner_of = self.world._owner
        wave: list[int] = list(redo)
        busy = {owner_of.get(calls[i][0], calls[i][0]) for i in redo}
        for index, (name, _) in enumerate(calls):
            owner = owner_of.get(name, name)
            if index in done or index in wave:
                continue
            if owner in busy:
                continue
            earlier = [i for i in range(index) if owner_of.get(calls[i][0], calls[i][0]) == owner]
            if all(i in done for i in earlier):
                wave.append(index)
            busy.add(owner)
        if not wave:
            results = self.world.results[self.turn]
            return results[-1] if results else "done"
        asked = []
        for index in sorted(wave):
            call_id = f"t{self.turn + 1}c{len(self._asked) + 1}"
            self._asked.append((call_id, index))
            name, kwargs = calls[index]
            asked.append(ToolCall(id=call_id, name=name, arguments=kwargs))
        return ModelResponse(tool_calls=tuple(asked), finish_reason="tool_calls")


def _failed_call(observation: str) -> bool:
    return observation.lstrip().lower().startswith("error")


def _was_refused(request: ModelRequest) -> bool:
    """Whether the oracle's last reply was refused for naming a tool that is not there."""
    last = request.messages[-1].content if len(request.messages) > 1 else ""
    return last.startswith("Your reply has these problems:") and "[unknown_tool]" in last


_RECORD_LINE = re.compile(r"^- (\S+) ")


def _record_lines(request: ModelRequest) -> list[str]:
    """The finished steps' lines of the request's execution record."""
    text = request.messages[-1].content if request.messages else ""
    return [line.strip() for line in text.split("Not finished:", 1)[0].splitlines() if line.strip().startswith("- ")]


def _failed(request: ModelRequest) -> list[str]:
    return [m.group(1) for line in _record_lines(request) if " ✗ failed" in line and (m := _RECORD_LINE.match(line))]


def _finished(request: ModelRequest) -> list[str]:
    return [m.group(1) for line in _record_lines(request) if " → " in line and (m := _RECORD_LINE.match(line))]
