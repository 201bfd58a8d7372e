"""Every example in examples/ runs offline, as a process, and prints what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

EXPECTED: dict[str, list[str]] = {
    "research_brief.py": [
        "draft         succeeded",
        "brief: Modern air-source heat pumps keep a COP of 2 to 3",
        "stop: goal_met; model calls 3, tool calls 4",
    ],
    "refund_with_approval.py": [
        "agent: waiting",
        "agent: refunds made so far: 0",
        "question ",
        "supervisor: planexec approve refund-A-1042",
        "agent: goal_met — Order A-1042 was refunded in full (84.50 EUR).",
        "payment service calls: [('A-1042', 84.5, 'refund-A-1042:refund:v1')]",
    ],
    "resumable_pipeline.py": [
        "worker process exited with status 1 while loading",
        "resumed; already done: ['batches', 'load_a', 'rows']",
        "worker   load load_b: key import-2026-11-24:load_b:v1, 2 rows",
        "resumer  load load_b: key import-2026-11-24:load_b:v1 seen before, ignored",
        "goal_met: Imported 6 rows in 3 batches.",
        "warehouse: 3 batches, 6 rows",
    ],
    "parallel_fetch.py": [
        "check_mail             succeeded attempts 3",
        "check_reports          failed    attempts 1 (timeout: health timed out after 0.5s)",
        "check_reports_mirror   succeeded attempts 1",
        "goal_met: 7 services are up",
    ],
    "git_agent.py": [
        "approver: asked to run git_add ",
        "approver: asked to run git_commit ",
        "  stage    git_add after status, diff",
        "  commit   git_commit after stage, history",
        "+Install it with `pip install tool`.",
        "goal_met: Committed the README's install line as 'Say how to install the tool'.",
        "last commit: Say how to install the tool",
        "README.md | 2 ++",
    ],
    "meeting_summarizer.py": [
        "worker process exited with status 1 while sending",
        "  handoff     summarize_and_send (write) after transcript, people",
        "resumed; already done: ['people', 'transcript']",
        "goal_met: Sent the summary of 'Weekly sync, 24 Nov 2026' to ann@example.com, bo@example.com, "
        "cy@example.com: 1 decision, 2 action items.",
        "planner calls after the crash: 0",
        "worker   summarize_and_send: key meeting-2026-11-24:handoff:v1, sent to 3",
        "resumer  summarize_and_send: key meeting-2026-11-24:handoff:v1 already sent, not sent again",
        "outbox: 1 message",
        "  | - we ship 2.4 on Friday.",
        "replayed: matched=True",
    ],
    "replay_a_run.py": [
        "recorded: goal_met",
        "replayed: matched=True",
        "tool calls so far: {'open_tickets': 1, 'classify': 1} (the replay called none)",
        "plan v2: the classifier failed; keyword rules are good enough for today",
        "'keyword_rules': 1} (only the fork's new step ran)",
        "edited log: matched=False",
        "divergence: event ",
    ],
}


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PLANEXEC_EXAMPLE"))}
    env |= {"PLANEXEC_STORE": "memory://", "PLANEXEC_ALLOW_MODEL_REQUESTS": "0", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_every_example_is_checked_and_listed() -> None:
    on_disk = {p.name for p in EXAMPLES.glob("*.py")}
    assert on_disk == set(EXPECTED)
    assert len(on_disk) >= 5
    listing = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    docs = (ROOT / "docs" / "examples.md").read_text(encoding="utf-8")
    for name in on_disk:
        assert f"]({name})" in listing, name
        assert name in docs, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline(name: str, tmp_path: Path) -> None:
    done = run_example(name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for line in EXPECTED[name]:
        assert line in done.stdout, (line, done.stdout)
    assert list(tmp_path.iterdir()) == []  # nothing left behind in the working directory


def test_the_refund_can_be_refused(tmp_path: Path) -> None:
    done = run_example("refund_with_approval.py", "--reject", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "supervisor: planexec reject refund-A-1042" in done.stdout
    assert "agent: rejected — step refund: a human rejected the step: the damage is not documented" in done.stdout
    assert "payment service calls: []" in done.stdout


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_switches_to_a_real_provider(name: str, tmp_path: Path) -> None:
    """With --model, the example asks the real provider: here, with no key set, the run is refused
    before anything is sent, naming the key it needs."""
    done = run_example(name, "--model", "openai:gpt-4.1-mini", cwd=tmp_path)
    assert done.returncode != 0
    assert "OPENAI_API_KEY" in done.stderr, done.stderr


TIMELINE = re.compile(r"^ +(\d+\.\d+)s (\w+) +(\w+)$", re.MULTILINE)


def test_the_git_agent_reads_at_once_and_commits_only_after_approval(tmp_path: Path) -> None:
    done = run_example("git_agent.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    timeline = [(kind, step) for _at, kind, step in TIMELINE.findall(done.stdout)]
    reads = {"status", "history", "diff"}
    started = [i for i, (kind, step) in enumerate(timeline) if kind == "step_started" and step in reads]
    finished = [i for i, (kind, step) in enumerate(timeline) if kind == "step_succeeded" and step in reads]
    assert len(started) == len(finished) == 3
    assert max(started) < min(finished)  # all three under way at once: nothing ordered them
    for write in ("stage", "commit"):
        asked = timeline.index(("approval_requested", write))
        decided = timeline.index(("approval_decided", write))
        assert asked < decided < timeline.index(("step_started", write))
    assert timeline.index(("step_succeeded", "stage")) < timeline.index(("step_started", "commit"))
    assert timeline[-1] == ("step_succeeded", "commit")
