"""Meeting summarizer: the planner reads a meeting's transcript and its attendees, then hands the
rest of the work to a deterministic workflow that writes the summary and sends it.

What it shows: a workflow (``@workflow``) given to ``Agent(workflows=[...])``; the planner's
``handoff`` whose arguments bind earlier outputs (``${transcript}``); the workflow's output is the
final answer, with no further planner call. The "send" writes a message to an outbox folder; the
worker process dies just after sending, before the result reaches the log, and a new process
resumes the run: the workflow is idempotent, so the hand-off is sent again with the same key and
the outbox ignores it — one message. Last, the run is replayed from its log with no model and no
tool called.

    python examples/meeting_summarizer.py
    python examples/meeting_summarizer.py --model openai:gpt-4.1-mini

With ``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) a real model plans (install the provider's extra
and set its API key); the tools and the workflow stay the offline ones below.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import tempfile
from pathlib import Path

from planexec import Agent, ToolContext, tool, workflow
from planexec.models import Model, ModelRequest
from planexec.store import SQLiteStore
from planexec.testing import FunctionModel, handoff_reply

RUN_ID = "meeting-2026-11-24"
WORKDIR = Path(".")  # set by main(): where the outbox, the run log and the call journal live
CRASH = False  # the worker process dies right after sending (set with --worker)

TRANSCRIPT = """Weekly sync, 24 Nov 2026
Ann: The release candidate passed QA overnight.
Bo: Decision: we ship 2.4 on Friday.
Cy: Action: Bo writes the release notes by Thursday.
Ann: Action: Cy tells support about the new export format.
Bo: Anything else? No. Thanks, all."""


def journal(line: str) -> None:
    """Every call, from every process, in the order they happen."""
    process = "worker " if CRASH else "resumer"
    with (WORKDIR / "calls.log").open("a", encoding="utf-8") as f:
        f.write(f"{process}  {line}\n")


@tool
def read_transcript(meeting: str) -> str:
    """Read the transcript of a recorded meeting.

    Args:
        meeting: the meeting's id
    """
    journal(f"read_transcript {meeting}")
    return TRANSCRIPT


@tool
def attendees(meeting: str) -> list[str]:
    """The e-mail addresses of a meeting's attendees.

    Args:
        meeting: the meeting's id
    """
    journal(f"attendees {meeting}")
    return ["ann@example.com", "bo@example.com", "cy@example.com"]


@workflow(idempotent=True)
def summarize_and_send(transcript: str, recipients: list[str], ctx: ToolContext) -> str:
    """Summarize a meeting transcript (its decisions and action items) and e-mail the summary.

    Args:
        transcript: the meeting's transcript
        recipients: who gets the summary
    """
    title, *lines = transcript.splitlines()
    said = [line.split(":", 1)[1].strip() for line in lines if ":" in line]
    decisions = [s.split(":", 1)[1].strip() for s in said if s.startswith("Decision:")]
    actions = [s.split(":", 1)[1].strip() for s in said if s.startswith("Action:")]
    body = "\n".join(
        [f"Summary of {title}", "Decisions:", *(f"- {d}" for d in decisions), "Actions:", *(f"- {a}" for a in actions)]
    )
    outbox = WORKDIR / "outbox"
    outbox.mkdir(exist_ok=True)
    message = outbox / f"{hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:16]}.eml"
    if message.exists():  # the mail service keeps the keys it has sent: a repeat is ignored
        journal(f"summarize_and_send: key {ctx.idempotency_key} already sent, not sent again")
    else:
        message.write_text(f"To: {', '.join(recipients)}\nIdempotency-Key: {ctx.idempotency_key}\n\n{body}\n")
        journal(f"summarize_and_send: key {ctx.idempotency_key}, sent to {len(recipients)}")
        if CRASH:
            os._exit(1)  # the worker dies before the result reaches the log: the log has the intent only
    return (
        f"Sent the summary of '{title}' to {', '.join(recipients)}: "
        f"{len(decisions)} decision, {len(actions)} action items."
    )


def scripted_planner(request: ModelRequest) -> dict[str, object]:
    """Plans once; a hand-off needs no final answer from the planner."""
    assert request.purpose == "planner.propose", request.purpose
    return handoff_reply(
        "summarize_and_send",
        {"transcript": "${transcript}", "recipients": "${people}"},
        steps=[
            {"id": "transcript", "description": "read the transcript", "tool": "read_transcript",
             "args": {"meeting": RUN_ID}},
            {"id": "people", "description": "look up the attendees", "tool": "attendees",
             "args": {"meeting": RUN_ID}},
        ],
        reason="read the meeting, then the workflow summarizes it and sends the summary",
    )  # fmt: skip


def build_agent(model: str | None, planner: Model | None = None) -> Agent:
    chosen: Model | str = model or planner or FunctionModel(scripted_planner)  # a real one: "openai:gpt-4.1-mini"
    return Agent(
        chosen,
        tools=[read_transcript, attendees],
        workflows=[summarize_and_send],
        store=SQLiteStore(WORKDIR / "runs.db"),
    )


async def worker(options: argparse.Namespace) -> None:
    """The first process: it starts the run, and dies just after sending."""
    agent = build_agent(options.model)
    await agent.run(f"Summarize meeting {RUN_ID} and send the summary to its attendees.", run_id=RUN_ID)


async def main() -> None:
    global WORKDIR, CRASH
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        WORKDIR, CRASH = Path(options.worker), True
        await worker(options)
        return

    with tempfile.TemporaryDirectory(prefix="meeting-") as tmp:
        WORKDIR = Path(tmp)
        command = [sys.executable, __file__, "--worker", tmp, *(["--model", options.model] if options.model else [])]
        died = await asyncio.create_subprocess_exec(*command)
        print(f"worker process exited with status {await died.wait()} while sending")

        planner = FunctionModel(scripted_planner)
        agent = build_agent(options.model, planner)
        run = await agent.resume(RUN_ID)
        plan = run.state.plan
        if plan is not None:
            for step in plan.steps:
                after = f" after {', '.join(step.depends_on)}" if step.depends_on else ""
                print(f"  {step.id:<11} {step.tool} ({step.effect}){after}")
        print("resumed; already done:", sorted(s for s, r in run.state.steps.items() if r.status == "succeeded"))
        result = await run.result()
        print(f"{result.stop.kind}: {result.answer}")
        print(f"planner calls after the crash: {len(planner.calls)}")

        print("calls, both processes:")
        for line in (WORKDIR / "calls.log").read_text(encoding="utf-8").splitlines():
            print("  " + line)
        messages = sorted((WORKDIR / "outbox").glob("*.eml"))
        print(f"outbox: {len(messages)} message")
        for line in messages[0].read_text(encoding="utf-8").splitlines():
            print("  | " + line)

        report = await agent.replay(RUN_ID)
        print(f"replayed: matched={report.matched}, {report.compared} events, no model or tool called")
        await agent.aclose()
        store = agent.store
        if store is not None:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
