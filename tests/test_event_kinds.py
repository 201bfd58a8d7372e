"""Event kinds are declared once, in planexec.log: code elsewhere names an event by its class (or
looks it up in ``EVENT_KINDS``), never by spelling its kind."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import planexec.log
from planexec.log import EVENT_KINDS, ErrorCode, Event, StopKind

SOURCE = Path(planexec.log.__file__).resolve().parents[1]
"""src/planexec."""

LOG = SOURCE / "log"

ALSO_ANOTHER_WORD = {
    "budget_exhausted": "a stop kind too (StopKind): StopReason(kind='budget_exhausted') ends a run at a cap",
    "step_failed": "an error code too (ErrorCode): a run stopped because a step failed with replanning off",
}
"""Kinds spelled the same as a word of another of planexec.log's vocabularies. Elsewhere they may be
written only as an argument of a call (``StopReason(kind=...)``, ``error_stop(...)``), where they
mean that other word; compared with, or listed in a set, they are still refused."""


def _kinds_spelled(path: Path, root: Path = SOURCE.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in EVENT_KINDS):
            continue
        if _in_all(node, parents):
            continue  # a name a module exports (a function may be named like a kind)
        parent = parents.get(node)
        if node.value in ALSO_ANOTHER_WORD and (
            isinstance(parent, ast.keyword) or (isinstance(parent, ast.Call) and node in parent.args)
        ):
            continue
        found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def _in_all(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Assign):
            return any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    return False


def test_no_event_kind_is_spelled_outside_planexec_log() -> None:
    sources = [p for p in sorted(SOURCE.rglob("*.py")) if LOG not in p.parents]
    assert len(sources) > 100
    spelled = [where for path in sources for where in _kinds_spelled(path)]
    assert not spelled, (
        "event kinds spelled outside planexec.log; name the event's class, or look it up in "
        "planexec.log.EVENT_KINDS:\n" + "\n".join(spelled)
    )


def test_the_check_finds_a_kind_spelled(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        '__all__ = ["tools_changed"]\n'
        'QUIET = frozenset({"step_started"})\n'
        'stop = StopReason(kind="budget_exhausted")\n'
        'late = event.kind == "step_failed"\n',
        encoding="utf-8",
    )
    assert _kinds_spelled(module, tmp_path) == ["module.py:2: 'step_started'", "module.py:4: 'step_failed'"]


def test_the_words_allowed_are_words_of_another_vocabulary() -> None:
    others = set(typing.get_args(StopKind)) | set(typing.get_args(ErrorCode))
    assert set(ALSO_ANOTHER_WORD) <= others
    assert set(ALSO_ANOTHER_WORD) <= set(EVENT_KINDS)


def test_every_kind_is_one_class_of_the_event_union() -> None:
    classes = typing.get_args(typing.get_args(Event)[0])
    assert tuple(EVENT_KINDS.values()) == classes
    for kind, cls in EVENT_KINDS.items():
        field = {f.name: f for f in dataclasses.fields(cls)}["kind"]
        assert field.default == kind
        assert typing.get_args(typing.get_type_hints(cls)["kind"]) == (kind,)
        assert cls.__module__.startswith("planexec.log."), cls
        assert getattr(planexec.log, cls.__name__) is cls, f"planexec.log does not export {cls.__name__}"
        assert cls.__name__ in planexec.log.__all__
