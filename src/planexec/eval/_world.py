"""A task that brings its own world: tools bound to state made fresh for each run, what the user
says at each turn, a check after each turn, and a stand-in model for a role the task names none for
(BFCL's tasks: its API classes, its checks, its oracle). The runner asks the task's ``world``
factory for a new one for every run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from planexec.eval._matchers import CheckOutcome
from planexec.models import Model
from planexec.tools import Tool

__all__ = ["Role", "TaskWorld"]

Role = Literal["planner", "react"]


@runtime_checkable
class TaskWorld(Protocol):
    """One run's world. Turns are numbered from 0; a task with ``turns`` has ``1 + len(turns)``.

    A method that raises once a turn has run ends the run with a failed check of the turn it
    raised in (``turn N: error``), and the report keeps what the turns before did; one that raises
    before any turn ran fails the run with its error."""

    def tools(self, turn: int) -> Sequence[Tool]:
        """The tools of ``turn`` (a turn may add or withhold some: the session's toolset changes)."""
        ...

    def goal(self, turn: int) -> str:
        """What the user asks at ``turn``."""
        ...

    def begin_turn(self, turn: int) -> None:
        """Called before ``turn`` runs."""
        ...

    def check_turn(self, turn: int) -> CheckOutcome:
        """The verdict on ``turn`` once the agent is done with it; a failed turn ends the run."""
        ...

    def stand_in(self, role: Role) -> Model | None:
        """A model for ``role`` when the task names none (an oracle), else None."""
        ...
