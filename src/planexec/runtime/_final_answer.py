"""The final answer before the run ends with it: judged by the review the developer set (their
deterministic checks, a judge model against a rubric, a human's checklist), and held to the trust
policy's ``answer`` setting (a human asked about untrusted text in it, or its untrusted parts
withheld). Each review is an ``answer_reviewed`` event; a refused answer goes back to the planner
with the reasons."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from planexec._util.clip import clip
from planexec.errors import BindingError
from planexec.log import AnswerReviewed
from planexec.models import Message, ModelRequest, OutputSpec, resolve_model
from planexec.plan import ANSWER_CHARS, ANSWER_VALUE_CHARS, Author, fill_template, placeholders
from planexec.runtime._core import Core
from planexec.runtime._model_calls import ModelCaller
from planexec.runtime._sealed import default_template
from planexec.runtime._settings import AnswerCheck, ApprovalDecision, ApprovalRequest
from planexec.runtime._trust import Trust
from planexec.tools import run_in_thread
from planexec.trust import Provenance, Source

__all__ = ["REASON_CHARS", "AnswerChecks", "AnswerLoop", "Guarded", "name_of"]


REASON_CHARS = 2_000
"""The most of a reviewer's reason (a check's objection, the judge's) that is kept: it is logged,
shown and sent to the planner with every round."""

_VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"passed": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["passed", "reason"],
    "additionalProperties": False,
}


class AnswerLoop(Core, ModelCaller, Protocol):
    """What checking the final answer sees of the loop, beyond :class:`Core`."""

    goal: str
    trust: Trust


Reviewer = Literal["checks", "rubric", "human"]

AskHuman = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]
"""Ask a human on the planning round's behalf, and wait for the answer."""


@dataclass(frozen=True, slots=True)
class Guarded:
    """What the trust policy made of a final answer that holds untrusted text."""

    answer: str | None
    """The answer to end with instead (None: the answer as it is, confirmed by a human)."""
    withheld: tuple[str, ...]
    """The steps whose untrusted output was left out (``*``: all of it)."""
    label: Provenance


class AnswerChecks:
    """Reviews a run's final answer and holds it to the trust policy."""

    def __init__(self, engine: AnswerLoop, ask: AskHuman) -> None:
        self._engine = engine
        self._ask = ask

    def check_names(self) -> tuple[str, ...]:
        """The names of the final answer's deterministic checks (what a sealed planner is told of
        a refusal by them)."""
        review = self._engine.config.review
        return () if review is None else tuple(name_of(check) for check in review.checks)

    # -- the review ---------------------------------------------------------------------------

    async def review(self, answer: str) -> tuple[str, ...] | None:
        """Judge ``answer`` with every reviewer set, in order; the reasons it was refused, or None."""
        engine = self._engine
        review = engine.config.review
        assert review is not None
        if review.checks:
            refused = await self._checks(answer)
            if refused is not None:
                return refused
        if review.judge is not None and review.rubric is not None:
            problems = await self._rubric(answer)
            self._reviewed(answer, "rubric", problems)
            if problems:
                return problems
        if review.checklist:
            request = ApprovalRequest(
                approval_id="",
                run_id=engine.run_id,
                subject="answer",
                reason="review the final answer before the run ends with it",
                output=answer,
                checklist=tuple(review.checklist),
                rule="answer_checklist",
            )
            decision = await self._ask(request)
            return self.checklist_verdict(answer, decision)
        return None

    async def _checks(self, answer: str) -> tuple[str, ...] | None:
        """The objections of the developer's checks, or None when they pass (the checks are code:
        a record knows their verdict)."""
        engine = self._engine
        review = engine.config.review
        assert review is not None
        reviewed = await engine.world.answer_checks(lambda: self._run_checks(answer))
        engine.emit(reviewed)
        return None if reviewed.passed else reviewed.problems

    async def _run_checks(self, answer: str) -> AnswerReviewed:
        engine = self._engine
        review = engine.config.review
        assert review is not None
        found = [await _run_check(check, answer) for check in review.checks]
        problems = tuple(p for p in found if p is not None)
        return AnswerReviewed(at=engine.now(), answer=answer, passed=not problems, reviewer="checks", problems=problems)

    def _reviewed(self, answer: str, reviewer: Reviewer, problems: tuple[str, ...]) -> None:
        engine = self._engine
        engine.emit(
            AnswerReviewed(
                at=engine.now(),
                answer=answer,
                passed=not problems,
                reviewer=reviewer,
                problems=problems,
            )
        )

    def checklist_verdict(self, answer: str, decision: ApprovalDecision) -> tuple[str, ...] | None:
        """A human's answer to the checklist, logged: the reasons the answer was refused, or None."""
        problems = [f"{r.item}: {r.note or 'failed'}" for r in decision.checklist if not r.passed]
        if not decision.approved:
            problems.insert(0, f"refused by {decision.by}: {decision.reason or 'no reason given'}")
        self._reviewed(answer, "human", tuple(problems))
        return tuple(problems) if problems else None

    async def _rubric(self, answer: str) -> tuple[str, ...]:
        engine = self._engine
        review = engine.config.review
        assert review is not None
        assert review.judge is not None
        request = ModelRequest(
            messages=(
                Message(
                    role="system",
                    content="You review the final answer of an agent against a rubric. Reply with passed "
                    "(true or false) and a one-sentence reason.",
                ),
                Message(role="user", content=f"Goal: {engine.goal}\nRubric: {review.rubric}\nAnswer: {answer}"),
            ),
            output=OutputSpec(name="verdict", json_schema=_VERDICT_SCHEMA),
            settings=review.judge_settings,
            purpose="answer_review",
        )
        judge = resolve_model(review.judge, providers=engine.config.providers)
        response = await engine.call_model("judge", judge, request, None)
        parsed = response.parsed
        if not isinstance(parsed, dict) or not isinstance(parsed.get("passed"), bool):
            return (f"the judge's reply was unreadable: {response.text[:200]!r}",)
        if parsed["passed"]:
            return ()
        return (clip(f"rubric: {parsed.get('reason') or 'failed'}", REASON_CHARS),)

    # -- trust --------------------------------------------------------------------------------

    async def guard(self, author: Author, answer: str) -> Guarded | None:
        """Hold a final answer that holds untrusted text to the trust policy's ``answer`` setting:
        ask a human about it, or withhold its untrusted parts. None: the answer stands as it is."""
        engine = self._engine
        policy = engine.trust.policy
        if policy is None or policy.answer == "label":
            return None
        label = self.label(author)
        if label is None or label.trusted:
            return None
        if policy.answer == "ask" and engine.can_ask_humans:
            request = ApprovalRequest(
                approval_id="",
                run_id=engine.run_id,
                subject="answer",
                reason=f"the final answer holds text the run does not trust ({label})",
                output=answer,
                provenance={"answer": label},
                rule="untrusted_answer",
            )
            decision = await self._ask(request)
            if decision.approved:
                return Guarded(None, (), label.confirmed(decision.by))
        return self.withheld(author, label)

    def withheld(self, author: Author, label: Provenance) -> Guarded:
        """The final answer without its untrusted parts, the steps left out (``*``: all of it) and
        the label of what is left. A template's placeholders of untrusted outputs say so in their
        place; an answer a planner wrote after reading untrusted text is withheld whole."""
        engine = self._engine
        trust, state = engine.trust, engine.state
        template: str | None = None
        writer_trusted = True
        if author == "memory":
            recalled = state.recalled
            template = recalled.answer if recalled is not None else None
        elif engine.config.planner.sealed and state.plan is not None:
            plan = state.plan
            template = plan.answer if plan.answer is not None else default_template(plan)
            writer_trusted = plan.author == "human" or not state.plan_reads.get(plan.version, ())
        if template is not None and writer_trusted:
            quoted = dict.fromkeys(p.ref.step_id for p in placeholders(template))
            out = tuple(sid for sid in quoted if not trust.output_of(sid).trusted)
            try:
                kept = fill_template(
                    template, state.outputs, max_value_chars=ANSWER_VALUE_CHARS, max_chars=ANSWER_CHARS, withhold=out
                )
            except BindingError:
                kept = None
            if kept is not None:
                sources = tuple(s for s in label.sources if s.trusted)
                return Guarded(kept, out, Provenance(trusted=True, sources=sources))
        read = ", ".join(str(s) for s in label.untrusted_sources) or "untrusted text"
        notice = f"[withheld: the answer was written after reading untrusted text ({read}); the run's log keeps it]"
        return Guarded(clip(notice, ANSWER_VALUE_CHARS), ("*",), Provenance(trusted=True))

    def label(self, author: Author) -> Provenance | None:
        """The final answer's label: an answer filled in from a template (plan memory's, a sealed
        plan's) is as trusted as the template's author and the outputs it quotes; the planner's
        own answer, as the round that wrote it."""
        engine = self._engine
        trust = engine.trust
        if not trust.on:
            return None
        state = engine.state
        if author == "memory":
            recalled = state.recalled
            template = recalled.answer if recalled is not None and recalled.answer is not None else ""
            memory = Provenance.of(Source(kind="memory", trusted=True))
            return trust.template_answer(template, memory)
        plan = state.plan
        if engine.config.planner.sealed and plan is not None:
            template = plan.answer if plan.answer is not None else default_template(plan) or ""
            read = state.plan_reads.get(plan.version, ())
            if plan.author == "human":
                writer = Provenance.of(Source(kind="human", trusted=True))
            else:
                writer = Provenance(trusted=not read, sources=(Source(kind="planner", trusted=not read), *read))
            return trust.template_answer(template, writer)
        return trust.answer(state)


async def _run_check(check: AnswerCheck, answer: str) -> str | None:
    """A deterministic answer check's objection, or None when it accepts the answer.

    The check runs in a worker thread, so one that never returns leaves the run to its wall-time
    budget and to cancellation rather than stopping the event loop; an awaitable it returns (an
    ``async def`` check) is awaited. Whatever goes wrong in it is an objection that says why."""
    name = name_of(check)
    try:
        result = await run_in_thread(functools.partial(check, answer))  # in a copy of the context
        if inspect.isawaitable(result):
            result = await result
    except Exception as e:
        return clip(f"{name}: the check raised {_described(e)}", REASON_CHARS)
    if result is None or result is True:
        return None
    if result is False:
        return f"{name}: refused"
    if isinstance(result, str):
        return clip(f"{name}: {result}", REASON_CHARS)
    return f"{name}: refused (it returned a {type(result).__name__}, not True, None, False or text)"


def name_of(check: object) -> str:
    """A check's name, as a reviewer's objection gives it."""
    try:
        name = getattr(check, "__name__", None)
    except Exception:
        name = None
    return clip(name, 200) if isinstance(name, str) else type(check).__name__


def _described(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:
        text = "(its message cannot be shown)"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
