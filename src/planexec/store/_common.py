"""What every backend shares: argument checks, the closed state and ``async with`` support."""

from __future__ import annotations

from types import TracebackType
from typing import Self, get_args

from planexec._errors import Problem, UsageError
from planexec.store._base import RunStatus
from planexec.store._redact import Redactor

__all__ = ["StoreBase", "check_list_args", "check_run_id"]

_STATUSES = get_args(RunStatus)


def check_run_id(run_id: str) -> None:
    if not isinstance(run_id, str) or not run_id:
        raise UsageError(f"a run id must be a non-empty string, not {run_id!r}")


def check_list_args(status: str | None, limit: int) -> None:
    problems = []
    if status is not None and status not in _STATUSES:
        problems.append(Problem(code="status", where="status", message=f"must be one of {', '.join(_STATUSES)}"))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        problems.append(Problem(code="limit", where="limit", message=f"must be an int >= 0, not {limit!r}"))
    if problems:
        raise UsageError("invalid list_runs arguments", problems)


class StoreBase:
    """The parts of a store that do not depend on where the log lives."""

    def __init__(self, *, redactor: Redactor | None) -> None:
        self.redactor: Redactor = redactor if redactor is not None else Redactor()
        """Applied to every event (and the summary's text) before it is written."""
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"this {type(self).__name__} is closed; open a new one")

    async def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
