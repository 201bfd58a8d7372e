"""A planner's reply read: strict JSON (or structured output) in, a plan, turn or answer and its
problems out; and the output schemas and cache keys of its requests.

The answer is hostile input: it is parsed as strict JSON (``NaN`` and ``Infinity`` are
``invalid_json``), and an answer nested deeper than the plan allows (``REPLY_DEPTH``) is a
``too_deep`` problem, never a ``RecursionError``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from planexec._util.clip import clip
from planexec._util.strict_json import MAX_DEPTH, JSONRefused, loads
from planexec.errors import Problem
from planexec.models import ModelResponse, OutputSpec
from planexec.plan import FLAT_KEYS, FinalAnswer, FlatTurn, PlanDraft, Turn, capped
from planexec.planner._context import PlanningContext
from planexec.planner._wire import FLAT_TURN_SCHEMA, PLAN_SCHEMA, TURN_SCHEMA, unwire_handoff, unwire_step, unwire_turn

__all__ = ["FLAT_SPEC", "PLAN_SPEC", "REPLY_DEPTH", "TURN_SPEC", "cache_key", "confidence_of", "parse_reply"]

T = TypeVar("T", bound=BaseModel)

REPLY_DEPTH = MAX_DEPTH + 5
"""How deep a planner's answer may nest: a step's arguments or schemas may be ``MAX_DEPTH`` levels
deep, inside the answer, its list of steps, a step, its checks and a check."""


def cache_key(spec: OutputSpec, system: str, tools: str) -> str:
    """One key for every planner request that starts the same way (the agent's schema,
    instructions and tools), in any run: a provider that routes by key finds its cached prefix."""
    return _key_of(_SCHEMA_TEXT.get(id(spec)) or json.dumps(spec.json_schema, sort_keys=True), system, tools)


@functools.lru_cache(maxsize=64)
def _key_of(schema: str, system: str, tools: str) -> str:
    digest = hashlib.sha256("\0".join((schema, system, tools)).encode()).hexdigest()
    return f"planexec/planner/{digest[:24]}"


PLAN_SPEC = OutputSpec(name="plan", json_schema=PLAN_SCHEMA)
TURN_SPEC = OutputSpec(name="turn", json_schema=TURN_SCHEMA)
FLAT_SPEC = OutputSpec(name="turn", json_schema=FLAT_TURN_SCHEMA)
_SCHEMA_TEXT = {id(spec): json.dumps(spec.json_schema, sort_keys=True) for spec in (PLAN_SPEC, TURN_SPEC, FLAT_SPEC)}


def confidence_of(value: BaseModel) -> float | None:
    """A turn's confidence, or a plan's: its own, else the lowest its steps give."""
    if isinstance(value, Turn):
        if value.stop:
            return value.confidence
        step_confidence = value.step.confidence if value.step is not None else None
        return value.confidence if value.confidence is not None else step_confidence
    if isinstance(value, PlanDraft):
        if value.confidence is not None:
            return value.confidence
        given = [s.confidence for s in value.steps if s.confidence is not None]
        return min(given) if given else None
    return None


def _unfenced(text: str) -> str:
    """The text inside a Markdown code fence (```json ... ```), or the text itself when it is not
    fenced. Plain string operations: a regex for this backtracks for minutes on a reply that opens
    a fence over a long run of spaces and never closes it."""
    stripped = text.strip()
    if len(stripped) < 6 or not stripped.startswith("```") or not stripped.endswith("```"):
        return text
    inner = stripped[3:-3]
    if inner.startswith("json"):
        inner = inner[4:]
    return inner.strip()


def parse_reply(
    response: ModelResponse, output: type[T], ctx: PlanningContext | None = None, *, sealed: bool = False
) -> tuple[T | None, list[Problem]]:
    if response.refusal is not None:
        return None, [Problem(code="refusal", where="reply", message=f"the model refused: {response.refusal}")]
    # Structured output reaches the planner only as strict JSON data: a run keeps a reply's parsed
    # output only when it is (see planexec.runtime), else the text is parsed here, strictly.
    data = response.parsed
    if data is None:
        text = _unfenced(response.text)
        try:
            data = loads(text, max_depth=REPLY_DEPTH)
        except JSONRefused as e:
            if not text.lstrip().startswith(("{", "[")):
                return None, [_prose_problem(text)]
            return None, [_reply_problem(e.problem)]
    data, problems = _unwired(data, output, sealed=sealed)
    try:
        if output is Turn and isinstance(data, dict) and "step" not in data and not FLAT_KEYS.isdisjoint(data):
            flat = FlatTurn.model_validate(data)
            if problems:
                return None, capped(problems)
            step_id = ctx.new_step_id() if ctx is not None and ctx.new_step_id is not None else "s1"
            return flat.as_turn(step_id), []  # type: ignore[return-value]
        value = output.model_validate(data)
        return (None, capped(problems)) if problems else (value, [])
    except ValidationError as e:
        return None, capped(
            [
                *problems,
                *(
                    Problem(
                        code="invalid_output",
                        where=".".join(str(p) for p in err["loc"]) or "reply",
                        message=err["msg"],
                    )
                    for err in e.errors(include_url=False)
                ),
            ]
        )


def _unwired(data: Any, output: type[BaseModel], *, sealed: bool = False) -> tuple[Any, list[Problem]]:
    """An answer in the wire form (see :mod:`planexec.planner._wire`) in the form of ``output``.
    ``sealed``: a plan's ``answer`` is its answer template."""
    problems: list[Problem] = []
    if not isinstance(data, dict):
        return data, problems
    if output is Turn:
        return unwire_turn(data, problems), problems
    data = dict(data)
    answer = data.pop("answer", None)
    if output is FinalAnswer:
        if answer is None and data.get("stop") is True and data.get("tool") is None:
            answer = data.get("next_step")  # a flat turn's answer, asked for under the step-by-step policy
        if not isinstance(answer, str):
            problems.append(Problem(code="invalid_output", where="answer", message="give the final answer as text"))
        elif not answer.strip():
            problems.append(Problem(code="invalid_output", where="answer", message="the final answer is empty"))
        return {"answer": answer if isinstance(answer, str) else ""}, problems
    if sealed:
        if answer is not None and not (isinstance(answer, str) and not answer.strip()):
            data["answer"] = answer  # a sealed plan's answer template (blank: none, as a strict reply gives it)
    elif answer is not None:
        problems.append(
            Problem(
                code="invalid_output",
                where="answer",
                message="an answer is given only when the final answer is asked for: plan the steps first",
            )
        )
    steps = data.get("steps")
    if isinstance(steps, list):
        data["steps"] = [unwire_step(s, f"steps.{i}", problems) for i, s in enumerate(steps)]
    if "handoff" in data:
        data["handoff"] = unwire_handoff(data["handoff"], problems)
    return data, problems


def _prose_problem(text: str) -> Problem:
    """A reply in words where structured output was asked for (a model that wrote text instead of
    calling the output tool it was told to call, or that ignored the response format)."""
    said = clip(" ".join(text.split()), 160) or "nothing"
    asked = "the structured output asked for"
    return Problem(
        code="invalid_json",
        where="reply",
        message=f"not valid JSON: the model answered in text rather than with {asked}: {said!r}",
    )


def _reply_problem(problem: Problem) -> Problem:
    where = f"reply{problem.where}" if problem.where else "reply"
    if problem.code in ("too_deep", "too_large"):
        return Problem(code=problem.code, where=where, message=f"the reply is {problem.message}")
    return Problem(code="invalid_json", where=where, message=f"not valid JSON: {problem.message}")
