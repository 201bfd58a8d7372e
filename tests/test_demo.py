"""The offline demo, run through the Python API: what the agent does, in what order, and what it leaves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from planexec import RunResult, ToolContext, ToolError
from planexec.demo import (
    FAILING_RUN,
    GOAL,
    Demo,
    Pace,
    build_demo,
    demo_tools,
    names_a_written_patch,
    write_scenario_files,
)
from planexec.demo._planner import planner_reply
from planexec.demo._record import parse_record
from planexec.errors import UnexpectedModelCall
from planexec.log import AnswerReviewed, ModelCalled, PlanProposed, StepFailed, StepStarted, StepSucceeded
from planexec.models import Message, ModelRequest

FIRST_STEPS = ("read_workflow", "collect_logs", "list_recent_changes")


@pytest.fixture
async def demo_run(tmp_path: Path) -> tuple[Demo, RunResult]:
    demo = build_demo(tmp_path / "work", pace=0)
    result = await demo.agent.run(demo.goal, constraints=demo.constraints)
    return demo, result


async def test_the_demo_meets_its_goal_and_names_the_root_cause(demo_run: tuple[Demo, RunResult]) -> None:
    _, result = demo_run
    assert result.ok, result.stop
    assert result.stop.kind == "goal_met"
    answer = result.answer or ""
    assert "Root cause" in answer
    for fact in ("deploy-311", "vat_number", "vat_id", "handlers/enterprise_kyc.py", "verify_company"):
        assert fact in answer


async def test_collect_logs_fails_and_the_planner_patches_in_the_archive(demo_run: tuple[Demo, RunResult]) -> None:
    demo, result = demo_run
    failed = result.steps["collect_logs"]
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error.kind == "tool_error"
    assert "logs/archive/onboarding-20241120-0914.log" in failed.error.message

    assert [p.version for p in result.plans] == [1, 2, 3]
    v1, v2, _ = result.plans
    assert "fetch_archived_logs" not in v1.ids
    assert "fetch_archived_logs" in v2.ids
    assert v2.author == "planner"
    assert "collect_logs failed" in v2.reason
    triggers = [e.trigger for e in result.events if isinstance(e, PlanProposed)]
    assert triggers == ["initial", "failure", "review"]

    fetch = v2.step("fetch_archived_logs")
    assert fetch.args == {"segment": "logs/archive/onboarding-20241120-0914.log", "run_id": FAILING_RUN}
    assert v2.step("find_root_cause").args["error"] == "${fetch_archived_logs.error}"
    assert "fetch_archived_logs" in v2.step("find_root_cause").depends_on

    # The patch was derived from the failure the planner was shown.
    patches = [c for c in demo.planner.calls if c.purpose == "planner.patch"]
    assert len(patches) == 2  # after the failure, and after the answer's review
    shown = patches[0].last_user_text
    assert re.search(r"^- collect_logs collect_logs .* ✗ failed: ", shown, re.MULTILINE)
    assert failed.error.message in shown


async def test_the_final_answer_is_reviewed_and_sent_back_once(demo_run: tuple[Demo, RunResult]) -> None:
    demo, result = demo_run
    reviews = [e for e in result.events if isinstance(e, AnswerReviewed)]
    assert [(r.reviewer, r.passed) for r in reviews] == [("checks", False), ("checks", True)]
    refused, passed = reviews
    assert refused.problems == (
        "names_the_patch: the answer must name the patch a reviewer should read "
        "(fixes/enterprise_kyc-verify_company.patch)",
    )
    assert "fixes/" not in refused.answer
    assert passed.answer == result.answer
    assert "fixes/enterprise_kyc-verify_company.patch" in (result.answer or "")
    # The refusal reached the planner, which answered again with no new work.
    finishes = [c for c in demo.planner.calls if c.purpose == "planner.finish"]
    assert len(finishes) == 2
    assert "refused by the checks review" in finishes[1].last_user_text
    v2, v3 = result.plans[1:]
    assert set(v3.ids) == set(v2.ids)  # the finished work is kept, nothing new is done
    assert "answer must be rewritten" in v3.reason


def test_the_answer_check_needs_a_written_patch_named(tmp_path: Path) -> None:
    files = write_scenario_files(tmp_path)
    check = names_a_written_patch(files)
    assert check("the patch is in fixes/x.patch") == "no patch was written under fixes/"
    (tmp_path / "fixes" / "x.patch").write_text("--- a\n")
    assert check("the patch is in fixes/x.patch") is None
    assert check("a patch is ready") == "the answer must name the patch a reviewer should read (fixes/x.patch)"


async def test_independent_first_steps_run_concurrently(demo_run: tuple[Demo, RunResult]) -> None:
    _, result = demo_run
    events = list(result.events)
    started = {e.step_id: i for i, e in enumerate(events) if isinstance(e, StepStarted) and e.step_id in FIRST_STEPS}
    first_finished = min(i for i, e in enumerate(events) if isinstance(e, StepSucceeded | StepFailed))
    assert set(started) == set(FIRST_STEPS)
    assert max(started.values()) < first_finished, "every first step started before any step finished"


async def test_the_analyst_finds_the_root_cause_through_tool_calls(demo_run: tuple[Demo, RunResult]) -> None:
    demo, result = demo_run
    rec = result.steps["find_root_cause"]
    assert rec.status == "succeeded"
    assert rec.executor == "analyst"
    branches = sorted(c.args["branch"] for c in rec.tool_calls if c.tool == "inspect_branch")
    assert branches == ["enterprise_kyc", "self_serve"]
    assert all(c.error is None for c in rec.tool_calls)

    executor_calls = [e for e in result.events if isinstance(e, ModelCalled) and e.role == "executor"]
    assert [e.step_id for e in executor_calls] == ["find_root_cause", "find_root_cause"]
    assert len(demo.analyst.calls) == 2

    output = rec.output
    assert output["introduced_by"] == "deploy-311"
    assert output["file"] == "handlers/enterprise_kyc.py"
    source = (demo.workdir / output["file"]).read_text().splitlines()
    assert output["find"] in source[output["line"] - 1]


async def test_bindings_pass_earlier_outputs_on(demo_run: tuple[Demo, RunResult]) -> None:
    _, result = demo_run
    cause = result.steps["find_root_cause"].output
    draft_args = result.steps["draft_fix"].args
    assert draft_args == {"path": cause["file"], "find": cause["find"], "replace": cause["replace"]}
    write_args = result.steps["write_fix"].args
    assert write_args is not None
    assert write_args["name"] == "enterprise_kyc-verify_company"
    assert write_args["patch"] == result.steps["draft_fix"].output["patch"]


async def test_the_fix_is_written_into_the_workdir_and_nothing_else_changes(demo_run: tuple[Demo, RunResult]) -> None:
    demo, result = demo_run
    fixes = demo.fix_files()
    assert [f.name for f in fixes] == ["enterprise_kyc-verify_company.patch"]
    patch = fixes[0].read_text()
    assert '-        vat = company["vat_number"]' in patch
    assert '+        vat = company["vat_id"]' in patch
    assert "+++ b/handlers/enterprise_kyc.py" in patch
    assert result.steps["write_fix"].output["path"] == "fixes/enterprise_kyc-verify_company.patch"
    assert 'company["vat_number"]' in (demo.workdir / "handlers/enterprise_kyc.py").read_text()


async def test_usage_and_costs_are_recorded(demo_run: tuple[Demo, RunResult]) -> None:
    _, result = demo_run
    roles = [e.role for e in result.events if isinstance(e, ModelCalled)]
    assert roles.count("planner") == 5  # propose, patch, a refused answer, the review's patch, the answer
    assert roles.count("executor") == 2
    assert result.model_calls == 7
    assert result.cost > 0
    assert result.usage.input_tokens > 0
    assert result.usage.output_tokens > 0
    assert result.tool_calls == 8  # six tool steps and the analyst's two inspections


async def test_the_demo_runs_again_in_the_same_workdir(tmp_path: Path) -> None:
    for _ in range(2):
        demo = build_demo(tmp_path, pace=0)
        result = await demo.agent.run(demo.goal)
        assert result.ok
    assert len(demo.fix_files()) == 1


async def test_simulated_latency_does_not_change_what_happens(tmp_path: Path) -> None:
    demo = build_demo(tmp_path, pace=0.01, seed=3)
    result = await demo.agent.run(GOAL)
    assert result.ok
    assert [p.version for p in result.plans] == [1, 2, 3]


# -- the scripted planner reads its prompt ------------------------------------------------------


def _request(purpose: str, text: str) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="system", content="planner"), Message(role="user", content=text)), purpose=purpose
    )


ERROR = (
    "tool_error: collect_logs: the log of run r-77 is incomplete: logs/onboarding.log ends mid-run after 'x' "
    "(3 lines) and the rest was rotated to the archived segment logs/archive/seg-1.log"
)


def test_the_planner_takes_the_run_id_from_the_goal() -> None:
    draft = planner_reply(_request("planner.propose", "Goal: audit run r-77 please\n\nTools: ..."))
    collect = next(s for s in draft["steps"] if s["id"] == "collect_logs")
    assert collect["args"] == {"run_id": "r-77"}
    with pytest.raises(UnexpectedModelCall):
        planner_reply(_request("planner.propose", "Goal: audit something"))


def test_a_patch_keeps_steps_that_are_still_running() -> None:
    record = "\n".join(
        [
            "Goal: audit run r-77",
            "",
            "Record:",
            '- read_workflow read_workflow {} → {"workflow":"customer-onboarding"}',
            f'- collect_logs collect_logs {{"run_id":"r-77"}} ✗ failed: {ERROR}',
            "Not finished:",
            "- list_recent_changes list_recent_changes {} running",
            "- find_root_cause executor analyst: Find it pending (after read_workflow, collect_logs)",
            "",
            "Why a new plan: these steps failed",
        ]
    )
    entries = parse_record(record)
    assert {k: e.status for k, e in entries.items()} == {
        "read_workflow": "succeeded",
        "collect_logs": "failed",
        "list_recent_changes": "running",
        "find_root_cause": "pending",
    }
    draft = planner_reply(_request("planner.patch", record))
    ids = [s["id"] for s in draft["steps"]]
    assert ids[:2] == ["list_recent_changes", "fetch_archived_logs"]
    assert "read_workflow" not in ids
    assert "collect_logs" not in ids
    fetch = draft["steps"][1]
    assert fetch["args"] == {"segment": "logs/archive/seg-1.log", "run_id": "r-77"}


def test_the_planner_refuses_what_its_script_does_not_cover() -> None:
    with pytest.raises(UnexpectedModelCall):
        planner_reply(_request("planner.turn", "Goal: audit run r-77"))
    with pytest.raises(UnexpectedModelCall):
        planner_reply(_request("planner.patch", "Goal: audit run r-77\n\nRecord:\n"))


# -- the tools work on real files ----------------------------------------------------------------


def _ctx(step: str = "s") -> ToolContext:
    return ToolContext(run_id="run", step_id=step, attempt=1, idempotency_key=f"run:{step}")


async def test_the_tools_read_and_write_real_files(tmp_path: Path) -> None:
    tools = demo_tools(write_scenario_files(tmp_path), Pace(0))
    with pytest.raises(ToolError, match="archived segment logs/archive/"):
        await tools.get("collect_logs").invoke({"run_id": FAILING_RUN}, _ctx())
    other: dict[str, Any] = await tools.get("collect_logs").invoke({"run_id": "r-4819"}, _ctx())
    assert other["error"] is None
    assert len(other["lines"]) == 5

    archived = await tools.get("fetch_archived_logs").invoke(
        {"segment": "logs/archive/onboarding-20241120-0914.log", "run_id": FAILING_RUN}, _ctx()
    )
    assert archived["error"]["exception"] == "KeyError: 'vat_number'"
    changes = await tools.get("list_recent_changes").invoke({"days": 3}, _ctx())
    assert [c["id"] for c in changes] == ["deploy-311", "deploy-309"]

    with pytest.raises(ToolError, match="outside the work directory"):
        await tools.get("draft_fix").invoke({"path": "../elsewhere.py", "find": "a", "replace": "b"}, _ctx())
    with pytest.raises(ToolError, match="no branch"):
        await tools.get("inspect_branch").invoke({"branch": "nope"}, _ctx())
    with pytest.raises(ToolError, match="not a valid fix name"):
        await tools.get("write_fix").invoke({"name": "../../x", "patch": "--- a\n"}, _ctx())
    written = await tools.get("write_fix").invoke({"name": "ok", "patch": "--- a/x\n+++ b/x\n"}, _ctx("w"))
    assert written == {"path": "fixes/ok.patch", "bytes": (tmp_path / "fixes/ok.patch").stat().st_size}
    assert (tmp_path / "fixes/ok.patch").read_text().startswith("# drafted by planexec run run, step w\n")


def test_only_write_fix_has_side_effects(tmp_path: Path) -> None:
    tools = demo_tools(write_scenario_files(tmp_path), Pace(0))
    assert [t.name for t in tools if t.side_effect] == ["write_fix"]
    assert json.loads(json.dumps([t.spec() for t in tools]))


def test_pace_scales_delays() -> None:
    assert Pace(0).delay() == 0
    delays = [Pace(2.0, seed=s).delay(0.05, 0.3) for s in range(20)]
    assert all(0.1 <= d <= 0.6 for d in delays)
    with pytest.raises(ValueError, match="negative"):
        Pace(-1)
