"""Open questions to humans, as the CLI shows them: what each is about, and the exact commands
that answer it."""

from __future__ import annotations

import json
import shlex
from typing import Any

from planexec.cli._store_options import StoreChoice, store_flag
from planexec.log import ApprovalRecord
from planexec.runs import question_about

__all__ = ["about", "answer_commands", "approval_json", "under_review"]

SHOWN_CHARS = 400
"""How much of an answer or a result under review a listing shows (JSON has all of it)."""


about = question_about
"""What the question is about, in a few words."""


def under_review(rec: ApprovalRecord) -> list[str]:
    """What a reviewer must see to answer: the answer or result under review, the failed checks and
    the checklist, numbered as ``--fail N=NOTE`` counts them."""
    if rec.subject not in ("answer", "review"):
        return []
    output = rec.asked_output
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"… ({len(text):,} characters; --json shows all)"
    lines = [("answer: " if rec.subject == "answer" else "result: ") + text]
    if rec.verdict is not None:
        lines += [f"failed check {c.name}: {c.detail}" for c in rec.verdict.failures]
    lines += [f"checklist {n}: {item}" for n, item in enumerate(rec.checklist, 1)]
    return lines


def answer_commands(choice: StoreChoice, run_id: str, rec: ApprovalRecord) -> list[str]:
    """Command lines that answer ``rec``: approve (with what an answer of its kind needs) and reject."""
    head = f"planexec {store_flag(choice)}"
    target = f"{shlex.quote(run_id)} {shlex.quote(rec.approval_id)}"
    if rec.subject == "question":
        return [f"{head}answer {target} TEXT"]
    if rec.subject == "escalation":
        return [
            f"{head}approve {target} --choice guidance --text TEXT",
            f"{head}approve {target} --choice replan",
            f"{head}reject {target} --reason TEXT  (stops the run)",
        ]
    if rec.subject == "answer":
        return [f"{head}approve {target}", f"{head}reject {target} --reason TEXT [--fail N=NOTE ...]"]
    if rec.subject == "effect":
        approve = f"{head}approve {target} --choice retry|skip|done"
    elif rec.subject == "plan":
        approve = f"{head}approve {target} [--edit plan.json]"
    else:
        approve = f"{head}approve {target}"
    return [approve, f"{head}reject {target} --reason TEXT"]


def approval_json(rec: ApprovalRecord, *, run_id: str, choice: StoreChoice | None = None) -> dict[str, Any]:
    """One question (and its answer, if any) as JSON data."""
    data: dict[str, Any] = {
        "run_id": run_id,
        "approval_id": rec.approval_id,
        "subject": rec.subject,
        "step_id": rec.step_id,
        "plan_version": rec.plan_version,
        "reason": rec.reason,
        "asked_at": rec.requested_at,
        "approved": rec.approved,
        "by": rec.by,
        "answer_reason": rec.decision_reason or None,
        "choice": rec.choice,
        "output": rec.output,
        "edited": rec.edited_plan is not None,
        "code": rec.code,
        "asked_output": rec.asked_output,
        "verdict": None
        if rec.verdict is None
        else {
            "passed": rec.verdict.passed,
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in rec.verdict.checks],
        },
        "checklist": list(rec.checklist),
        "text": rec.text,
        "checklist_results": [{"item": r.item, "passed": r.passed, "note": r.note} for r in rec.checklist_results],
        "answered_at": rec.decided_at,
    }
    if choice is not None and rec.approved is None:
        data["commands"] = answer_commands(choice, run_id, rec)
    return data
