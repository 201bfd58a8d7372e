"""A whole suite, under the defence settings asked for, into one report."""

from __future__ import annotations

import time

from planexec.agentdojo._report import DojoReport, summarize
from planexec.agentdojo._run import DojoProgress, DojoSettings, run_cases, settings_problems
from planexec.agentdojo._suites import BENCHMARK_VERSION, load_suite
from planexec.errors import UsageError

__all__ = ["run_suite"]


def _label(model: object, stand_in: str) -> str:
    if model is None:
        return stand_in
    return model if isinstance(model, str) else str(getattr(model, "name", type(model).__name__))


async def run_suite(
    suite: str, settings: DojoSettings | None = None, *, progress: DojoProgress | None = None
) -> DojoReport:
    """Run every case of ``suite`` (banking, slack, travel, workspace) under ``settings`` and
    report per setting. Every problem with the settings is a usage error raised before any run;
    a case that cannot be run is counted (``errors``), not raised."""
    settings = settings or DojoSettings()
    problems = settings_problems(suite, settings)
    if problems:
        raise UsageError("invalid AgentDojo evaluation", problems)
    dojo = load_suite(suite)
    started = time.perf_counter()
    cases, not_injectable = await run_cases(dojo, settings, progress)
    kind = "gullible" if settings.gullible else "honest"
    planner = _label(settings.planner, f"offline {kind} oracle")
    return DojoReport(
        suite=suite,
        version=BENCHMARK_VERSION,
        attack=settings.attack,
        planner=planner,
        executor=_label(settings.executor, planner if settings.planner is not None else f"offline {kind} executor"),
        policy=settings.policy,
        defences=tuple(summarize(name, cases) for name in settings.chosen_defences()),
        not_injectable=tuple(not_injectable),
        cases=tuple(cases),
        seconds=time.perf_counter() - started,
    )
