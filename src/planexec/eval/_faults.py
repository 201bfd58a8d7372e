"""Fault profiles in an evaluation: checked when the suite is read, and built afresh for every run
with a seed derived from the evaluation's seed, the task and the repetition — so an evaluation
under faults gives the same faults every time, whatever the concurrency."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from planexec._errors import Problem
from planexec.eval._suite import FaultSpec

if TYPE_CHECKING:
    from planexec.faults import FaultProfile

__all__ = ["describe_faults", "fault_problems", "profile_for", "read_faults_option", "run_seed"]


def run_seed(seed: int, task_id: str, index: int) -> int:
    """The seed of one run: stable for (seed, task, repetition), different between them."""
    digest = hashlib.sha256(f"{seed}\x00{task_id}\x00{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def profile_for(spec: FaultSpec, seed: int) -> FaultProfile:
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
    try:
        FaultProfile.from_mapping(dict(spec))
    except Exception as e:
        found = getattr(e, "problems", ())
        if not found:
            return [Problem(code="faults", where=where, message=str(e))]
        return [
            Problem(code="faults", where=f"{where}.{p.where}" if p.where else where, message=p.message) for p in found
        ]
    return []


def read_faults_option(value: str) -> FaultSpec:
    """``--faults``: a file (YAML or JSON mapping of a profile's fields) when one exists at that path,
    else a profile's name. A file that cannot be read raises ``ValueError``."""
    path = Path(value)
    if not path.is_file():
        return value
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read {value}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{value} must hold a mapping of fault profile fields")
    return data


def describe_faults(spec: FaultSpec | None) -> str | dict[str, Any] | None:
    """The spec as JSON data, for the report."""
    if spec is None or isinstance(spec, str):
        return spec
    data: dict[str, Any] = json.loads(json.dumps(dict(spec), default=str))
    return data
