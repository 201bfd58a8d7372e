"""How a run's end is signalled inside the loop: a part raises :class:`Stop` with the reason (and
the answer, when the goal was met); an error no part could route becomes a stop whose code says
whose it was (:func:`crash_stop`)."""

from __future__ import annotations

from planexec.errors import UsageError
from planexec.log import ErrorCode, StopReason
from planexec.models import ModelCrashed
from planexec.runtime._journal import JournalFailed
from planexec.runtime._sealed import AnswerUnfilled
from planexec.runtime._world import RecordedError
from planexec.tools import ToolCrashed
from planexec.trust import Provenance

__all__ = ["Stop", "crash_stop", "error_stop"]


class Stop(Exception):
    """Internal signal: the run ends with ``reason`` (and ``answer`` when the goal was met)."""

    def __init__(
        self,
        reason: StopReason,
        answer: str | None = None,
        provenance: Provenance | None = None,
        withheld: tuple[str, ...] = (),
    ) -> None:
        self.reason = reason
        self.answer = answer
        self.provenance = provenance
        """The answer's label (None: no answer, or a run that labels nothing)."""
        self.withheld = withheld
        """The steps whose untrusted output was withheld from the answer (``*``: all of it)."""
        super().__init__(str(reason))


def error_stop(code: ErrorCode, detail: str) -> Stop:
    """The signal that ends a run with an error of kind ``code``."""
    return Stop(StopReason(kind="error", code=code, detail=detail))


def crash_stop(crash: BaseException, *, planner: bool = False, problems: str = "") -> Stop:
    """The stop for an error a planning round or a step could not route: its code says whose it was.

    ``problems``: what was wrong with the planner's last answers in the round, when any was
    refused: the root cause, named before whatever failed after it."""
    if planner and problems and not isinstance(crash, JournalFailed | ToolCrashed | ModelCrashed):
        text = str(crash) if isinstance(crash, RecordedError) else f"{type(crash).__name__}: {crash}"
        return error_stop("planner_output", f"the planner's output kept failing its checks: {problems} (then: {text})")
    if isinstance(crash, AnswerUnfilled):
        return error_stop("answer_template", str(crash))
    code: ErrorCode
    if isinstance(crash, JournalFailed):
        code = "log_failed"
    elif isinstance(crash, ToolCrashed):
        code = "tool_crashed"
    elif isinstance(crash, ModelCrashed):
        code = "model_crashed"
    elif planner:
        text = str(crash) if isinstance(crash, RecordedError) else f"{type(crash).__name__}: {crash}"
        return error_stop("planner_failed", f"the planner failed: {text}")
    elif isinstance(crash, UsageError):
        code = "usage"
    else:
        return error_stop("internal", f"internal error: {type(crash).__name__}: {crash}")
    prefix = "the planner failed: " if planner else ""
    return error_stop(code, f"{prefix}{crash}")
