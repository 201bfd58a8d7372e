"""The demo's analyst: the executor model that finds the root cause by calling tools.

First turn: it reads the error from its inputs and asks to inspect the failing branch, together with
the other branches to compare against. Second turn: it reads the handler's source at the failing
line, finds the deploy that renamed the missing field, and returns the root cause as JSON.
"""

from __future__ import annotations

import re
from typing import Any

from planexec.demo._record import step_inputs, tool_results
from planexec.errors import UnexpectedModelCall
from planexec.models import ModelRequest, ModelResponse, tool_calls

__all__ = ["analyst_reply"]

_KEY_ERROR = re.compile(r"KeyError: '(\w+)'")
_RENAME = re.compile(r"rename (\S+) to (\S+)")
_NUMBERED = re.compile(r"^\s*(\d+) \| (.*)$")


def analyst_reply(request: ModelRequest) -> ModelResponse | dict[str, Any]:
    """One turn of the analyst, from its step inputs and the tool results so far."""
    inputs = step_inputs(request)
    error = inputs.get("error")
    if not isinstance(error, dict) or "branch" not in error:
        raise UnexpectedModelCall("the analyst's inputs carry no error with a branch")
    results = [r for r in tool_results(request) if isinstance(r, dict) and "branch" in r]
    if not results:
        branches = list(inputs.get("workflow", {}).get("branches", {}))
        others = [b for b in branches if b != error["branch"]]
        return tool_calls(*(("inspect_branch", {"branch": b}) for b in [error["branch"], *others]))
    return _diagnose(error, inputs, {r["branch"]: r for r in results})


def _diagnose(error: dict[str, Any], inputs: dict[str, Any], branches: dict[str, dict[str, Any]]) -> dict[str, Any]:
    missing = _KEY_ERROR.search(str(error.get("exception", "")))
    failing = branches.get(error["branch"])
    if missing is None or failing is None:
        raise UnexpectedModelCall("the analyst cannot tell which key is missing, or did not see the failing branch")
    key = missing[1]
    file, _, line_text = str(error["location"]).rpartition(":")
    line = int(line_text)
    source = dict(_numbered(failing["source"]))
    find = source.get(line, "").strip()
    if key not in find:
        raise UnexpectedModelCall(f"line {line} of {file} does not read {key!r}")

    changes: list[dict[str, Any]] = inputs.get("changes", [])
    culprit = next((c for c in changes if key in c["summary"]), None)
    renamed = _RENAME.search(culprit["summary"]) if culprit else None
    if culprit is None or renamed is None:
        raise UnexpectedModelCall(f"no recent change renames {key!r}")
    old_path, new_path = renamed[1], renamed[2]
    new_key = new_path.rsplit(".", 1)[-1]
    fields = inputs.get("workflow", {}).get("intake", {}).get("fields", [])
    if new_path not in fields:
        raise UnexpectedModelCall(f"the intake form has no field {new_path!r}")
    healthy = sorted(b for b, r in branches.items() if b != error["branch"] and new_key in r["source"])
    compared = f" (the {', '.join(healthy)} branch already reads {new_key})" if healthy else ""
    touched = ", ".join(culprit["files"])
    return {
        "summary": f"{culprit['id']} ({culprit['version']}) renamed the signup field {old_path} to {new_path} and "
        f"updated {touched}{compared}, but not {file}: line {line} still reads {find}, so {error['step']} in the "
        f"{error['branch']} branch fails with {error['exception']} for every signup that reaches it.",
        "branch": error["branch"],
        "step": error["step"],
        "file": file,
        "line": line,
        "find": find,
        "replace": find.replace(f'"{key}"', f'"{new_key}"').replace(f"'{key}'", f"'{new_key}'"),
        "introduced_by": culprit["id"],
    }


def _numbered(source: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for text in source.splitlines():
        m = _NUMBERED.match(text)
        if m:
            out.append((int(m[1]), m[2]))
    return out
