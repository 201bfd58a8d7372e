"""Git agent: look at a repository's uncommitted change through an MCP server (mcp-server-git), then
commit it — but only once a human said yes.

What it shows: an MCP server's tools in a plan (``MCPToolset`` over stdio, started and stopped by
the agent); three read-only tools (``readOnlyHint``) run at once, since nothing orders them; two
write tools made to wait for approval with ``MCPTool(requires_approval=True)``; an approver
callback that is shown what it is asked; the run's log as a timeline.

    python examples/git_agent.py
    python examples/git_agent.py --model openai:gpt-4.1-mini

It works in a repository it creates in a temporary folder, with one commit and one edited file,
and needs git and mcp-server-git (``pip install mcp-server-git``, or the ``dev`` extra). With
``--model`` (or ``PLANEXEC_EXAMPLE_MODEL``) a real model plans (install the provider's extra and
set its API key); the tools stay those of the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from planexec import Agent, ApprovalRequest, Approvals
from planexec.log import ApprovalDecided, ApprovalRequested, StepStarted, StepSucceeded
from planexec.mcp import MCPStdio, MCPTool, MCPToolset
from planexec.models import Model, ModelRequest
from planexec.testing import FunctionModel

MESSAGE = "Say how to install the tool"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_repository(repo: Path) -> None:
    """A repository with one commit, and a change to its README not yet staged."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Example Agent")
    git(repo, "config", "user.email", "agent@example.com")
    (repo / "README.md").write_text("# tool\n\nA small tool.\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "First version")
    (repo / "README.md").write_text("# tool\n\nA small tool.\n\nInstall it with `pip install tool`.\n")


def scripted_planner(repo: Path) -> FunctionModel:
    """A planner that reads its prompt the way a model would: first a plan, then the answer."""
    where = {"repo_path": str(repo)}

    def reply(request: ModelRequest) -> dict[str, object]:
        if request.purpose == "planner.propose":
            return {
                "steps": [  # three reads, none waiting for another; then the writes, after them
                    {"id": "status", "description": "see what changed", "tool": "git_status", "args": where},
                    {"id": "history", "description": "read the recent history", "tool": "git_log",
                     "args": {**where, "max_count": 5}},
                    {"id": "diff", "description": "read the change", "tool": "git_diff_unstaged", "args": where},
                    {"id": "stage", "description": "stage the README", "tool": "git_add",
                     "args": {**where, "files": ["README.md"]}, "depends_on": ["status", "diff"]},
                    {"id": "commit", "description": "commit the change", "tool": "git_commit",
                     "args": {**where, "message": MESSAGE}, "depends_on": ["stage", "history"]},
                ]
            }  # fmt: skip
        return {"answer": f"Committed the README's install line as '{MESSAGE}'."}

    return FunctionModel(reply)


async def approve(request: ApprovalRequest) -> bool:
    """The human at the desk: shown each write before it runs, says yes."""
    step = request.step
    if step is not None:
        print(f"approver: asked to run {step.tool} {step.args} ({request.reason}) — yes")
    return True


def git_server() -> str:
    found = Path(sys.executable).with_name("mcp-server-git")
    path = str(found) if found.is_file() else shutil.which("mcp-server-git")
    if path is None or shutil.which("git") is None:
        raise SystemExit("this example needs git and mcp-server-git: pip install mcp-server-git")
    return path


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=os.environ.get("PLANEXEC_EXAMPLE_MODEL"), help="e.g. openai:gpt-4.1-mini")
    options = parser.parse_args()
    server = git_server()

    with tempfile.TemporaryDirectory(prefix="git-agent-") as workdir:
        repo = Path(workdir) / "repo"
        make_repository(repo)
        gated = {"git_add": MCPTool(requires_approval=True), "git_commit": MCPTool(requires_approval=True)}
        tools = MCPToolset(server=MCPStdio(command=server, args=("--repository", str(repo))), tools=gated)
        planner: Model | str = options.model or scripted_planner(repo)
        agent = Agent(planner, tools=[tools], approvals=Approvals(approver=approve), store=None)
        goal = f"Commit the uncommitted change in the git repository at {repo}, with a message that says what it does."
        async with agent:  # starts the server, and stops it at the end
            result = await agent.run(goal)

        print("plan:")
        for step in result.plans[-1].steps if result.plans else ():
            after = f" after {', '.join(step.depends_on)}" if step.depends_on else ""
            print(f"  {step.id:8} {step.tool}{after}")
        print("timeline (from the run's log):")
        start, asked_about = result.events[0].at, {}
        for event in result.events:
            if isinstance(event, ApprovalRequested):
                asked_about[event.approval_id] = event.step_id
            if isinstance(event, StepStarted | StepSucceeded):
                print(f"  {event.at - start:6.3f}s {event.kind:18} {event.step_id}")
            elif isinstance(event, ApprovalRequested | ApprovalDecided):
                print(f"  {event.at - start:6.3f}s {event.kind:18} {asked_about[event.approval_id]}")
        for step_id in ("status", "history", "diff", "commit"):
            print(f"output of {step_id}:")
            print("  " + str(result.outputs.get(step_id, "")).strip().replace("\n", "\n  "))
        print(f"{result.stop.kind}: {result.answer or result.stop.detail}")
        print("last commit: " + git(repo, "log", "-1", "--format=%s").strip())
        print(git(repo, "show", "--stat", "--format=", "HEAD").strip())


if __name__ == "__main__":
    asyncio.run(main())
