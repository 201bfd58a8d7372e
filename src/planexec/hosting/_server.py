"""planexec as an MCP server: a host hands it a goal (``run_goal``), follows the steps as progress
notifications, reads runs (``list_runs``, ``show_run``) and answers what a run asks a human
(``answer_question``, then ``resume_run``).

Annotations are evaluated when the tools are defined (no ``from __future__ import annotations``
here): the SDK reads each tool's signature for its input schema, and ``Context`` is imported only
when a server is made, since ``mcp`` is an optional extra.
"""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field

from planexec import __version__
from planexec._util.extras import install_hint
from planexec.errors import Problem, StoreError, UsageError
from planexec.hosting._arguments import strict_server_class
from planexec.hosting._host import (
    MAX_CONSTRAINT_CHARS,
    MAX_CONSTRAINTS,
    MAX_GOAL_CHARS,
    MAX_LIST,
    MAX_TEXT_CHARS,
    AgentSource,
    RunHost,
)
from planexec.hosting._views import (
    AnswerView,
    OutcomeView,
    RunDetailView,
    RunListView,
    answer_text,
    detail_text,
    list_text,
    outcome_text,
)
from planexec.store import RunStore

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.types import CallToolResult, ToolAnnotations

__all__ = ["mcp_server", "require_mcp"]

MAX_ID_CHARS = 256

INSTRUCTIONS = """\
planexec runs multi-step goals with a planner-executor agent: run_goal makes a plan of steps, runs \
them with the agent's tools (in parallel where it can), checks every result, patches the plan when \
a step fails and returns the answer. Every run is bounded by the agent's budgets and saved in a \
store: list_runs and show_run read the runs. When a run waits for a human (a plan or a step to \
approve, a question from the planner, a result to review), its pending questions come back with \
their ids: ask the user, record the answer with answer_question, then go on with resume_run."""

RUN_GOAL = """\
Run a goal with the configured planner-executor agent, and wait for it to end. The agent plans \
the goal as steps, runs them with its tools, checks each result and answers. Progress notifications \
(when a progress token is given) tell each finished step: progress is the steps finished, total the \
steps in the current plan. Returns the answer, why the run stopped (stop.kind: goal_met, \
budget_exhausted, rejected, escalated, error, waiting, ...), the run id, and the questions it waits \
for when a human must decide (status "waiting"): answer them with answer_question, then resume_run."""

LIST_RUNS = "List the runs in the store, newest first: id, goal, status, why each stopped, cost, open questions."

SHOW_RUN = """\
Show one run: goal and constraints, status and why it stopped, the steps of its current plan with \
their status, outputs and errors, tokens, calls and cost, the answer, and the questions it waits for \
with everything a human needs to answer each: the goal, the step with its arguments as they will \
be sent and its effect, the plan with its changes since the last approval and its cost forecast, \
why it is asked, and what each answer does."""

ANSWER_QUESTION = """\
Record a human's answer to a question a run waits for. decision "approve" or "reject" answers a \
plan, a step, a result under review or the final answer (reject needs text: the reason); "answer" \
answers the planner's question, or gives guidance on an escalation, with text. An uncertain effect \
(a side-effecting step that may have run before a restart) is approved with choice retry, skip or \
done. A budget question (the run reached a cap) is approved with budget, the caps to raise. \
question_id may be left out when the run waits for one question only. The run does not go on \
by itself: call resume_run once it waits for nothing else (ready_to_resume)."""

RESUME_RUN = """\
Go on with a saved run — once its questions are answered, or after the process running it \
stopped — with the agent it recorded, and wait for it to end or to wait again. Finished steps never \
run again. Returns like run_goal (a finished run, or one still waiting for an answer, as it is)."""

RunId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, description="The run's id (see list_runs).")]


def require_mcp() -> None:
    """Raise :class:`~planexec.UsageError` saying what to install when the ``mcp`` SDK is missing."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError(
            "planexec as an MCP server needs the mcp SDK",
            [Problem(code="extra", where="mcp", message=install_hint("mcp"))],
        ) from None


def mcp_server(agent: AgentSource, store: RunStore, *, name: str = "planexec") -> "MCPServer[Any]":
    """An MCP server whose tools run goals with ``agent`` and operate on the runs in ``store``.

    ``agent`` is an :class:`~planexec.runs.AgentSpec` — built afresh for each goal and recorded with
    the run, so that ``planexec resume`` (or this server's ``resume_run``) rebuilds it — or a
    function building an :class:`~planexec.Agent` that logs to the store it is given. Questions
    for humans are saved in the run's log and the run is suspended (there is no terminal to ask at).

    Tools: ``run_goal``, ``list_runs``, ``show_run``, ``answer_question``, ``resume_run``. Their
    arguments are judged strictly by the input schemas they publish: an argument a tool does not
    have, or a value of another type (``true`` for an integer), is refused as a tool error listing
    every problem. Serve the server with :func:`serve_stdio` or :func:`serve_http`, or connect
    ``mcp.Client(server)`` to it in-process. Needs the ``mcp`` extra.
    """
    require_mcp()
    host = RunHost(agent, store)
    server = strict_server_class()(name, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    _add_run_goal(server, host)
    _add_readers(server, host)
    _add_answer_question(server, host)
    _add_resume_run(server, host)
    return server


def _result(view: BaseModel, text: str) -> "CallToolResult":
    """A tool's result: ``text`` for the model to read, ``view`` as its structured content."""
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=view.model_dump(mode="json")
    )


@asynccontextmanager
async def _refusals() -> AsyncIterator[None]:
    """planexec's errors as the tool's error result (``is_error``), every problem listed."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except (UsageError, StoreError) as e:
        raise ToolError(str(e)) from None


def _progress_of(ctx: "Context[Any, Any]") -> Callable[[float, float | None, str], Any]:
    async def report(progress: float, total: float | None, message: str) -> None:
        await ctx.report_progress(progress, total, message)  # nothing is sent without a progress token

    return report


def _runs_agent() -> "ToolAnnotations":
    """What the tools that run the agent are: they act, may destroy and reach the world."""
    from mcp.types import ToolAnnotations

    return ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True)


def _add_run_goal(server: "MCPServer[Any]", host: RunHost) -> None:
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult

    @server.tool(name="run_goal", title="Run a goal", description=RUN_GOAL, annotations=_runs_agent())
    async def run_goal(
        goal: Annotated[str, Field(min_length=1, max_length=MAX_GOAL_CHARS, description="What to achieve, in words.")],
        ctx: Context[Any, Any],
        constraints: Annotated[
            tuple[Annotated[str, Field(min_length=1, max_length=MAX_CONSTRAINT_CHARS)], ...],
            Field(max_length=MAX_CONSTRAINTS, description="Rules the plan and the answer must keep to."),
        ] = (),
    ) -> Annotated[CallToolResult, OutcomeView]:
        async with _refusals():
            view = await host.run_goal(goal, constraints, _progress_of(ctx))
        return _result(view, outcome_text(view))


def _add_readers(server: "MCPServer[Any]", host: RunHost) -> None:
    from mcp.types import CallToolResult, ToolAnnotations

    reads = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @server.tool(name="list_runs", title="List runs", description=LIST_RUNS, annotations=reads)
    async def list_runs(
        status: Annotated[
            Literal["running", "waiting", "finished"] | None,
            Field(description="Only runs with this status: running, waiting (for a human) or finished."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIST, description="At most this many runs.")] = 20,
    ) -> Annotated[CallToolResult, RunListView]:
        async with _refusals():
            view = await host.list_runs(status, limit)
        return _result(view, list_text(view))

    @server.tool(name="show_run", title="Show a run", description=SHOW_RUN, annotations=reads)
    async def show_run(run_id: RunId) -> Annotated[CallToolResult, RunDetailView]:
        async with _refusals():
            view = await host.show_run(run_id)
        return _result(view, detail_text(view))


def _add_answer_question(server: "MCPServer[Any]", host: RunHost) -> None:
    from mcp.types import CallToolResult, ToolAnnotations

    @server.tool(
        name="answer_question",
        title="Answer a run's question",
        description=ANSWER_QUESTION,
        annotations=ToolAnnotations(
            readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
        ),
    )
    async def answer_question(
        run_id: RunId,
        question_id: Annotated[
            str | None,
            Field(max_length=MAX_ID_CHARS, description="The question's id; leave out when the run waits for one."),
        ] = None,
        decision: Annotated[
            Literal["approve", "reject", "answer"],
            Field(description="approve or reject (a plan, step, review or final answer), or answer (a question)."),
        ] = "approve",
        text: Annotated[
            str | None,
            Field(
                max_length=MAX_TEXT_CHARS,
                description="The answer to a question, guidance for an escalation, or why (approve, reject).",
            ),
        ] = None,
        choice: Annotated[
            Literal["retry", "skip", "done", "guidance", "replan"] | None,
            Field(
                description="With approve: retry, skip or done for an uncertain effect; guidance or replan "
                "for an escalation."
            ),
        ] = None,
        budget: Annotated[
            dict[str, float | None] | None,
            Field(
                description="With approve, for a budget question (the run reached a cap): the caps to raise, "
                'e.g. {"cost": 2.5} (null: no cap); the cap reached must be among them.'
            ),
        ] = None,
    ) -> Annotated[CallToolResult, AnswerView]:
        async with _refusals():
            view = await host.answer_question(run_id, question_id, decision, text, choice, budget)
        return _result(view, answer_text(view))


def _add_resume_run(server: "MCPServer[Any]", host: RunHost) -> None:
    from mcp.server.mcpserver import Context
    from mcp.types import CallToolResult

    @server.tool(name="resume_run", title="Resume a run", description=RESUME_RUN, annotations=_runs_agent())
    async def resume_run(run_id: RunId, ctx: Context[Any, Any]) -> Annotated[CallToolResult, OutcomeView]:
        async with _refusals():
            view = await host.resume_run(run_id, _progress_of(ctx))
        return _result(view, outcome_text(view))
