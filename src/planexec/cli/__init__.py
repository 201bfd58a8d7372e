"""The ``planexec`` command line: ``demo``, ``run`` and ``schema``; the durable side of runs —
``runs``, ``show``, ``export``, ``approvals``, ``approve``, ``reject``, ``resume``, ``replay`` and
``gc`` — over the store named by ``--store`` (or ``PLANEXEC_STORE``).

Exit status of the commands that run an agent: 0 goal met, 1 stopped otherwise, 2 wrong command
line, 3 suspended until a human answers.
"""

from planexec.cli._entry import entry
from planexec.cli._main import main

__all__ = ["entry", "main"]
