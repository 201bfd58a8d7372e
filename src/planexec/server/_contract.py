"""The parts of the API's OpenAPI document its routes' types do not say: the one error body every
refusal has, which refusals each operation answers with (and their codes), the bearer scheme, the
formats of ids and cursors, and the links from a run to what can be done with it next."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "CURSOR",
    "CURSOR_PATTERN",
    "EVENT_ID",
    "EVENT_ID_PATTERN",
    "ID",
    "ID_PATTERN",
    "INBOX_LINKS",
    "LISTED_LINKS",
    "MAX_WHOLE",
    "NOT_BLANK",
    "QUESTION_LINKS",
    "RUN_LINKS",
    "SECURITY_SCHEME",
    "ErrorBody",
    "completed",
    "refusals",
]

ID_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$"
"""A run id or a question id the API takes: 1 to 128 of ``A-Z a-z 0-9 . _ : -``, and not ``.`` or
``..`` (which a client's URL handling would take for a path segment to resolve)."""
CURSOR_PATTERN = r"^-?[0-9]{1,24}(\.[0-9]{1,24})?(e[+-]?[0-9]{1,3})?~([A-Za-z0-9_-]{4}){0,400}([A-Za-z0-9_-]{2,3})?$"
"""A listing's cursor: where the last run shown started (a decimal number), ``~``, and its run id
in unpadded URL-safe base64."""
EVENT_ID_PATTERN = r"^[0-9]{1,20}$"
"""A ``Last-Event-ID``: the sequence number of the last event received, in ASCII digits."""
ID = re.compile(ID_PATTERN)
CURSOR = re.compile(CURSOR_PATTERN)
EVENT_ID = re.compile(EVENT_ID_PATTERN)
"""The patterns, to check a value with ``fullmatch`` (their ``$`` is the end of the text, as in the
document's patterns, never before a last newline as with ``re.match``)."""
SPACES = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Every character Python's ``str.isspace`` holds for (what ``str.strip`` removes)."""
NOT_BLANK = "[^" + "".join(f"\\u{ord(c):04x}" for c in SPACES) + "]"
"""A pattern a text matches when it holds something other than white space."""
SECURITY_SCHEME = "bearer"
MAX_WHOLE = 2**53 - 1
"""The largest whole number a request may give: every JSON reader holds it exactly (a float64, a
JavaScript number), so a client and the server agree on whether a value is over a bound."""


# -- the error body ---------------------------------------------------------------------------------


class ProblemItem(BaseModel):
    where: str = Field(description="The field, parameter or header at fault (empty: the request as a whole).")
    message: str
    code: str


class ErrorDetail(BaseModel):
    code: str = Field(description="What went wrong, for programs to act on (see each response's description).")
    message: str
    problems: list[ProblemItem] = Field(description="Every problem found, not only the first.")


class ErrorBody(BaseModel):
    """What the API answers whenever it refuses a request."""

    error: ErrorDetail


# -- which refusals each operation answers with ------------------------------------------------------

CODES: dict[str, tuple[int, str]] = {
    "bad_json": (400, "the request body is not JSON (or is nested too deeply to read)"),
    "bad_id": (400, "a run id or question id in the path is not one"),
    "bad_cursor": (400, "the cursor is not one a listing gave"),
    "bad_event_id": (400, "`Last-Event-ID` is not an event's sequence number"),
    "unauthorized": (401, "no `Authorization: Bearer TOKEN` with the server's token"),
    "unknown_run": (404, "no such run"),
    "unknown_agent": (404, "no agent registered under that name"),
    "unknown_question": (404, "the run has no such question"),
    "idempotency_conflict": (409, "the idempotency key started a run with another request"),
    "finished": (409, "the run has finished"),
    "waiting": (409, "the run waits for an answer"),
    "running": (409, "the run is being executed (here or by a worker)"),
    "elsewhere": (409, "another process executes the run"),
    "decided": (409, "the question has been answered"),
    "conflict": (409, "the run's log changed meanwhile"),
    "busy": (409, "the run's log kept changing while it was written"),
    "not_started": (409, "the run waits for a worker and has not begun: nothing of it to act on yet"),
    "no_question": (409, "the run has not begun: it asks nothing yet"),
    "too_large": (413, "the request body is larger than the server reads (1 MiB by default)"),
    "bad_host": (421, "the `Host` header names no host the server answers for"),
    "invalid": (422, "the request does not fit: every problem is listed, `where` naming the field"),
    "store": (503, "the store cannot be reached"),
}
"""Each error code the API answers with: its status and what it means."""
EVERY_OPERATION = ("too_large", "bad_host", "store")
"""What any request may be answered: the body-size limit, a host the server does not answer for,
and the store (or the server) unavailable."""
UNAVAILABLE_TEXT = "the server is at its connection limit (in plain text)"


def refusals(*codes: str, token: bool = True) -> dict[int | str, dict[str, Any]]:
    """The error responses of an operation that may answer with ``codes`` (with ``token``, it also
    answers 401 without the bearer token), for a route's ``responses``."""
    by_status: dict[int, list[str]] = {}
    every = (*codes, *(("unauthorized",) if token else ()), *EVERY_OPERATION)
    for code in every:
        by_status.setdefault(CODES[code][0], []).append(code)
    responses: dict[int | str, dict[str, Any]] = {}
    for status in sorted(by_status):
        lines = [f"`{code}`: {CODES[code][1]}" for code in by_status[status]]
        if status == 503:
            lines.append(f"or {UNAVAILABLE_TEXT}")
        response: dict[str, Any] = {"model": ErrorBody, "description": "; ".join(lines) + "."}
        if status == 401:
            response["headers"] = {
                "WWW-Authenticate": {
                    "description": 'The scheme to use: `Bearer realm="planexec"`.',
                    "required": True,
                    "schema": {"type": "string"},
                }
            }
        if status == 503:
            response["content"] = {"text/plain": {"schema": {"type": "string"}}}
        responses[status] = response
    return responses


# -- links: from a run to what can be done with it --------------------------------------------------


def _link(operation: str, description: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation, "description": description, "parameters": parameters}


def _run_links(run_id: str) -> dict[str, Any]:
    return {
        "GetRun": _link("get_run", "The run.", run_id=run_id),
        "GetEvents": _link("get_events", "Its events.", run_id=run_id),
        "StreamEvents": _link("stream_events", "Its events, live.", run_id=run_id),
        "CancelRun": _link("cancel_run", "Cancel it.", run_id=run_id),
        "ResumeRun": _link("resume_run", "Go on with it here.", run_id=run_id),
        "TellRun": _link("tell_run", "Tell it something new.", run_id=run_id),
        "ForkRun": _link("fork_run", "A new run from its log.", run_id=run_id),
    }


RUN_LINKS = _run_links("$response.body#/run_id")
"""From a response that is a run (a summary or its detail) to what can be done with it."""
QUESTION_LINKS = {
    "AnswerQuestion": _link(
        "answer_question",
        "Answer the first question the run waits for.",
        run_id="$response.body#/run_id",
        question_id="$response.body#/questions/0/question_id",
    )
}
"""From a run's detail to answering the first question it waits for."""
LISTED_LINKS = {"GetRun": _link("get_run", "The first run listed.", run_id="$response.body#/runs/0/run_id")}
INBOX_LINKS = {
    "AnswerQuestion": _link(
        "answer_question",
        "Answer the first question listed.",
        run_id="$response.body#/questions/0/run_id",
        question_id="$response.body#/questions/0/question_id",
    )
}


# -- what FastAPI's document leaves out ------------------------------------------------------------


Document = dict[str, Any]


def completed(generate: Callable[[], Document], *, is_open: Callable[[str], bool]) -> Callable[[], Document]:
    """``generate`` (an app's ``openapi``) with the bearer scheme declared and applied to every
    operation but those on paths ``is_open`` names (an empty requirement: no token), and each
    optional parameter described as the text it is when sent (a parameter left out is absent,
    never ``null``)."""
    done: list[Document] = []

    def openapi() -> Document:
        if done:
            return done[0]
        document = generate()
        components = document.setdefault("components", {})
        components["securitySchemes"] = {
            SECURITY_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "The server's token (`--token-file`, `$PLANEXEC_SERVE_TOKEN` or the `serve-token` "
                "file beside the default store), as `Authorization: Bearer TOKEN`.",
            }
        }
        for path, operations in document.get("paths", {}).items():
            for operation in operations.values():
                operation["security"] = [] if is_open(path) else [{SECURITY_SCHEME: []}]
                for parameter in operation.get("parameters", ()):
                    parameter["schema"] = _not_null(parameter["schema"])
        done.append(document)
        return document

    return openapi


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its ``null`` alternative: ``anyOf: [X, null]`` becomes X (with the
    description, title and pattern given beside ``anyOf``)."""
    options = schema.get("anyOf")
    if not isinstance(options, list):
        return schema
    kept = [option for option in options if option != {"type": "null"}]
    if len(kept) != 1 or len(kept) == len(options):
        return schema
    rest = {name: value for name, value in schema.items() if name != "anyOf"}
    return {**kept[0], **rest}
