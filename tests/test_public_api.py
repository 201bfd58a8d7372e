"""The public API: the names ``planexec`` exports are pinned, and every exported name imports."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

import planexec

PUBLIC = [
    "Acceptance",
    "Agent",
    "AnswerReview",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "Budget",
    "BudgetExhausted",
    "ChecklistResult",
    "Escalated",
    "Escalation",
    "Event",
    "FunctionModel",
    "Limits",
    "LogUnreadable",
    "MaxReplans",
    "Message",
    "Model",
    "ModelExecutor",
    "ModelNotFound",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "Plan",
    "PlanInvalid",
    "PlanexecError",
    "Planner",
    "Problem",
    "Rejected",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunContext",
    "RunFailed",
    "RunResult",
    "RunState",
    "ScriptedModel",
    "Stalled",
    "Step",
    "StepError",
    "StepRecord",
    "StopReason",
    "StoreError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolExecutor",
    "Toolset",
    "TransientToolError",
    "UnexpectedModelCall",
    "UnknownToolError",
    "UnrecoverableError",
    "Usage",
    "UsageError",
    "Verdict",
    "__version__",
    "plan_json_schema",
    "resolve_model",
    "tool",
    "tool_calls",
]

SUBPACKAGES = [
    "planexec.plan",
    "planexec.tools",
    "planexec.models",
    "planexec.planner",
    "planexec.executor",
    "planexec.runtime",
]


def test_public_names_are_pinned() -> None:
    """Adding or removing a public name is an API change: update this list on purpose."""
    assert sorted(planexec.__all__) == PUBLIC
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
        planexec.PlanInvalid,
        planexec.ToolDefinitionError,
        planexec.UnknownToolError,
        planexec.ModelNotFound,
        planexec.UnexpectedModelCall,
    ]
    failed = [
        planexec.BudgetExhausted,
        planexec.MaxReplans,
        planexec.Stalled,
        planexec.Rejected,
        planexec.Escalated,
        planexec.RunCancelled,
        planexec.UnrecoverableError,
    ]
    for cls in usage:
        assert issubclass(cls, planexec.UsageError)
    for cls in failed:
        assert issubclass(cls, planexec.RunFailed)
    assert issubclass(planexec.TransientToolError, planexec.ToolError)
    for root in (planexec.UsageError, planexec.RunFailed, planexec.ToolError):
        assert issubclass(root, planexec.PlanexecError)


PACKAGES = sorted(
    f"planexec.{p.name}" for p in Path(planexec.__file__).parent.iterdir() if (p / "__init__.py").is_file()
)


@pytest.mark.parametrize("module_name", PACKAGES)
def test_each_subpackage_imports_first(module_name: str) -> None:
    """Importing ``planexec`` loads none of its parts, so any of them may be the first one imported."""
    subprocess.run([sys.executable, "-c", f"import {module_name}"], check=True, capture_output=True)
