"""The public API: the names ``planexec`` exports are pinned, and every exported name imports."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import planexec
from planexec import errors

PUBLIC = [
    "Acceptance",
    "Agent",
    "AnswerReview",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "Budget",
    "Escalation",
    "Event",
    "Limits",
    "Model",
    "ModelExecutor",
    "ModelSettings",
    "Plan",
    "PlanexecError",
    "Planner",
    "Problem",
    "RetryPolicy",
    "Run",
    "RunContext",
    "RunFailed",
    "RunResult",
    "Step",
    "StopReason",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolExecutor",
    "Toolset",
    "TransientToolError",
    "TrustPolicy",
    "UsageError",
    "Workflow",
    "__version__",
    "tool",
    "workflow",
]

SUBPACKAGES = [
    "planexec.errors",
    "planexec.testing",
    "planexec.plan",
    "planexec.tools",
    "planexec.trust",
    "planexec.models",
    "planexec.planner",
    "planexec.executor",
    "planexec.log",
    "planexec.store",
    "planexec.faults",
    "planexec.runtime",
    "planexec.telemetry",
    "planexec.eval",
    "planexec.hosting",
    "planexec.workers",
]


def test_public_names_are_pinned() -> None:
    """Adding or removing a public name is an API change: update this list on purpose. The top level
    is the everyday API and stays small; everything else lives in the package that owns it."""
    assert sorted(planexec.__all__) == PUBLIC
    assert len(PUBLIC) <= 40
    assert len(set(planexec.__all__)) == len(planexec.__all__)


def test_every_public_name_imports() -> None:
    for name in planexec.__all__:
        assert getattr(planexec, name, None) is not None, name
    namespace: dict[str, object] = {}
    exec("from planexec import *", namespace)
    assert set(PUBLIC) - {"__version__"} <= set(namespace)


def test_version() -> None:
    assert planexec.__version__ == importlib.metadata.version("planexec")


@pytest.mark.parametrize("module_name", SUBPACKAGES)
def test_subpackage_exports_import(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    for name in exported:
        assert hasattr(module, name), f"{module_name}.{name}"
        assert not name.startswith("_"), f"{module_name}.{name}"


def test_top_level_names_are_the_subpackages_objects() -> None:
    """Each top-level name is the very object its subpackage exports, not a copy."""
    found: dict[str, object] = {}
    for module_name in SUBPACKAGES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            found.setdefault(name, getattr(module, name))
    for name in PUBLIC:
        if name in found:
            assert getattr(planexec, name) is found[name], name


def test_errors_form_two_families_under_one_root() -> None:
    usage = [
        errors.PlanInvalid,
        errors.ToolDefinitionError,
        errors.UnknownToolError,
        errors.ModelNotFound,
        errors.UnexpectedModelCall,
    ]
    failed = [
        errors.BudgetExhausted,
        errors.MaxReplans,
        errors.Stalled,
        errors.Rejected,
        errors.Escalated,
        errors.RunCancelled,
        errors.UnrecoverableError,
        errors.WaitingForHuman,
    ]
    for cls in usage:
        assert issubclass(cls, errors.UsageError)
    for cls in failed:
        assert issubclass(cls, errors.RunFailed)
    assert issubclass(errors.TransientToolError, errors.ToolError)
    assert issubclass(errors.LogUnreadable, errors.StoreError)
    for root in (errors.UsageError, errors.RunFailed, errors.ToolError, errors.StoreError):
        assert issubclass(root, errors.PlanexecError)
    for name in errors.__all__:  # the top level hands on the very same classes
        if name in planexec.__all__:
            assert getattr(planexec, name) is getattr(errors, name), name


PACKAGES = sorted(
    f"planexec.{p.name}" for p in Path(planexec.__file__).parent.iterdir() if (p / "__init__.py").is_file()
)


@pytest.mark.parametrize("module_name", PACKAGES)
def test_each_subpackage_imports_first(module_name: str) -> None:
    """Importing ``planexec`` loads none of its parts, so any of them may be the first one imported."""
    subprocess.run([sys.executable, "-c", f"import {module_name}"], check=True, capture_output=True)
