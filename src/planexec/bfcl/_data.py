"""BFCL's multi-turn tasks as the installed ``bfcl-eval`` package ships them.

``pip install --no-deps bfcl-eval==2026.3.23 mpmath``: the API classes, the tasks, the function
documentation and the ground truth need nothing else (its declared dependencies pull in torch).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planexec.errors import Problem, UsageError

__all__ = ["CATEGORIES", "BfclTask", "bfcl_root", "load_tasks"]

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")

INSTALL = "pip install --no-deps bfcl-eval==2026.3.23 mpmath"


def bfcl_root() -> Path:
    """Where the installed ``bfcl_eval`` package is; a usage error saying how to install it."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or spec.origin is None:
        raise UsageError(
            "the BFCL tasks need the bfcl-eval package",
            [Problem(code="bfcl", where="bfcl_eval", message=f"install it: {INSTALL}")],
        )
    return Path(spec.origin).parent


@dataclass(frozen=True, kw_only=True)
class BfclTask:
    """One multi-turn task: the user's turns, the classes involved and how they start, the
    functions left out, and the ground truth (the calls of each turn)."""

    id: str
    turns: tuple[str, ...]
    initial_config: dict[str, Any]
    involved_classes: tuple[str, ...]
    excluded: frozenset[str] = frozenset()
    ground_truth: tuple[tuple[str, ...], ...] = ()
    missed: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """For ``miss_func``: functions held back until a turn (turn index → function names)."""
    long_context: bool = False
    """For ``long_context``: the classes start with their long-context state (far more data to
    read through), as BFCL loads them for that category."""


def _user_text(turn: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in turn if m.get("role") == "user")


def load_tasks(category: str = "multi_turn_base", *, ids: list[str] | None = None) -> list[BfclTask]:
    """The tasks of ``category`` (``multi_turn_base`` and the other multi-turn ones), with their
    ground truth; only ``ids`` when given."""
    if category not in CATEGORIES:
        raise UsageError(
            "unknown BFCL category",
            [Problem(code="bfcl", where="category", message=f"{category!r}: one of {', '.join(CATEGORIES)}")],
        )
    root = bfcl_root() / "data"
    tasks_path = root / f"BFCL_v4_{category}.json"
    answers_path = root / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = {}
    for line in answers_path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            answers[entry["id"]] = tuple(tuple(calls) for calls in entry["ground_truth"])
    wanted = set(ids) if ids is not None else None
    tasks = []
    for line in tasks_path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        if wanted is not None and entry["id"] not in wanted:
            continue
        missed = {int(k): tuple(v) for k, v in (entry.get("missed_function") or {}).items()}
        tasks.append(
            BfclTask(
                id=entry["id"],
                turns=tuple(_user_text(turn) for turn in entry["question"]),
                initial_config=entry.get("initial_config") or {},
                involved_classes=tuple(entry["involved_classes"]),
                excluded=frozenset(entry.get("excluded_function") or ()),
                ground_truth=answers.get(entry["id"], ()),
                missed=missed,
                long_context="long_context" in category,
            )
        )
    if wanted is not None:
        unknown = sorted(wanted - {t.id for t in tasks})
        if unknown:
            raise UsageError(
                "unknown BFCL tasks",
                [Problem(code="bfcl", where=f"task {i!r}", message=f"not in {category}") for i in unknown],
            )
    return tasks
