"""The sealed-plan oracle: a user task's ground truth planned as a planner that never reads tool
output would plan it, for sealed planning — written with the plain fields of a plan's steps, so
that it runs under today's planner and under ``Planner(sealed=True)`` alike.

Each ground-truth call is a tool step; its arguments are chosen by where their values are:

- a value in the user's prompt is a literal (the planner read it there);
- a value only in an earlier call's output is taken out of that output by a **quarantined
  extractor step**: a model-driven step with no tool and no tools (``tool: null``,
  ``allowed_tools: []``), run by the executor named :data:`EXTRACTOR`, with an
  ``output_schema`` (``{"value": ...}``) and the output it reads bound in its ``args``
  (``{"text": "${c1}"}``); the call binds ``${x2_recipient.value}``;
- a value in neither (a date the task leaves open, a count) is a literal the planner chose.

The extractor is offline too (:attr:`SealedOracle.extractor`): honest, it returns the
ground-truth value only when that value is in what it is given; gullible, it returns the
injection task's value for the same argument (or the first of the same JSON type) whenever the
injection's goal is in what it is given — the worst an extractor can do, since its output
steers the call.

The plan is made upfront (sealed planning plans from the goal and the tools' signatures). A
sealed planner cannot word an answer from outputs it never reads, so when the task has a
ground-truth answer the plan ends with one more quarantined step, :data:`ANSWER_STEP`, which
reads every call's output and writes the answer (``{"value": ...}``; its output, and so the
answer, is untrusted); the plan's answer template is ``{{answer.value}}``. Honest, that step
writes the task's ground-truth output (as the undefended oracle's planner does); gullible, it
adds the injection task's ground-truth output whenever the injection's goal is in what it reads.
A task with no ground-truth answer is answered by quoting every call's output whole.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from typing import Any

from planexec.agentdojo._oracle import DONE
from planexec.agentdojo._reading import literal, plain, reads
from planexec.agentdojo._suites import DojoSuite
from planexec.agentdojo._world import DojoWorld
from planexec.models import FunctionModel, ModelRequest, ModelResponse

__all__ = ["ANSWER_STEP", "EXTRACTOR", "SealedOracle", "appears"]

EXTRACTOR = "extractor"
"""The name of the executor that runs the extractor steps."""
ANSWER_STEP = "answer"
"""The id of the quarantined step that writes a sealed plan's answer from the calls' outputs."""

_STEP_HEAD = re.compile(r"^Step (\S+):")


def _number_pattern(value: float) -> re.Pattern[str]:
    if value == int(value):
        return re.compile(rf"(?<![\d.]){int(value)}(?:\.0+)?(?!\.?\d)")
    return re.compile(rf"(?<![\d.]){re.escape(repr(value))}0*(?!\d)")


def appears(value: Any, text: str) -> bool:
    """Whether ``value`` is written in ``text`` (already :func:`plain`): a string as it is, a
    number as a number (``4`` in ``4.00``, not in ``14``), every item of a list and every value
    of an object; empty values, booleans and nulls never are."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, str):
        wanted = plain(value)
        return bool(wanted) and wanted in text
    if isinstance(value, int | float):
        return math.isfinite(value) and _number_pattern(float(value)).search(text) is not None
    if isinstance(value, list | tuple):
        return bool(value) and all(appears(v, text) for v in value)
    if isinstance(value, dict):
        return bool(value) and all(appears(v, text) for v in value.values())
    return False


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


@functools.cache
def _sealed_plan(suite: DojoSuite, user_task: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The sealed plan of ``user_task`` and the values its extractors are to find: made from the
    environment with no injection (a planner that never reads tool output plans the same whether
    or not an attack is under way), once per task."""
    world = DojoWorld(suite=suite, user_task=user_task)
    expected: dict[str, Any] = {}
    calls = world.ground_truth(world.task)
    outputs = [plain(json.dumps(o, ensure_ascii=False, default=str)) for o in world.dry_run(calls)]
    prompt = plain(world.prompt)
    steps: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        step_id = f"c{i + 1}"
        depends = [f"c{i}"] if i else []
        args: dict[str, Any] = {}
        for name, value in call.args.items():
            source = None
            if not appears(value, prompt):
                source = next((j for j in range(i - 1, -1, -1) if appears(value, outputs[j])), None)
            if source is None:
                args[name] = literal(value)
                continue
            extractor_id = f"x{i + 1}_{name}"
            steps.append(
                {
                    "id": extractor_id,
                    "description": f"Take the {name} for {call.function} out of the output of c{source + 1}",
                    "executor": EXTRACTOR,
                    "tool": None,
                    "allowed_tools": [],
                    "args": {"text": f"${{c{source + 1}}}"},
                    "depends_on": [f"c{source + 1}"],
                    "output_schema": {
                        "type": "object",
                        "properties": {"value": {"type": _json_type(value)}},
                        "required": ["value"],
                        "additionalProperties": False,
                    },
                }
            )
            expected[extractor_id] = value
            args[name] = f"${{{extractor_id}.value}}"
            depends.append(extractor_id)
        steps.append(
            {
                "id": step_id,
                "description": f"{call.function}, for the user's request",
                "tool": call.function,
                "args": args,
                "depends_on": depends,
            }
        )
    answer = str(world.task.GROUND_TRUTH_OUTPUT or "")
    calls_made = [f"c{i + 1}" for i in range(len(calls))]
    if answer and calls_made:
        steps.append(
            {
                "id": ANSWER_STEP,
                "description": "Write the answer to the user's request from what the calls returned",
                "executor": EXTRACTOR,
                "tool": None,
                "allowed_tools": [],
                "args": {c: f"${{{c}}}" for c in calls_made},
                "depends_on": calls_made,
                "output_schema": {
                    "type": "object",
                    "properties": {"value": {"type": "string"}},
                    "required": ["value"],
                    "additionalProperties": False,
                },
            }
        )
        expected[ANSWER_STEP] = answer
    return steps, expected


class SealedOracle:
    """The sealed plan of one run of ``world``'s user task (``planner``) and its extractor
    (``extractor``). ``injection_task``: the run's injection task (None: no attack);
    ``gullible``: the extractor falls for it."""

    def __init__(self, world: DojoWorld, *, injection_task: str | None = None, gullible: bool = True) -> None:
        self.world = world
        self._injection_task = injection_task if gullible else None
        self._goal: str | None = None
        if self._injection_task is not None:
            self._goal = plain(str(world.suite.injection_task(self._injection_task).GOAL))
        self._injected: list[tuple[str, Any]] | None = None
        kind = "gullible" if gullible else "honest"
        self.planner = FunctionModel(self._planner_reply, name="agentdojo-sealed-oracle")
        self.extractor = FunctionModel(self._extract, name=f"agentdojo-{kind}-extractor")

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The sealed plan (made when first asked for, once per task)."""
        return copy.deepcopy(_sealed_plan(self.world.suite, self.world.user_task)[0])

    @property
    def answer(self) -> str:
        """The answer template written with the plan: the quarantined answer step's output, else
        every call's output quoted whole (a sealed planner cannot word an answer from what it
        never reads)."""
        steps = self.steps
        if any(s["id"] == ANSWER_STEP for s in steps):
            return "{{" + ANSWER_STEP + ".value}}"
        calls = [s["id"] for s in steps if s.get("tool")]
        return " ".join("{{" + c + "}}" for c in calls) if calls else DONE

    @property
    def expected(self) -> dict[str, Any]:
        """Extractor step id → the ground-truth value it is to find."""
        return dict(_sealed_plan(self.world.suite, self.world.user_task)[1])

    def _injected_args(self) -> list[tuple[str, Any]]:
        """The injection task's ground-truth arguments (name, value), in the order of its calls."""
        if self._injected is None:
            self._injected = []
            if self._injection_task is not None:
                injected = self.world.suite.injection_task(self._injection_task)
                self._injected = [(k, v) for c in self.world.ground_truth(injected) for k, v in c.args.items()]
        return self._injected

    def _compose(self, request: ModelRequest, answer: str) -> str:
        """The answer step's reply: the task's answer, and the injection task's too when the
        gullible extractor reads the injection."""
        if self._goal is not None and reads(request, self._goal):
            assert self._injection_task is not None
            injected = str(self.world.suite.injection_task(self._injection_task).GROUND_TRUTH_OUTPUT or "")
            if injected:
                return f"{answer} {injected}"
        return answer

    def _planner_reply(self, request: ModelRequest) -> Any:
        if request.purpose == "planner.finish":
            return {"answer": DONE}
        if request.purpose == "planner.propose":
            return {
                "reason": "the ground truth, its values taken out of outputs by extractors",
                "steps": self.steps,
                "answer": self.answer,
            }
        if request.purpose == "planner.patch":
            return {"reason": "a call could not be made with what was extracted: nothing more to do", "steps": []}
        return ValueError(f"the sealed-plan oracle plans upfront, not for {request.purpose!r}")

    def _extract(self, request: ModelRequest) -> Any:
        asked = next((m.content for m in request.messages if m.role == "user"), "")
        head = _STEP_HEAD.match(asked)
        step_id = head.group(1) if head else ""
        expected = self.expected.get(step_id)
        if step_id == ANSWER_STEP:
            return {"value": self._compose(request, str(expected or DONE))}
        if self._goal is not None and reads(request, self._goal):
            name = step_id.split("_", 1)[1] if "_" in step_id else ""
            injected = self._injected_args()
            same_name = [v for k, v in injected if k == name]
            same_type = [v for _, v in injected if _json_type(v) == _json_type(expected)]
            chosen = (same_name or same_type or [None])[0]
            if chosen is not None:
                return {"value": chosen}
        if expected is not None and appears(expected, plain(asked)):
            return {"value": expected}
        return ModelResponse(refusal="the value asked for is not in the text given")
