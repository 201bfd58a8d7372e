"""Scripted models picked up again: a run that goes on in a new process must not hear the replies
its earlier processes already used, so its script starts after them."""

from __future__ import annotations

import os
from collections.abc import Iterable

from planexec.log import Event, ModelCalled
from planexec.models import Model, ScriptedModel

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


def rest_of_script(spec: str, model: Model, used: int) -> Model:
    """``model`` (just built from ``spec``) without the first ``used`` replies of its script; the
    model keeps its name, so that the next pick-up counts its calls the same way."""
    if script_path(spec) is None or used <= 0 or not isinstance(model, ScriptedModel):
        return model
    return model.after(used)
