"""A list of everything wrong with one request, collected instead of stopping at the first."""

from __future__ import annotations

from planexec.errors import Problem, UsageError

__all__ = ["Problems"]


class Problems(list[Problem]):
    """Problems found so far; ``where`` names the field or value at fault (``planner``,
    ``tools 'pkg.mod:TOOLS'``, ``approval_id`` …) so that a command line can name its flag instead."""

    def add(self, where: str, message: str, *, code: str = "invalid") -> None:
        self.append(Problem(code=code, where=where, message=message))

    def add_usage_error(self, where: str, error: UsageError) -> None:
        """Each problem of ``error``, under ``where`` and after the error's summary."""
        if error.problems:
            for p in error.problems:
                said = f"{p.where}: {p.message}" if p.where else p.message
                self.add(where, f"{error.summary}: {said}", code=p.code)
        else:
            self.add(where, error.summary)

    def raise_if_any(self, summary: str) -> None:
        if self:
            raise UsageError(summary, list(self))
