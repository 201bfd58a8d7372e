"""Executors: how steps are carried out, and how their results are judged."""

from planexec.executor._acceptance import Acceptance, PredicateFn
from planexec.executor._base import Executor, StepContext, StepFailure
from planexec.executor._extractor import EXTRACTOR_INSTRUCTIONS, Extractor
from planexec.executor._model import ModelExecutor
from planexec.executor._outcome import PASSED, CheckResult, ErrorKind, StepError, Verdict
from planexec.executor._profile import ExecutorProfile, executor_profile
from planexec.executor._ray import RayExecutor, RayOptions
from planexec.executor._tool_calls import ToolCallOutcome, ToolCallSite, call_tool, checked_call, tool_error
from planexec.executor._tools import ToolExecutor

__all__ = [
    "EXTRACTOR_INSTRUCTIONS",
    "PASSED",
    "Acceptance",
    "CheckResult",
    "ErrorKind",
    "Executor",
    "ExecutorProfile",
    "Extractor",
    "ModelExecutor",
    "PredicateFn",
    "RayExecutor",
    "RayOptions",
    "StepContext",
    "StepError",
    "StepFailure",
    "ToolCallOutcome",
    "ToolCallSite",
    "ToolExecutor",
    "Verdict",
    "call_tool",
    "checked_call",
    "executor_profile",
    "tool_error",
]
