"""The checks of a run: did it call the right tools, and is its answer right — by a deterministic
comparison, and by a model judge against a rubric."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from planexec._util.clip import clip
from planexec._util.regex import PatternError, search
from planexec.eval._suite import AnswerExpectation, ToolExpectation
from planexec.models import Message, Model, ModelRequest, ModelSettings, OutputSpec, Usage

__all__ = ["JUDGE_SCHEMA", "CheckOutcome", "JudgeOutcome", "check_answer", "judge_answer", "match_tools"]

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"passed": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["passed", "reason"],
    "additionalProperties": False,
}
"""The structured output a judge is asked for."""

_JUDGE_INSTRUCTIONS = (
    "You grade an agent's final answer against a rubric. Reply with passed (true when the answer "
    "meets the rubric, else false) and a one-sentence reason."
)


@dataclass(frozen=True, kw_only=True)
class CheckOutcome:
    """One check of a run: ``stop``, ``tools.<mode>``, ``answer.<exact|contains|regex>`` or ``answer.judge``."""

    name: str
    passed: bool
    detail: str = ""


def _matches(pattern: str, answer: str, *, ignore_case: bool) -> bool:
    """Whether ``pattern`` matches the answer. RE2 runs it (linear in the answer, which a model
    wrote) unless it needs what only Python's ``re`` has (lookaround, backreferences): the suite's
    author wrote the pattern, and is trusted with it."""
    try:
        return search(f"(?i){pattern}" if ignore_case else pattern, answer)
    except PatternError:
        return re.search(pattern, answer, re.IGNORECASE if ignore_case else 0) is not None


def _listing(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "(none)"


def _sequence(names: Sequence[str]) -> str:
    return " → ".join(names) if names else "(none)"


def match_tools(expect: ToolExpectation, called: Sequence[str]) -> CheckOutcome:
    """Compare the tools a run called (in order) with what the task expects."""
    name = f"tools.{expect.match}"
    wanted, got = Counter(expect.tools), Counter(called)
    if expect.match == "strict":
        ok = tuple(called) == expect.tools
        detail = (
            "" if ok else f"expected {' → '.join(expect.tools) or '(none)'}, called {' → '.join(called) or '(none)'}"
        )
    elif expect.match == "unordered":
        missing, extra = sorted((wanted - got).elements()), sorted((got - wanted).elements())
        ok = not missing and not extra
        detail = "" if ok else f"not called: {_listing(missing)}; called beyond the list: {_listing(extra)}"
    elif expect.match == "subset":
        missing = sorted((wanted - got).elements())
        ok = not missing
        detail = "" if ok else f"not called: {_listing(missing)} (called {_listing(called)})"
    else:
        outside = sorted({c for c in called if c not in wanted})
        ok = not outside
        detail = "" if ok else f"called outside the list: {_listing(outside)}"
    return CheckOutcome(name=name, passed=ok, detail=detail)


def check_answer(expect: AnswerExpectation, answer: str | None) -> CheckOutcome | None:
    """The deterministic answer check, when the task has one."""
    kind = expect.deterministic
    if kind is None:
        return None
    name = f"answer.{kind}"
    if answer is None:
        return CheckOutcome(name=name, passed=False, detail="the run gave no answer")

    def fold(text: str) -> str:
        return text.casefold() if expect.ignore_case else text

    text = fold(answer.strip())
    if kind == "exact":
        wanted = fold((expect.exact or "").strip())
        ok = text == wanted
        return CheckOutcome(name=name, passed=ok, detail="" if ok else f"expected {expect.exact!r}, got {_cut(answer)}")
    if kind == "contains":
        missing = [t for t in expect.contains if fold(t) not in text]
        detail = "" if not missing else f"the answer lacks {', '.join(map(repr, missing))}: {_cut(answer)}"
        return CheckOutcome(name=name, passed=not missing, detail=detail)
    ok = _matches(expect.regex or "", answer, ignore_case=expect.ignore_case)
    return CheckOutcome(name=name, passed=ok, detail="" if ok else f"no match for {expect.regex!r} in {_cut(answer)}")


@dataclass(frozen=True, kw_only=True)
class JudgeOutcome:
    check: CheckOutcome
    usage: Usage
    cost: float
    judged: bool = False
    """Whether the judge gave a verdict (not: no answer to judge, a failed call, an unreadable reply)."""


async def judge_answer(
    model: Model, *, goal: str, rubric: str, answer: str | None, settings: ModelSettings | None = None
) -> JudgeOutcome:
    """Ask ``model`` whether ``answer`` meets ``rubric`` (structured output: passed and reason),
    with the judge's ``settings``.

    No answer fails without asking; a failed call or an unreadable reply fails with the reason.
    """
    name = "answer.judge"
    if answer is None:
        return JudgeOutcome(
            check=CheckOutcome(name=name, passed=False, detail="the run gave no answer"), usage=Usage(), cost=0.0
        )
    request = ModelRequest(
        messages=(
            Message(role="system", content=_JUDGE_INSTRUCTIONS),
            Message(role="user", content=f"Goal: {goal}\nRubric: {rubric}\nAnswer: {answer}"),
        ),
        output=OutputSpec(name="verdict", json_schema=JUDGE_SCHEMA),
        settings=settings or ModelSettings(),
        purpose="eval.judge",
    )
    try:
        response = await model.request(request)
    except Exception as e:
        detail = f"the judge failed: {type(e).__name__}: {e}"
        return JudgeOutcome(check=CheckOutcome(name=name, passed=False, detail=detail), usage=Usage(), cost=0.0)
    verdict = response.parsed
    if verdict is None:
        try:
            verdict = json.loads(response.text)
        except ValueError:
            verdict = None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("passed"), bool):
        check = CheckOutcome(name=name, passed=False, detail=f"the judge's reply was unreadable: {_cut(response.text)}")
    else:
        check = CheckOutcome(name=name, passed=verdict["passed"], detail=str(verdict.get("reason", "")))
        return JudgeOutcome(check=check, usage=response.usage, cost=response.cost or 0.0, judged=True)
    return JudgeOutcome(check=check, usage=response.usage, cost=response.cost or 0.0)


def _cut(text: str, limit: int = 120) -> str:
    return repr(clip(" ".join(text.split()), limit, "…"))
