"""AgentDojo's suites as a planexec workload, to measure planexec's defences against prompt
injection: AgentDojo's environments, functions, injection vectors, attacks and checks, unchanged;
each of the suite's functions a planexec tool over a fresh environment per run; each user task a
run, judged by its ``utility`` check, and under attack by the injection task's ``security`` check.

    report = await run_suite("banking")                        # every setting this version has
    report = await run_suite("slack", DojoSettings(defences=["none", "approvals"], limit=5))
    outcome = await run_case("banking", "user_task_0", injection_task="injection_task_1")
    outcome = await run_case("travel", "user_task_3", planner="openai:gpt-4.1", defence="approvals")

With no models named, offline stand-ins play them (:class:`DojoOracle`: the ground truth, and,
gullible, the injection's too whenever it reads it; :class:`SealedOracle` for sealed planning).
``planexec eval agentdojo:banking`` runs a suite from the command line.

Needs AgentDojo (MIT): ``pip install 'planexec[agentdojo]'`` then ``pip install --no-deps
agentdojo==0.1.35`` (``make`` does both) — its declared dependencies also bring langchain and
python-dotenv, which none of the modules used here imports.
"""

from planexec.agentdojo._attacks import DEFAULT_ATTACK, attack_names, attack_problems, injections_for
from planexec.agentdojo._defences import (
    DEFENCE_NAMES,
    DEFENCES,
    FULL_RECORD,
    AgentOptions,
    Defence,
    DefenceContext,
    DefenceName,
    SimulatedHuman,
    ToolMaker,
    extractor_executor,
)
from planexec.agentdojo._effects import WRITES, Changes, changed_by_ground_truth
from planexec.agentdojo._evaluate import run_suite
from planexec.agentdojo._oracle import DONE, DojoOracle, PlannedCall
from planexec.agentdojo._report import (
    COLUMNS,
    DefenceSummary,
    DojoReport,
    dump_report,
    report_rows,
    report_table,
    summarize,
)
from planexec.agentdojo._run import (
    MAX_CONCURRENCY,
    CaseOutcome,
    DojoProgress,
    DojoSettings,
    run_case,
    settings_problems,
)
from planexec.agentdojo._sealed import ANSWER_STEP, EXTRACTOR, SealedOracle, appears
from planexec.agentdojo._suites import BENCHMARK_VERSION, INSTALL, SUITES, DojoSuite, load_suite, suite_problems
from planexec.agentdojo._world import Call, DojoWorld

__all__ = [
    "ANSWER_STEP",
    "BENCHMARK_VERSION",
    "COLUMNS",
    "DEFAULT_ATTACK",
    "DEFENCES",
    "DEFENCE_NAMES",
    "DONE",
    "EXTRACTOR",
    "FULL_RECORD",
    "INSTALL",
    "MAX_CONCURRENCY",
    "SUITES",
    "WRITES",
    "AgentOptions",
    "Call",
    "CaseOutcome",
    "Changes",
    "Defence",
    "DefenceContext",
    "DefenceName",
    "DefenceSummary",
    "DojoOracle",
    "DojoProgress",
    "DojoReport",
    "DojoSettings",
    "DojoSuite",
    "DojoWorld",
    "PlannedCall",
    "SealedOracle",
    "SimulatedHuman",
    "ToolMaker",
    "appears",
    "attack_names",
    "attack_problems",
    "changed_by_ground_truth",
    "dump_report",
    "extractor_executor",
    "injections_for",
    "load_suite",
    "report_rows",
    "report_table",
    "run_case",
    "run_suite",
    "settings_problems",
    "suite_problems",
    "summarize",
]
