"""The ``planexec`` program: the command group, run as a process that always ends.

A tool may start a thread that never ends (one that is not a daemon thread); the interpreter would
wait for it at exit, and the command would never return. When a command is done and such threads
are still running, ``planexec`` says so and exits without waiting for them.
"""

from __future__ import annotations

import os
import sys
import threading

from planexec._util.plural import counted
from planexec.cli._main import main

__all__ = ["entry"]


def entry() -> None:
    """Run the ``planexec`` command line in this process, then exit with its status."""
    try:
        main(standalone_mode=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    stray = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if stray:
        names = ", ".join(sorted(t.name for t in stray)[:5])
        still = "still runs" if len(stray) == 1 else "still run"
        note = f"planexec: {counted(len(stray), 'thread')} started by a tool {still} ({names}); exiting anyway"
        print(note, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
