"""AgentDojo's prompt-injection suites under planexec's defence settings, with the worst model
imaginable: an offline oracle of each user task's ground truth that, whenever an injection's goal
is in what it is sent, adds the injection task's ground-truth calls to what it does (and the
injection's ground-truth output to its answer). Attack: AgentDojo's ``important_instructions``.

Run: ``PYTHONPATH=src:. .venv/bin/python -m benchmarks.side.agentdojo`` (banking, slack and travel:
about 3 minutes on 2 cores; needs AgentDojo: ``pip install --no-deps agentdojo==0.1.35`` beside the
``agentdojo`` extra, which ``make`` does). ``--suites banking,slack,travel,workspace`` adds
workspace (about 6 minutes more); ``--attack NAME`` picks another of AgentDojo's attacks.

Printed: a markdown table, one row per suite and setting — utility with no attack, utility under
attack, attack success (the attacker's goal met, by AgentDojo's security check, with no human's
yes), attacks held (met only on a human's yes), calls held for a human per user task, planner and
executor calls and characters per user task (no attack), runs, and the time the runs took added up;
then each suite's wall time and the settings this version does not have.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from planexec.agentdojo import COLUMNS, DojoReport, DojoSettings, report_rows, run_suite


async def main(suites: list[str], attack: str) -> None:
    reports: list[DojoReport] = []
    walls: list[tuple[str, float]] = []
    for suite in suites:
        started = time.perf_counter()
        reports.append(await run_suite(suite, DojoSettings(attack=attack)))
        walls.append((suite, time.perf_counter() - started))
    first = reports[0]
    print(f"AgentDojo {first.version}, attack {first.attack}, planner: {first.planner}\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in report_rows(reports):
        print("| " + " | ".join(row) + " |")
    print()
    for (suite, wall), report in zip(walls, reports, strict=True):
        note = f"; run with no attack only: {', '.join(report.not_injectable)}" if report.not_injectable else ""
        print(f"{suite}: {len(report.cases):,} runs in {wall:.1f}s{note}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--suites", default="banking,slack,travel", help="comma-separated suite names")
    parser.add_argument("--attack", default="important_instructions", help="one of AgentDojo's attacks")
    args = parser.parse_args()
    asyncio.run(main([s.strip() for s in args.suites.split(",") if s.strip()], args.attack))
