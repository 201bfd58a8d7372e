"""Fault profiles in an evaluation: checked when the suite is read, and built afresh for every run
with a seed derived from the evaluation's seed, the task and the repetition — so an evaluation
under faults gives the same faults every time, whatever the concurrency."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planexec.errors import Problem, UsageError
from planexec.eval._files import read_yaml
from planexec.eval._limits import MAX_FAULT_STORM, MAX_SEED, MAX_SUITE_BYTES, number_problem, shape_problems
from planexec.eval._suite import FaultSpec

if TYPE_CHECKING:
    from planexec.faults import FaultProfile

__all__ = ["describe_faults", "fault_problems", "read_faults_option", "run_seed", "seeded_profile"]


def run_seed(seed: int, task_id: str, index: int) -> int:
    """The seed of one run: stable for (seed, task, repetition), different between them."""
    digest = hashlib.sha256(f"{seed}\x00{task_id}\x00{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def seeded_profile(spec: FaultSpec, seed: int) -> FaultProfile:
    """The profile ``spec`` names, seeded with ``seed`` (a mapping's own seed is replaced)."""
    from planexec.faults import FaultProfile

    if isinstance(spec, str):
        return FaultProfile.named(spec, seed=seed)
    return FaultProfile.from_mapping({**spec, "seed": seed})


def fault_problems(spec: Any, where: str) -> list[Problem]:
    """What is wrong with a fault spec: an unknown profile name, or fields that do not fit."""
    try:
        from planexec.faults import PROFILES, FaultProfile
    except ImportError as e:
        return [Problem(code="faults", where=where, message=f"fault profiles are not available: {e}")]
    if isinstance(spec, str):
        if spec in PROFILES:
            return []
        known = ", ".join(sorted(PROFILES))
        return [Problem(code="faults", where=where, message=f"unknown fault profile {spec!r} (known: {known})")]
    if not isinstance(spec, Mapping):
        return [Problem(code="faults", where=where, message="must be a profile name or a mapping of its fields")]
    unsafe = shape_problems(spec, code="faults")
    if unsafe:
        return [
            Problem(code=p.code, where=f"{where}.{p.where}" if p.where else where, message=p.message) for p in unsafe
        ]
    problems: list[Problem] = []
    fields = dict(spec)
    for key, maximum in _BOUNDED.items():
        message = number_problem(fields.get(key, 0), whole=True, maximum=maximum)
        if message is not None:
            problems.append(Problem(code="faults", where=f"{where}.{key}", message=message))
            del fields[key]
    try:
        FaultProfile.from_mapping(fields)
    except Exception as e:
        found = getattr(e, "problems", ())
        if not found:
            return [*problems, Problem(code="faults", where=where, message=str(e))]
        problems += [
            Problem(code="faults", where=f"{where}.{p.where}" if p.where else where, message=p.message) for p in found
        ]
    return problems


_BOUNDED = {"rate_limit_storm": MAX_FAULT_STORM, "seed": MAX_SEED}
"""A profile's counts and their maximum: checked here, as the profile itself sets none."""


def read_faults_option(value: str) -> FaultSpec:
    """``--faults``: a file (YAML or JSON mapping of a profile's fields) when one exists at that path,
    else a profile's name. A file that cannot be read, or goes beyond the limits of a suite file,
    raises :class:`UsageError`."""
    path = Path(value)
    if not path.is_file():
        return value
    data, duplicates = read_yaml(path, limit=MAX_SUITE_BYTES, what=f"the fault profile {value}")
    if duplicates:
        raise UsageError(f"the fault profile {value} gives a key twice", duplicates)
    if not isinstance(data, dict):
        raise UsageError(f"{value} must hold a mapping of fault profile fields")
    return data


def describe_faults(spec: FaultSpec | None) -> str | dict[str, Any] | None:
    """The spec as JSON data, for the report."""
    if spec is None or isinstance(spec, str):
        return spec
    data: dict[str, Any] = json.loads(json.dumps(dict(spec), default=str))  # checked by fault_problems: bounded
    return data
