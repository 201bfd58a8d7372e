"""Test doubles: models that answer from a script or a function, so that agents run offline, in
tests and demos, with no provider and no key.

    planner = ScriptedModel([plan_reply, final_reply])
    model = FunctionModel(lambda request: ...)

Each is a real :class:`~planexec.Model`: runs made with them are logged, budgeted and replayed like
any other. ``allow_model_requests(False)`` makes any call to a real provider fail at once, so that a
test suite cannot reach the network by mistake. Seeded fault injection lives in
:mod:`planexec.faults`.
"""

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
    "tool_calls",
]
