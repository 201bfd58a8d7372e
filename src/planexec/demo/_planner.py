"""The demo's planner: a function model that plans the audit, patches the plan, and writes the answer.

It reads what it is sent: the run id from the goal, the failure and the archived segment from the
execution record in a patch request, and the root cause and the fix file from the record when it is
asked for the final answer.
"""

from __future__ import annotations

import re
from typing import Any

from planexec.demo._record import RecordEntry, parse_record, user_text
from planexec.errors import UnexpectedModelCall
from planexec.models import ModelRequest

__all__ = ["ROOT_CAUSE_SCHEMA", "planner_reply"]

ROOT_CAUSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "branch": {"type": "string"},
        "step": {"type": "string"},
        "file": {"type": "string"},
        "line": {"type": "integer"},
        "find": {"type": "string"},
        "replace": {"type": "string"},
        "introduced_by": {"type": "string"},
    },
    "required": ["summary", "branch", "step", "file", "line", "find", "replace", "introduced_by"],
    "additionalProperties": False,
}

_RUN_ID = re.compile(r"\br-\d+\b")
_SEGMENT = re.compile(r"(logs/archive/\S+?\.log)\b")
_REFUSED = "A final answer was refused"


def _gather(run_id: str) -> list[dict[str, Any]]:
    """The three independent first steps."""
    return [
        {
            "id": "read_workflow",
            "description": "Read the onboarding workflow definition",
            "tool": "read_workflow",
        },
        {
            "id": "collect_logs",
            "description": f"Collect the application logs of run {run_id}",
            "tool": "collect_logs",
            "args": {"run_id": run_id},
            "checks": [{"kind": "non_empty"}],
        },
        {
            "id": "list_recent_changes",
            "description": "List the deploys of the last week",
            "tool": "list_recent_changes",
            "args": {"days": 7},
        },
    ]


def _analysis(logs_step: str) -> list[dict[str, Any]]:
    """Find the root cause from the logs, then draft the fix and write it for review."""
    return [
        {
            "id": "find_root_cause",
            "description": "Find the root cause: check the failing branch's code against the error and recent changes",
            "executor": "analyst",
            "allowed_tools": ["inspect_branch"],
            "args": {
                "error": f"${{{logs_step}.error}}",
                "workflow": "${read_workflow}",
                "changes": "${list_recent_changes}",
            },
            "depends_on": ["read_workflow", logs_step, "list_recent_changes"],
            "expected": "the failing file and line, the change that introduced the bug, and the smallest fix",
            "output_schema": ROOT_CAUSE_SCHEMA,
            "confidence": 0.8,
        },
        {
            "id": "draft_fix",
            "description": "Draft the fix as a patch",
            "tool": "draft_fix",
            "args": {
                "path": "${find_root_cause.file}",
                "find": "${find_root_cause.find}",
                "replace": "${find_root_cause.replace}",
            },
            "depends_on": ["find_root_cause"],
            "checks": [{"kind": "contains", "text": "+++ b/"}],
        },
        {
            "id": "write_fix",
            "description": "Write the patch into fixes/ for review",
            "tool": "write_fix",
            "args": {"name": "${find_root_cause.branch}-${find_root_cause.step}", "patch": "${draft_fix.patch}"},
            "depends_on": ["draft_fix"],
            "effect": "write",
        },
    ]


def _propose(text: str) -> dict[str, Any]:
    goal = next((line for line in text.splitlines() if line.startswith("Goal:")), "")
    m = _RUN_ID.search(goal)
    if m is None:
        raise UnexpectedModelCall("the demo planner needs the failing run's id (like r-1234) in the goal")
    return {
        "reason": "Gather the workflow, the failing run's logs and the recent deploys in parallel; "
        "then find the root cause, draft the fix and write it for review.",
        "steps": [*_gather(m[0]), *_analysis("collect_logs")],
    }


def _patch(text: str) -> dict[str, Any]:
    if "Why a new plan: the final answer was refused" in text:
        # The work is done; only the answer fell short. No new steps: answer again.
        return {"reason": "The work is complete; the answer must be rewritten as the review asks.", "steps": []}
    record = parse_record(text)
    failed = [e for e in record.values() if e.status == "failed"]
    logs = record.get("collect_logs")
    if logs is None or logs.status != "failed" or logs.error is None or len(failed) != 1:
        listing = ", ".join(f"{e.step_id} ({e.status})" for e in failed) or "none"
        raise UnexpectedModelCall(f"the demo planner can patch only a failed collect_logs; failed: {listing}")
    segment = _SEGMENT.search(logs.error)
    run = _RUN_ID.search(logs.error)
    if segment is None or run is None:
        raise UnexpectedModelCall(f"the collect_logs error names no archived segment: {logs.error!r}")
    # Steps still running are listed again unchanged, so that the patch keeps them running.
    unfinished = [s for s in _gather(run[0]) if _still_to_do(record.get(s["id"]))]
    fetch = {
        "id": "fetch_archived_logs",
        "description": f"Fetch the rest of run {run[0]}'s logs from the archived segment",
        "tool": "fetch_archived_logs",
        "args": {"segment": segment[1], "run_id": run[0]},
        "checks": [{"kind": "non_empty"}, {"kind": "contains", "text": "ERROR"}],
    }
    return {
        "reason": f"collect_logs failed: the current log of {run[0]} ends mid-run and continues in {segment[1]}; "
        "fetch that archived segment and find the root cause from its error instead.",
        "steps": [*[s for s in unfinished if s["id"] != "collect_logs"], fetch, *_analysis("fetch_archived_logs")],
    }


def _still_to_do(entry: RecordEntry | None) -> bool:
    return entry is not None and entry.status in ("pending", "running")


def _answer(text: str) -> dict[str, Any]:
    record = parse_record(text)
    cause = _need(record, "find_root_cause").output_json()
    written = _need(record, "write_fix").output_json()
    logs = _need(record, "fetch_archived_logs").output_json()
    error = logs.get("error") or {}
    answer = (
        f"Root cause: {cause['summary']}\n"
        f"Evidence: the current log of run {logs['run_id']} stops mid-run because it was rotated; the archived "
        f"segment {logs['source']} has the error {error.get('exception')} at {error.get('location')}.\n"
        f"Fix: in {cause['file']} line {cause['line']}, replace `{cause['find']}` with `{cause['replace']}`. "
    )
    if _REFUSED not in text:
        # The first draft says a patch was written but not where: the answer's review sends it back.
        return {"answer": answer + "A patch is ready for review; nothing was changed in the source tree."}
    return {"answer": answer + f"The patch is in {written['path']} for review; nothing was changed in the source tree."}


def _need(record: dict[str, RecordEntry], step_id: str) -> RecordEntry:
    entry = record.get(step_id)
    if entry is None or entry.status != "succeeded":
        raise UnexpectedModelCall(f"the demo planner expected step {step_id!r} to have succeeded")
    return entry


def planner_reply(request: ModelRequest) -> dict[str, Any]:
    """The planner's answer to one request, derived from what the request says."""
    text = user_text(request)
    if request.purpose == "planner.propose":
        return _propose(text)
    if request.purpose == "planner.patch":
        return _patch(text)
    if request.purpose == "planner.finish":
        return _answer(text)
    raise UnexpectedModelCall(f"the demo planner has no answer for a {request.purpose or 'plain'} request")
