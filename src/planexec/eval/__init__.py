"""Evaluation: run a suite of golden tasks against planexec (or the ReAct baseline), check each
run's tools and answer, measure it, and compare the report with a baseline.

    suite = load_suite("suite.yaml")
    report = await run_suite(suite, EvalSettings(concurrency=8))
    comparison = compare_reports(report, load_report(json.load(open("base.json"))), suite.tolerances)

``planexec eval SUITE.yaml`` does the same from the command line; ``planexec eval bfcl:multi_turn_base``
runs BFCL's multi-turn tasks.
"""

from planexec.eval._compare import Comparison, Regression, compare_reports
from planexec.eval._faults import fault_problems, read_faults_option, seeded_profile
from planexec.eval._limits import MAX_CONCURRENCY, MAX_SEED, MAX_TOLERANCE
from planexec.eval._load import SUITE_FORMAT_VERSION, SuiteInvalid, load_suite, suite_from_mapping
from planexec.eval._matchers import CheckOutcome, check_answer, judge_answer, match_tools
from planexec.eval._metrics import RunMetrics, Trace, trace_of
from planexec.eval._report import (
    REPORT_FORMAT,
    REPORT_VERSION,
    EvalReport,
    RunReport,
    Summary,
    TaskReport,
    dump_report,
    json_text,
    load_report,
    read_report,
    report_text,
)
from planexec.eval._runner import EvalSettings, ProgressSink, run_suite
from planexec.eval._suite import (
    AGENT_KINDS,
    AgentKind,
    AnswerExpectation,
    EnsembleSpec,
    FaultSpec,
    JudgeCheck,
    MatchMode,
    Suite,
    Task,
    Tolerances,
    ToolExpectation,
)
from planexec.eval._table import failure_lines, report_tables
from planexec.eval._world import TaskWorld

__all__ = [
    "AGENT_KINDS",
    "MAX_CONCURRENCY",
    "MAX_SEED",
    "MAX_TOLERANCE",
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "SUITE_FORMAT_VERSION",
    "AgentKind",
    "AnswerExpectation",
    "CheckOutcome",
    "Comparison",
    "EnsembleSpec",
    "EvalReport",
    "EvalSettings",
    "FaultSpec",
    "JudgeCheck",
    "MatchMode",
    "ProgressSink",
    "Regression",
    "RunMetrics",
    "RunReport",
    "Suite",
    "SuiteInvalid",
    "Summary",
    "Task",
    "TaskReport",
    "TaskWorld",
    "Tolerances",
    "ToolExpectation",
    "Trace",
    "check_answer",
    "compare_reports",
    "dump_report",
    "failure_lines",
    "fault_problems",
    "json_text",
    "judge_answer",
    "load_report",
    "load_suite",
    "match_tools",
    "read_faults_option",
    "read_report",
    "report_tables",
    "report_text",
    "run_suite",
    "seeded_profile",
    "suite_from_mapping",
    "trace_of",
]
