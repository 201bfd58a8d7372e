"""Test doubles: models that answer from a script or a function, so that agents run offline, in
tests and demos, with no provider and no key.

    planner = ScriptedModel([plan_reply, final_reply])
    planner = ScriptedModel([handoff_reply("send_summary", {"text": "..."})])
    model = FunctionModel(lambda request: ...)

Each is a real :class:`~planexec.Model`: runs made with them are logged, budgeted and replayed like
any other. ``allow_model_requests(False)`` makes any call to a real provider fail at once, so that a
test suite cannot reach the network by mistake. Seeded fault injection lives in
:mod:`planexec.faults`.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from planexec.models import (
    FunctionModel,
    Reply,
    ScriptedModel,
    StreamingScriptedModel,
    allow_model_requests,
    tool_calls,
)

__all__ = [
    "FunctionModel",
    "Reply",
    "ScriptedModel",
    "StreamingScriptedModel",
    "allow_model_requests",
    "handoff_reply",
    "tool_calls",
]


def handoff_reply(
    workflow: str,
    args: Mapping[str, Any] | None = None,
    *,
    steps: Sequence[Mapping[str, Any]] = (),
    reason: str = "",
) -> dict[str, Any]:
    """An upfront planner's answer that runs ``steps`` (as plan steps are written), then hands the
    rest of the work to ``workflow`` with ``args`` (which may bind outputs: ``"${step_id}"``)."""
    return {
        "reason": reason,
        "steps": [dict(s) for s in steps],
        "handoff": {"workflow": workflow, "args": dict(args or {})},
    }
