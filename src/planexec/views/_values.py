"""Values as a human is shown them: redacted as the store redacts, a long value cut with its size."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from planexec._util.clip import clip
from planexec.errors import BindingError
from planexec.plan import Step, compile_args
from planexec.store import Redactor
from planexec.trust import Provenance
from planexec.views._models import ArgumentView
from planexec.views._trust import provenance_view

__all__ = ["SHOWN_CHARS", "TEXT_CHARS", "arguments", "json_text", "shown_value"]

SHOWN_CHARS = 2_000
"""The most characters of one value a view carries whole; a longer one is cut (its size is shown)."""
TEXT_CHARS = 160
"""The most characters of a value's one-line text."""


def json_text(value: Any) -> str:
    """``value`` as compact JSON text (text as it is)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, TypeError, RecursionError):
        return repr(value)


def _size(value: Any) -> int:
    return len(json_text(value)) if not isinstance(value, str) else len(value)


def shown_value(value: Any, redactor: Redactor | None, *, limit: int = SHOWN_CHARS) -> tuple[Any, int, bool]:
    """``value`` redacted, and cut to its JSON text's first ``limit`` characters when longer:
    (what to show, the whole value's size in characters, whether it was cut)."""
    if redactor is not None:
        value = redactor.redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value, len(json_text(value)), False
    text = json_text(value)
    if len(text) <= limit:
        return value, len(text), False
    return clip(text, limit, marker=f"… ({len(text):,} characters)"), len(text), True


def _one_line(value: Any) -> str:
    text = " ".join(json_text(value).split())
    return clip(text, TEXT_CHARS, marker="…")


def arguments(
    step: Step,
    sent: Mapping[str, Any] | None,
    outputs: Mapping[str, Any],
    redactor: Redactor | None,
    labels: Mapping[str, Provenance] | None = None,
) -> list[ArgumentView]:
    """Each argument of ``step`` as it will be sent: ``sent`` when the arguments are known (the
    engine resolved them), else resolved from the ``outputs`` of earlier steps where they exist;
    a binding whose step has not run is shown as the binding. ``labels``: each argument's label,
    when known."""
    labels = labels or {}

    def label_of(name: str) -> Any:
        label = labels.get(name)
        return provenance_view(label, redactor) if label is not None else None

    views = []
    for name, raw in step.args.items():
        compiled = compile_args({name: raw})
        bound = [str(ref) for _where, ref in compiled.refs]
        known = True
        if sent is not None and name in sent:
            value = sent[name]
        elif bound and not compiled.problems:
            try:
                value = compiled.resolve(outputs)[name]
            except BindingError:
                value, known = raw, False
        else:
            value = raw
        shown, size, cut = shown_value(value, redactor)
        views.append(
            ArgumentView(
                name=name,
                value=shown,
                text=_one_line(shown),
                binding=" ".join(bound) if bound else None,
                resolved=known,
                size=size,
                cut=cut,
                provenance=label_of(name),
            )
        )
    for name in sent or {}:  # arguments sent that the plan did not write
        if name not in step.args:
            shown, size, cut = shown_value(sent[name], redactor)  # type: ignore[index]
            views.append(
                ArgumentView(
                    name=name, value=shown, text=_one_line(shown), size=size, cut=cut, provenance=label_of(name)
                )
            )
    return views
