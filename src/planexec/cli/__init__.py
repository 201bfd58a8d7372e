"""The ``planexec`` command line: ``planexec demo``, ``planexec run``, ``planexec schema``."""

from planexec.cli._main import main

__all__ = ["main"]
