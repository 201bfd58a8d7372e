"""Acceptance: a verdict on every step's output, from deterministic checks and, when asked, a
model rubric against the step's success criteria.

The planner writes the checks, so they are hostile input: ``matches`` patterns run with RE2 (time
linear in the output), schemas are bounded and applied by planexec's own validator (see
:mod:`planexec.plan._schemas`), and anything a check cannot do — an output too deep to render, a
schema that overflows — fails that check with the reason instead of raising.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planexec._util.clip import clip
from planexec._util.regex import PatternError, search
from planexec.errors import Problem, UsageError
from planexec.executor._base import StepContext
from planexec.executor._outcome import PASSED, CheckResult, Verdict
from planexec.models import Message, Model, ModelRequest, ModelSettings, OutputSpec, Providers, resolve_model
from planexec.plan import BindingError, Contains, FitsSchema, Matches, NonEmpty, Predicate, Step, judge, render_text

__all__ = ["Acceptance", "PredicateFn"]

PredicateFn = Callable[[Step, Any], bool | str | None]
"""A predicate accepts an output by returning True or None, and rejects it by returning False
or a string that says why."""

_JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"passed": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["passed", "reason"],
    "additionalProperties": False,
}


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """How step results are judged.

    ``predicates`` are named checks a plan can refer to (``{"kind": "predicate", "name": ...}``);
    ``accept`` is a predicate applied to every step; ``judge`` is a model that grades outputs of
    steps with ``expected`` criteria (``judge_all`` grades every step); ``judge_settings`` say how
    the judge is asked; ``min_confidence``: a result whose executor reported a lower confidence
    fails (a result reported with no confidence is not judged on it).
    """

    predicates: Mapping[str, PredicateFn] = field(default_factory=dict)
    accept: PredicateFn | None = None
    judge: Model | str | None = None
    judge_all: bool = False
    min_confidence: float | None = None
    judge_settings: ModelSettings = field(default_factory=ModelSettings)

    def __post_init__(self) -> None:
        problems = []
        least = self.min_confidence
        if least is not None and (isinstance(least, bool) or not isinstance(least, int | float) or not 0 <= least <= 1):
            problems.append(Problem(code="acceptance", where="min_confidence", message="must be from 0 to 1"))
        if not isinstance(self.judge_settings, ModelSettings):
            problems.append(Problem(code="acceptance", where="judge_settings", message="must be a ModelSettings(...)"))
        if problems:
            raise UsageError("invalid acceptance", problems)

    def checks_anything(self, step: Step) -> bool:
        """Whether ``step``'s output is checked at all (a step with nothing to check passes)."""
        return (
            bool(step.checks)
            or step.output_schema is not None
            or self.accept is not None
            or self.min_confidence is not None
            or self._judges(step)
        )

    async def verdict(
        self, step: Step, output: Any, ctx: StepContext, *, providers: Providers | None = None
    ) -> Verdict:
        """Judge ``output`` by every check that applies to ``step``; a judge given as a model string
        resolves through ``providers`` (``Providers.default()`` when None)."""
        if not self.checks_anything(step):
            return PASSED
        results: list[CheckResult] = []
        if step.output_schema is not None:
            results.append(await _schema_check("output_schema", step.output_schema, output))
        for check in step.checks:
            if isinstance(check, FitsSchema):
                results.append(await _schema_check("schema", check.json_schema, output))
            else:
                results.append(self._check(check, step, output))
        if self.accept is not None:
            results.append(_predicate("accept", self.accept, step, output))
        confidence = getattr(ctx, "confidence", None)
        if self.min_confidence is not None and confidence is not None:
            ok = confidence >= self.min_confidence
            detail = "" if ok else f"the executor's confidence {confidence:.2f} is under {self.min_confidence:.2f}"
            results.append(CheckResult(name="confidence", passed=ok, detail=detail))
        if self._judges(step) and all(r.passed for r in results):
            results.append(await self._judge(step, output, ctx, providers))
        return Verdict(passed=all(r.passed for r in results), checks=tuple(results))

    def _judges(self, step: Step) -> bool:
        return self.judge is not None and (self.judge_all or step.expected is not None)

    def _check(self, check: Any, step: Step, output: Any) -> CheckResult:
        if isinstance(check, NonEmpty):
            empty = output is None or (isinstance(output, str | list | dict | tuple) and len(output) == 0)
            return CheckResult(name="non_empty", passed=not empty, detail="the output is empty" if empty else "")
        if isinstance(check, Contains):
            try:
                ok = check.text in render_text(output)
            except BindingError as e:
                return CheckResult(name="contains", passed=False, detail=f"the output cannot be read as text: {e}")
            return CheckResult(name="contains", passed=ok, detail="" if ok else f"the output lacks {check.text!r}")
        if isinstance(check, Matches):
            try:
                ok = search(check.pattern, render_text(output))
            except (BindingError, PatternError) as e:
                return CheckResult(name="matches", passed=False, detail=f"the pattern cannot be applied: {e}")
            return CheckResult(name="matches", passed=ok, detail="" if ok else f"no match for {check.pattern!r}")
        assert isinstance(check, Predicate)
        fn = self.predicates.get(check.name)
        if fn is None:
            return CheckResult(name=f"predicate:{check.name}", passed=False, detail="unknown predicate")
        return _predicate(f"predicate:{check.name}", fn, step, output)

    async def _judge(self, step: Step, output: Any, ctx: StepContext, providers: Providers | None) -> CheckResult:
        assert self.judge is not None
        model = resolve_model(self.judge, providers=providers)
        criteria = step.expected or step.description
        request = ModelRequest(
            messages=(
                Message(
                    role="system",
                    content="You check one step's result against its success criteria. "
                    "Reply with passed (true or false) and a one-sentence reason.",
                ),
                Message(
                    role="user",
                    content=f"Step: {step.description}\nSuccess criteria: {criteria}\nResult: {_as_text(output)}",
                ),
            ),
            output=OutputSpec(name="verdict", json_schema=_JUDGE_SCHEMA),
            settings=self.judge_settings,
            purpose="judge",
        )
        response = await ctx.call_model(model, request)
        parsed = response.parsed
        if not isinstance(parsed, dict) or not isinstance(parsed.get("passed"), bool):
            return CheckResult(
                name="rubric",
                passed=False,
                detail=f"the judge's reply was unreadable: {clip(repr(response.text), 200)}",
            )
        return CheckResult(name="rubric", passed=parsed["passed"], detail=str(parsed.get("reason", "")))


async def _schema_check(name: str, schema: Mapping[str, Any], output: Any) -> CheckResult:
    errors = await judge(schema, output)
    return CheckResult(name=name, passed=not errors, detail="; ".join(errors))


def _as_text(output: Any) -> str:
    try:
        return render_text(output)
    except BindingError as e:
        return f"(the result cannot be shown as text: {e})"


def _predicate(name: str, fn: PredicateFn, step: Step, output: Any) -> CheckResult:
    try:
        result = fn(step, output)
    except Exception as e:
        return CheckResult(name=name, passed=False, detail=f"the predicate raised {type(e).__name__}: {e}")
    if result is None or result is True:
        return CheckResult(name=name, passed=True)
    return CheckResult(name=name, passed=False, detail=result if isinstance(result, str) else "rejected")
