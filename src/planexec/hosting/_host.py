"""The operations a host calls, over one store: start a goal, follow a run to its end (reporting
each finished step), list and show runs, answer a question, resume a run.

Nothing here knows MCP: the server maps these onto tools. Each operation raises
:class:`~planexec.UsageError` listing every problem with its input; what a run returns is read back
from the store, so it is what any other process (``planexec show``) sees, secrets redacted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planexec.errors import Problem, UsageError
from planexec.hosting._views import (
    AnswerView,
    Decision,
    OutcomeView,
    RunDetailView,
    RunListView,
    answer_view,
    detail_view,
    list_view,
    outcome_view,
)
from planexec.log import ChecklistResult, RunStarted, RunState
from planexec.runs import (
    STATUSES,
    AgentSpec,
    Progress,
    Supervisor,
    answer,
    build_agent,
    list_runs,
    load_run,
    pick_question,
    question_about,
    read_run,
    still_waiting,
)
from planexec.runtime import Agent, ApprovalDecision, Run, caps_from_json
from planexec.store import RunStore

__all__ = ["AgentSource", "Progress", "RunHost"]

AgentSource = AgentSpec | Callable[[RunStore], Agent]
"""What runs goals: an :class:`~planexec.runs.AgentSpec` (built afresh for each run and recorded
with it, as ``planexec run`` does), or a function that builds an agent logging to the given store."""

MAX_GOAL_CHARS = 20_000
MAX_CONSTRAINTS = 50
MAX_CONSTRAINT_CHARS = 2_000
MAX_TEXT_CHARS = 20_000
MAX_LIST = 200
ANSWERED_BY = "mcp"
"""Who the log says answered a question through a host."""


def _problem(where: str, message: str, code: str = "input") -> Problem:
    return Problem(code=code, where=where, message=message)


class RunHost:
    """Runs goals with one agent, and operates on the runs of one store."""

    def __init__(self, agent: AgentSource, store: RunStore) -> None:
        if not isinstance(agent, AgentSpec) and not callable(agent):
            raise UsageError(
                "cannot host the agent",
                [_problem("agent", "must be an AgentSpec or a function building an Agent from a store")],
            )
        self.agent = agent
        self.store = store
        self.runs = Supervisor(store)
        """The runs this host runs now."""

    # -- running -------------------------------------------------------------------------------

    async def run_goal(
        self, goal: str, constraints: Sequence[str] = (), progress: Progress | None = None
    ) -> OutcomeView:
        """Start ``goal`` and follow it until it ends or waits for a human."""
        problems: list[Problem] = []
        if not isinstance(goal, str) or not goal.strip():
            problems.append(_problem("goal", "the goal is empty"))
        elif len(goal) > MAX_GOAL_CHARS:
            problems.append(_problem("goal", f"is {len(goal):,} characters long; at most {MAX_GOAL_CHARS:,}"))
        if len(constraints) > MAX_CONSTRAINTS:
            problems.append(_problem("constraints", f"{len(constraints):,} given; at most {MAX_CONSTRAINTS}"))
        for n, text in enumerate(constraints):
            if not isinstance(text, str) or not text.strip():
                problems.append(_problem(f"constraints[{n}]", "is empty"))
            elif len(text) > MAX_CONSTRAINT_CHARS:
                problems.append(_problem(f"constraints[{n}]", f"is longer than {MAX_CONSTRAINT_CHARS:,} characters"))
        if problems:
            raise UsageError("cannot start the run", problems)
        if isinstance(self.agent, AgentSpec):
            spec = replace(self.agent, constraints=(*self.agent.constraints, *constraints))
            agent = build_agent(spec, store=self.store)
            every, metadata = spec.constraints, spec.metadata()
        else:
            agent = self._built()
            every, metadata = tuple(constraints), None
        try:
            run = await self.runs.begin(agent, goal, constraints=every, metadata=metadata)
            return await self._follow(run, since=0, progress=progress)
        finally:
            await agent.aclose()

    async def resume_run(self, run_id: str, progress: Progress | None = None) -> OutcomeView:
        """Go on with ``run_id`` from its log, with the agent it recorded, until it ends or waits
        again; a finished run, or one that waits for answers not given yet, is returned as it is."""
        self._check_idle(run_id)
        log = await load_run(self.store, run_id)
        state = RunState.fold(log)
        if state.finished or still_waiting(state):
            return await self._outcome(run_id)
        first = log[0]
        if not isinstance(first, RunStarted):  # load_run refuses such a log; said again for the type checker
            raise _unknown(run_id)
        agent = None if isinstance(self.agent, AgentSpec) else self._built()
        try:
            run = await self.runs.pick_up(run_id, log=log, agent=agent)
            return await self._follow(run, since=run.state.events, progress=progress)
        finally:
            if agent is not None:
                await agent.aclose()

    def _built(self) -> Agent:
        """The agent the host's function builds; it must log to the host's store."""
        assert not isinstance(self.agent, AgentSpec)
        agent = self.agent(self.store)
        if not isinstance(agent, Agent) or agent.store is not self.store:
            what = "an Agent logging elsewhere" if isinstance(agent, Agent) else type(agent).__name__
            raise UsageError(
                "cannot build the agent",
                [_problem("agent", f"the function returned {what}: return an Agent(..., store=store)")],
            )
        return agent

    def _check_idle(self, run_id: str) -> None:
        if self.runs.busy(run_id):
            raise UsageError(
                f"cannot resume run {run_id!r}",
                [_problem("run_id", "this server is running it now; it returns when the run ends or waits", "busy")],
            )

    async def _follow(self, run: Run, *, since: int, progress: Progress | None) -> OutcomeView:
        """Follow ``run`` until it ends or is suspended, telling ``progress`` as each step finishes.
        When this call is cancelled, the run is cancelled with it."""
        await self.runs.follow(run, since=since, progress=progress)
        return await self._outcome(run.run_id)

    async def _outcome(self, run_id: str) -> OutcomeView:
        stored = await read_run(self.store, run_id)
        return outcome_view(RunState.fold(stored.events))

    # -- reading ----------------------------------------------------------------------------

    async def list_runs(self, status: str | None = None, limit: int = 20) -> RunListView:
        problems = []
        if status is not None and status not in STATUSES:
            problems.append(_problem("status", f"{status!r} is not one of {', '.join(STATUSES)}"))
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
            problems.append(_problem("limit", f"{limit!r} must be from 1 to {MAX_LIST}"))
        if problems:
            raise UsageError("cannot list the runs", problems)
        return list_view(await list_runs(self.store, status=status, limit=limit))

    async def show_run(self, run_id: str) -> RunDetailView:
        stored = await read_run(self.store, run_id)
        if not stored.found:
            raise _unknown(run_id)
        return detail_view(RunState.fold(stored.events), stored.unreadable)

    # -- answering --------------------------------------------------------------------------

    async def answer_question(
        self,
        run_id: str,
        question_id: str | None = None,
        decision: Decision = "approve",
        text: str | None = None,
        choice: str | None = None,
        budget: Mapping[str, float | None] | None = None,
    ) -> AnswerView:
        """Record a human's answer to a question ``run_id`` waits for (``question_id``; None: its
        only open one). ``budget``: for a budget question approved, the caps to raise."""
        summary = f"cannot answer run {run_id!r}"
        problems: list[Problem] = []
        if decision not in ("approve", "reject", "answer"):
            problems.append(_problem("decision", f"{decision!r} is not one of approve, reject, answer"))
        if text is not None and len(text) > MAX_TEXT_CHARS:
            problems.append(_problem("text", f"is longer than {MAX_TEXT_CHARS:,} characters"))
        elif decision == "reject" and (text is None or not text.strip()):
            problems.append(_problem("text", "say why the answer is no"))
        elif decision == "answer" and (text is None or not text.strip()):
            problems.append(_problem("text", "the answer is empty"))
        try:
            log = await load_run(self.store, run_id)
            rec = pick_question(RunState.fold(log), question_id)
        except UsageError as e:
            raise UsageError(summary, [*e.problems, *problems]) from None
        if decision == "answer" and rec.subject not in ("question", "escalation"):
            problems.append(
                _problem(
                    "decision", f"{rec.approval_id} is about {question_about(rec)}: answer it with approve or reject"
                )
            )
        if budget is not None and (rec.subject != "budget" or decision != "approve"):
            problems.append(_problem("budget", "raises caps only when approving a budget question"))
        if problems:
            raise UsageError(summary, problems)
        if decision == "reject":
            made = ApprovalDecision(approved=False, reason=text or "", by=ANSWERED_BY)
        elif decision == "answer":
            guidance: Any = "guidance" if rec.subject == "escalation" else None
            made = ApprovalDecision(approved=True, text=text, choice=guidance, by=ANSWERED_BY)
        else:
            guided = rec.subject == "escalation" and choice == "guidance"
            ticked = tuple(ChecklistResult(item=item, passed=True) for item in rec.checklist)
            made = ApprovalDecision(
                approved=True,
                reason="" if guided else text or "",
                text=text if guided else None,
                choice=choice,  # type: ignore[arg-type]  # answer() checks it against the question
                checklist=ticked,
                by=ANSWERED_BY,
                budget=caps_from_json(budget) if budget is not None else None,
            )
        after = await answer(self.store, run_id, made, approval_id=rec.approval_id, log=log)
        return answer_view(after, rec.approval_id, decision)


def _unknown(run_id: str) -> UsageError:
    return UsageError(
        f"no run {run_id!r}",
        [_problem("run_id", f"no run {run_id!r} in the store (list_runs lists them)", "unknown_run")],
    )
