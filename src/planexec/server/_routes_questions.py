"""The questions runs wait for: ``GET /v1/inbox`` (every open one) and
``POST /v1/runs/{run_id}/questions/{question_id}/answer``, whose body is made into the decision the
command line would make, checked the same way."""

from __future__ import annotations

from typing import Any

import pydantic

from planexec.errors import Problem, UsageError
from planexec.log import ChecklistResult, RunState
from planexec.plan import Plan
from planexec.runs import answer, open_questions, pick_question
from planexec.runtime import ApprovalDecision, caps_from_json
from planexec.server._bodies import Answer, AnswerResult, Inbox
from planexec.server._contract import INBOX_LINKS, refusals
from planexec.server._shared import ANSWERED_BY, ApiError, QuestionId, Routes, RunId, ServedHere, checked_id
from planexec.server._views import agent_of, summary

__all__ = ["answer_routes", "inbox_routes"]

inbox_routes = Routes()
"""``GET /v1/inbox``."""
answer_routes = Routes()
"""``POST /v1/runs/{run_id}/questions/{question_id}/answer``."""


@inbox_routes.get("/v1/inbox", tags=["questions"], responses={200: {"links": INBOX_LINKS}, **refusals()})
async def inbox(served: ServedHere) -> Inbox:
    """Every question unfinished runs wait for, oldest first."""
    return Inbox(questions=await open_questions(served.store))


@answer_routes.post(
    "/v1/runs/{run_id}/questions/{question_id}/answer",
    tags=["questions"],
    responses=refusals(
        *("bad_json", "bad_id", "unknown_run", "unknown_question"),
        *("finished", "no_question", "decided", "conflict", "busy", "invalid"),
    ),
)
async def answer_question(run_id: RunId, question_id: QuestionId, body: Answer, served: ServedHere) -> AnswerResult:
    """Answer a question the run waits for: approve, reject, approve an edited plan (checked
    like any plan), or answer the planner's question. The run then goes on here once it waits
    for nothing else."""
    checked_id(question_id, "question_id")
    checked_id(run_id, "run_id")
    if served.not_stored(run_id) is not None:  # accepted here, not begun: it waits for no answer
        message = "the run has not begun: it asks nothing yet"
        raise ApiError(
            409,
            "no_question",
            f"cannot answer run {run_id!r}",
            [Problem(code="no_question", where="question_id", message=message)],
        )
    log = await served.run_log(run_id)
    try:
        rec = pick_question(RunState.fold(log), question_id)
    except UsageError as e:
        if any(p.code == "unknown" for p in e.problems):
            raise ApiError(
                404,
                "unknown_question",
                f"run {run_id!r} has no question {question_id!r}",
                [Problem(code="unknown_question", where="question_id", message=p.message) for p in e.problems],
            ) from None
        raise
    decision = _decision(body, rec)
    state = await answer(served.store, run_id, decision, approval_id=rec.approval_id, log=log)
    resumed = False
    idle = state.status == "waiting" and not state.pending_approvals and not served.workers.busy(run_id)
    if idle and not await served.back_to_workers(run_id):
        served.workers.resume(run_id, log)
        resumed = True
    return AnswerResult(run=summary(state, agent_of(log[0])), resumed=resumed)


def _decision(body: Answer, rec: Any) -> ApprovalDecision:
    """The answer the request gives, before it is checked against the run (as the CLI's are)."""
    problems: list[Problem] = []
    edited = _edited_plan(body, rec, problems)
    _check_answer(body, rec, problems)
    checklist = _checklist(body, rec, problems)
    if problems:
        raise ApiError(422, "invalid", f"cannot answer {rec.approval_id}", problems)
    subject = rec.subject
    text = body.text
    if body.decision == "reject":
        return ApprovalDecision(approved=False, reason=text or "", by=ANSWERED_BY, checklist=checklist)
    if body.decision == "answer":
        return ApprovalDecision(
            approved=True, text=text, choice="guidance" if subject == "escalation" else None, by=ANSWERED_BY
        )
    guided = subject == "escalation" and body.choice == "guidance"
    return ApprovalDecision(
        approved=True,
        by=ANSWERED_BY,
        choice=body.choice,
        output=body.output,
        edited_plan=edited,
        text=text if guided or subject == "question" else None,
        reason="" if guided else text or "",
        checklist=checklist,
        budget=caps_from_json(body.budget.given()) if body.budget is not None else None,
    )


def _edited_plan(body: Answer, rec: Any, problems: list[Problem]) -> Plan | None:
    """The edited plan the answer approves (None: none), its problems added to ``problems``."""
    if body.plan is None:
        return None
    if rec.subject != "plan" or body.decision != "approve":
        problems.append(Problem(code="plan", where="plan", message="only an approved plan can be edited"))
        return None
    try:
        return Plan.model_validate(body.plan)
    except pydantic.ValidationError as e:
        for error in e.errors():
            where = ".".join(str(p) for p in ("plan", *error["loc"]))
            problems.append(Problem(code="plan", where=where, message=error["msg"]))
    return None


def _check_answer(body: Answer, rec: Any, problems: list[Problem]) -> None:
    """Add to ``problems`` what does not fit the question in the answer's output, decision, text
    and budget."""
    subject = rec.subject
    text = body.text
    if body.output is not None and body.choice != "done":
        problems.append(
            Problem(code="output", where="output", message="gives a step's output: use it with choice done")
        )
    if body.decision == "answer":
        if subject not in ("question", "escalation"):
            message = f"{rec.approval_id} is about {subject}: approve or reject it"
            problems.append(Problem(code="decision", where="decision", message=message))
        if not (text or "").strip():
            problems.append(Problem(code="text", where="text", message="the answer is empty"))
    if body.decision == "reject" and not (text or "").strip():
        problems.append(Problem(code="text", where="text", message="say why the answer is no"))
    if body.budget is not None and (subject != "budget" or body.decision != "approve"):
        problems.append(
            Problem(code="budget", where="budget", message="raises caps only when approving a budget question")
        )
    if subject == "budget" and body.decision == "approve" and (body.budget is None or not body.budget.given()):
        problems.append(Problem(code="budget", where="budget", message='give the caps to raise, e.g. {"cost": 2.5}'))


def _checklist(body: Answer, rec: Any, problems: list[Problem]) -> tuple[ChecklistResult, ...]:
    """The results the answer gives for the question's checklist (all passed when an approval
    gives none), or, when they do not fit it, () and the problem added to ``problems``."""
    if body.checklist is not None:
        if len(body.checklist) != len(rec.checklist):
            message = f"give one result for each of the {len(rec.checklist)} items"
            problems.append(Problem(code="checklist", where="checklist", message=message))
            return ()
        return tuple(
            ChecklistResult(item=item, passed=given.passed, note=given.note)
            for item, given in zip(rec.checklist, body.checklist, strict=True)
        )
    if rec.checklist and body.decision == "approve":
        return tuple(ChecklistResult(item=item, passed=True) for item in rec.checklist)
    return ()
