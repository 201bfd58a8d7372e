"""The ``planexec`` command line: ``demo``, ``run`` and ``schema``; the durable side of runs —
``runs``, ``show``, ``export``, ``approvals``, ``approve``, ``reject``, ``resume``, ``replay`` and
``gc`` — over the store named by ``--store`` (or ``PLANEXEC_STORE``).

Exit status of the commands that run an agent: 0 goal met, 1 stopped otherwise, 2 wrong command
line, 3 suspended until a human answers.

``question_panel(view)`` renders a :class:`~planexec.views.QuestionView` as the CLI shows it.
"""

from typing import TYPE_CHECKING, Any

from planexec.cli._entry import entry
from planexec.cli._main import main

if TYPE_CHECKING:
    from planexec.cli._questions import question_panel

__all__ = ["entry", "main", "question_panel"]


def __getattr__(name: str) -> Any:
    """``question_panel`` is imported when first used: the command line starts without Rich."""
    if name == "question_panel":
        from planexec.cli._questions import question_panel

        return question_panel
    raise AttributeError(f"module 'planexec.cli' has no attribute {name!r}")
