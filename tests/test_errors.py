"""The one tree of errors: every exception a public face exports is a ``PlanexecError`` drawn in
``planexec.errors``' docstring, and no module defines an exception under a public name that no face
exports."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import planexec
from planexec import errors

FACES = [
    "planexec",
    "planexec.errors",
    "planexec.testing",
    "planexec.plan",
    "planexec.tools",
    "planexec.models",
    "planexec.planner",
    "planexec.executor",
    "planexec.log",
    "planexec.store",
    "planexec.faults",
    "planexec.runtime",
    "planexec.react",
    "planexec.eval",
    "planexec.demo",
    "planexec.cli",
    "planexec.workers",
]


_ROOT = re.compile(r"^\s*(PlanexecError)\s*$")
_BRANCH = re.compile(r"^([\s│]*)[├└]── ([A-Z][A-Za-z]+)\b")


def _tree() -> list[tuple[int, str]]:
    """The classes drawn in ``planexec.errors``' docstring: (indent, name), in drawing order."""
    drawn: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        root = _ROOT.match(line)
        branch = _BRANCH.match(line)
        if root:
            drawn.append((0, root.group(1)))
        elif branch:
            drawn.append((len(branch.group(1)), branch.group(2)))
    return drawn


def _drawn() -> set[str]:
    return {name for _indent, name in _tree()}


def _exported_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for face in FACES:
        module = importlib.import_module(face)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                found[f"{face}.{name}"] = value
    return found


def _modules() -> list[ModuleType]:
    modules = [planexec]
    for info in pkgutil.walk_packages(planexec.__path__, prefix="planexec."):
        if info.name == "planexec.__main__":
            continue  # running it starts the command line
        modules.append(importlib.import_module(info.name))
    return modules


def test_the_drawing_names_the_root_and_its_families() -> None:
    drawn = _drawn()
    assert {"PlanexecError", "UsageError", "RunFailed", "StoreError", "ToolError", "ModelCallError"} <= drawn
    assert "Errors" not in drawn  # prose is not read as a class
    assert len(_tree()) == len(drawn)  # each class is drawn once


def test_every_drawn_name_is_a_planexec_error_in_its_place() -> None:
    """Each class in the drawing exists and sits under the class it is drawn under."""
    exported = {cls.__name__: cls for cls in _exported_exceptions().values()}
    parents: list[tuple[int, type[BaseException]]] = []
    for indent, name in _tree():
        cls = exported[name]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        if parents:
            assert issubclass(cls, parents[-1][1]), f"{name} is drawn under {parents[-1][1].__name__}"
        else:
            assert cls is errors.PlanexecError, f"{name} is drawn as the root"
        parents.append((indent, cls))


def test_every_exported_exception_is_a_planexec_error_in_the_tree() -> None:
    drawn = _drawn()
    exported = _exported_exceptions()
    assert exported, "no exception found: the walk is broken"
    outside = sorted(name for name, cls in exported.items() if not issubclass(cls, errors.PlanexecError))
    assert outside == []
    undrawn = sorted(name for name, cls in exported.items() if cls.__name__ not in drawn)
    assert undrawn == []


INTERNAL_SIGNALS = {
    # raised and caught inside planexec, shared by several of its modules, never met by a caller
    "planexec._util.strict_json.JSONRefused",
    "planexec._util.regex.PatternError",
    "planexec._util.json_schema.TooCostly",
    "planexec.server._shared.ApiError",  # becomes the HTTP answer's error body
    "planexec.runtime._journal.JournalFailed",  # the run ends with the typed stop log_failed
    "planexec.runtime._run_end.Suspend",
    "planexec.runtime._run_end.EndedOutside",
    "planexec.runtime._sealed.AnswerUnfilled",
    "planexec.runtime._stops.Stop",
    "planexec.runtime._trust.TrustRefused",  # the run ends with the typed stop refused
    "planexec.runtime._world.RecordedError",
    "planexec.store._failures.Damaged",  # raised to callers as StoreError / LogUnreadable
    "planexec.store._pgconn.TimedOut",  # raised to callers as StoreError
}


def test_no_exception_with_a_public_name_is_left_unexported() -> None:
    """An exception class a module defines under a public name is exported by some face, or is one
    of the internal signals listed above; the others that stay inside planexec are named with a
    leading underscore."""
    exported = set(_exported_exceptions().values())
    orphans = []
    for module in _modules():
        for value in vars(module).values():
            if not (inspect.isclass(value) and issubclass(value, BaseException)):
                continue
            if value.__module__ != module.__name__ or value.__name__.startswith("_"):
                continue
            if value not in exported and f"{module.__name__}.{value.__name__}" not in INTERNAL_SIGNALS:
                orphans.append(f"{module.__name__}.{value.__name__}")
    assert orphans == []


@pytest.mark.parametrize(
    ("face", "name"),
    [
        ("planexec.runtime", "BudgetHit"),
        ("planexec.planner", "PlannerEscalated"),
        ("planexec.planner", "PlannerGaveUp"),
        ("planexec.executor", "StepFailure"),
        ("planexec.plan", "BindingError"),
        ("planexec.tools", "ToolCrashed"),
        ("planexec.tools", "OutputNotJSON"),
        ("planexec.models", "ModelCrashed"),
    ],
)
def test_errors_moved_into_the_tree_are_still_where_they_were(face: str, name: str) -> None:
    """Each package still hands on its errors, as the very classes ``planexec.errors`` defines."""
    assert getattr(importlib.import_module(face), name) is getattr(errors, name)


def test_the_families_of_errors_that_joined_the_tree() -> None:
    from planexec.eval import SuiteInvalid
    from planexec.models import ModelCallError, NotSupported
    from planexec.store import AppendConflict

    for usage in (NotSupported, SuiteInvalid):
        assert issubclass(usage, errors.UsageError)
    signals = (
        errors.BudgetHit,
        errors.PlannerEscalated,
        errors.PlannerGaveUp,
        errors.StepFailure,
        errors.BindingError,
        errors.ToolCrashed,
        errors.OutputNotJSON,
        errors.ModelCrashed,
        AppendConflict,
        ModelCallError,
    )
    for cls in signals:
        # None of them joined a family whose handlers would now catch it by surprise.
        assert issubclass(cls, errors.PlanexecError)
        for family in (errors.UsageError, errors.RunFailed, errors.ToolError, errors.StoreError):
            assert not issubclass(cls, family), (cls, family)
    assert issubclass(errors.OutputNotJSON, ValueError)  # as it always was


def test_moved_errors_keep_their_messages_and_fields() -> None:
    hit = errors.BudgetHit("cost", 0.5, 0.25, needed=0.5)
    assert (hit.budget, hit.limit, hit.used, hit.needed) == ("cost", 0.5, 0.25, 0.5)
    assert str(hit) == "cost budget exhausted: used 0.25 of 0.5; the next call needs about 0.5 more"
    crashed = errors.ModelCrashed("m", KeyboardInterrupt())
    assert str(crashed) == "model m raised KeyboardInterrupt"
    assert str(errors.ToolCrashed("t", SystemExit("bye"))) == "tool t raised SystemExit: bye"
    escalated = errors.PlannerEscalated("low_confidence", "too unsure")
    assert (escalated.code, escalated.detail, str(escalated)) == ("low_confidence", "too unsure", "too unsure")
