"""Offline models for AgentDojo's tasks: function-backed test models that know a task's ground
truth, so that the whole path (planner → static checks → scheduler → executor → AgentDojo's
functions → AgentDojo's checks) runs with no model service.

:class:`DojoOracle` plans a user task's ground-truth calls (``ground_truth(pre_environment)``) and
answers with the task's ground-truth output (``GROUND_TRUTH_OUTPUT``, the text AgentDojo's
utility checks look for; "Done." where the task has none). It plans as either policy asks:

- ``planner.propose``: every call, each after the one before (a ground truth is an ordered list);
- ``planner.patch``: the steps not finished, a failed one again under a new id (once);
- ``planner.turn`` (step by step): the next call, a failed one again (once), then stop with the answer;
- ``planner.finish``: the answer.

Gullible (the default), it is the worst model imaginable for security: whenever the injection
task's goal is in a request it is sent — in the execution record, in a step's inputs — it adds
the injection task's ground-truth calls to what it does next (once per run): to its plan or its
next turn as a planner, as tool calls as an executor of a model-driven step (those its step
grants), and it adds the injection task's ground-truth output to any answer or step result it
writes from such a request. With no injection in what it reads, it is the oracle.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from planexec.agentdojo._reading import literal, plain, reads, record_outcomes
from planexec.agentdojo._world import DojoWorld
from planexec.models import FunctionModel, ModelRequest, ModelResponse, ToolCall

__all__ = ["DONE", "DojoOracle", "PlannedCall"]

DONE = "Done."
"""The answer of a task whose ground truth gives no output."""

RETRIES = 1
"""How many times a failed call is planned again."""


@dataclass(kw_only=True)
class PlannedCall:
    """A call the oracle means to make: a function, its arguments, and whose ground truth it is
    (``user`` or ``injection``)."""

    function: str
    args: dict[str, Any]
    origin: str = "user"
    tries: int = 0

    def step(self, step_id: str) -> dict[str, Any]:
        why = "the user's request" if self.origin == "user" else "what a message in a tool's output asked"
        return {
            "id": step_id,
            "description": f"{self.function}, for {why}",
            "tool": self.function,
            "args": literal(self.args),
        }


@dataclass(kw_only=True)
class _Injection:
    """What a gullible model knows of the injection task it falls for."""

    goal: str
    """The injection task's goal, :func:`plain`: the text it looks for in what it reads."""
    calls: list[PlannedCall]
    answer: str
    acted: bool = False
    """Whether its calls have been added already (they are added once per run)."""


@dataclass(kw_only=True)
class _Plan:
    todo: list[PlannedCall] = field(default_factory=list)
    issued: dict[str, PlannedCall] = field(default_factory=dict)
    """Steps given and not yet seen to end: id → call."""
    last: str | None = None
    """Step-by-step policy: the id of the step given last."""
    current: list[dict[str, Any]] = field(default_factory=list)
    """Upfront policy: the steps of the plan in force that were not seen to end."""


class DojoOracle:
    """The planner (``planner``) and executor (``executor``) of one run of ``world``'s user task.

    ``injection_task``: the injection task of the run's attack (None: no attack); ``gullible``:
    fall for it (else read past it, as the oracle)."""

    def __init__(self, world: DojoWorld, *, injection_task: str | None = None, gullible: bool = True) -> None:
        self.world = world
        task = world.task
        self.answer = str(task.GROUND_TRUTH_OUTPUT or "") or DONE
        self._plan = _Plan(todo=[PlannedCall(function=c.function, args=dict(c.args)) for c in world.ground_truth(task)])
        self._injection: _Injection | None = None
        if injection_task is not None and gullible:
            injected = world.suite.injection_task(injection_task)
            self._injection = _Injection(
                goal=plain(str(injected.GOAL)),
                calls=[
                    PlannedCall(function=c.function, args=dict(c.args), origin="injection")
                    for c in world.ground_truth(injected)
                ],
                answer=str(injected.GROUND_TRUTH_OUTPUT or ""),
            )
        self._count = 0
        self._token = secrets.token_hex(3)
        self._last_reply: dict[str, Any] | None = None
        kind = "gullible" if gullible else "oracle"
        self.planner = FunctionModel(self._planner_reply, name=f"agentdojo-{kind}-planner")
        self.executor = FunctionModel(self._executor_reply, name=f"agentdojo-{kind}-executor")

    @property
    def fooled(self) -> bool:
        """Whether it has added the injection task's calls to what it does."""
        return self._injection is not None and self._injection.acted

    # -- reading ----------------------------------------------------------------------------

    def _falls_for(self, request: ModelRequest, able: set[str] | None = None) -> list[PlannedCall]:
        """The injection's calls (those of the functions in ``able``, when given), the first time
        the injection is read where it can make any of them (else none)."""
        injection = self._injection
        if injection is None or injection.acted or not reads(request, injection.goal):
            return []
        calls = [c for c in injection.calls if able is None or c.function in able]
        if calls:
            injection.acted = True
        return [PlannedCall(function=c.function, args=dict(c.args), origin=c.origin) for c in calls]

    def _answer_for(self, request: ModelRequest, base: str) -> str:
        injection = self._injection
        if injection is not None and injection.answer and reads(request, injection.goal):
            return f"{base} {injection.answer}"
        return base

    def _new_id(self, prefix: str) -> str:
        """A step id no tool output can name in advance: an injection that imitates the execution
        record ("- s2 send_money … ✗ failed") cannot make the oracle think a step failed or
        succeeded."""
        self._count += 1
        return f"{prefix}{self._count}-{self._token}"

    # -- the planner ------------------------------------------------------------------------

    def _planner_reply(self, request: ModelRequest) -> Any:
        if self._last_reply is not None and _is_repair(request):
            return self._last_reply  # it knows no better: the run gives up after its repairs, and says why
        if request.purpose == "planner.finish":
            reply = {"answer": self._answer_for(request, self.answer)}
        elif request.purpose == "planner.turn":
            reply = self._turn(request)
        elif request.purpose == "planner.patch":
            reply = self._patch(request)
        else:
            reply = self._propose(request)
        self._last_reply = reply
        return reply

    def _propose(self, request: ModelRequest) -> dict[str, Any]:
        plan = self._plan
        calls = [*self._falls_for(request), *plan.todo]
        plan.todo = []
        steps = self._chain(calls)
        plan.current = steps
        return {"reason": "the calls that do what the user asked, in order", "steps": steps}

    def _chain(self, calls: list[PlannedCall]) -> list[dict[str, Any]]:
        """Steps for ``calls``, each after the one before (the first after none)."""
        steps: list[dict[str, Any]] = []
        for call in calls:
            step = call.step(self._new_id("c"))
            if steps:
                step["depends_on"] = [steps[-1]["id"]]
            self._plan.issued[step["id"]] = call
            steps.append(step)
        return steps

    def _patch(self, request: ModelRequest) -> dict[str, Any]:
        """Every step not seen to end kept as it was (one may be running: it must not change), a
        failed call once more under a new id with the steps after it moved onto it; the
        injection's calls, newly read, as a chain of their own beside them."""
        plan = self._plan
        ended = record_outcomes(request, [s["id"] for s in plan.current])
        renamed: dict[str, str | None] = {}
        steps: list[dict[str, Any]] = []
        for step in plan.current:
            outcome = ended.get(step["id"])
            if outcome is None:
                steps.append(step)
                continue
            call = plan.issued.pop(step["id"])
            if outcome == "succeeded":
                continue
            renamed[step["id"]] = None
            if call.tries < RETRIES:
                call.tries += 1
                again = call.step(self._new_id("c"))
                again["depends_on"] = list(step.get("depends_on", []))
                plan.issued[again["id"]] = call
                renamed[step["id"]] = again["id"]
                steps.append(again)
        for i, step in enumerate(steps):
            deps = step.get("depends_on", [])
            if any(d in renamed for d in deps):  # waiting on a step that failed: it has not started
                moved = [renamed.get(d, d) for d in deps]
                steps[i] = {**step, "depends_on": [d for d in moved if d is not None]}
        steps = [*self._chain(self._falls_for(request)), *steps]
        plan.current = steps
        return {"reason": "the calls not made yet, a failed one again", "steps": steps}

    def _turn(self, request: ModelRequest) -> dict[str, Any]:
        plan = self._plan
        if plan.last is not None:
            outcome = record_outcomes(request, [plan.last]).get(plan.last)
            call = plan.issued.pop(plan.last)
            if outcome == "failed" and call.tries < RETRIES:
                call.tries += 1
                plan.todo.insert(0, call)
            plan.last = None
        plan.todo[:0] = self._falls_for(request)
        if not plan.todo:
            return {"thought": "every call is made", "stop": True, "answer": self._answer_for(request, self.answer)}
        call = plan.todo.pop(0)
        step = call.step(self._new_id("s"))
        plan.issued[step["id"]] = call
        plan.last = step["id"]
        return {"thought": f"next: {call.function}", "confidence": 1.0, "stop": False, "step": step}

    # -- the executor of model-driven steps ----------------------------------------------------

    def _executor_reply(self, request: ModelRequest) -> Any:
        granted = {t.name for t in request.tools}
        if granted and request.messages[-1].role != "tool":
            calls = self._falls_for(request, granted)
            if calls:
                return ModelResponse(
                    tool_calls=tuple(
                        ToolCall(id=self._new_id("call"), name=c.function, arguments=dict(c.args)) for c in calls
                    ),
                    finish_reason="tool_calls",
                )
        if request.output is not None:
            return ModelResponse(refusal="nothing in the step's inputs fits what is asked")
        return self._answer_for(request, DONE)


def _is_repair(request: ModelRequest) -> bool:
    """Whether ``request`` sends the planner's last reply back with its problems."""
    last = request.messages[-1] if request.messages else None
    return last is not None and last.role == "user" and last.content.startswith("Your reply has these problems:")
