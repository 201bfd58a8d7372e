"""The bounds an evaluation reads its input within, so that no suite, fault profile or baseline
report — however broken or hostile — makes reading or running it unbounded.

* Files: a suite (or a ``--faults`` file) is refused above ``MAX_SUITE_BYTES``, a baseline report
  above ``MAX_REPORT_BYTES``, a scripted model's replies above ``MAX_SCRIPT_BYTES`` — before they
  are parsed, and never read past the limit (a device or a growing file cannot make them endless).
* Shape: at most ``MAX_ALIASES`` YAML aliases; at most ``MAX_VALUES`` values once every alias is
  followed (measured on the parsed nodes, without expanding them; ``MAX_REPORT_VALUES`` in a
  report); lists and mappings nested at most ``MAX_DEPTH`` deep (Python's parsers and printers
  recurse, so deeper input would end in a ``RecursionError``); no whole number beyond
  ``MAX_INTEGER_BITS`` bits anywhere.
* Counts: ``MAX_TASKS`` tasks, ``MAX_REPEAT`` runs of one task, ``MAX_RUNS`` runs in all,
  ``MAX_CONCURRENCY`` runs (or steps) at once, ``MAX_TURNS`` ReAct turns, ``MAX_STALL_ROUNDS``
  planning rounds, ``MAX_FAULT_STORM`` rate-limited calls, seeds up to ``MAX_SEED``; every other
  number (budget caps, tolerances, limits) is finite, not negative and at most ``MAX_NUMBER``.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

from planexec.errors import Problem

__all__ = [
    "MAX_ALIASES",
    "MAX_CONCURRENCY",
    "MAX_DEPTH",
    "MAX_FAULT_STORM",
    "MAX_INTEGER_BITS",
    "MAX_NUMBER",
    "MAX_REPEAT",
    "MAX_REPORT_BYTES",
    "MAX_REPORT_VALUES",
    "MAX_RUNS",
    "MAX_SCRIPT_BYTES",
    "MAX_SEED",
    "MAX_STALL_ROUNDS",
    "MAX_SUITE_BYTES",
    "MAX_TASKS",
    "MAX_TOLERANCE",
    "MAX_TURNS",
    "MAX_VALUES",
    "amount",
    "number_problem",
    "shape_problems",
    "shown",
]

MAX_SUITE_BYTES = 512 * 1024
"""A suite file, or a fault profile file: a thousand tasks written out in full fit; reading one takes seconds."""
MAX_REPORT_BYTES = 32 * 1024 * 1024
"""A baseline report: it holds every run of an evaluation (up to ``MAX_RUNS``), answers included."""
MAX_SCRIPT_BYTES = 8 * 1024 * 1024
"""A scripted model's replies file named by a suite."""
MAX_ALIASES = 100
"""YAML aliases (``*name``) in one file; ``defaults:`` is the way to share task fields."""
MAX_VALUES = 100_000
"""Values (texts, numbers, lists, mappings) a file holds once every alias is followed."""
MAX_REPORT_VALUES = 2_000_000
"""Values in a baseline report (JSON has no aliases; a run takes about fifty)."""
MAX_DEPTH = 64
"""Lists and mappings inside one another (a suite needs about six)."""
MAX_INTEGER_BITS = 128
"""Whole numbers beyond this many bits are refused anywhere (none is meaningful in a suite)."""
MAX_TASKS = 1000
MAX_REPEAT = 1000
"""Runs of one task (``repeat``)."""
MAX_RUNS = 10_000
"""Runs of a whole suite: every task's ``repeat`` added up."""
MAX_CONCURRENCY = 256
"""Runs at once (``concurrency``, ``--concurrency``), and steps at once in a run (``limits.max_concurrency``)."""
MAX_SEED = 2**63 - 1
MAX_TURNS = 1000
"""The ReAct baseline's model turns (``max_turns``)."""
MAX_STALL_ROUNDS = 1000
"""Planning rounds in ``limits`` (``stall_rounds``, ``repeat_rounds``)."""
MAX_FAULT_STORM = 1000
"""A fault profile's ``rate_limit_storm``."""
MAX_TOLERANCE = 1000.0
"""A tolerance of cost or latency (a relative rise: 1000 is 100,000 per cent), or ``latency_floor`` in seconds."""
MAX_NUMBER = 10**12
"""Any other number: a budget's caps, a limit not named above."""


class _Short(reprlib.Repr):
    """A repr that stays short whatever the value: long texts and big containers are cut."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxstring = 60
        self.maxother = 60
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 4

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > MAX_INTEGER_BITS:
            return f"a {x.bit_length():,}-bit number"
        return super().repr_int(x, level)


_SHORT = _Short()


def shown(value: Any) -> str:
    """``value`` for a message: its repr, cut short, and safe for numbers of any size."""
    return _SHORT.repr(value)


def amount(number: float) -> str:
    """A bound as people write it: ``1,000``, ``0.5``."""
    if isinstance(number, int) or float(number).is_integer():
        return f"{int(number):,}"
    return f"{number:g}"


def number_problem(
    value: Any, *, whole: bool, minimum: float = 0, maximum: float = MAX_NUMBER, nullable: bool = False
) -> str | None:
    """What is wrong with ``value`` as a number of this kind and range (None: nothing). Booleans,
    texts, NaN and infinities are never numbers here."""
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        return f"must be a {'whole number' if whole else 'number'}, not {shown(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be finite, not {shown(value)}"
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:
        return f"is too large a number (must be at most {amount(maximum)})"
    if value < minimum:
        return "must not be negative" if minimum == 0 else f"must be at least {amount(minimum)}"
    if value > maximum:
        return f"must be at most {amount(maximum)}"
    return None


def shape_problems(
    data: Any, *, finite: bool = False, code: str = "limit", max_values: int = MAX_VALUES
) -> list[Problem]:
    """What makes ``data`` unsafe to walk: nested deeper than ``MAX_DEPTH`` (a value that contains
    itself is endlessly deep), more than ``max_values`` values (shared values counted each time they
    appear), whole numbers beyond ``MAX_INTEGER_BITS`` bits, and with ``finite`` NaN or infinities.

    The walk is iterative and stops at the first limit, so it is bounded whatever ``data`` is. Where
    a problem is is the path to it, cut after a few levels."""
    found: list[Problem] = []
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(data, 0, ())]
    count = 0
    while stack:
        value, depth, trail = stack.pop()
        count += 1
        if count > max_values:
            message = f"holds more than {max_values:,} values (shared values counted each time they appear)"
            return [Problem(code=code, where="", message=message)]
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, int):
            if value.bit_length() > MAX_INTEGER_BITS:
                found.append(Problem(code=code, where=_path(trail), message=f"is too large a number ({shown(value)})"))
            continue
        if isinstance(value, float):
            if finite and not math.isfinite(value):
                found.append(Problem(code=code, where=_path(trail), message=f"must be finite, not {value}"))
            continue
        if not isinstance(value, Mapping | list | tuple):
            continue
        if depth >= MAX_DEPTH:
            message = f"is nested more than {MAX_DEPTH} levels deep (or refers to itself)"
            return [Problem(code=code, where=_path(trail), message=message)]
        mapping = isinstance(value, Mapping)
        items = list(value.items()) if isinstance(value, Mapping) else list(enumerate(value))
        for key, item in reversed(items):
            if mapping and isinstance(key, int) and key.bit_length() > MAX_INTEGER_BITS:
                found.append(
                    Problem(code=code, where=_path(trail), message=f"has a key too large a number ({shown(key)})")
                )
                continue
            step = (key,) if not mapping else shown(key) if isinstance(key, tuple) else key
            below = trail if len(trail) > _TRAIL else (*trail, step)
            stack.append((item, depth + 1, below))
    return found


_TRAIL = 4
"""Levels a path names before it is cut (``tasks[0].budget.cost``; deeper: ``…``)."""


def _path(trail: tuple[Any, ...]) -> str:
    """A walk's trail as a path: mapping keys joined by dots, list indexes (1-tuples) in brackets."""
    text = ""
    for step in trail[:_TRAIL]:
        if isinstance(step, tuple):
            text += f"[{step[0]}]"
        else:
            name = step if isinstance(step, str) and len(step) <= 40 else shown(step)
            text = f"{text}.{name}" if text else str(name)
    return text + ("…" if len(trail) > _TRAIL else "")
