"""Scripted models picked up again: a run that goes on in a new process must not hear the replies
its earlier processes already used, so the script is read again and started after them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from planexec.log import Event, ModelCalled
from planexec.models import Model, ModelResponse, Reply, ScriptedModel, tool_calls

__all__ = ["absolute_model_string", "calls_made", "rest_of_script", "script_path"]

PREFIX = "scripted:"


def script_path(spec: str) -> str | None:
    """The file of a ``scripted:FILE`` model string (None for other models)."""
    return spec[len(PREFIX) :] if spec.startswith(PREFIX) else None


def absolute_model_string(spec: str) -> str:
    """``scripted:FILE`` with FILE made absolute, so that the run can be picked up from elsewhere."""
    path = script_path(spec)
    if path is None or not path or os.path.isabs(path):
        return spec
    return PREFIX + os.path.abspath(path)


def calls_made(events: Iterable[Event], *, role: str, model: str) -> int:
    """How many times the run asked ``model`` in ``role``."""
    return sum(1 for e in events if isinstance(e, ModelCalled) and e.role == role and e.model == model)


def _reply(item: Any) -> Reply:
    if isinstance(item, dict) and "$tool_calls" in item:
        return tool_calls(*((c["name"], c.get("arguments", {})) for c in item["$tool_calls"]))
    if isinstance(item, dict) and "$text" in item:
        return ModelResponse(text=str(item["$text"]))
    reply: Reply = item
    return reply


def rest_of_script(spec: str, model: Model, used: int) -> Model:
    """``model`` (built from ``spec``) without the first ``used`` replies of its script.

    The script has been read once already (that is how ``model`` was built), so it is known to be
    well formed; the model keeps its name, so that the next pick-up counts its calls the same way.
    """
    path = script_path(spec)
    if path is None or used <= 0 or not isinstance(model, ScriptedModel):
        return model
    data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    latency = 0.0
    if isinstance(data, dict):
        latency = float(data.get("latency", 0.0))
        data = data.get("replies")
    replies = [_reply(item) for item in data]
    return ScriptedModel(replies[used:], name=model.name, latency=latency)
